"""Semantic tokens (full document, a range, and deltas): a lexical pass classified
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

import itertools
import json
import re
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import TYPE_CHECKING, Generic, NamedTuple, TypeVar

from lsprotocol import types as lsp

from compiler.core.diagnostics import Span
from compiler.core.types import DType
from compiler.ir.nodes import HANDLERS
from compiler.ir.ops import SURFACE_OPS
from compiler.syntax import lex

from .. import background
from ..background import Checkpoint
from ..convert import LineIndex, index_of
from ..items import split_items
from ..protocol import RawResult

if TYPE_CHECKING:
    from ..base import Safe, Server

# (start, end, token type index, modifier bits) of one classified token
Row = tuple[int, int, int, int]

TOKEN_TYPES = ["keyword", "type", "function", "method", "parameter", "variable", "number", "comment", "macro",
               "property", "enumMember", "typeParameter"]
TOKEN_MODIFIERS = ["declaration", "defaultLibrary"]
LEGEND = lsp.SemanticTokensLegend(token_types=TOKEN_TYPES, token_modifiers=TOKEN_MODIFIERS)

_DTYPES = {d.value for d in DType}
_ENUMS = {c for op in SURFACE_OPS.values() for a in op.attrs for c in a.choices}
_TYPE_INDEX = {name: i for i, name in enumerate(TOKEN_TYPES)}
# A token as the cache keeps it: (terminal, text, start, end).  Plain tuples of str and
# int, which the garbage collector stops tracking, unlike lark Tokens: 60,000 cached
# Tokens made every full collection of the server a 60 ms pause.
Tok = tuple[str, str, int, int]
_NONE: Tok = ("$NONE", "", 0, 0)       # stands for "no token" before the first and after the last


# A line of junk gets no semantic tokens: a 128,000-character line of `§x§x...` is
# 128,000 tokens to lex and classify (a quarter of a second, on every keystroke), and no
# one reads the colours of such a line.  "Junk": a line over LONG characters whose code (what
# comes before a `//`) holds over JUNK characters that are not Kina's; a long line of
# real code (a literal of 4,000 values) is lexed as any other.
LONG, JUNK = 4_096, 256
_LONG_LINE = re.compile(f"[^\r\n]{{{LONG + 1},}}")
_NOT_KINA = re.compile(r"[^A-Za-z0-9_\s()\[\]{}.,:=+\-*/@]")


def _blank_junk(m: re.Match[str]) -> str:
    line = m.group()
    code = line.split("//", 1)[0]
    return " " * len(line) if len(_NOT_KINA.findall(code)) > JUNK else line


def compact(text: str) -> list[Tok]:
    """The text's tokens, comments kept, as `Tok`s (none on lines of junk, which are lexed
    as blanks of the same length: offsets stay the text's)."""
    if len(text) > LONG:
        text = _LONG_LINE.sub(_blank_junk, text)
    return [(t.type, str(t), lex.start(t), lex.end(t)) for t in lex.tokens(text, comments=True)]


class _Sizes:
    """The size parameters of the function being classified (`fn f[B, T]`), read from the
    tokens as they go by: sizes are local to their function and declared in its header, so
    a chunk (which starts at a function) classifies them from its own text."""
    __slots__ = ("names", "state")

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.state = 0        # 1: after `fn`, 2: after `fn f`, 3: inside `fn f[..]`

    def see(self, kind: str, word: str) -> bool:
        """Advance past a code token; True when it declares a size."""
        if kind == "FN":
            self.names, self.state = set(), 1
        elif self.state == 1:
            self.state = 2 if kind == "NAME" else 0
        elif self.state == 2:
            self.state = 3 if kind == "LSQB" else 0
        elif self.state == 3:
            if kind == "NAME":
                self.names.add(word)
                return True
            if kind != "COMMA":
                self.state = 0
        return False


def _classify(tok: Tok, prev: Tok, nxt: Tok, functions: set[str], params: set[str],
              sizes: set[str] | frozenset[str] = frozenset(), declares: bool = False) -> tuple[str, int] | None:
    """(token type, modifier bits) of one token, from its neighbours (comments skipped);
    `sizes`: the size parameters of its function, `declares`: the token declares one."""
    kind = tok[0]
    if kind == lex.COMMENT:
        return "comment", 0
    if kind in lex.NUMBERS:
        return "number", 0
    if kind in lex.KEYWORD_TERMINALS:
        return "keyword", 0
    if kind != "NAME":
        return None
    if declares:
        return "typeParameter", 1
    return _classify_name(tok[1], prev[0], nxt[0], functions, params, sizes)


def _classify_name(word: str, prev: str, nxt: str, functions: set[str], params: set[str],
                   sizes: set[str] | frozenset[str] = frozenset()) -> tuple[str, int] | None:
    if word in _DTYPES:
        return "type", 0
    if word in HANDLERS:
        return "macro", 2
    if nxt == "EQUAL":
        return "property", 0
    call, after_dot = nxt == "LPAR", prev == "DOT"
    if word in functions and (call or nxt == "LSQB") and not after_dot:   # shadows the op's free form; `f[8](..)`
        return "function", 1 if prev == "FN" else 0
    if word in SURFACE_OPS and (after_dot or call):
        return ("method" if after_dot else "function"), 2
    if word in sizes and not after_dot:   # in a type, a list, an attribute or as a bare number
        return "typeParameter", 0
    if word in _ENUMS and prev == "EQUAL":
        return "enumMember", 0
    if word in params:
        return "parameter", 0
    return None  # plain variables are left to the editor's own highlighting


def token_rows(text: str, functions: set[str], params: set[str], start: int = 0,
               end: int | None = None) -> Iterator[Row]:
    """(start, end, type index, modifier bits) of every token that starts in [start, end), in order."""
    return rows_of(compact(text), functions, params, start, len(text) if end is None else end)


def rows_of(toks: list[Tok], functions: set[str], params: set[str], start: int, end: int) -> Iterator[Row]:
    """token_rows of an already lexed text."""
    n, prev = len(toks), _NONE
    sizes = _Sizes()
    for i, tok in enumerate(toks):
        if tok[2] >= end:
            break
        j = i + 1
        while j < n and toks[j][0] == lex.COMMENT:      # neighbours skip comments
            j += 1
        declares = tok[0] != lex.COMMENT and sizes.see(tok[0], tok[1])
        cls = _classify(tok, prev, toks[j] if j < n else _NONE, functions, params, sizes.names, declares)
        if tok[0] != lex.COMMENT:
            prev = tok
        # a token that starts before `start` but reaches into the range is not reported (LSP: tokens in range)
        if cls is not None and tok[2] >= start:
            yield tok[2], tok[3], _TYPE_INDEX[cls[0]], cls[1]


def encode(rows: Iterable[Row], index: LineIndex) -> list[int]:
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


def declared(toks: list[Tok]) -> tuple[frozenset[str], frozenset[str]]:
    """(function names, parameter names) a lexed text declares: the NAME after `fn`, and
    every NAME before a `:` in a header (between `fn` and its body's `{`; types hold no
    `:`).  Lexical, so it needs no parse or check: semantic tokens never wait for the
    analysis of an edit, and a function with a syntax error still declares its names."""
    fns: set[str] = set()
    params: set[str] = set()
    in_header = False
    for i, (kind, word, _, _) in enumerate(toks):
        nxt = toks[i + 1] if i + 1 < len(toks) else _NONE
        if kind == "FN":
            in_header = True
            if nxt[0] == "NAME":
                fns.add(nxt[1])
        elif kind == "LBRACE":
            in_header = False
        elif in_header and kind == "NAME" and nxt[0] == "COLON":
            params.add(word)
    return frozenset(fns), frozenset(params)


def semantic_tokens(text: str, index: LineIndex, functions: set[str] | None = None, params: set[str] | None = None,
                    span: Span | None = None) -> lsp.SemanticTokens:
    """Tokens of the whole text, or of those starting inside `span`; names default to the
    ones the text declares (`declared`)."""
    if span is None:
        return lsp.SemanticTokens(data=_chunks.tokens(text, index, functions, params))
    return lsp.SemanticTokens(data=_chunks.tokens(text, index, functions, params, span=span))


class _Chunk(NamedTuple):
    """What the cache knows about one chunk's text apart from its tokens."""
    words: frozenset[str]        # every NAME in it: the names its classification can depend on
    functions: frozenset[str]    # the names it declares (`declared`)
    params: frozenset[str]


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _TextLRU(Generic[K, V]):
    """Least recently used first out, bounded by entries and by the characters of the
    texts in its keys (`text_of(key)`)."""

    def __init__(self, limit: int, text_of: Callable[[K], str]) -> None:
        self._data: OrderedDict[K, V] = OrderedDict()
        self.limit, self._text_of = limit, text_of
        self.chars = 0

    def get(self, key: K) -> V | None:
        hit = self._data.get(key)
        if hit is not None:
            self._data.move_to_end(key)
        return hit

    def put(self, key: K, value: V, budget: int) -> None:
        if key not in self._data:
            self.chars += len(self._text_of(key))
        self._data[key] = value
        self.trim(budget)

    def trim(self, budget: int) -> None:
        while self._data and (len(self._data) > self.limit or self.chars > budget):
            old, _ = self._data.popitem(last=False)
            self.chars -= len(self._text_of(old))

    def __len__(self) -> int:
        return len(self._data)

    def values(self) -> Iterable[V]:
        return self._data.values()


class ChunkCache:
    """Full-document tokens assembled from per-function chunks, each encoded once.

    An edit changes one function; re-lexing and re-encoding the other 99 of a
    1,000-line file on every keystroke made semantic tokens the slowest request.
    The text is cut where a top-level item (item_split.split_items) starts a line: a
    classification reads only the code tokens next to a word, and none of those
    crosses such a cut in a way that matters (the token after a function's last
    `}` is the next `fn`), so a chunk's tokens depend only on its text and on
    which of its own words are function or parameter names (a new parameter name
    elsewhere re-encodes only the chunks that use that word).  A chunk's data is
    LSP's relative encoding with lines counted from the chunk's first line;
    assembling shifts each chunk's first delta line (its first token is on a
    later line than every token before it, so its delta column is its column)."""

    def __init__(self, limit: int = 1024, token_limit: int = 256, chars: int = 200_000) -> None:
        def first(key: tuple[str, frozenset[str], frozenset[str], str]) -> str:
            return key[0]
        self._data: _TextLRU[tuple[str, frozenset[str], frozenset[str], str], tuple[list[int], int, str]] = \
            _TextLRU(limit, first)
        self._last: tuple[str, str, list[int], str] | None = None   # (text, encoding, full(text))
        # the chunks of the last text tokenised (_assemble), and their tokens under its names
        self._last_infos: dict[str, tuple[str, _Chunk]] = {}
        self._last_names: tuple[str, frozenset[str], frozenset[str]] | None = None
        self._last_encoded: dict[str, tuple[list[int], int, str]] = {}
        self._info: _TextLRU[str, _Chunk] = _TextLRU(limit, str)
        # A few versions of each function's tokens, not thousands (memory; they are
        # `Tok`s, which a full collection does not walk).
        self._tokens: _TextLRU[str, list[Tok]] = _TextLRU(token_limit, str)
        # Each keeps at most max(chars, 2 x the text last tokenised) characters of chunk
        # text: a count bound alone kept 1,024 versions of a chunk holding a
        # 250,000-character line, and a file that shrank kept its largest version's chunks.
        self._floor = chars
        self._budget = chars
        self._limit = limit

    def _fit(self, text: str, chunks: int) -> None:
        """Bound the caches by what `text` needs (the current text keeps all its chunks: a
        fixed bound of 1,024 entries made every request on a file of more than 1,024
        functions miss every chunk, the 1.8 s cliff of issue 31)."""
        self._budget = max(self._floor, 2 * len(text))
        self._data.limit = self._info.limit = max(self._limit, 2 * chunks)
        self._data.trim(self._budget)
        self._info.trim(self._budget)
        self._tokens.trim(self._budget)

    def chars(self) -> int:
        """Characters of chunk text the caches hold (each text counted once per cache)."""
        return self._data.chars + self._info.chars + self._tokens.chars

    @staticmethod
    def _cuts(text: str) -> list[tuple[int, int]]:
        starts = [it.start for it in split_items(text) if it.start > 0 and text[it.start - 1] == "\n"]
        cuts = [0] + starts + [len(text)]
        return list(zip(cuts, cuts[1:]))

    def names(self, text: str) -> tuple[set[str], set[str]]:
        """(function names, parameter names) the whole text declares."""
        cuts = self._cuts(text)
        self._fit(text, len(cuts))
        return self._names([text[a:b] for a, b in cuts])

    def _names(self, chunks: list[str]) -> tuple[set[str], set[str]]:
        infos = [self._chunk_info(c) for c in chunks]
        return {f for c in infos for f in c.functions}, {p for c in infos for p in c.params}

    def tokens(self, text: str, index: LineIndex, functions: set[str] | None = None,
               params: set[str] | None = None, checkpoint: Callable[[], None] = lambda: None,
               span: Span | None = None) -> list[int]:
        """The whole text's tokens, or (`span`) those starting inside span, from the chunks
        that overlap it (so a range is never slower than the full request); names default
        to the ones the text declares.  `checkpoint` is called before each chunk (it raises
        once the document has changed: background.py)."""
        data, _ = self._assemble(text, index, functions, params, checkpoint, span)
        return data if span is None else _clip(data, *index.line_columns([span.start, span.end]))

    def full(self, text: str, index: LineIndex, checkpoint: Callable[[], None] = lambda: None,
             ) -> tuple[list[int], str]:
        """(the whole text's tokens, the same as JSON text).  The JSON is joined from each
        chunk's cached JSON (json.dumps of the 520,000 numbers of a 20,000-line file took
        45 ms), and the answer for the last text asked is kept: the editor asks again for
        a text it already has tokens of (a tab brought back, a second view)."""
        last = self._last
        if last is not None and last[0] is text and last[1] == index.encoding:
            return last[2], last[3]
        data, parts = self._assemble(text, index, None, None, checkpoint, None)
        answer = "[" + ",".join(parts) + "]"
        self._last = (text, index.encoding, data, answer)
        return data, answer

    def _assemble(self, text: str, index: LineIndex, functions: set[str] | None, params: set[str] | None,
                  checkpoint: Callable[[], None], span: Span | None) -> tuple[list[int], list[str]]:
        """(the tokens of the chunks that overlap span (all: None), their JSON text in parts)."""
        cuts = self._cuts(text)
        self._fit(text, len(cuts))
        chunks = [text[a:b] for a, b in cuts]
        # The last text's chunks, by text, in plain dicts: after an edit all but one are
        # there, and the LRUs' bookkeeping for 2,000 chunks was most of a request.
        # (each kept under the string object first seen, which the LRUs key on too: the
        # dicts share the caches' strings rather than hold a second copy of the text)
        known = self._last_infos
        kept = [known.get(c) or (c, self._chunk_info(c)) for c in chunks]
        chunks = [c for c, _ in kept]
        infos = [info for _, info in kept]
        self._last_infos = dict(zip(chunks, kept))
        if functions is None or params is None:
            functions = set().union(*(i.functions for i in infos))
            params = set().union(*(i.params for i in infos))
        names = (index.encoding, frozenset(functions), frozenset(params))
        reuse = self._last_encoded if names == self._last_names else {}
        encoded: dict[str, tuple[list[int], int, str]] = {}
        lines = [line for line, _ in index.line_columns([a for a, _ in cuts])]
        data: list[int] = []
        parts: list[str] = []
        prev_line = 0
        for (a, b), chunk_text, line in zip(cuts, chunks, lines):
            if span is not None and not (a < span.end and b > span.start):
                continue
            checkpoint()
            hit = reuse.get(chunk_text) or self._chunk(chunk_text, index.encoding, functions, params)
            encoded[chunk_text] = hit
            chunk, last, rest = hit
            if not chunk:
                continue
            first = line + chunk[0] - prev_line     # only a chunk's first token is re-based
            data.extend(chunk)
            data[len(data) - len(chunk)] = first
            parts.append(f"{first},{rest}")
            prev_line = line + last
        if span is None:
            self._last_names, self._last_encoded = names, encoded
        return data, parts

    def _chunk(self, text: str, encoding: str, functions: set[str], params: set[str]) -> tuple[list[int], int, str]:
        """(encoded tokens of one chunk, the line of its last token, the JSON text of its
        tokens after the first delta line), from the cache."""
        words = self._chunk_info(text).words
        key = (text, words & functions, words & params, encoding)
        hit = self._data.get(key)
        if hit is None:
            data = encode(rows_of(self._lexed(text), functions, params, 0, len(text)), LineIndex(text, encoding))
            hit = (data, sum(data[0::5]), ",".join(map(str, data[1:])))
            self._data.put(key, hit, self._budget)
        return hit

    def _chunk_info(self, text: str) -> _Chunk:
        info = self._info.get(text)
        if info is None:
            toks = self._lexed(text)
            info = _Chunk(frozenset(t[1] for t in toks if t[0] == "NAME"), *declared(toks))
            self._info.put(text, info, self._budget)
        return info

    def _lexed(self, text: str) -> list[Tok]:
        """The chunk's tokens, kept apart from the names: typing inside a parameter's name
        changes the module's names, and re-lexing all 100 functions of a 1,000-line file
        for it took 33 of the request's 40 ms."""
        toks = self._tokens.get(text)
        if toks is None:
            toks = compact(text)
            self._tokens.put(text, toks, self._budget)
        return toks


def _clip(data: list[int], start: tuple[int, int], end: tuple[int, int]) -> list[int]:
    """The encoded tokens that start in [start, end) ((line, column) positions)."""
    out: list[int] = []
    line = col = 0
    prev_line = prev_col = 0
    for i in range(0, len(data), 5):
        dl, dc = data[i], data[i + 1]
        line, col = line + dl, (col + dc if dl == 0 else dc)
        if start <= (line, col) < end:
            out += (line - prev_line, col - prev_col if line == prev_line else col, *data[i + 2:i + 5])
            prev_line, prev_col = line, col
    return out


_chunks = ChunkCache()


def cache_chars() -> int:
    """Characters of chunk text the process-wide token cache holds (kina/serverStats)."""
    return _chunks.chars()


def delta_edit(old: list[int], new: list[int]) -> list[lsp.SemanticTokensEdit]:
    """One edit turning `old` into `new` (none if equal), cut at whole tokens."""
    if old == new:
        return []
    n = min(len(old), len(new))
    prefix = _common_run(old, new, n)
    prefix -= prefix % 5
    suffix = _common_run(old, new, n - prefix, backwards=True)
    suffix -= suffix % 5
    return [lsp.SemanticTokensEdit(start=prefix, delete_count=len(old) - prefix - suffix,
                                   data=new[prefix:len(new) - suffix])]


_BLOCK = 2048


def _common_run(a: list[int], b: list[int], n: int, backwards: bool = False) -> int:
    """Length of the common prefix (suffix: `backwards`) of a and b, at most n: compared a
    block of numbers at a time (list comparison is C code; a loop over the 520,000 numbers
    of a 20,000-line file's tokens took 30 ms), then within the first block that differs."""
    la, lb = len(a), len(b)
    i = 0
    if backwards:
        while i + _BLOCK <= n and a[la - i - _BLOCK:la - i] == b[lb - i - _BLOCK:lb - i]:
            i += _BLOCK
        while i < n and a[la - 1 - i] == b[lb - 1 - i]:
            i += 1
        return i
    while i + _BLOCK <= n and a[i:i + _BLOCK] == b[i:i + _BLOCK]:
        i += _BLOCK
    while i < n and a[i] == b[i]:
        i += 1
    return i


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
        return _chunks.tokens(text, index, checkpoint=checkpoint, span=span)
    return await background.run(ls, uri, text, version, work)


async def _full_of(ls: Server, uri: str) -> tuple[list[int], str] | None:
    """The whole buffer's tokens and their JSON text (as _tokens_of)."""
    cur = ls.buffer(uri)
    if cur is None:
        return None
    text, version = cur
    encoding = ls.position_encoding()
    return await background.run(ls, uri, text, version,
                                lambda checkpoint: _chunks.full(text, index_of(text, encoding), checkpoint))


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
