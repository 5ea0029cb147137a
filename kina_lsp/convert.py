"""Positions: compiler Spans (code-point offsets) <-> LSP Ranges.

The compiler counts characters (Python code points); LSP counts code units of
the negotiated position encoding per line: UTF-16 by default (an emoji is one
compiler column but two LSP columns), or UTF-8 / UTF-32 when the client offers
them in `general.positionEncodings` (pygls picks the client's first choice).
`LineIndex` is built once per text version and answers both directions in
O(log lines + line length); an all-ASCII text (the common case) skips the
per-character walk since every encoding agrees there.
"""
from __future__ import annotations

import bisect

from lsprotocol import types as lsp

from compiler.diagnostics import Span


def _utf16_units(ch: str) -> int:
    return 2 if ord(ch) > 0xFFFF else 1


def _utf8_units(ch: str) -> int:
    o = ord(ch)
    return 1 if o < 0x80 else 2 if o < 0x800 else 3 if o < 0x10000 else 4


# position encoding (LSP PositionEncodingKind value) -> code units of one character
UNITS = {"utf-16": _utf16_units, "utf-8": _utf8_units, "utf-32": lambda ch: 1}


class LineIndex:
    """Line starts of one text, for offset <-> Position conversion."""

    def __init__(self, text: str, encoding: str = "utf-16"):
        self.text = text
        encoding = getattr(encoding, "value", encoding)  # PositionEncodingKind or its string
        self._units = UNITS.get(encoding, _utf16_units)
        self.starts = [0]
        for i, ch in enumerate(text):
            if ch == "\n":
                self.starts.append(i + 1)
        self._walk = not text.isascii() and encoding != "utf-32"  # columns need a walk

    def _line_end(self, line: int) -> int:
        return self.starts[line + 1] - 1 if line + 1 < len(self.starts) else len(self.text)

    def position(self, offset: int) -> lsp.Position:
        offset = max(0, min(offset, len(self.text)))
        line = bisect.bisect_right(self.starts, offset) - 1
        start = self.starts[line]
        col = offset - start
        if self._walk:
            col = sum(map(self._units, self.text[start:offset]))
        return lsp.Position(line=line, character=col)

    def positions(self, offsets) -> list[lsp.Position]:
        """position() of many offsets in one pass.  Ascending offsets (token streams) cost
        O(len(text) + len(offsets)) in total: each line is walked once, from its start to
        its last offset, where calling position() per offset walks it once per token
        (quadratic on a long non-ASCII line)."""
        out, n = [], len(self.text)
        line, line_end, at, col = -1, -1, 0, 0      # the line being walked, up to `at` (= col units)
        for offset in offsets:
            offset = max(0, min(offset, n))
            if not (line >= 0 and at <= offset and offset < line_end):
                line = bisect.bisect_right(self.starts, offset) - 1
                line_end = self.starts[line + 1] if line + 1 < len(self.starts) else n + 1
                at, col = self.starts[line], 0
            if self._walk:
                col += sum(map(self._units, self.text[at:offset]))
            else:
                col += offset - at
            at = offset
            out.append(lsp.Position(line=line, character=col))
        return out

    def offset(self, pos: lsp.Position) -> int:
        """Code-point offset of an LSP position, clamped to the line and the text."""
        if pos.line < 0:
            return 0
        if pos.line >= len(self.starts):
            return len(self.text)
        start, end = self.starts[pos.line], self._line_end(pos.line)
        want = max(0, pos.character)
        if not self._walk:
            return min(start + want, end)
        units = 0
        for i in range(start, end):
            if units >= want:
                return i
            units += self._units(self.text[i])
        return end

    def range(self, span: Span) -> lsp.Range:
        return lsp.Range(start=self.position(span.start), end=self.position(span.end))

    def span(self, rng: lsp.Range) -> Span:
        return Span(self.offset(rng.start), self.offset(rng.end))
