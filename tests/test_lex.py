"""compiler.syntax.lex.tokens on junk: linear in the text (issue 31's 128,000-character line).

Lark's own lexer loop restarts after every bad character and counts the lines of all
the text before it at each restart, so a line of `§x§x...` took time quadratic in its
length.  The check compares the CPU time of 64k and 256k characters of junk (4x the text:
about 4x the time when linear, 16x when quadratic), loosely, with no wall-clock threshold.
"""
from __future__ import annotations

import gc
import time

from compiler.syntax import lex


def _cpu(text: str) -> float:
    """The least CPU time of three runs, with the cyclic garbage collector off: its full
    collections grow with the number of live objects (the 256k run's token list), so with
    it on the ratio measured the collector too (8.5x once in CI for a linear lexer)."""
    best = float("inf")
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):      # the least of three: what the machine's other load added least to
            t = time.process_time()
            lex.tokens(text)
            best = min(best, time.process_time() - t)
    finally:
        gc.enable()
    return best


def test_lexing_junk_is_linear():
    small, big = "§x" * 32_000, "§x" * 128_000
    toks = lex.tokens(big)
    # one BAD token per `§` (each starts a run of junk that ends at the next `x`), one NAME per `x`
    assert [t.type for t in toks[:4]] == [lex.BAD, "NAME", lex.BAD, "NAME"] and len(toks) == 256_000
    assert (lex.start(toks[-1]), lex.end(toks[-1])) == (255_999, 256_000)
    ratio = _cpu(big) / _cpu(small)
    assert ratio < 8, f"256k characters of junk took {ratio:.1f}x the time of 64k (linear: ~4x)"


def test_tokens_after_junk_keep_their_lines_and_keywords():
    text = "§§ x\n  fn §\nlet y"
    toks = lex.tokens(text)
    assert [(t.type, str(t), t.line, t.column) for t in toks] == [
        (lex.BAD, "§", 1, 1), ("NAME", "x", 1, 4), ("FN", "fn", 2, 3), (lex.BAD, "§", 2, 6),
        ("LET", "let", 3, 1), ("NAME", "y", 3, 5)]
    assert [t.type for t in lex.tokens(text, 5, 11)] == ["FN", lex.BAD]
