"""Semantic tokens (full document, a range, and deltas; the handlers here, the lexical
classification in semantic_lex.py, the per-function cache in semantic_chunks.py): a lexical pass classified
with the op table and the function and parameter names the text declares, so
built-in ops, user functions, dtypes and the reverseMode handler are told apart
even where a TextMate grammar cannot.  Nothing here waits for the analysis.  The size
parameters of a generic function (`fn f[B, T]`) are `typeParameter`s where declared
and wherever its body uses them; they are local to their function, read from its header.

The tokens are compiler.syntax.lex's (the grammar's own terminals, comments kept); a
word is classified by the code tokens on either side ("after a `.`", "before
a `(`", "after `fn`").  Token rows are (line, start, length) in the negotiated
position encoding, delta-encoded as LSP requires.  The pass is linear in the
text: offsets become positions through LineIndex.positions (no per-token walk
of the line; a per-word copy of the text before it was once quadratic).  It runs on a
worker thread, so a huge file never holds up other requests on the event loop.

Full results are assembled from per-function chunks, each lexed and encoded once
(ChunkCache): an edit re-encodes only the function it touches.

Deltas (`textDocument/semanticTokens/full/delta`): the last full result of each
open document is kept under a result id (in its DocState, documents.py); a delta request for that id is answered
with one edit (the changed middle between the common prefix and suffix of the
two token arrays), as rust-analyzer does.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from .. import background
from ..background import Checkpoint
from ..convert import index_of
from ..protocol import RawResult
from . import semantic_chunks
from .semantic_chunks import ChunkCache, cache_chars, delta_edit, semantic_tokens
from .semantic_lex import LEGEND, TOKEN_MODIFIERS, TOKEN_TYPES, encode, token_rows

if TYPE_CHECKING:
    from ..base import Safe, Server

# the feature's entry points, wherever they are defined
__all__ = ["LEGEND", "TOKEN_MODIFIERS", "TOKEN_TYPES", "ChunkCache", "cache_chars", "delta_edit", "encode",
           "register", "semantic_tokens", "token_rows", "warm"]

async def warm(ls: Server, uri: str) -> None:
    """Lex and encode a just-opened document in the background: the editor asks for its
    semantic tokens right away, and a cold 1,000-line file took 60-100 ms to lex."""
    try:
        await _full_of(ls, uri)
    except Exception:   # only a cache fill: the request itself will report any failure
        pass


async def _tokens_of(ls: Server, uri: str, rng: lsp.Range | None = None) -> list[int] | None:
    """The tokens of the buffer as it is now.  Lexical only (names from `declared`), so
    unlike hover this never waits for the analysis of the edit just made: the editor
    asks for tokens after every keystroke, and waiting behind a check of several
    functions put it over 100 ms."""
    cur = ls.buffer(uri)
    if cur is None:
        return None
    text, version = cur
    encoding = ls.position_encoding()

    def work(checkpoint: Checkpoint) -> list[int]:
        index = index_of(text, encoding)
        span = index.span(rng) if rng is not None else None
        return semantic_chunks.CHUNKS.tokens(text, index, checkpoint=checkpoint, span=span)
    return await background.run(ls, uri, text, version, work)


async def _full_of(ls: Server, uri: str) -> tuple[list[int], str] | None:
    """The whole buffer's tokens and their JSON text (as _tokens_of)."""
    cur = ls.buffer(uri)
    if cur is None:
        return None
    text, version = cur
    encoding = ls.position_encoding()
    return await background.run(ls, uri, text, version,
                                lambda checkpoint: semantic_chunks.CHUNKS.full(text, index_of(text, encoding), checkpoint))


def register(server: Server, safe: Safe) -> None:
    """Full, delta and range handlers (one legend: pygls merges them into one capability)."""
    def empty() -> lsp.SemanticTokens:
        return lsp.SemanticTokens(data=[])

    @server.feature(lsp.TEXT_DOCUMENT_SEMANTIC_TOKENS_FULL, LEGEND)
    @safe(default=empty)
    async def on_semantic_tokens(ls: Server, params: lsp.SemanticTokensParams) -> lsp.SemanticTokens | RawResult:
        found = await _full_of(ls, params.text_document.uri)
        if found is None:
            return empty()
        data, data_json = found
        rid = ls.documents.put_tokens(params.text_document.uri, data)
        # ready JSON: through cattrs, the 250,000 numbers of a 5,000-line file cost more
        # than computing them (and json.dumps of them, more than joining cached parts)
        return RawResult(f'{{"resultId":{json.dumps(rid)},"data":{data_json}}}')

    @server.feature(lsp.TEXT_DOCUMENT_SEMANTIC_TOKENS_FULL_DELTA, LEGEND)
    @safe(default=empty)
    async def on_semantic_tokens_delta(ls: Server, params: lsp.SemanticTokensDeltaParams,
                                       ) -> lsp.SemanticTokens | lsp.SemanticTokensDelta:
        uri = params.text_document.uri
        found = await _full_of(ls, uri)
        if found is None:
            return empty()
        data = found[0]
        old = ls.documents.tokens(uri, params.previous_result_id)
        rid = ls.documents.put_tokens(uri, data)
        if old is None:   # unknown or superseded id: the full array (the spec allows either)
            return lsp.SemanticTokens(data=data, result_id=rid)
        return lsp.SemanticTokensDelta(edits=delta_edit(old, data), result_id=rid)

    @server.feature(lsp.TEXT_DOCUMENT_SEMANTIC_TOKENS_RANGE, LEGEND)
    @safe(default=empty)
    async def on_semantic_tokens_range(ls: Server, params: lsp.SemanticTokensRangeParams,
                                       ) -> lsp.SemanticTokens | RawResult:
        data = await _tokens_of(ls, params.text_document.uri, params.range)
        return RawResult(json.dumps({"data": data or []}))

