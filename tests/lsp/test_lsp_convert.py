"""Span <-> Range conversion in every LSP position encoding (no server process)."""
from __future__ import annotations

import pytest
from lsprotocol import types as lsp

from compiler.diagnostics import Span
from kina_lsp.convert import LineIndex

TEXT = "ab\n// é🙂 x\nlet y\n"
X = TEXT.index("x")   # after a 2-byte é and a 4-byte, 2-UTF-16-unit emoji


@pytest.mark.parametrize("encoding, col", [("utf-16", 7), ("utf-8", 10), ("utf-32", 6),
                                           (lsp.PositionEncodingKind.Utf16, 7)])
def test_columns_follow_the_encoding(encoding, col):
    idx = LineIndex(TEXT, encoding)
    assert idx.position(X) == lsp.Position(line=1, character=col)
    assert idx.offset(lsp.Position(line=1, character=col)) == X
    assert idx.span(idx.range(Span(X, X + 1))) == Span(X, X + 1)


def test_round_trip_every_offset():
    for enc in ("utf-16", "utf-8", "utf-32"):
        idx = LineIndex(TEXT, enc)
        assert [idx.offset(idx.position(o)) for o in range(len(TEXT) + 1)] == list(range(len(TEXT) + 1))


def test_out_of_range_positions_clamp():
    idx = LineIndex(TEXT)
    assert idx.offset(lsp.Position(line=0, character=99)) == 2          # end of line 0, not into line 1
    assert idx.offset(lsp.Position(line=99, character=0)) == len(TEXT)
    assert idx.position(10_000) == idx.position(len(TEXT))
    # a position inside the emoji's surrogate pair maps to a character boundary
    inside = LineIndex(TEXT).offset(lsp.Position(line=1, character=5))
    assert inside in (TEXT.index("🙂"), TEXT.index("🙂") + 1)
