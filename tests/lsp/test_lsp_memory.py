"""What the server keeps is bounded by the text it has now.  A long random session (lines
of 250,000 characters, documents up to 600,000) grew the server from 195 MB to 728 MB, and
nothing came back when the document shrank: every cache was bounded by a number of
entries, not by their size, and some by nothing.

- compiler.syntax.parse.parse_local (process-wide): at most 4,096 items *and* 1,000,000
  characters; an item of more than a quarter of that is not kept;
- compiler.analysis.Analysis: items that left the text are kept within max(64,000
  characters, the text's length); the last good version of a function only for names
  the text still has;
- semantic tokens' chunk cache (process-wide): max(200,000, 2 x the text) characters per
  table, trimmed as soon as tokens of a smaller text are asked for;
- pygls' futures: one was left behind for every notification (each edit);
- a didChange / didSave of a document that is not open makes no state.

kina/serverStats reports each of them; benchmarks/bench_lsp.py --session 5000 measures
the RSS."""
from __future__ import annotations

import randomsession as rs
from conftest import MODULE_LOOP

from compiler.analysis import GONE_CHARS, Analysis
from compiler.syntax import parse
from kina_lsp.convert import LineIndex
from kina_lsp.features import semantic

LONG = 250_000


def _with_line(i: int, n: int = LONG) -> str:
    """A function whose body holds a comment line of n characters (version i)."""
    return (f"fn big(x: Tensor[F32, [4]]) -> Tensor[F32, [4]] {{\n  // {i} " + "x" * n + "\n  x.exp()\n}\n")


def test_the_parse_cache_is_bounded_by_characters():
    parse.parse_local.cache_clear()
    for i in range(40):                            # 40 versions of an item with a 100,000-character line
        parse.parse_local(_with_line(i, 100_000))
    entries, chars = parse.parse_local.cache_size()
    assert chars <= parse.parse_local.chars and entries <= 10
    huge = _with_line(0, parse.parse_local.chars)  # one item larger than a quarter of the budget
    assert parse.parse_local(huge)[0] is not None and parse.parse_local.cache_size()[1] <= chars
    small = "fn f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] { x }"
    assert parse.parse_local(small)[0] is parse.parse_local(small)[0]    # still a cache


def test_the_analysis_keeps_what_the_text_needs():
    base = rs.make_source(20)
    a = Analysis()
    for i in range(30):                            # edit the long line 30 times
        text = base + _with_line(i)
        a.update(text)
        assert a.cache_size()["goneChars"] <= max(GONE_CHARS, len(text))
    for i in range(30):                            # new function names every time
        a.update(base.replace("layer", f"v{i}layer"))
    assert a.cache_size()["lastGood"] == 20        # the names in the text now, not 620
    a.update("fn f")
    size = a.cache_size()
    assert size["goneChars"] <= GONE_CHARS and size["lastGood"] == 0 and size["items"] == 1
    # an undo still finds recent items: the last version comes back without a re-check
    assert a.update(base.replace("layer", "v29layer")).diagnostics == []


def test_the_semantic_token_cache_shrinks_with_the_text():
    cache = semantic.ChunkCache()
    base = rs.make_source(20)
    for i in range(20):
        text = base + _with_line(i)
        cache.tokens(text, LineIndex(text))
    assert cache.chars() <= 3 * 2 * (len(base) + LONG + 100)
    cache.tokens("fn f", LineIndex("fn f"))
    assert cache.chars() <= 3 * 200_000


@MODULE_LOOP
async def test_the_server_s_caches_come_down_when_the_document_shrinks():
    client = await rs.Client.start()
    try:
        session = rs.Session("file:///tmp/kina-lsp-test/memory.kina", 4, rs.Scale(base_functions=20))
        client.send(session.open())
        uri = session.uri

        def replace(text: str) -> None:
            session.version += 1
            session.model.set(text)
            client.send({"method": "textDocument/didChange", "params": {
                "textDocument": {"uri": uri, "version": session.version}, "contentChanges": [{"text": text}]}})

        tokens = {"textDocument": {"uri": uri}}
        for i in range(12):                        # lines of 250,000 characters, edited
            replace(session.base + _with_line(i))
            await client.call("textDocument/semanticTokens/full", tokens, f"tokens{i}")
            await client.call("textDocument/documentSymbol", tokens, f"symbols{i}")
        replace(session.base + _with_line(99, 600_000))          # a 600,000-character document
        await client.call("textDocument/semanticTokens/full", tokens, "tokens-big")
        await client.call("textDocument/documentSymbol", tokens, "symbols-big")
        replace("fn f")                                           # ... and 4 characters
        await client.call("textDocument/semanticTokens/full", tokens, "tokens-small")
        await client.call("textDocument/documentSymbol", tokens, "symbols-small")
        # edits of documents that are not open make no state
        client.send({"method": "textDocument/didChange", "params": {
            "textDocument": {"uri": "file:///tmp/kina-lsp-test/never-opened.kina", "version": 2},
            "contentChanges": [{"text": "fn g"}]}})
        stats = (await client.call("kina/serverStats", None, "stats"))["result"]
        assert list(stats["documents"]) == [uri]
        doc = stats["documents"][uri]
        assert doc["goneChars"] <= GONE_CHARS and doc["lastGood"] == 0 and doc["viewChars"] == 4
        assert stats["parseCache"]["chars"] <= parse.parse_local.chars
        assert stats["semanticCacheChars"] <= 3 * 200_000
        assert stats["futures"] == 0 and stats["openRequests"] == 0     # none left by the 14 edits
        client.send({"method": "textDocument/didClose", "params": {"textDocument": {"uri": uri}}})
        stats = (await client.call("kina/serverStats", None, "stats-closed"))["result"]
        assert stats["documents"] == {}
        rss = client.rss_mb()
        assert rss is None or rss < 300, f"{rss:.0f} MB"
    finally:
        await client.stop()
