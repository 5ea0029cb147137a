"""Semantic tokens: full, range and delta through a real server, and the F1 regression
(a long literal line with non-ASCII text was quadratic and blocked the event loop)."""
from __future__ import annotations

from conftest import MODULE_LOOP, change, doc_id, open_doc, open_example, pos, published
from lsprotocol import types as lsp

from compiler.syntax import items as syntax_items
from compiler.syntax import lex
from kina_lsp.convert import LineIndex
from kina_lsp.features import semantic, semantic_chunks
from kina_lsp.features.semantic import TOKEN_TYPES

FORWARD = "storylm0_forward.kina"


def decode(data: list[int], text: str) -> list[tuple[int, int, str, str]]:
    """(line, UTF-16 column, token text, type) of every token of an LSP token array."""
    lines, line, col, out = text.split("\n"), 0, 0, []
    for i in range(0, len(data), 5):
        dl, dc, n, kind, _ = data[i:i + 5]
        line, col = line + dl, (col + dc if dl == 0 else dc)
        units = lines[line].encode("utf-16-le")
        out.append((line, col, units[2 * col:2 * (col + n)].decode("utf-16-le"), TOKEN_TYPES[kind]))
    return out


def literal_program(n: int) -> str:
    values = ", ".join(f"{i % 7}.5" for i in range(n))
    return (f"// café 🙂\nfn main() -> Tensor[F32, [{n}]] {{ // café\n"
            f"  let x = Tensor[F32, [{n}]] {{ {values} }} in // café 🙂 é\n  x.exp()\n}}\n")


class CountingText(str):
    """A text that counts the characters its slices and indexing hand out."""
    handed = 0

    def __getitem__(self, key):
        out = super().__getitem__(key)
        CountingText.handed += len(out)
        return out


def test_long_non_ascii_line_is_linear(monkeypatch):
    """F1: every word copied the whole text before it (`text[:start].rstrip()`), and every
    token walked its line from the start (4,000 values: 12 s in the server).  Now the
    look-behinds read a few characters per word: count what the pass reads.  The count is
    of one pass with the process's caches empty: after texts of other tests, split_items
    first compares the text with the last one it split (`common_ends`, by bisection: 1.5
    times the text more, still linear), and which tests ran before this one in its
    process varies under pytest-xdist."""
    monkeypatch.setattr(semantic_chunks, "CHUNKS", semantic.ChunkCache())
    monkeypatch.setattr(syntax_items, "_recent", [])
    text = literal_program(4000)
    counted = CountingText(text)
    CountingText.handed = 0
    data = semantic.semantic_tokens(counted, LineIndex(text, "utf-16"), {"main"}, set()).data
    assert CountingText.handed <= 2 * len(text)
    toks = decode(data, text)
    values = [t[2] for t in toks if t[3] == "number" and t[0] == 2]
    assert values == ["4000"] + [f"{i % 7}.5" for i in range(4000)]
    # the comment after the emoji is located in UTF-16 units
    assert [t for t in toks if t[3] == "comment"][-1][2] == "// café 🙂 é"
    assert any(t[2] == "exp" and t[3] == "method" for t in toks)


def test_positions_match_position_on_every_offset():
    text = "a🙂b\né\r\nxyz🙂\n\n🙂🙂"
    for enc in ("utf-16", "utf-8", "utf-32"):
        index = LineIndex(text, enc)
        offsets = list(range(len(text) + 1))
        assert index.positions(offsets) == [index.position(o) for o in offsets]
        assert index.positions(reversed(offsets)) == [index.position(o) for o in reversed(offsets)]


def test_delta_edit_reconstructs_the_new_array():
    old = [0, 1, 2, 3, 0, 1, 0, 2, 3, 0, 0, 4, 1, 6, 0]
    for new in ([], old, old[:5], old + [1, 0, 3, 2, 0], [9, 9, 9, 9, 9] + old[5:], old[:5] + old[10:]):
        edits = semantic.delta_edit(old, new)
        got = list(old)
        for e in edits:
            assert e.start % 5 == 0
            got[e.start:e.start + e.delete_count] = e.data or []
        assert got == new


@MODULE_LOOP
async def test_f1_server_answers_long_non_ascii_line(client):
    text = literal_program(4000)
    uri = open_doc(client, text, "f1_long_line.kina")
    await published(client, uri, 1)
    res = await client.text_document_semantic_tokens_full_async(lsp.SemanticTokensParams(text_document=doc_id(uri)))
    toks = decode(res.data, text)
    assert toks[0] == (0, 0, "// café 🙂", "comment")
    assert [t for t in toks if t[3] == "comment"][-1][2] == "// café 🙂 é"
    # and the server still answers other requests on that document
    hover = await client.text_document_hover_async(lsp.HoverParams(text_document=doc_id(uri),
                                                                   position=pos(text, "x.exp")))
    assert hover is not None and "Tensor[F32, [4000], @host]" in hover.contents.value


@MODULE_LOOP
async def test_range_tokens_are_the_full_tokens_inside_the_range(client):
    uri, text = open_example(client, FORWARD)
    full = decode((await client.text_document_semantic_tokens_full_async(
        lsp.SemanticTokensParams(text_document=doc_id(uri)))).data, text)
    start, end = pos(text, "fn storylm0_forward"), pos(text, "let heads")
    res = await client.text_document_semantic_tokens_range_async(lsp.SemanticTokensRangeParams(
        text_document=doc_id(uri), range=lsp.Range(start=start, end=end)))
    part = decode(res.data, text)
    inside = [t for t in full if (start.line, start.character) <= (t[0], t[1]) < (end.line, end.character)]
    assert part == inside and len(part) > 20
    assert part[0][2] == "fn" and ("gather" in {t[2] for t in part})


@MODULE_LOOP
async def test_delta_after_an_edit_gives_the_new_full_tokens(client):
    text = "fn f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  let y = x.exp() in\n  y\n}\n"
    uri = open_doc(client, text, "delta.kina")
    await published(client, uri, 1)
    first = await client.text_document_semantic_tokens_full_async(lsp.SemanticTokensParams(text_document=doc_id(uri)))
    assert first.result_id
    new_text = text.replace("x.exp()", "x.exp().tanh() + x")
    change(client, uri, 2, new_text)
    await published(client, uri, 2)
    delta = await client.text_document_semantic_tokens_full_delta_async(lsp.SemanticTokensDeltaParams(
        text_document=doc_id(uri), previous_result_id=first.result_id))
    assert isinstance(delta, lsp.SemanticTokensDelta) and delta.result_id != first.result_id
    assert len(delta.edits) == 1
    data = list(first.data)
    for e in delta.edits:
        data[e.start:e.start + e.delete_count] = e.data or []
    again = await client.text_document_semantic_tokens_full_async(lsp.SemanticTokensParams(text_document=doc_id(uri)))
    assert data == list(again.data)
    assert [t[2] for t in decode(data, new_text) if t[3] == "method"] == ["exp", "tanh"]
    # an unknown previous id is answered with the full array
    full = await client.text_document_semantic_tokens_full_delta_async(lsp.SemanticTokensDeltaParams(
        text_document=doc_id(uri), previous_result_id="no-such-id"))
    assert isinstance(full, lsp.SemanticTokens) and list(full.data) == list(again.data)


def _names(text: str) -> tuple[set[str], set[str]]:
    import re
    return set(re.findall(r"fn (\w+)", text)), set(re.findall(r"(\w+):", text))


def test_chunked_tokens_equal_one_pass_over_mutated_texts():
    """The per-function chunk cache gives exactly the one-pass token array, in every
    encoding, on texts mutated with line breaks (\\n, \\r\\n, \\r), `fn` at line starts,
    non-ASCII and astral characters."""
    import glob
    import random
    rng = random.Random(7)
    bits = ["fn", "\n", "\r\n", "\r", "é", "🙂", " ", "(", ".", "=", "x", "fn f(", "\nfn ", "// c\n"]
    texts = []
    for path in sorted(glob.glob("examples/*.kina"))[:6]:
        t = open(path, encoding="utf-8").read()
        for _ in range(60):
            i = rng.randrange(len(t) + 1)
            t = t[:i] + rng.choice(bits) + t[i:]
            texts.append(t)
    for t in texts:
        fns, params = _names(t)
        for enc in ("utf-16", "utf-8", "utf-32"):
            idx = LineIndex(t, enc)
            want = semantic.encode(semantic.token_rows(t, fns, params), idx)
            assert semantic.semantic_tokens(t, idx, fns, params).data == want


def _twenty_functions() -> str:
    return "".join(f"fn f{i}(x: Tensor[F32, [4]]) -> Tensor[F32, [4]] {{\n  let y = x.exp() in\n  y\n}}\n"
                   for i in range(20))


def _record_lexing(monkeypatch) -> list[str]:
    """The texts semantic tokens lexes from now on."""
    calls: list[str] = []
    real = lex.tokens
    monkeypatch.setattr(lex, "tokens", lambda t, *a, **k: calls.append(t) or real(t, *a, **k))
    return calls


def test_an_edit_re_encodes_only_its_chunk(monkeypatch):
    text = _twenty_functions()
    fns, params = _names(text)
    semantic.semantic_tokens(text, LineIndex(text), fns, params)
    calls = _record_lexing(monkeypatch)
    edited = text.replace("x.exp()", "x.tanh()", 1)
    got = semantic.semantic_tokens(edited, LineIndex(edited), fns, params).data
    assert len(calls) == 1 and calls[0].startswith("fn f0(")
    assert got == semantic.encode(semantic.token_rows(edited, fns, params), LineIndex(edited))


def test_new_names_reclassify_without_relexing(monkeypatch):
    """Typing a parameter's name changes the module's names: every chunk is classified
    again (a word may now be a parameter) but none is lexed again."""
    text = _twenty_functions()
    fns, params = _names(text)
    semantic.semantic_tokens(text, LineIndex(text), fns, params)
    calls = _record_lexing(monkeypatch)
    got = semantic.semantic_tokens(text, LineIndex(text), fns, params | {"y"}).data
    assert calls == []
    assert got == semantic.encode(semantic.token_rows(text, fns, params | {"y"}), LineIndex(text))
    assert got != semantic.semantic_tokens(text, LineIndex(text), fns, params).data


def test_declared_names_are_lexical():
    """Names come from the tokens (no parse): a function with a syntax error in its body
    still declares its name and parameters; tuple types in a header are not parameters."""
    text = "fn f(x: Tensor[F32, [4]], pair: (F32, F32)) -> F32 {\n  let y = x..exp( in\n}\nfn g() -> F32 { f(1.0) }\n"
    assert semantic_chunks.CHUNKS.names(text) == ({"f", "g"}, {"x", "pair"})
    data = decode(semantic.semantic_tokens(text, LineIndex(text)).data, text)
    assert (0, 3, "f", "function") in data and (0, 5, "x", "parameter") in data
    assert (3, 16, "f", "function") in data


def test_a_new_name_re_encodes_only_chunks_using_it(monkeypatch):
    """Typing a parameter's name in one function re-encodes the chunks whose words include
    it, not all 100 of a 1,000-line file (the key is the chunk's own words' names)."""
    monkeypatch.setattr(semantic_chunks, "CHUNKS", semantic.ChunkCache())   # nothing cached by other tests
    text = _twenty_functions() + "fn late(zz: Tensor[F32, [4]]) -> Tensor[F32, [4]] {\n  zz\n}\n"
    semantic.semantic_tokens(text, LineIndex(text))
    encoded: list[str] = []
    real = semantic.encode
    monkeypatch.setattr(semantic_chunks, "encode", lambda rows, index: encoded.append(index.text) or real(rows, index))
    edited = text.replace("(zz:", "(y:").replace("  zz\n", "  y\n")
    got = semantic.semantic_tokens(edited, LineIndex(edited)).data
    # the edited function and the 20 that use `y` (now a parameter name) are re-encoded
    assert len(encoded) == 21
    fns, params = semantic_chunks.CHUNKS.names(edited)
    assert got == real(semantic.token_rows(edited, fns, params), LineIndex(edited))


async def test_tokens_never_wait_for_the_analysis():
    """Semantic tokens read the buffer, not the analysis: with an analysis that never
    finishes they still answer, for the text as it is now."""
    import asyncio

    class Server:
        text = "fn f(x: Tensor[F32, [4]]) -> Tensor[F32, [4]] { x.exp() }\n"

        def buffer(self, uri):
            return (self.text, 3)

        def position_encoding(self):
            return "utf-16"

        async def view(self, uri, wait=False):
            await asyncio.Event().wait()   # an analysis that never ends

    ls = Server()
    data = await asyncio.wait_for(semantic._tokens_of(ls, "file:///a.kina"), 5)
    assert (0, 3, "f", "function") in decode(data, ls.text)


def test_cached_tokens_are_not_walked_by_the_collector(monkeypatch):
    """The cache keeps plain (terminal, text, start, end) tuples, which the collector
    stops tracking: 60,000 cached lark Tokens made each full collection a 60 ms pause
    of the server."""
    import gc
    monkeypatch.setattr(semantic_chunks, "CHUNKS", semantic.ChunkCache())
    text = _twenty_functions()
    semantic.semantic_tokens(text, LineIndex(text))
    gc.collect()
    cached = [t for toks in semantic_chunks.CHUNKS._tokens.values() for t in toks]
    assert len(cached) > 20 * 20
    assert not any(gc.is_tracked(t) for t in cached)
