"""The LALR parser of grammar.lark with the AST builder embedded: tokens -> syntax/nodes.py nodes.

lark runs the transformer (`_ToAst`) inside the parser, so no parse tree is built: each
grammar rule returns its AST node as soon as it is reduced.  A grammatical but invalid
construct (a dtype name used as a name, a positional argument after an attribute, an
expression nested MAX_DEPTH deep) raises SyntaxProblem with its span; syntax/parse.py and the
recovery (syntax/recovery.py) turn that into a diagnostic.

PARSER is one shared object whose transformer carries the offset of the item being
parsed (TO_AST.offset, added to every span): set it and parse while holding PARSE_LOCK.
"""
from __future__ import annotations

import dataclasses
import math
import sys
import threading
from typing import Any, TypeVar

from lark import Token, Transformer

from compiler.core.diagnostics import Span
from compiler.core.types import DType
from compiler.syntax import grammar, lex
from compiler.syntax import nodes as ast

# Expression trees nested deeper than this are rejected: every later stage walks nesting
# recursively, and no real program nests a hundred operators.  Flat chains (a binary
# operator's left operand, a method call's receiver) do not count: they may be of any length.
MAX_DEPTH = 200

RESERVED_WORDS = frozenset(d.value for d in DType)


# The transformer runs inside the LALR parser (no parse tree is built) and the parser
# keeps every token, so a node's span is simply first child start .. last child end.
class _Value:
    """A parsed attribute or literal value with its span (not an AST node)."""
    __slots__ = ("value", "span")

    def __init__(self, value: int | float | str | tuple[ast.SizeExpr, ...] | ast.SizeBin, span: Span) -> None:
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


def _num(tok: Token, span: Span) -> int | float:
    """The value of a number token: INT, FLOAT, or the words `inf` and `nan` (INF, NAN).
    A FLOAT beyond float64 (`1e400`) is an error, not a silent infinity: no dtype holds it."""
    if tok.type == "INT":
        return int(tok)
    x = float(tok)    # float("inf"), float("nan") read the words
    if math.isinf(x) and tok.type != "INF":
        raise SyntaxProblem(f"the number {tok} overflows every float dtype (the largest finite F64 value is "
                            f"{sys.float_info.max:g}); write `inf` or `-inf` for an infinity", span)
    return x


def _negated(v: int | float) -> int | float:
    """-v; but `-nan` is `nan` (a NaN's sign bit means nothing in Kina, and the formatter
    spells every NaN `nan`)."""
    return v if v != v else -v


def _nodes(ch: Children) -> Children:
    """The children that are not tokens (punctuation and keywords are kept only for spans)."""
    return [c for c in ch if not isinstance(c, Token)]


def _names(ch: Children) -> list[Token]:
    return [c for c in ch if isinstance(c, Token) and c.type == "NAME"]


class _ToAst(Transformer[Token, ast.FnDef]):
    """Builds syntax/nodes.py nodes while parsing; spans are shifted by `offset` (the item's
    position in the document), which syntax/parse.py sets before each parse."""

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
        v = _num(ch[-1], self._tok(ch[-1]))
        return _Value(_negated(v) if ch[0].type == "MINUS" else v, self._span(ch))

    # ---- items and types
    def start(self, ch: Children) -> ast.FnDef:
        fn: ast.FnDef = ch[0]
        return fn

    def fn_def(self, ch: Children) -> ast.FnDef:
        name = self._binding(ch[1])
        nodes = _nodes(ch)
        params = tuple(c for c in nodes if isinstance(c, ast.Param))
        sizes = next((c for c in nodes if isinstance(c, tuple)), ())
        return ast.FnDef(name.id, name.span, params, nodes[-2], nodes[-1], self._span(ch), sizes)

    def size_params(self, ch: Children) -> tuple[ast.SizeParam, ...]:
        names = [self._binding(t) for t in _names(ch)]
        return tuple(ast.SizeParam(n.id, n.span) for n in names)

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
    def _deep(node: _Node, *kids: ast.Expr, spine: ast.Expr | None = None) -> _Node:
        """Record node's expression depth (as _tree_depth counts it: a leaf is 1) and stop
        the parse as soon as the function's depth must exceed MAX_DEPTH.  `spine`: the
        left operand of a binary operator or the receiver of a method call, which
        continues a flat chain (`y + y + ... + y`, `x.a().b()...`) at node's own depth:
        every stage walks such chains with loops (walk.spine), so only nesting counts."""
        depth = 1 + max((getattr(k, "_depth", 1) for k in kids), default=0)
        if spine is not None:
            depth = max(depth, getattr(spine, "_depth", 1))
        if depth >= MAX_DEPTH:     # the function itself adds one more level
            raise TooDeep(f"expression nested more than {MAX_DEPTH} deep; split it with lets", node.span)
        if depth > 1:
            object.__setattr__(node, "_depth", depth)
        return node

    def binop(self, ch: Children) -> ast.BinOp:
        lhs, op, rhs = ch
        return self._deep(ast.BinOp(str(op), lhs, rhs, self._tok(op), self._span(ch)), rhs, spine=lhs)

    def neg(self, ch: Children) -> ast.Number | ast.Neg:
        operand = ch[1]
        if isinstance(operand, ast.Number):   # `-1` is a number, not neg(1)
            return ast.Number(_negated(operand.value), self._span(ch))
        return self._deep(ast.Neg(operand, self._span(ch)), operand)

    def method_call(self, ch: Children) -> ast.MethodCall:
        receiver, method = ch[0], ch[2]
        found = [c for c in ch[3:] if isinstance(c, _Args)]
        args = found[0] if found else _Args((), (), None)
        return self._deep(ast.MethodCall(receiver, str(method), self._tok(method), args.args, args.attrs,
                                         self._span(ch)), *args.args, spine=receiver)

    def field(self, ch: Children) -> ast.Field:
        receiver, name = ch[0], ch[2]
        return self._deep(ast.Field(receiver, str(name), self._tok(name), self._span(ch)), spine=receiver)

    def name(self, ch: Children) -> ast.Name:
        return ast.Name(str(ch[0]), self._tok(ch[0]))

    def number(self, ch: Children) -> ast.Number:
        return ast.Number(_num(ch[0], self._tok(ch[0])), self._tok(ch[0]))

    def call(self, ch: Children) -> ast.Call:
        func = ch[0]
        found = [c for c in ch[1:] if isinstance(c, _Args)]
        args = found[0] if found else _Args((), (), None)
        sizes = next((c for c in ch[1:] if isinstance(c, ast.IntList)), None)
        return self._deep(ast.Call(str(func), self._tok(func), args.args, args.attrs, self._span(ch), sizes),
                          *args.args)

    def sized_method(self, ch: Children) -> ast.Call:
        """`module.f[8, 4](x, w)`: sizes in brackets after a dot only make sense for a
        function of an imported module, so the receiver must be a plain name."""
        receiver, method = ch[0], ch[2]
        if not isinstance(receiver, ast.Name):
            raise SyntaxProblem("sizes in brackets follow a generic function (`f[8, 4](x)` or "
                                "`module.f[8, 4](x)`), not a method call", ch[3].span)
        return self._qualified(receiver.id, receiver.span, method, ch[3:], ch)

    def qualified_call(self, ch: Children) -> ast.Call:
        """`module.f(args)` after `handle`."""
        return self._qualified(str(ch[0]), self._tok(ch[0]), ch[2], ch[3:], ch)

    def _qualified(self, module: str, module_span: Span, name: Token, rest: Children, ch: Children) -> ast.Call:
        found = [c for c in rest if isinstance(c, _Args)]
        args = found[0] if found else _Args((), (), None)
        sizes = next((c for c in rest if isinstance(c, ast.IntList)), None)
        func_span = module_span.cover(self._tok(name))
        return self._deep(ast.Call(f"{module}.{name}", func_span, args.args, args.attrs, self._span(ch), sizes),
                          *args.args)

    def handle(self, ch: Children) -> ast.Handle:
        handler = ch[3]
        return self._deep(ast.Handle(ch[1], str(handler), self._tok(handler), self._span(ch)), ch[1])

    def tensor_lit(self, ch: Children) -> ast.TensorLit:
        nodes = _nodes(ch)
        lit = ast.TensorLit(nodes[0], tuple(v.value for v in nodes[1:]), self._span(ch))
        object.__setattr__(lit, "value_spans", tuple(v.span for v in nodes[1:]))   # see TensorLit
        return lit

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
        elif isinstance(value, ast.SizeName):   # a bare word: `op=sum` (or a size: `stop=T`)
            value = _Value(value.id, value.span)
        elif isinstance(value, ast.SizeBin):    # `stop=T - 1`
            value = _Value(value, value.span)
        return ast.Attr(str(name), self._tok(name), value.value, value.span, self._span(ch))

    def signed_int(self, ch: Children) -> _Value:
        return self._signed(ch)

    def attr_float(self, ch: Children) -> _Value:
        return self._signed(ch)

    def int_list(self, ch: Children) -> ast.IntList:
        return ast.IntList(tuple(_size(v) for v in _nodes(ch)), self._span(ch))

    # ---- size expressions
    def size_name(self, ch: Children) -> ast.SizeName:
        return ast.SizeName(str(ch[0]), self._tok(ch[0]))

    def size_bin(self, ch: Children) -> ast.SizeBin:
        lhs, op, rhs = ch
        depth = 1 + max(getattr(lhs, "_depth", 1), getattr(rhs, "_depth", 1))
        node = ast.SizeBin(str(op), _size(lhs), _size(rhs), self._span(ch))
        if depth >= MAX_DEPTH:
            raise TooDeep(f"size expression nested more than {MAX_DEPTH} deep", node.span)
        object.__setattr__(node, "_depth", depth)
        return node

    def size_paren(self, ch: Children) -> _Value | ast.SizeName | ast.SizeBin:
        inner: _Value | ast.SizeName | ast.SizeBin = ch[1]
        if isinstance(inner, ast.SizeBin):   # the parenthesised expression covers its parentheses
            wider = dataclasses.replace(inner, span=self._span(ch))
            object.__setattr__(wider, "_depth", getattr(inner, "_depth", 1))
            return wider
        if isinstance(inner, _Value):
            return _Value(inner.value, self._span(ch))
        return inner

    def literal_value(self, ch: Children) -> _Value:
        return self._signed(ch)


def _size(v: _Value | ast.SizeName | ast.SizeBin) -> ast.SizeExpr:
    """A size as the AST holds it: a plain int, or a size expression node."""
    if isinstance(v, _Value):
        assert isinstance(v.value, int)   # the grammar's size atoms are integers or names
        return v.value
    return v


TO_AST = _ToAst()
PARSER = grammar.load(transformer=TO_AST)

PARSE_LOCK = threading.Lock()   # the embedded transformer carries the item offset
