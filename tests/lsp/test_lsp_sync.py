"""The server's copy of a document stays the client's (issue 12, F2): LSP breaks lines
only at \\n, \\r\\n and \\r, so U+2028, U+2029, U+0085, VT, FF and FS..RS are
characters inside a line and must not shift later incremental edits.  Checked
through kina/viewFileText (the server's text) after targeted edits, and after
random edits full of such characters, where every request still gets an answer
and the diagnostics are the CLI's for the client's text.  The full 2,000-edit
run with timings is benchmarks/bench_lsp.py.

The long random session (randomsession.py: snippets, deletions, multi-change edits,
CRLF pastes, U+2028, very long lines, whole documents from 4 characters to a big
file, requests of every kind interleaved without waiting, some cancelled) checks
that every request gets exactly one answer; bench_lsp.py --session 5000 is the long
run at full size (250,000-character lines, 600,000-character documents)."""
from __future__ import annotations

import random

import pytest
import randomsession as rs
from conftest import MODULE_LOOP, change, doc_id, example_path, open_doc, published
from lsprotocol import types as lsp
from rawlsp import lsp_position

from compiler.analysis import analyze

pytestmark = MODULE_LOOP

SEPARATORS = ["\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]
FORWARD = example_path("storylm0_forward.kina").read_text(encoding="utf-8")


def position(text: str, offset: int) -> lsp.Position:
    p = lsp_position(text, offset)
    return lsp.Position(line=p["line"], character=p["character"])


def edit(client, uri, version, text, start, end, new) -> str:
    """Replace text[start:end] by new, as an incremental change; the client's new text."""
    change(client, uri, version, new, lsp.Range(start=position(text, start), end=position(text, end)))
    return text[:start] + new + text[end:]


async def server_text(client, uri) -> str:
    reply = await client.protocol.send_request_async("kina/viewFileText", {"textDocument": {"uri": uri}})
    return reply.text     # pygls' client turns a JSON object it has no type for into an Object


def cli_summary(text):
    snap = analyze(text)
    return sorted((d.code, position(text, d.span.start), position(text, d.span.end)) for d in snap.diagnostics)


def lsp_summary(diags):
    return sorted((d.code, d.range.start, d.range.end) for d in diags)


@pytest.mark.parametrize("sep", SEPARATORS, ids=[f"U+{ord(c):04X}" for c in SEPARATORS])
async def test_a_separator_character_does_not_shift_later_edits(client, sep):
    text = FORWARD.replace("\n", f" // {sep} here\n", 3)     # the character sits in three comments
    uri = open_doc(client, text, f"sep{ord(sep):x}.kina")
    await published(client, uri, 1)
    # an edit on a line below the separators: break a shape, then repair it
    at = text.index("lm_head.reshape([1, 4, 8])") + len("lm_head.reshape([1, 4, ")
    text = edit(client, uri, 2, text, at, at + 1, "7")
    assert await server_text(client, uri) == text
    diags = await published(client, uri, 2)
    assert diags and lsp_summary(diags) == cli_summary(text)
    text = edit(client, uri, 3, text, at, at + 1, "8")
    assert await server_text(client, uri) == text
    assert await published(client, uri, 3) == []


@pytest.mark.parametrize("eol", ["\r", "\r\n"])
async def test_edits_in_a_file_with_cr_line_ends(client, eol):
    text = FORWARD.replace("\n", eol)
    uri = open_doc(client, text, f"cr{len(eol)}.kina")
    assert await published(client, uri, 1) == []
    at = text.index("lm_head.reshape([1, 4, 8])") + len("lm_head.reshape([1, 4, ")
    text = edit(client, uri, 2, text, at, at + 1, "7")
    assert await server_text(client, uri) == text
    diags = await published(client, uri, 2)
    assert diags and lsp_summary(diags) == cli_summary(text)
    # an edit that joins two lines and one that splits a line with every kind of break
    nl = text.index(eol, 200)
    text = edit(client, uri, 3, text, nl, nl + len(eol), " ")
    text = edit(client, uri, 4, text, nl, nl + 1, "\r\n \n \r x")
    assert await server_text(client, uri) == text


PIECES = ["(", ")", "{", "}", ".", ",", "let ", " in", "fn ", "=", "\n", "\r", "\r\n", "🙂", "é", "x", "1", " ",
          "// c", *SEPARATORS]


def _boundary(text: str, offset: int) -> int:
    """No LSP position lies between the \\r and \\n of a line break: step back before it."""
    return offset - 1 if 0 < offset < len(text) and text[offset - 1] == "\r" and text[offset] == "\n" else offset


def random_edit(rng: random.Random, text: str) -> tuple[int, int, str]:
    start = _boundary(text, rng.randrange(len(text) + 1))
    end = _boundary(text, min(len(text), start + rng.choice([0, 0, 1, 2, 5, 20])))
    return start, max(start, end), "".join(rng.choice(PIECES) for _ in range(rng.choice([0, 1, 1, 2, 3])))


async def test_random_edits_with_separators_keep_the_texts_equal(client):
    rng = random.Random(20261)
    text = FORWARD
    uri = open_doc(client, text, "random_sync.kina")
    await published(client, uri, 1)
    version = 1
    for i in range(400):
        start, end, new = random_edit(rng, text)
        version += 1
        text = edit(client, uri, version, text, start, end, new)
        if i % 20 == 0:     # requests interleaved with edits always get answers
            p = position(text, rng.randrange(len(text) + 1))
            await client.text_document_hover_async(lsp.HoverParams(text_document=doc_id(uri), position=p))
            await client.text_document_document_symbol_async(lsp.DocumentSymbolParams(text_document=doc_id(uri)))
        if i % 50 == 49:
            assert await server_text(client, uri) == text, f"out of sync after edit {i}"
    assert lsp_summary(await published(client, uri, version)) == cli_summary(text)


async def test_a_random_session_answers_every_request_exactly_once():
    """A server of its own gets 800 random edits with about 500 requests interleaved and
    not waited for (and some $/cancelRequest): every request id gets exactly one answer, a
    result or cancelled / content modified / server cancelled with a message, and the
    server's text is the client's at every pause.  (Bounded: well under a minute.)"""
    client = await rs.Client.start()
    try:
        session = rs.Session("file:///tmp/kina-lsp-test/session.kina", 20262, rs.TEST_SCALE)
        problems = await rs.run_session(client, session, 800, pause_every=50, timeout=60)
        assert problems == []
        # the session did make every kind of edit, and the document went from 4 characters
        # to tens of thousands with lines of thousands of characters
        assert all(session.kinds[k] > 0 for k in [*rs.KINDS, "multi"]), session.kinds
        assert min(session.sizes) <= 50 and max(session.sizes) >= rs.TEST_SCALE.big_doc
        assert len(client.sent) > 300
        stats = (await client.call("kina/serverStats", None, "stats"))["result"]
        assert stats["openRequests"] == 0 and stats["inFlight"] == 0
    finally:
        assert await client.stop() == 0
