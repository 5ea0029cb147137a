"""Span <-> Range conversion in every LSP position encoding (no server process)."""
from __future__ import annotations

import pytest
from lsprotocol import types as lsp

from compiler.core.diagnostics import Span
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


# ---- LSP line breaks: \n, \r\n and \r only (issue 12, F2/F3) ------------------------------
from kina_lsp.convert import split_lines  # noqa: E402
from kina_lsp.protocol import KinaTextDocument  # noqa: E402

SEPARATORS = "\u2028\u2029\u0085\x0b\x0c\x1c\x1d\x1e"


def test_only_lf_crlf_and_cr_end_lines():
    text = "a\u2028b\x0cc\r\nd\re\nf" + SEPARATORS
    assert split_lines(text) == ("a\u2028b\x0cc\r\n", "d\r", "e\n", "f" + SEPARATORS)
    idx = LineIndex(text)
    assert idx.line_count == 4
    assert idx.position(text.index("d")) == lsp.Position(line=1, character=0)
    assert idx.position(text.index("\n")) == lsp.Position(line=0, character=5)   # inside \r\n: end of line 0
    assert idx.offset(lsp.Position(line=0, character=99)) == text.index("\r")    # clamped before the break
    assert idx.position(len(text)) == lsp.Position(line=3, character=1 + len(SEPARATORS))


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8", "utf-32"])
def test_positions_of_many_offsets_match_position(encoding):
    import random
    rng = random.Random(7)
    for _ in range(100):
        text = "".join(rng.choice("ab é🙂\n\r\u2028") for _ in range(rng.randrange(60)))
        idx = LineIndex(text, encoding)
        offsets = sorted(rng.randrange(len(text) + 1) for _ in range(12))
        assert idx.positions(offsets) == [idx.position(o) for o in offsets]


def test_incremental_edits_after_separator_characters_land_where_the_client_put_them():
    text = f"x = 1 // {SEPARATORS}\nlet y = 2\r\nlet z = 3\rend\n"
    doc = KinaTextDocument("file:///t.kina", source=text)
    at = lambda line, ch: lsp.Position(line=line, character=ch)  # noqa: E731
    doc.apply_change(lsp.TextDocumentContentChangePartial(range=lsp.Range(start=at(1, 4), end=at(1, 5)), text="w"))
    doc.apply_change(lsp.TextDocumentContentChangePartial(range=lsp.Range(start=at(3, 0), end=at(3, 3)), text="fin"))
    doc.apply_change(lsp.TextDocumentContentChangePartial(range=lsp.Range(start=at(2, 9), end=at(3, 0)), text=" "))
    assert doc.source == f"x = 1 // {SEPARATORS}\nlet w = 2\r\nlet z = 3 fin\n"
    # a reversed range is the span between its two positions; past the end clamps
    doc.apply_change(lsp.TextDocumentContentChangePartial(range=lsp.Range(start=at(9, 0), end=at(2, 0)), text=""))
    assert doc.source == f"x = 1 // {SEPARATORS}\nlet w = 2\r\n"
