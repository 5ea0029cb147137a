"""Syntax-error wording: a lark parse error -> one `syntax` Diagnostic saying what was
expected (in words, not terminal names), what was found and where.

Used by the plain parse of an item (syntax/parse.py) and by the recovery that finds the
item's other errors (syntax/recovery.py); a SyntaxProblem raised by the AST builder
(syntax/builder.py) keeps its own message and span.
"""
from __future__ import annotations

from enum import Enum
from typing import Literal

from lark import Token
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from compiler.core.diagnostics import Diagnostic, Span
from compiler.syntax import lex
from compiler.syntax.builder import SyntaxProblem
from compiler.syntax.hints import RETURN_MESSAGE

# How each terminal is named in messages.
_TERMINAL_NAMES = {
    "NAME": "a name", "INT": "an integer", "FLOAT": "a number", "$END": "the end of the function",
    "FN": "`fn`", "LET": "`let`", "HANDLE": "`handle`", "TENSOR": "`Tensor`", "IN": "`in`", "WITH": "`with`",
}
_EXPR_START = {"NAME", "INT", "FLOAT", "INF", "NAN", "LPAR", "LSQB", "MINUS", "TENSOR", "HANDLE"}
_NUMBER_WORDS = {"INF": "infinity", "NAN": "not a number"}
_OPERATORS = {"PLUS", "MINUS", "STAR", "SLASH", "AT", "DOT"}

_AFTER = {"IN": "after `in`", "EQUAL": "after `=`", "LET": "after `let`", "COLON": "after `:`",
          "COMMA": "after `,`", "LBRACE": "after `{`", "RARROW": "after `->`", "DOT": "after `.`",
          "WITH": "after `with`", "HANDLE": "after `handle`"}


def _terminal_name(name: str) -> str:
    if name in _TERMINAL_NAMES:
        return _TERMINAL_NAMES[name]
    term = lex.TERMINALS.get(name)
    if term is not None and term.pattern.type == "str":
        return f"`{term.pattern.value}`"
    return name.lower()


def _describe_expected(expected: set[str]) -> str:
    expected = set(expected)
    parts = []
    if "IN" in expected:
        return "`in` after the let value"
    if "EQUAL" in expected and "LPAR" not in expected:
        return "`=` after the let pattern" if "NAME" not in expected else "`=`"
    if {"NAME", "LPAR", "MINUS", "FLOAT", "LSQB"} <= expected and "HANDLE" not in expected:
        return "an attribute value (a number, a word, a size expression or a list)"
    if {"NAME", "LPAR", "MINUS"} <= expected:
        parts.append("an expression")
        expected -= _EXPR_START
        if "LET" in expected:
            parts[-1] = "an expression or `let`"
            expected.discard("LET")
    if _OPERATORS <= expected:
        parts.append("an operator")
        expected -= _OPERATORS
    parts += sorted(_terminal_name(t) for t in expected)
    if not parts:
        return "something else"
    if len(parts) == 1:
        return parts[0]
    return ", ".join(parts[:-1]) + " or " + parts[-1]


def _token_before(text: str, pos: int) -> Token | None:
    """The last token before `pos` (for "after `in`"); only computed on an error."""
    before = lex.tokens(text, 0, pos)
    return before[-1] if before and before[-1].type != lex.BAD else None


def _found(tok: Token | None) -> str:
    if tok is None or tok.type == "$END":
        return "the end of the function (is a `}` missing?)"
    text = str(tok)
    if len(text) > 20:
        text = text[:20] + "..."
    return f"`{text}`"


def bad_character(text: str, pos: int) -> Diagnostic:
    """The diagnostic for a character that starts no token (shown escaped if unprintable)."""
    n = len(text)
    pos = min(pos, n)
    ch = text[pos:pos + 1]
    shown = ch if ch.isprintable() else repr(ch)[1:-1]
    return Diagnostic("syntax", f"unexpected character `{shown}`", Span(pos, min(pos + 1, n)))


class _Lex(Enum):
    BEFORE = "before"   # error_diagnostic's default: find the token before the error by lexing


def error_diagnostic(err: UnexpectedInput, text: str,
                     last: Token | None | Literal[_Lex.BEFORE] = _Lex.BEFORE) -> Diagnostic:
    """One diagnostic for a lark error: what was expected (in words), what was found, where.
    `last` is the token before the error when the caller already knows it (recovery does)."""
    n = len(text)
    if isinstance(err, UnexpectedCharacters) and not isinstance(err, UnexpectedToken):
        return bad_character(text, err.pos_in_stream or 0)
    tok = getattr(err, "token", None)
    # `accepts` is what the parser state really accepts; `expected` may be the lexer's wider set.
    expected = set(getattr(err, "accepts", None) or getattr(err, "expected", None) or ())
    if tok is None or tok.type == "$END":
        tok, span = None, Span(n, n)
    else:
        span = Span(min(tok.start_pos, n), min(max(tok.end_pos, tok.start_pos), n))
    wanted = _describe_expected(expected)
    if last is _Lex.BEFORE:
        last = _token_before(text, span.start)
    if last is not None and last.type == "NAME" and str(last) == "return":
        return Diagnostic("syntax", RETURN_MESSAGE, Span(lex.start(last), lex.end(last)))
    if tok is not None and tok.type in ("INF", "NAN") and "NAME" in expected:
        return Diagnostic("syntax", f"`{tok}` is a number ({_NUMBER_WORDS[tok.type]}), a reserved word; "
                          "choose another name", span)
    context = _AFTER.get(last.type) if last is not None and " after " not in wanted else None
    if context:
        wanted = f"{wanted} {context}"
    return Diagnostic("syntax", f"expected {wanted}, found {_found(tok)}", span)


def failure_diagnostic(err: Exception, text: str, offset: int) -> Diagnostic:
    """The diagnostic of a failed plain parse (document offsets); foreign errors propagate."""
    if isinstance(err, UnexpectedInput):
        return error_diagnostic(err, text).shift(offset)
    problem = getattr(err, "orig_exc", err)
    if not isinstance(problem, SyntaxProblem):
        raise err
    return Diagnostic("syntax", problem.message, problem.span)

