"""Semantic tokens, the cache: full-document tokens assembled from per-function chunks
(ChunkCache: an edit re-encodes only the function it touches), ranges clipped from them,
and deltas between two token arrays (delta_edit).  semantic_lex.py makes a chunk's
tokens; semantic.py serves them.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, NamedTuple, TypeVar

from lsprotocol import types as lsp

from compiler.core.diagnostics import Span

from ..convert import LineIndex
from ..items import split_items
from .semantic_lex import Tok, compact, declared, encode, rows_of


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


CHUNKS = ChunkCache()


def cache_chars() -> int:
    """Characters of chunk text the process-wide token cache holds (kina/serverStats)."""
    return CHUNKS.chars()


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


def semantic_tokens(text: str, index: LineIndex, functions: set[str] | None = None, params: set[str] | None = None,
                    span: Span | None = None) -> lsp.SemanticTokens:
    """Tokens of the whole text, or of those starting inside `span`; names default to the
    ones the text declares (`declared`)."""
    if span is None:
        return lsp.SemanticTokens(data=CHUNKS.tokens(text, index, functions, params))
    return lsp.SemanticTokens(data=CHUNKS.tokens(text, index, functions, params, span=span))
