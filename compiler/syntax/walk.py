"""Generic walks over the syntax tree: children(node) for iterative traversals, and
shift(node, delta), a copy of any span-carrying structure (AST, typed IR, diagnostics)
with every Span moved by `delta`.

Iterative on purpose: a function may have thousands of lets, a flat chain
(`y + y + ... + y`, `x.a().b()...`) may have thousands of links (SPINE: the field that
continues one), and the incremental front end (analysis.py) keeps item-local results
and shifts them to document offsets.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TypeVar, cast

from compiler.core.diagnostics import Span
from compiler.syntax import nodes as ast


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


# The field of a node that continues a flat chain: a binary operator's left operand, a
# method call's (or field access's) receiver.  Chains may be of any length (the parser's
# depth limit counts nesting only), so every walk follows these fields with a loop.
SPINE: dict[type, str] = {ast.BinOp: "lhs", ast.MethodCall: "receiver", ast.Field: "receiver"}


def spine(node: object) -> list[object]:
    """node and the links of the flat chain under it, outermost first (just [node] when
    node continues no chain); the last element is the chain's first operand."""
    out = [node]
    field = SPINE.get(type(node))
    while field is not None:
        node = getattr(node, field)
        out.append(node)
        field = SPINE.get(type(node))
    return out


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
    if type(node) in SPINE:
        return _shift_spine(node, delta)
    if isinstance(node, Span):
        return Span(node.start + delta, node.end + delta)
    if isinstance(node, list):
        return [_shift(x, delta) for x in node]
    if isinstance(node, tuple):
        return tuple(_shift(x, delta) for x in node)
    if isinstance(node, dict):
        return {k: _shift(v, delta) for k, v in node.items()}
    return _shift_fields(node, delta, None, None)


def _shift_fields(node: object, delta: int, skip: str | None, replacement: object) -> object:
    """A shifted copy of a dataclass node (the field `skip` set to `replacement` instead)."""
    fields = getattr(node, "__dataclass_fields__", None)
    if fields is None:
        return node
    cls = type(node)
    new = object.__new__(cls)
    for name in fields:
        value = replacement if name == skip else _shift(getattr(node, name), delta)
        object.__setattr__(new, name, value)   # frozen: bypass __setattr__
    return new


def _shift_spine(node: object, delta: int) -> object:
    """Shift a flat chain with a loop, innermost link first."""
    links = spine(node)
    out = _shift(links[-1], delta)
    for link in reversed(links[:-1]):
        out = _shift_fields(link, delta, SPINE[type(link)], out)
    return out


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


def rebuild(node: _T, f: Callable[[ast.Expr], ast.Expr]) -> _T:
    """A copy of an AST in which every expression node `e` is replaced by `f(e)`, children
    first (imports.qualify turns `layers.linear(x)` into a Call).  Let chains and flat chains
    are rebuilt with loops, like `shift`."""
    return cast(_T, _rebuild(node, f))


def _rebuild(node: object, f: Callable[[ast.Expr], ast.Expr]) -> object:
    if isinstance(node, ast.Let):
        chain = []
        here: ast.Expr = node
        while isinstance(here, ast.Let):
            chain.append(here)
            here = here.body
        body = cast(ast.Expr, _rebuild(here, f))
        for link in reversed(chain):
            body = f(ast.Let(link.names, link.destructure, cast(ast.Expr, _rebuild(link.value, f)), body, link.span))
        return body
    if type(node) in SPINE:
        links = spine(node)
        out = _rebuild(links[-1], f)
        for outer in reversed(links[:-1]):
            out = _rebuild_fields(outer, f, SPINE[type(outer)], out)
        return out
    if isinstance(node, tuple):
        return tuple(_rebuild(x, f) for x in node)
    return _rebuild_fields(node, f, None, None)


_EXPR_TYPES = (ast.Name, ast.IntList, ast.Number, ast.MethodCall, ast.Field, ast.Call, ast.BinOp, ast.Neg,
               ast.Handle, ast.TensorLit, ast.TupleExpr, ast.Let)
_LEAVES = (ast.Name, ast.IntList, ast.Number, ast.TensorLit, ast.Attr, Span)


def _rebuild_fields(node: object, f: Callable[[ast.Expr], ast.Expr], skip: str | None, replacement: object) -> object:
    fields = getattr(node, "__dataclass_fields__", None)
    if fields is None or isinstance(node, _LEAVES):
        return f(node) if isinstance(node, _EXPR_TYPES) else node
    changed = {}
    for name in fields:
        old = getattr(node, name)
        new = replacement if name == skip else _rebuild(old, f)
        if new is not old:
            changed[name] = new
    out = dataclasses.replace(node, **changed) if changed else node   # type: ignore[type-var]
    return f(out) if isinstance(out, _EXPR_TYPES) else out
