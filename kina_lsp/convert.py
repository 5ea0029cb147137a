"""Positions: compiler Spans (code-point offsets) <-> LSP Ranges.

The compiler counts characters (Python code points); LSP counts code units of
the negotiated position encoding per line: UTF-16 by default (an emoji is one
compiler column but two LSP columns), or UTF-8 / UTF-32 when the client offers
them in `general.positionEncodings` (pygls picks the client's first choice).
`LineIndex` is built once per text version and answers both directions in
O(log lines + line length); an all-ASCII text (the common case) skips the
per-character walk since every encoding agrees there.  Lines end only at `\n`,
`\r\n` and `\r`, as the LSP defines them.
"""
from __future__ import annotations

import bisect
import itertools
import operator
import re
from collections.abc import Iterable

from lsprotocol import types as lsp

from compiler.core.diagnostics import Span

_ASTRAL = re.compile("[\U00010000-\U0010FFFF]")   # two UTF-16 code units each


# LSP line breaks: exactly these three (not str.splitlines(), which also breaks at
# U+2028, U+2029, U+0085, VT, FF and FS..RS; LSP clients treat those as characters).
LINE_BREAK = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> tuple[str, ...]:
    """The lines of text with their line breaks, as LSP counts them."""
    out, start = [], 0
    for m in LINE_BREAK.finditer(text):
        out.append(text[start:m.end()])
        start = m.end()
    if start < len(text):
        out.append(text[start:])
    return tuple(out)


def _line_bounds(text: str) -> tuple[list[int], list[int]]:
    """(start, end of content) of every line.  When every line break is the same one (all
    `\n`, or all `\r\n`: nearly every file) the lines come from str.split and the sums
    from itertools, at C speed: a 20,000-line file took 13 ms through the regex loop below
    (after every edit), 5 ms this way."""
    breaks = text.count("\n")
    crs = text.count("\r")
    sep = "\n" if crs == 0 else "\r\n" if crs == breaks == text.count("\r\n") else None
    if sep is None:     # mixed or lone \r breaks
        starts, ends = [0], []
        for m in LINE_BREAK.finditer(text):
            ends.append(m.start())
            starts.append(m.end())
        ends.append(len(text))
        return starts, ends
    lens = list(map(len, text.split(sep)))
    width = len(sep)
    starts = [0]
    # start of line i = the lengths of the lines before it + i breaks
    starts += map(operator.add, itertools.accumulate(lens[:-1]), range(width, width * len(lens), width))
    return starts, list(map(operator.add, starts, lens))


class LineIndex:
    """Line starts and ends of one text, for offset <-> Position conversion.

    Columns are counted without a per-character Python loop (a 400,000-character
    line stays cheap): UTF-32 columns are code points; UTF-16 columns are code
    points plus the astral characters before the column (found once, by regex);
    UTF-8 columns come from encoding the line's prefix."""

    def __init__(self, text: str, encoding: str = "utf-16") -> None:
        self.text = text
        encoding = getattr(encoding, "value", encoding)  # PositionEncodingKind or its string
        self.encoding = encoding if encoding in ("utf-8", "utf-32") else "utf-16"
        self.starts, self.ends = _line_bounds(text)   # ends: where each line's content ends (before its break)
        ascii_only = text.isascii()
        self._utf8 = self.encoding == "utf-8" and not ascii_only
        self._astral = ([m.start() for m in _ASTRAL.finditer(text)]
                        if self.encoding == "utf-16" and not ascii_only else [])

    @property
    def line_count(self) -> int:
        return len(self.starts)

    def _units(self, start: int, offset: int) -> int:
        """Code units of text[start:offset] (one line) in the negotiated encoding."""
        if self._utf8:
            return len(self.text[start:offset].encode("utf-8", "surrogatepass"))
        if self._astral:
            return offset - start + bisect.bisect_left(self._astral, offset) - bisect.bisect_left(self._astral, start)
        return offset - start

    def position(self, offset: int) -> lsp.Position:
        offset = max(0, min(offset, len(self.text)))
        line = bisect.bisect_right(self.starts, offset) - 1
        start = self.starts[line]
        offset = min(offset, self.ends[line])   # inside a \r\n: the end of the line
        return lsp.Position(line=line, character=self._units(start, offset))

    def positions(self, offsets: Iterable[int]) -> list[lsp.Position]:
        """position() of many offsets (see line_columns)."""
        return [lsp.Position(line=line, character=col) for line, col in self.line_columns(offsets)]

    def line_columns(self, offsets: Iterable[int]) -> list[tuple[int, int]]:
        """(line, column) of many offsets as plain ints: a token stream of a 1,000-line file
        has ~10,000 offsets, and building an lsp.Position for each cost more than the
        lexing (semantic tokens).  Ascending offsets on a UTF-8 line are counted in one
        walk (each line encoded once, not once per token)."""
        n, starts, ends = len(self.text), self.starts, self.ends
        out: list[tuple[int, int]] = []
        if not self._utf8:
            plain = not self._astral
            for offset in offsets:
                offset = max(0, min(offset, n))
                line = bisect.bisect_right(starts, offset) - 1
                start = starts[line]
                offset = min(offset, ends[line])     # inside a \r\n: the end of the line
                out.append((line, offset - start if plain else self._units(start, offset)))
            return out
        line, at, units = -1, 0, 0              # the line being walked, up to `at` (= units)
        for offset in offsets:
            offset = max(0, min(offset, n))
            if not (line >= 0 and at <= offset <= ends[line]):
                line = bisect.bisect_right(starts, offset) - 1
                at, units = starts[line], 0
                offset = min(offset, ends[line])
            units += self._units(at, offset)
            at = offset
            out.append((line, units))
        return out

    def offset(self, pos: lsp.Position) -> int:
        """Code-point offset of an LSP position, clamped to the line and the text.  A
        column inside a multi-unit character means the end of that character."""
        if pos.line < 0:
            return 0
        if pos.line >= len(self.starts):
            return len(self.text)
        start, end = self.starts[pos.line], self.ends[pos.line]
        want = max(0, pos.character)
        if not self._utf8 and not self._astral:
            return min(start + want, end)
        lo, hi = start, end                     # smallest i with units(start, i) >= want
        if self._units(start, end) <= want:
            return end
        while lo < hi:
            mid = (lo + hi) // 2
            if self._units(start, mid) >= want:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def range(self, span: Span) -> lsp.Range:
        return lsp.Range(start=self.position(span.start), end=self.position(span.end))

    def span(self, rng: lsp.Range) -> Span:
        return Span(self.offset(rng.start), self.offset(rng.end))


_RECENT: tuple[tuple[str, str, LineIndex], ...] = ()   # (text, encoding, LineIndex) of the last few texts, newest first


def index_of(text: str, encoding: str = "utf-16") -> LineIndex:
    """The LineIndex of text, shared: after an edit the document (to apply the next edit)
    and the analysis (to convert its spans) need the index of the same text object."""
    global _RECENT
    encoding = getattr(encoding, "value", encoding)
    for t, enc, index in _RECENT:          # a tuple: safe to read while another thread replaces it
        if t is text and enc == encoding:
            return index
    index = LineIndex(text, encoding)
    _RECENT = ((text, encoding, index),) + _RECENT[:3]
    return index
