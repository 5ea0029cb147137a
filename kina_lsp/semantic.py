"""Semantic tokens (full document, a range, and deltas): a lexical pass classified
with the op table and the module's function names, so built-in ops, user
functions, dtypes and the reverseMode handler are told apart even where a
TextMate grammar cannot.

Token rows are (line, start, length) in the negotiated position encoding,
delta-encoded as LSP requires.  The pass is linear in the text: offsets become
positions through LineIndex.positions (no per-token walk of the line), and the
look-behind of each word ("after a `.`", "after `fn`") scans back over blanks
only (it used to copy the text before every word: issue 12, F1).  It runs on a worker
thread, so a huge file never holds up other requests on the event loop.

Full results are assembled from per-function chunks, each lexed and encoded once
(ChunkCache): an edit re-encodes only the function it touches.

Deltas (`textDocument/semanticTokens/full/delta`): the last full result of each
document is kept under a result id; a delta request for that id is answered
with one edit (the changed middle between the common prefix and suffix of the
two token arrays), as rust-analyzer does.
"""
from __future__ import annotations

import asyncio
import itertools
import re
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

from lsprotocol import types as lsp

from compiler.diagnostics import Span
from compiler.ops import SURFACE_OPS
from compiler.types import DType

from .convert import LineIndex

TOKEN_TYPES = ["keyword", "type", "function", "method", "parameter", "variable", "number", "comment", "macro",
               "property", "enumMember"]
TOKEN_MODIFIERS = ["declaration", "defaultLibrary"]
LEGEND = lsp.SemanticTokensLegend(token_types=TOKEN_TYPES, token_modifiers=TOKEN_MODIFIERS)

_TOKEN = re.compile(r"(?P<comment>//[^\n]*)|(?P<number>\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
                    r"|(?P<ident>[A-Za-z_]\w*)(?P<call>\s*\()?(?P<kw>\s*=(?!=))?")
_KEYWORDS = {"fn", "let", "in", "handle", "with", "Tensor"}
_DTYPES = {d.value for d in DType}
_ENUMS = {c for op in SURFACE_OPS.values() for a in op.attrs for c in a.choices}
_TYPE_INDEX = {name: i for i, name in enumerate(TOKEN_TYPES)}
_WORD_CHAR = re.compile(r"\w")


def _before(text: str, pos: int) -> int:
    """Index just past the last non-blank character before pos (0 if none)."""
    while pos > 0 and text[pos - 1].isspace():
        pos -= 1
    return pos


def _classify(m: re.Match, text: str, functions: set[str]) -> tuple[str, int] | None:
    """(token type, modifier bits) of one identifier match."""
    word = m.group("ident")
    if word in _KEYWORDS:
        return "keyword", 0
    if word in _DTYPES:
        return "type", 0
    if word == "reverseMode":
        return "macro", 2
    if m.group("kw"):
        return "property", 0
    prev = _before(text, m.start())
    after_dot = prev > 0 and text[prev - 1] == "."
    if word in SURFACE_OPS and (after_dot or m.group("call")):
        return ("method" if after_dot else "function"), 2
    if word in functions and m.group("call"):
        declares = text.startswith("fn", prev - 2) and not (prev > 2 and _WORD_CHAR.match(text[prev - 3]))
        return "function", 1 if declares else 0
    if word in _ENUMS and prev > 0 and text[prev - 1] == "=":
        return "enumMember", 0
    return None  # plain variables are left to the editor's own highlighting


def token_rows(text: str, functions: set[str], params: set[str], start: int = 0, end: int | None = None):
    """(start, end, type index, modifier bits) of every token that starts in [start, end), in order."""
    end = len(text) if end is None else end
    # a token that starts before `start` but reaches into the range is not reported (LSP: tokens in range)
    for m in _TOKEN.finditer(text, start, len(text)):
        if m.start() >= end:
            break
        if m.group("comment"):
            yield m.start(), m.end(), _TYPE_INDEX["comment"], 0
        elif m.group("number"):
            yield m.start(), m.end(), _TYPE_INDEX["number"], 0
        else:
            cls = _classify(m, text, functions)
            if cls is None:
                if m.group("ident") not in params:
                    continue
                cls = ("parameter", 0)
            yield m.start("ident"), m.end("ident"), _TYPE_INDEX[cls[0]], cls[1]


def encode(rows, index) -> list[int]:
    """LSP's relative encoding of token rows; a token spanning lines is dropped."""
    rows = list(rows)
    ends = index.line_columns(itertools.chain.from_iterable((s, e) for s, e, _, _ in rows))
    data: list[int] = []
    append = data.extend
    prev_line = prev_col = 0
    for i, (_, _, kind, mods) in enumerate(rows):
        (a_line, a_col), (b_line, b_col) = ends[2 * i], ends[2 * i + 1]
        if a_line != b_line:
            continue
        append((a_line - prev_line, a_col - prev_col if a_line == prev_line else a_col, b_col - a_col, kind, mods))
        prev_line, prev_col = a_line, a_col
    return data


def names_of(view) -> tuple[set[str], set[str]]:
    """(function names, parameter names) of the view's module (names only: no AST is copied)."""
    fns = [fn for _offset, fn in view.snapshot.local_functions()]
    return {f.name for f in fns}, {p.name for f in fns for p in f.params}


def semantic_tokens(text: str, index, functions: set[str], params: set[str],
                    span: Span | None = None) -> lsp.SemanticTokens:
    """Tokens of the whole text, or of those starting inside `span`."""
    if span is None:
        return lsp.SemanticTokens(data=_chunks.tokens(text, index, functions, params))
    return lsp.SemanticTokens(data=encode(token_rows(text, functions, params, span.start, span.end), index))


_FN_LINE = re.compile(r"(?<=\n)fn\b")


class ChunkCache:
    """Full-document tokens assembled from per-function chunks, each encoded once.

    An edit changes one function; re-lexing and re-encoding the other 99 of a
    1,000-line file on every keystroke made semantic tokens the slowest request.
    The text is cut where a line starts with `fn`: no token, look-behind or
    `name (` match crosses such a cut, so a chunk's tokens depend only on its text
    and the module's function and parameter names.  A chunk's data is LSP's
    relative encoding with lines counted from the chunk's first line; assembling
    shifts each chunk's first delta line (its first token is on a later line than
    every token before it, so its delta column is its column)."""

    def __init__(self, limit: int = 4096):
        self._data: OrderedDict[tuple, tuple[list[int], int]] = OrderedDict()
        self._limit = limit

    def tokens(self, text: str, index, functions: set[str], params: set[str]) -> list[int]:
        names = (frozenset(functions), frozenset(params), index.encoding)
        cuts = [0] + [m.start() for m in _FN_LINE.finditer(text)] + [len(text)]
        lines = [line for line, _ in index.line_columns(cuts[:-1])]
        data: list[int] = []
        prev_line = 0
        for (a, b), line in zip(zip(cuts, cuts[1:]), lines):
            chunk, last = self._chunk(text[a:b], names, functions, params)
            if not chunk:
                continue
            data.append(line + chunk[0] - prev_line)
            data.extend(chunk[1:])
            prev_line = line + last
        return data

    def _chunk(self, text: str, names: tuple, functions, params) -> tuple[list[int], int]:
        """(encoded tokens of one chunk, the line of its last token), from the cache."""
        key = (text, names)
        hit = self._data.get(key)
        if hit is None:
            data = encode(token_rows(text, functions, params), LineIndex(text, names[2]))
            hit = (data, sum(data[0::5]))
            self._data[key] = hit
            while len(self._data) > self._limit:
                self._data.popitem(last=False)
        else:
            self._data.move_to_end(key)
        return hit


_chunks = ChunkCache()


def delta_edit(old: list[int], new: list[int]) -> list[lsp.SemanticTokensEdit]:
    """One edit turning `old` into `new` (none if equal), cut at whole tokens."""
    if old == new:
        return []
    n = min(len(old), len(new))
    prefix = 0
    while prefix < n and old[prefix] == new[prefix]:
        prefix += 1
    prefix -= prefix % 5
    suffix = 0
    while suffix < n - prefix and old[len(old) - 1 - suffix] == new[len(new) - 1 - suffix]:
        suffix += 1
    suffix -= suffix % 5
    return [lsp.SemanticTokensEdit(start=prefix, delete_count=len(old) - prefix - suffix,
                                   data=new[prefix:len(new) - suffix])]


class ResultCache:
    """The last full token array of each document, under a fresh result id (bounded)."""

    def __init__(self, limit: int = 64):
        self._ids = itertools.count(1)
        self._by_uri: OrderedDict[str, tuple[str, list[int]]] = OrderedDict()
        self._limit = limit

    def put(self, uri: str, data: list[int]) -> str:
        rid = str(next(self._ids))
        self._by_uri[uri] = (rid, data)
        self._by_uri.move_to_end(uri)
        while len(self._by_uri) > self._limit:
            self._by_uri.popitem(last=False)
        return rid

    def get(self, uri: str, rid: str) -> list[int] | None:
        hit = self._by_uri.get(uri)
        return hit[1] if hit is not None and hit[0] == rid else None


_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kina-semantic")
_cache = ResultCache()


async def _tokens_of(ls, uri: str, rng: lsp.Range | None = None) -> list[int] | None:
    view = await ls.view(uri)
    if view is None:
        return None
    functions, params = names_of(view)
    span = view.index.span(rng) if rng is not None else None
    loop = asyncio.get_running_loop()
    result = await loop.run_in_executor(_pool, semantic_tokens, view.text, view.index, functions, params, span)
    return result.data


def register(server, safe) -> None:
    """Full, delta and range handlers (one legend: pygls merges them into one capability)."""
    empty = lambda: lsp.SemanticTokens(data=[])  # noqa: E731

    @server.feature(lsp.TEXT_DOCUMENT_SEMANTIC_TOKENS_FULL, LEGEND)
    @safe(default=empty)
    async def on_semantic_tokens(ls, params: lsp.SemanticTokensParams):
        data = await _tokens_of(ls, params.text_document.uri)
        if data is None:
            return empty()
        return lsp.SemanticTokens(data=data, result_id=_cache.put(params.text_document.uri, data))

    @server.feature(lsp.TEXT_DOCUMENT_SEMANTIC_TOKENS_FULL_DELTA, LEGEND)
    @safe(default=empty)
    async def on_semantic_tokens_delta(ls, params: lsp.SemanticTokensDeltaParams):
        uri = params.text_document.uri
        data = await _tokens_of(ls, uri)
        if data is None:
            return empty()
        old = _cache.get(uri, params.previous_result_id)
        rid = _cache.put(uri, data)
        if old is None:   # unknown or superseded id: the full array (the spec allows either)
            return lsp.SemanticTokens(data=data, result_id=rid)
        return lsp.SemanticTokensDelta(edits=delta_edit(old, data), result_id=rid)

    @server.feature(lsp.TEXT_DOCUMENT_SEMANTIC_TOKENS_RANGE, LEGEND)
    @safe(default=empty)
    async def on_semantic_tokens_range(ls, params: lsp.SemanticTokensRangeParams):
        data = await _tokens_of(ls, params.text_document.uri, params.range)
        return lsp.SemanticTokens(data=data or [])
