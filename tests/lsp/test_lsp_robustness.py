"""Robustness: random edits (the server's buffer and diagnostics must track the
client's exactly), binary junk, settings changes."""
from __future__ import annotations

import random

from conftest import MODULE_LOOP, change, doc_id, example_path, open_doc, pos, published
from lsprotocol import types as lsp

from compiler.analysis import analyze

pytestmark = MODULE_LOOP

FORWARD = example_path("storylm0_forward.kina").read_text(encoding="utf-8")
JUNK_PIECES = ["(", ")", "{", "}", "[", "]", ".", ",", "let ", " in", "fn ", "@", "=", "\n", "🙂", "é",
               "\x00", "reduce_keep(op=", "Tensor[F32, [", "//", "x", "1", " "]


def position(text: str, offset: int) -> lsp.Position:
    line = text.count("\n", 0, offset)
    col = text[text.rfind("\n", 0, offset) + 1:offset]
    return lsp.Position(line=line, character=len(col.encode("utf-16-le")) // 2)


def random_edit(rng: random.Random, text: str) -> tuple[int, int, str]:
    start = rng.randrange(len(text) + 1)
    end = min(len(text), start + rng.choice([0, 0, 1, 2, 5, 20]))
    new = "".join(rng.choice(JUNK_PIECES) for _ in range(rng.choice([0, 1, 1, 2, 3])))
    return start, end, new


def summary(diags):
    return sorted((d.code, d.range.start.line, d.range.start.character, d.range.end.line, d.range.end.character)
                  for d in diags)


def expected_summary(text):
    snap = analyze(text)
    out = []
    for d in snap.diagnostics:
        s, e = position(text, d.span.start), position(text, d.span.end)
        out.append((d.code, s.line, s.character, e.line, e.character))
    return sorted(out)


async def test_fuzz_random_edits_then_hover(client):
    rng = random.Random(1234)
    uri = open_doc(client, FORWARD, "fuzz.kina")
    await published(client, uri, 1)
    text, version = FORWARD, 1
    for i in range(300):
        start, end, new = random_edit(rng, text)
        version += 1
        change(client, uri, version, new, lsp.Range(start=position(text, start), end=position(text, end)))
        text = text[:start] + new + text[end:]
        if i % 25 == 0:  # requests interleaved with edits still get answers, never errors
            p = position(text, rng.randrange(len(text) + 1))
            await client.text_document_hover_async(lsp.HoverParams(text_document=doc_id(uri), position=p))
            await client.text_document_completion_async(lsp.CompletionParams(text_document=doc_id(uri), position=p))
    # the server's copy of the buffer is the client's: same diagnostics as the CLI on our copy
    assert summary(await published(client, uri, version)) == expected_summary(text)
    version += 1
    change(client, uri, version, FORWARD)
    assert await published(client, uri, version) == []
    h = await client.text_document_hover_async(lsp.HoverParams(
        text_document=doc_id(uri), position=pos(FORWARD, "let x =", 4)))
    assert "x: Tensor[F32, [1, 4, 4], @host]" in h.contents.value


async def test_binary_junk_gets_answers(client):
    junk = bytes(range(256)).decode("latin-1") + "fn (( let in 🙂 \x00 Tensor[" * 3
    uri = open_doc(client, junk, "junk.kina")
    diags = await published(client, uri, 1)
    assert diags and all(d.source == "kina" for d in diags)
    p = lsp.Position(line=1, character=5)
    d = doc_id(uri)
    await client.text_document_hover_async(lsp.HoverParams(text_document=d, position=p))
    await client.text_document_definition_async(lsp.DefinitionParams(text_document=d, position=p))
    await client.text_document_completion_async(lsp.CompletionParams(text_document=d, position=p))
    await client.text_document_signature_help_async(lsp.SignatureHelpParams(text_document=d, position=p))
    assert await client.text_document_document_symbol_async(lsp.DocumentSymbolParams(text_document=d)) == []
    end = lsp.Position(line=50, character=0)
    await client.text_document_inlay_hint_async(lsp.InlayHintParams(
        text_document=d, range=lsp.Range(start=lsp.Position(line=0, character=0), end=end)))
    await client.text_document_code_action_async(lsp.CodeActionParams(
        text_document=d, range=lsp.Range(start=p, end=p), context=lsp.CodeActionContext(diagnostics=diags)))
    # positions past the end of the document are clamped, not errors
    far = lsp.Position(line=10_000, character=10_000)
    assert await client.text_document_hover_async(lsp.HoverParams(text_document=d, position=far)) is None


async def test_settings_from_did_change_configuration(client):
    uri = open_doc(client, FORWARD, "settings.kina")
    await published(client, uri, 1)
    rng = lsp.Range(start=lsp.Position(line=0, character=0), end=lsp.Position(line=60, character=0))
    params = lsp.InlayHintParams(text_document=doc_id(uri), range=rng)
    assert await client.text_document_inlay_hint_async(params)
    client.set_configuration({"inlayHints": {"enabled": False}}, section="kina")
    client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
        settings={"kina": {"inlayHints": {"enabled": False}}}))
    assert not await client.text_document_inlay_hint_async(params)
    client.set_configuration({"inlayHints": {"enabled": True}}, section="kina")
    client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(settings={}))
    for _ in range(100):  # the server pulls workspace/configuration asynchronously
        if await client.text_document_inlay_hint_async(params):
            break
    assert await client.text_document_inlay_hint_async(params)
