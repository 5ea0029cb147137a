"""Lexing: Kina text -> tokens, with the terminals of grammar.lark and nothing else.

The one lexer of the project: the parser's error recovery, the language
server's completion context, semantic tokens, word-under-cursor and workspace
symbols, and the grammar tests all read Kina through `tokens()`, so a new
keyword or a change to how numbers are written is made once, in the grammar.

`tokens()` never fails: a run of characters that starts no token becomes one
BAD token spanning its first character, and lexing resumes after the run.
Comments are dropped unless asked for; blanks always are.
"""
from __future__ import annotations

import copy
import re

from lark import Token
from lark.lexer import BasicLexer
from lark.utils import TextSlice

from compiler.core.diagnostics import BOM
from compiler.syntax import grammar

# The terminals and basic lexer of the parser's own Lark (syntax/grammar.py, loaded from
# lark's cache), so terminal names agree and the recovery (syntax/recovery.py) can feed
# these tokens to the parser.
_LARK = grammar.load()
TERMINALS = {t.name: t for t in _LARK.terminals}
_CODE_LEXER: BasicLexer = _LARK._build_lexer()                       # blanks and comments dropped
_COMMENTS_CONF = copy.copy(_LARK.lexer_conf)
_COMMENTS_CONF.ignore = ("WS",)
_COMMENTS_LEXER = BasicLexer(_COMMENTS_CONF)                          # blanks dropped, comments kept

BAD = "BAD_CHARACTER"      # pseudo-terminal: a character that starts no token
COMMENT = "COMMENT"
NUMBERS = frozenset({"INT", "FLOAT", "INF", "NAN"})   # `inf` and `nan` are numbers spelled as words

# The grammar's word-shaped string terminals: fn, let, in, handle, with, Tensor, and the
# number words inf and nan (reserved: no binding may take their names).
KEYWORD_TERMINALS = {name: str(t.pattern.value) for name, t in TERMINALS.items()
                     if t.pattern.type == "str" and str(t.pattern.value).isidentifier()}
KEYWORDS = frozenset(KEYWORD_TERMINALS.values())
WORDS = frozenset({"NAME"} | set(KEYWORD_TERMINALS))    # terminals an identifier-like word lexes to

# Whether some terminal matches at a position: the lexer fails exactly where none does.
_ANY_TERMINAL = re.compile("|".join(f"(?:{t.pattern.to_regexp()})" for t in _LARK.terminals
                                    if t.name not in _LARK.lexer_conf.ignore))
_BLANKS = re.compile(r"\s+")


def _junk_end(text: str, pos: int, end: int) -> int:
    """End of the run of junk starting with the bad character at `pos`: further bad
    characters and blanks.  Only the first is worth a diagnostic (recovery skips the
    rest), and lexing each separately would make a pasted binary blob slow."""
    pos += 1
    while pos < end:
        blank = _BLANKS.match(text, pos, end)
        if blank:
            pos = blank.end()
        elif _ANY_TERMINAL.match(text, pos, end):
            break
        else:
            pos += 1
    return pos


def tokens(text: str, start: int = 0, end: int | None = None, comments: bool = False) -> list[Token]:
    """Every token of text[start:end] in order, positions in `text`'s offsets.

    Lark's own loop (LexerThread) cannot resume after a bad character without starting
    over, and each start counts the lines of everything before it: a 128,000-character
    line of `§x§x...` (64,000 bad characters) took seconds.  This is the same loop as
    lark's BasicLexer.next_token (its scanner, keyword callbacks and line counting), kept
    going past bad characters: linear in the text."""
    end = len(text) if end is None else end
    lexer = _COMMENTS_LEXER if comments else _CODE_LEXER
    pos = start + 1 if start == 0 and text.startswith(BOM) else start   # a byte-order mark is no token
    scanner, window = lexer.scanner, TextSlice(text, 0, end)
    ignore, newlines, callback = lexer.ignore_types, lexer.newline_types, lexer.callback
    line = text.count("\n", 0, pos) + 1
    line_start = text.rfind("\n", 0, pos) + 1
    out: list[Token] = []
    while pos < end:
        found = scanner.match(window, pos)
        tok: Token | None = None
        if found is None:    # one BAD token, and the rest of the run of junk is skipped
            out.append(Token(BAD, text[pos], pos, line, pos - line_start + 1, line, pos - line_start + 2, pos + 1))
            value, kind = text[pos:_junk_end(text, pos, end)], BAD
        else:
            value, kind = found
            if kind not in ignore or kind in callback:
                tok = Token(kind, value, pos, line, pos - line_start + 1)
        if found is None or kind in newlines:
            breaks = value.count("\n")
            if breaks:
                line += breaks
                line_start = pos + value.rindex("\n") + 1
        pos += len(value)
        if tok is not None:
            tok.end_line, tok.end_column, tok.end_pos = line, pos - line_start + 1, pos
            if kind in callback:      # a keyword: lark retypes the NAME it matched
                tok = callback[kind](tok)
            if kind not in ignore:
                out.append(tok)
    return out


def start(tok: Token) -> int:
    """A token's first offset (lark types it Optional: every token lexed from text has one)."""
    assert tok.start_pos is not None, tok
    return tok.start_pos


def end(tok: Token) -> int:
    """A token's end offset (exclusive)."""
    assert tok.end_pos is not None, tok
    return tok.end_pos


def is_word(text: str) -> bool:
    """Whether the whole text is one identifier-like token."""
    toks = tokens(text, comments=True)
    return len(toks) == 1 and toks[0].type in WORDS and len(toks[0]) == len(text)


LONG_LINE = 4096   # past this, word_at lexes a window of the line around the offset
WINDOW = 256


def word_at(text: str, offset: int, numbers: bool = False) -> Token | None:
    """The identifier-like token (a name or a keyword; a number too if asked) touching
    `offset` (just after it counts), read from the offset's line only (no token spans a
    line break); of a line over LONG_LINE characters, from a window of about 2 x WINDOW
    characters around the offset cut at blanks (no token spans a blank, and a `//` before
    the window makes it all comment): a request per keystroke need not lex 128,000
    characters of a pasted blob."""
    lo = max(text.rfind("\n", 0, offset), text.rfind("\r", 0, offset)) + 1
    hi = min((i for i in (text.find("\n", offset), text.find("\r", offset)) if i >= 0), default=len(text))
    if hi - lo > LONG_LINE:
        a = max(lo, text.rfind(" ", lo, max(lo, offset - WINDOW)) + 1)
        b = text.find(" ", min(hi, offset + WINDOW), hi)
        if text.find("//", lo, a) >= 0:
            return None
        lo, hi = a, hi if b < 0 else b
    for tok in tokens(text, lo, hi):
        if (tok.type in WORDS or numbers and tok.type in NUMBERS) and start(tok) <= offset <= end(tok):
            return tok
    return None
