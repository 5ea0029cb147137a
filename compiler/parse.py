"""Parsing: Kina source text -> AST (compiler/syntax.py) + syntax diagnostics.

The text is first split into top-level items (`fn ... { ... }`) by a cheap
brace scan that skips comments; each item is then parsed on its own with the
LALR grammar in grammar.lark, so one broken function never hides the others
and the incremental front end (analysis.py) can re-parse only the items whose
text changed.  Spans are character offsets; `parse_item(text, offset)` returns
spans already shifted to document offsets.

An item that parses costs one plain LALR parse.  Only an item that fails is
parsed again in recovery mode (see `_recover`), which resynchronises at the
let chain's `in`s so that every independent syntax error of a function is
reported at once (the language server shows them all); a broken item's AST is
None either way, so the checker never sees a partial tree.

Nothing here raises on bad input: binary junk, unbalanced braces and absurd
nesting all come back as `syntax` diagnostics whose spans lie inside the text.
"""
from __future__ import annotations

import dataclasses
import re
import threading
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from typing import Any, Literal, TypeVar, cast

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken, VisitError
from lark.parsers.lalr_interactive_parser import InteractiveParser

from . import lex
from . import syntax as ast
from .check_hints import RETURN_MESSAGE
from .diagnostics import Diagnostic, Span
from .types import DType

# Expression trees deeper than this are rejected: every later stage walks them
# recursively, and no real program nests a hundred operators.
MAX_DEPTH = 200

RESERVED_WORDS = frozenset(d.value for d in DType)

# ---- item split ------------------------------------------------------------------
@dataclass(frozen=True)
class Item:
    """One top-level chunk of the document: text[start:end], named after `fn NAME` (or "")."""
    start: int
    end: int
    name: str


# Only comments, the `fn` keyword and braces matter for the split.
# (The lookahead lets the regex engine skip every other character fast: 3x on a long file.)
_SPLIT_TOKENS = re.compile(r"(?=[/f{}])(?://[^\r\n]*|(?<![\w])fn(?![\w])|[{}])")
_FN_NAME = re.compile(r"fn\s+([A-Za-z_][A-Za-z0-9_]*)")
_COMMENT = re.compile(r"//[^\r\n]*")   # a comment ends at any line break


def split_items(text: str) -> list[Item]:
    """Top-level items: each starts at a `fn` keyword at brace depth 0 and ends at the
    brace that closes its body.  A `fn` met inside an unfinished item starts a new
    item (fn is a keyword, so it cannot belong to a body): a missing `}` costs one
    function, not the rest of the file."""
    items: list[Item] = []
    start = None          # start of the current item
    depth = 0
    for m in _SPLIT_TOKENS.finditer(text):
        tok = m.group()
        if tok.startswith("//"):
            continue
        if tok == "fn":
            if start is not None:
                items.append(_item(text, start, _trim_end(text, start, m.start())))
            start, depth = m.start(), 0
            continue
        if start is None:
            continue      # a stray brace outside any item: reported as junk by gaps()
        depth += 1 if tok == "{" else -1
        if depth == 0:
            items.append(_item(text, start, m.end()))
            start = None
    if start is not None:
        items.append(_item(text, start, _trim_end(text, start, len(text))))
    return items


def _item(text: str, start: int, end: int) -> Item:
    m = _FN_NAME.match(text, start, end)
    return Item(start, end, m.group(1) if m else "")


def _trim_end(text: str, start: int, end: int) -> int:
    """End of an unterminated item: drop trailing whitespace (comments stay: harmless)."""
    while end > start and text[end - 1].isspace():
        end -= 1
    return end


def gaps(text: str, items: list[Item]) -> list[Diagnostic]:
    """A syntax diagnostic for every run of text outside items that is not blank or a comment."""
    diags = []
    prev = 0
    for lo, hi in [(it.start, it.end) for it in items] + [(len(text), len(text))]:
        chunk = _COMMENT.sub(lambda m: " " * len(m.group()), text[prev:lo])
        stripped = chunk.strip()
        if stripped:
            first = prev + chunk.index(stripped[0])
            last = prev + len(chunk.rstrip())
            word = stripped.split()[0][:20]
            diags.append(Diagnostic("syntax", f"expected a top-level function (`fn name(...) -> Type {{ ... }}`), "
                                              f"found `{word}`", Span(first, last)))
        prev = hi
    return diags


# ---- the AST builder ----------------------------------------------------------------
# The transformer runs inside the LALR parser (no parse tree is built) and the parser
# keeps every token, so a node's span is simply first child start .. last child end.
class _Value:
    """A parsed attribute or literal value with its span (not an AST node)."""
    __slots__ = ("value", "span")

    def __init__(self, value: int | float | str | tuple[int, ...], span: Span) -> None:
        self.value, self.span = value, span


class _Pattern:
    __slots__ = ("names", "destructure", "span")

    def __init__(self, names: list[ast.Name], destructure: bool, span: Span) -> None:
        self.names, self.destructure, self.span = names, destructure, span


class _Args:
    __slots__ = ("args", "attrs", "span")

    def __init__(self, args: tuple[ast.Expr, ...], attrs: tuple[ast.Attr, ...], span: Span | None) -> None:
        self.args, self.attrs, self.span = args, attrs, span


# A rule's children as the transformer gets them: its tokens, and what its sub-rules
# returned (AST nodes, _Value, _Pattern, _Args).  grammar.lark fixes which child is what
# at each position, so the element type is Any here: each rule below reads its children
# by position and returns a precisely typed node (tests/test_parse.py covers every rule).
Children = list[Any]
_Node = TypeVar("_Node", bound=ast.Expr)


class SyntaxProblem(Exception):
    """A grammatical but invalid construct found while building the AST (e.g. a reserved word as a name)."""

    def __init__(self, message: str, span: Span) -> None:
        super().__init__(message)
        self.message, self.span = message, span


class TooDeep(SyntaxProblem):
    """An expression crossed MAX_DEPTH while it was being built: the parse stops there
    (a 30,000-term `y + y + ...` costs the first few hundred tokens, not all of them),
    and there is nothing to recover."""


def _num(tok: Token) -> int | float:
    return int(tok) if tok.type == "INT" else float(tok)


def _nodes(ch: Children) -> Children:
    """The children that are not tokens (punctuation and keywords are kept only for spans)."""
    return [c for c in ch if not isinstance(c, Token)]


def _names(ch: Children) -> list[Token]:
    return [c for c in ch if isinstance(c, Token) and c.type == "NAME"]


class _ToAst(Transformer[Token, ast.FnDef]):
    """Builds syntax.py nodes while parsing; spans are shifted by `offset` (the item's
    position in the document), which parse_item sets before each parse."""

    offset = 0

    def _span(self, ch: Children) -> Span:
        first, last = ch[0], ch[-1]
        start = lex.start(first) + self.offset if isinstance(first, Token) else first.span.start
        end = lex.end(last) + self.offset if isinstance(last, Token) else last.span.end
        return Span(start, end)

    def _tok(self, tok: Token) -> Span:
        return Span(lex.start(tok) + self.offset, lex.end(tok) + self.offset)

    def _binding(self, tok: Token) -> ast.Name:
        if str(tok) in RESERVED_WORDS:
            raise SyntaxProblem(f"`{tok}` is a dtype name, a reserved word; choose another name", self._tok(tok))
        return ast.Name(str(tok), self._tok(tok))

    def _signed(self, ch: Children) -> _Value:
        """`MINUS? number`."""
        sign = -1 if ch[0].type == "MINUS" else 1
        return _Value(sign * _num(ch[-1]), self._span(ch))

    # ---- items and types
    def start(self, ch: Children) -> ast.FnDef:
        fn: ast.FnDef = ch[0]
        return fn

    def fn_def(self, ch: Children) -> ast.FnDef:
        name = self._binding(ch[1])
        nodes = _nodes(ch)
        params = tuple(c for c in nodes if isinstance(c, ast.Param))
        return ast.FnDef(name.id, name.span, params, nodes[-2], nodes[-1], self._span(ch))

    def param(self, ch: Children) -> ast.Param:
        name = self._binding(ch[0])
        return ast.Param(name.id, name.span, ch[2], self._span(ch))

    def tensor_type(self, ch: Children) -> ast.TensorTypeExpr:
        names = _names(ch)
        shape = _nodes(ch)[0]
        placement = str(names[1]) if len(names) > 1 else None
        return ast.TensorTypeExpr(str(names[0]), shape.values, placement, self._span(ch))

    def tuple_type(self, ch: Children) -> ast.TupleTypeExpr:
        return ast.TupleTypeExpr(tuple(_nodes(ch)), self._span(ch))

    def paren(self, ch: Children) -> ast.Expr:
        inner: ast.Expr = ch[1]
        if isinstance(inner, ast.Name):     # a name keeps its own span (definitions, references)
            return inner
        # a parenthesised expression covers its parentheses (the depth mark goes along)
        wider = dataclasses.replace(inner, span=self._span(ch))
        if hasattr(inner, "_depth"):
            object.__setattr__(wider, "_depth", inner._depth)
        return wider

    # ---- the let chain
    def let_expr(self, ch: Children) -> ast.Let:
        pattern, value, body = _nodes(ch)
        let = ast.Let(tuple(pattern.names), pattern.destructure, value, body, self._span(ch))
        # the value is one level down; the body continues the chain at the let's own level
        depth = max(getattr(value, "_depth", 1) + 1, getattr(body, "_depth", 1))
        if depth >= MAX_DEPTH:
            raise TooDeep(f"expression nested more than {MAX_DEPTH} deep; split it with lets", value.span)
        object.__setattr__(let, "_depth", depth)
        return let

    def pat_name(self, ch: Children) -> _Pattern:
        return _Pattern([self._binding(ch[0])], False, self._span(ch))

    def pat_tuple(self, ch: Children) -> _Pattern:
        return _Pattern([self._binding(t) for t in _names(ch)], True, self._span(ch))

    # ---- expressions
    @staticmethod
    def _deep(node: _Node, *kids: ast.Expr) -> _Node:
        """Record node's expression depth (as _tree_depth counts it: a leaf is 1) and stop
        the parse as soon as the function's depth must exceed MAX_DEPTH."""
        depth = 1 + max((getattr(k, "_depth", 1) for k in kids), default=0)
        if depth >= MAX_DEPTH:     # the function itself adds one more level
            raise TooDeep(f"expression nested more than {MAX_DEPTH} deep; split it with lets", node.span)
        if depth > 1:
            object.__setattr__(node, "_depth", depth)
        return node

    def binop(self, ch: Children) -> ast.BinOp:
        lhs, op, rhs = ch
        return self._deep(ast.BinOp(str(op), lhs, rhs, self._tok(op), self._span(ch)), lhs, rhs)

    def neg(self, ch: Children) -> ast.Number | ast.Neg:
        operand = ch[1]
        if isinstance(operand, ast.Number):   # `-1` is a number, not neg(1)
            return ast.Number(-operand.value, self._span(ch))
        return self._deep(ast.Neg(operand, self._span(ch)), operand)

    def method_call(self, ch: Children) -> ast.MethodCall:
        receiver, method = ch[0], ch[2]
        found = [c for c in ch[3:] if isinstance(c, _Args)]
        args = found[0] if found else _Args((), (), None)
        return self._deep(ast.MethodCall(receiver, str(method), self._tok(method), args.args, args.attrs,
                                         self._span(ch)), receiver, *args.args)

    def field(self, ch: Children) -> ast.Field:
        receiver, name = ch[0], ch[2]
        return ast.Field(receiver, str(name), self._tok(name), self._span(ch))

    def name(self, ch: Children) -> ast.Name:
        return ast.Name(str(ch[0]), self._tok(ch[0]))

    def number(self, ch: Children) -> ast.Number:
        return ast.Number(_num(ch[0]), self._tok(ch[0]))

    def call(self, ch: Children) -> ast.Call:
        func = ch[0]
        found = [c for c in ch[1:] if isinstance(c, _Args)]
        args = found[0] if found else _Args((), (), None)
        return self._deep(ast.Call(str(func), self._tok(func), args.args, args.attrs, self._span(ch)), *args.args)

    def handle(self, ch: Children) -> ast.Handle:
        handler = ch[3]
        return self._deep(ast.Handle(ch[1], str(handler), self._tok(handler), self._span(ch)), ch[1])

    def tensor_lit(self, ch: Children) -> ast.TensorLit:
        nodes = _nodes(ch)
        return ast.TensorLit(nodes[0], tuple(v.value for v in nodes[1:]), self._span(ch))

    def tuple(self, ch: Children) -> ast.TupleExpr:
        items = _nodes(ch)
        return self._deep(ast.TupleExpr(tuple(items), self._span(ch)), *items)

    def args(self, ch: Children) -> _Args:
        items = _nodes(ch)
        args = tuple(c for c in items if not isinstance(c, ast.Attr))
        attrs = tuple(c for c in items if isinstance(c, ast.Attr))
        seen_attr = False
        for c in items:
            if isinstance(c, ast.Attr):
                seen_attr = True
            elif seen_attr:
                raise SyntaxProblem("positional argument after a keyword attribute; "
                                    "put tensor operands first, then `name=value` attributes", c.span)
        return _Args(args, attrs, self._span(ch))

    def attr(self, ch: Children) -> ast.Attr:
        name, value = ch[0], ch[2]
        if isinstance(value, ast.IntList):   # `perm=[0, 2, 1]`: Attr.value is the plain list
            value = _Value(value.values, value.span)
        elif isinstance(value, Token):       # a bare enum word: `op=sum`
            value = _Value(str(value), self._tok(value))
        return ast.Attr(str(name), self._tok(name), value.value, value.span, self._span(ch))

    def signed_int(self, ch: Children) -> _Value:
        return self._signed(ch)

    def attr_float(self, ch: Children) -> _Value:
        return self._signed(ch)

    def attr_word(self, ch: Children) -> _Value:
        return _Value(str(ch[0]), self._tok(ch[0]))

    def int_list(self, ch: Children) -> ast.IntList:
        return ast.IntList(tuple(v.value for v in _nodes(ch)), self._span(ch))

    def literal_value(self, ch: Children) -> _Value:
        return self._signed(ch)


_TO_AST = _ToAst()
_PARSER = Lark(
    lex.GRAMMAR,
    parser="lalr",
    lexer="basic",
    keep_all_tokens=True,
    transformer=_TO_AST,
    maybe_placeholders=False,
)


# ---- syntax errors --------------------------------------------------------------
# How each terminal is named in messages.
_TERMINAL_NAMES = {
    "NAME": "a name", "INT": "an integer", "FLOAT": "a number", "$END": "the end of the function",
    "FN": "`fn`", "LET": "`let`", "HANDLE": "`handle`", "TENSOR": "`Tensor`", "IN": "`in`", "WITH": "`with`",
}
_EXPR_START = {"NAME", "INT", "FLOAT", "LPAR", "LSQB", "MINUS", "TENSOR", "HANDLE"}
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


def _bad_character(text: str, pos: int) -> Diagnostic:
    """The diagnostic for a character that starts no token (shown escaped if unprintable)."""
    n = len(text)
    pos = min(pos, n)
    ch = text[pos:pos + 1]
    shown = ch if ch.isprintable() else repr(ch)[1:-1]
    return Diagnostic("syntax", f"unexpected character `{shown}`", Span(pos, min(pos + 1, n)))


class _Lex(Enum):
    BEFORE = "before"   # _error_diagnostic's default: find the token before the error by lexing


def _error_diagnostic(err: UnexpectedInput, text: str,
                      last: Token | None | Literal[_Lex.BEFORE] = _Lex.BEFORE) -> Diagnostic:
    """One diagnostic for a lark error: what was expected (in words), what was found, where.
    `last` is the token before the error when the caller already knows it (recovery does)."""
    n = len(text)
    if isinstance(err, UnexpectedCharacters) and not isinstance(err, UnexpectedToken):
        return _bad_character(text, err.pos_in_stream or 0)
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
    context = _AFTER.get(last.type) if last is not None and " after " not in wanted else None
    if context:
        wanted = f"{wanted} {context}"
    return Diagnostic("syntax", f"expected {wanted}, found {_found(tok)}", span)


# ---- error recovery inside an item ---------------------------------------------------------
# Runs only on an item whose plain parse failed.  The tokens are fed one by one to lark's
# interactive parser; after the body's `{` and after every `in` of the let chain the parser
# state is snapshotted (those are the only points where the parser always expects a fresh
# chain link).  On an error: report it, skip to the next chain boundary, restore the last
# snapshot and go on.  A snapshot shares the AST values it holds (no deep copy): the item's
# AST is thrown away anyway, only the diagnostics are kept.
MAX_ERRORS_PER_ITEM = 20

_OPENERS = frozenset({"LPAR", "LSQB", "LBRACE"})
_CLOSERS = frozenset({"RPAR", "RSQB", "RBRACE"})
_BRACKET_STEP = {**{t: 1 for t in _OPENERS}, **{t: -1 for t in _CLOSERS}}


def _failure_diagnostic(err: Exception, text: str, offset: int) -> Diagnostic:
    """The diagnostic of a failed plain parse (document offsets); foreign errors propagate."""
    if isinstance(err, UnexpectedInput):
        return _error_diagnostic(err, text).shift(offset)
    problem = getattr(err, "orig_exc", err)
    if not isinstance(problem, SyntaxProblem):
        raise err
    return Diagnostic("syntax", problem.message, problem.span)


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
        return _bad_character(text, lex.start(tok)).shift(offset)
    try:
        parser.feed_token(tok)
    except UnexpectedToken as err:
        err.interactive_parser = parser        # what the failed state accepts, as in a plain parse
        last = None if before is None or before.type == lex.BAD else before
        return _error_diagnostic(err, text, last).shift(offset)
    except (SyntaxProblem, VisitError) as err:
        return _failure_diagnostic(err, text, offset)
    return None


def _recover(text: str, offset: int) -> list[Diagnostic]:
    """All syntax errors of one item (at most MAX_ERRORS_PER_ITEM), in document offsets.
    The caller holds _PARSE_LOCK with _TO_AST.offset set: SyntaxProblem spans come from
    the transformer, which runs while tokens are fed."""
    tokens = lex.tokens(text)
    end = Token("$END", "", start_pos=len(text), end_pos=len(text))
    parser = _PARSER.parse_interactive(text)
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


def _merge(first: Diagnostic, recovered: list[Diagnostic]) -> tuple[Diagnostic, ...]:
    """The plain parse's error plus the recovered ones: one per span, in text order, capped."""
    by_span: dict[tuple[int, int], Diagnostic] = {}
    for d in [first, *recovered]:
        by_span.setdefault((d.span.start, d.span.end), d)
    ordered = sorted(by_span.values(), key=lambda d: (d.span.start, d.span.end))
    return tuple(ordered[:MAX_ERRORS_PER_ITEM])


# ---- items and modules -----------------------------------------------------------------
def _too_deep_at(text: str) -> int | None:
    """Offset of the first bracket nested deeper than MAX_DEPTH, or None."""
    depth = 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
            if depth > MAX_DEPTH:
                return i
        elif ch in ")]}":
            depth -= 1
    return None


def _tree_depth(node: ast.FnDef) -> int:
    """Expression depth of an AST, iteratively (the point is to reject trees too deep to
    recurse on).  A let's body continues the chain at the let's own depth: every stage
    walks let chains with loops, so a function may have any number of lets."""
    best = 0
    stack: list[tuple[ast.Expr | ast.FnDef, int]] = [(node, 1)]
    while stack:
        here, d = stack.pop()
        best = max(best, d)
        if isinstance(here, ast.Let):
            stack.append((here.value, d + 1))
            stack.append((here.body, d))
            continue
        for child in children(here):
            stack.append((child, d + 1))
    return best


def children(node: ast.Expr | ast.FnDef | ast.TypeExpr) -> list[ast.Expr]:
    """The sub-expressions of an AST node (the let chain included), for iterative walks."""
    if isinstance(node, ast.FnDef):
        return [node.body]
    if isinstance(node, ast.Let):
        return [node.value, node.body]
    if isinstance(node, ast.BinOp):
        return [node.lhs, node.rhs]
    if isinstance(node, ast.Neg):
        return [node.operand]
    if isinstance(node, ast.MethodCall):
        return [node.receiver, *node.args]
    if isinstance(node, ast.Field):
        return [node.receiver]
    if isinstance(node, ast.Call):
        return list(node.args)
    if isinstance(node, ast.Handle):
        return [node.call]
    if isinstance(node, ast.TupleExpr):
        return list(node.items)
    return []


_PARSE_LOCK = threading.Lock()   # the embedded transformer carries the item offset


def _parse_at(text: str, offset: int) -> tuple[ast.FnDef | None, tuple[Diagnostic, ...]]:
    """Parse one item whose first character sits at `offset` in the document.  The plain
    parse is the fast path; only a failed item is parsed again in recovery mode."""
    deep = _too_deep_at(text)
    if deep is not None:
        msg = f"brackets nested more than {MAX_DEPTH} deep; split the expression with lets"
        return None, (Diagnostic("syntax", msg, Span(offset + deep, offset + deep + 1)),)
    with _PARSE_LOCK:
        _TO_AST.offset = offset
        try:
            # the embedded transformer builds the AST while parsing: an FnDef, not a Tree
            fn = cast(ast.FnDef, _PARSER.parse(text))
        except (UnexpectedInput, SyntaxProblem, VisitError) as err:
            first = _failure_diagnostic(err, text, offset)
            if isinstance(getattr(err, "orig_exc", err), TooDeep):
                return None, (first,)
            return None, _merge(first, _recover(text, offset))
    depth = _tree_depth(fn)
    if depth > MAX_DEPTH:
        return None, (Diagnostic("syntax", f"expression nested {depth} deep (the limit is {MAX_DEPTH}); "
                                           "split it with lets", fn.name_span),)
    return fn, ()


@lru_cache(maxsize=4096)
def parse_local(text: str) -> tuple[ast.FnDef | None, tuple[Diagnostic, ...]]:
    """Parse one item with spans relative to its own start.  Cached by text (the
    incremental front end re-parses only items whose text changed); callers must
    treat the result as immutable."""
    return _parse_at(text, 0)


def parse_item(text: str, offset: int = 0) -> tuple[ast.FnDef | None, list[Diagnostic]]:
    """Parse one top-level item (`fn ... { ... }`) whose first character is at `offset`
    in the document; spans come back in document offsets."""
    fn, diags = parse_local(text) if offset == 0 else _parse_at(text, offset)
    return fn, list(diags)


def parse_module(text: str) -> tuple[ast.Module, list[Diagnostic]]:
    """Parse a whole document: every item separately, spans in document offsets."""
    items = split_items(text)
    diags = gaps(text, items)
    functions = []
    for it in items:
        fn, item_diags = parse_item(text[it.start:it.end], it.start)
        diags += item_diags
        if fn is not None:
            functions.append(fn)
    diags.sort(key=lambda d: (d.span.start, d.span.end))
    return ast.Module(tuple(functions), Span(0, len(text))), diags


# ---- span shifting (shared with analysis.py) ----------------------------------------------
_T = TypeVar("_T")


def shift(node: _T, delta: int) -> _T:
    """A copy of an AST / IR / diagnostic structure with every Span moved by `delta`."""
    if delta == 0:
        return node
    # _shift rebuilds each node as its own class (a list as a list, a dataclass as itself)
    return cast(_T, _shift(node, delta))


def _shift(node: object, delta: int) -> object:
    if isinstance(node, ast.Let):
        return _shift_let_chain(node, delta)
    if isinstance(node, Span):
        return Span(node.start + delta, node.end + delta)
    if isinstance(node, list):
        return [_shift(x, delta) for x in node]
    if isinstance(node, tuple):
        return tuple(_shift(x, delta) for x in node)
    if isinstance(node, dict):
        return {k: _shift(v, delta) for k, v in node.items()}
    fields = getattr(node, "__dataclass_fields__", None)
    if fields is None:
        return node
    cls = type(node)
    new = object.__new__(cls)
    for name in fields:
        object.__setattr__(new, name, _shift(getattr(node, name), delta))   # frozen: bypass __setattr__
    return new


def _shift_let_chain(let: ast.Let, delta: int) -> ast.Let:
    """Shift a let chain with a loop, not recursion: a function may have thousands of lets."""
    chain = []
    node: ast.Expr = let
    while isinstance(node, ast.Let):
        chain.append(node)
        node = node.body
    body: ast.Expr = shift(node, delta)
    for link in reversed(chain):
        body = ast.Let(shift(link.names, delta), link.destructure, shift(link.value, delta), body,
                       shift(link.span, delta))
    assert isinstance(body, ast.Let)   # the chain starts with `let` itself
    return body
