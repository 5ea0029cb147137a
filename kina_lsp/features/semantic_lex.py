"""Semantic tokens, the lexical half: a text's tokens (compiler.syntax.lex's, comments
kept) classified with the op table and the function and parameter names the text
declares, as LSP rows (delta-encoded, in the negotiated position encoding).  Pure
functions of the text: semantic_chunks.py caches them per function, semantic.py serves
them (the design notes are in semantic.py's docstring).
"""
from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator

from lsprotocol import types as lsp

from compiler.core.types import DType
from compiler.ir.nodes import HANDLERS
from compiler.ir.ops import SURFACE_OPS
from compiler.syntax import lex

from ..convert import LineIndex

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
