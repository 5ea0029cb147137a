"""Error recovery inside one item: every independent syntax error of a broken function.

Runs only on an item whose plain parse (syntax/parse.py) failed, so a function that parses
costs one LALR parse.  The item's tokens (syntax/lex.py) are fed one by one to lark's
interactive parser; on an error the recovery reports it, resynchronises at the let
chain's next `in` (or `let`) and goes on, so the language server shows every error of
the function at once.  Only the diagnostics are kept: a broken item's AST is None.
"""
from __future__ import annotations

from lark import Token
from lark.exceptions import UnexpectedToken, VisitError
from lark.parsers.lalr_interactive_parser import InteractiveParser

from compiler.core.diagnostics import Diagnostic
from compiler.syntax import lex
from compiler.syntax.builder import PARSER, SyntaxProblem
from compiler.syntax.errors import bad_character, error_diagnostic, failure_diagnostic

# After the body's `{` and after every `in` of the let chain the parser state is
# snapshotted (those are the only points where the parser always expects a fresh chain
# link).  On an error: report it, skip to the next chain boundary, restore the last
# snapshot and go on.  A snapshot shares the AST values it holds (no deep copy): the
# item's AST is thrown away anyway, only the diagnostics are kept.
MAX_ERRORS_PER_ITEM = 20

_OPENERS = frozenset({"LPAR", "LSQB", "LBRACE"})
_CLOSERS = frozenset({"RPAR", "RSQB", "RBRACE"})
_BRACKET_STEP = {**{t: 1 for t in _OPENERS}, **{t: -1 for t in _CLOSERS}}


def _resume_at(tokens: list[Token], i: int, depth: int) -> int | None:
    """Where to go on after an error at tokens[i], `depth` brackets deep since the last
    snapshot: just after the next `in` at depth 0, or at the next `let` (a let only ever
    starts a chain link, so it also ends brackets left open).  None when the item's closing
    `}` (or its end) comes first: nothing is left to check."""
    for j in range(i, len(tokens)):
        kind = tokens[j].type
        if kind == "LET":
            return j
        if kind == "IN" and depth == 0:
            return j + 1
        step = _BRACKET_STEP.get(kind, 0)
        if step < 0 and depth == 0:
            if kind == "RBRACE":
                return None       # the body's closing brace
            continue              # a stray `)` / `]`: part of the junk
        depth += step
    return None


def _feed_error(parser: InteractiveParser, tok: Token, before: Token | None,
                text: str, offset: int) -> Diagnostic | None:
    """Feed one token (`before` is the token preceding it in the text); the diagnostic
    if the parser rejects it, None if it accepts it."""
    if tok.type == lex.BAD:
        return bad_character(text, lex.start(tok)).shift(offset)
    try:
        parser.feed_token(tok)
    except UnexpectedToken as err:
        err.interactive_parser = parser        # what the failed state accepts, as in a plain parse
        last = None if before is None or before.type == lex.BAD else before
        return error_diagnostic(err, text, last).shift(offset)
    except (SyntaxProblem, VisitError) as err:
        return failure_diagnostic(err, text, offset)
    return None


def recover(text: str, offset: int) -> list[Diagnostic]:
    """All syntax errors of one item (at most MAX_ERRORS_PER_ITEM), in document offsets.
    The caller holds PARSE_LOCK with TO_AST.offset set: SyntaxProblem spans come from
    the transformer, which runs while tokens are fed."""
    tokens = lex.tokens(text)
    end = Token("$END", "", start_pos=len(text), end_pos=len(text))
    parser = PARSER.parse_interactive(text)
    snapshot: InteractiveParser | None = None
    depth = 0                     # bracket depth since the snapshot
    diags: list[Diagnostic] = []
    i = 0
    while len(diags) < MAX_ERRORS_PER_ITEM:
        tok = tokens[i] if i < len(tokens) else end
        diag = _feed_error(parser, tok, tokens[i - 1] if i else None, text, offset)
        if diag is None:
            if tok is end:
                break
            i += 1
            depth += _BRACKET_STEP.get(tok.type, 0)
            # `in` is only accepted closing a let value; the first `{` accepted opens the body
            if tok.type == "IN" or (tok.type == "LBRACE" and snapshot is None):
                # (lark leaves InteractiveParser.copy unannotated)
                snapshot, depth = parser.copy(deepcopy_values=False), 0  # type: ignore[no-untyped-call]
            continue
        diags.append(diag)
        resume = _resume_at(tokens, i, depth) if snapshot is not None else None
        if snapshot is None or resume is None:
            break                 # an error in the signature, or nothing left after the error
        parser, i, depth = snapshot.copy(deepcopy_values=False), resume, 0  # type: ignore[no-untyped-call]
    return diags


def merge(first: Diagnostic, recovered: list[Diagnostic]) -> tuple[Diagnostic, ...]:
    """The plain parse's error plus the recovered ones: one per span, in text order, capped."""
    by_span: dict[tuple[int, int], Diagnostic] = {}
    for d in [first, *recovered]:
        by_span.setdefault((d.span.start, d.span.end), d)
    ordered = sorted(by_span.values(), key=lambda d: (d.span.start, d.span.end))
    return tuple(ordered[:MAX_ERRORS_PER_ITEM])

