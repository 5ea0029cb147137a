"""Positions: compiler Spans (code-point offsets) <-> LSP Ranges (UTF-16 units).

The compiler counts characters (Python code points); LSP counts UTF-16 code
units per line, so a character outside the Basic Multilingual Plane (an emoji
in a comment) is one compiler column but two LSP columns.  `LineIndex` is
built once per text version and answers both directions in O(log lines +
line length); lines that are pure BMP (nearly all of them) skip the
per-character walk.
"""
from __future__ import annotations

import bisect

from lsprotocol import types as lsp

from compiler.diagnostics import Span


def _utf16_len(s: str) -> int:
    return len(s) + sum(1 for ch in s if ord(ch) > 0xFFFF)


class LineIndex:
    """Line starts of one text, for offset <-> Position conversion."""

    def __init__(self, text: str):
        self.text = text
        self.starts = [0]
        for i, ch in enumerate(text):
            if ch == "\n":
                self.starts.append(i + 1)
        self._astral = any(ord(ch) > 0xFFFF for ch in text)

    def _line_end(self, line: int) -> int:
        return self.starts[line + 1] - 1 if line + 1 < len(self.starts) else len(self.text)

    def position(self, offset: int) -> lsp.Position:
        offset = max(0, min(offset, len(self.text)))
        line = bisect.bisect_right(self.starts, offset) - 1
        start = self.starts[line]
        col = offset - start
        if self._astral:
            col = _utf16_len(self.text[start:offset])
        return lsp.Position(line=line, character=col)

    def offset(self, pos: lsp.Position) -> int:
        """Code-point offset of an LSP position, clamped to the line and the text."""
        if pos.line < 0:
            return 0
        if pos.line >= len(self.starts):
            return len(self.text)
        start, end = self.starts[pos.line], self._line_end(pos.line)
        want = max(0, pos.character)
        if not self._astral:
            return min(start + want, end)
        units = 0
        for i in range(start, end):
            if units >= want:
                return i
            units += 2 if ord(self.text[i]) > 0xFFFF else 1
        return end

    def range(self, span: Span) -> lsp.Range:
        return lsp.Range(start=self.position(span.start), end=self.position(span.end))

    def span(self, rng: lsp.Range) -> Span:
        return Span(self.offset(rng.start), self.offset(rng.end))
