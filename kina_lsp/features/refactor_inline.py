"""Refactors that remove lets: inline a let (refactor.inline), and join a let into the method
chain of the next let (refactor.rewrite), the inverse of refactor_extract's chain split.

Inline `let NAME = VALUE in`: every use of NAME becomes VALUE, in parentheses where
precedence needs them (`let s = a + b in s * c` -> `(a + b) * c`), and the let goes (its
line, with a trailing comment, when it stands alone).  Refused:

- a destructuring let (`let (a, b) = ..`): no single value to write;
- a use under `handle f(..) with reverseMode`: the arguments of a handle are what the
  handler differentiates at; writing an expression there changes what is evaluated inside
  the handled call's argument list (and the AD pass's structure rules), so it is left alone;
- a value with a comment inside (it would swallow what follows it on a joined line).

A value used several times is written several times.  That is safe for every op, the random
ones included: `random_uniform(key, ..)` and the other random ops are pure functions of their
key (docs/language.md §7), with no state advanced by a draw, so two copies draw the same
numbers the one let did; the cost is computing it twice (the compiler's CSE may merge them).

Join: `let a = x.exp() in let b = a.reduce_keep(op=sum, axis=1) in` becomes
`let b = x.exp().reduce_keep(op=sum, axis=1) in`, offered when `a` has exactly one use and
that use is the head of the next let's method chain.

Both are offered only when the edited text re-checks with the same types (refactor_check).
"""
from __future__ import annotations

from typing import Any

from compiler.syntax import nodes as ast

from ..documents import View
from . import astutil
from . import refactor_syntax as syn
from .refactor_check import Edit, Expect, Plan

Args = dict[str, Any]


def _let_at(fn: ast.FnDef, offset: int) -> ast.Let | None:
    """The let whose name is at offset (its binding, or a use of it)."""
    lets = list(astutil.lets(fn))
    for let in lets:
        if any(n.span.contains(offset) for n in let.names):
            return let
    word = next((n for n, _p in syn.walk(fn) if isinstance(n, ast.Name) and n.span.contains(offset)), None)
    if not isinstance(word, ast.Name):
        return None
    return next((let for let in lets if any(n.id == word.id for n in let.names)), None)


def find_inline(view: View, start: int, end: int) -> list[Args]:
    fn = view.snapshot.function_at(start)
    let = _let_at(fn, start) if fn is not None else None
    return [{"let": let.span.start}] if let is not None else []


def _the_let(view: View, args: Args) -> tuple[ast.FnDef, ast.Let] | None:
    at = args.get("let")
    if not isinstance(at, int):
        return None
    fn = view.snapshot.function_at(at)
    let = next((x for x in astutil.lets(fn) if x.span.start == at), None) if fn is not None else None
    if fn is None or let is None or let.destructure or len(let.names) != 1 or let.names[0].id == "_":
        return None
    return fn, let


def make_inline(view: View, args: Args) -> Plan | None:
    found = _the_let(view, args)
    if found is None:
        return None
    fn, let = found
    edits = _inline_edits(view.text, let)
    if edits is None:
        return None
    name = let.names[0].id
    n = len(edits) - 1
    title = f"Inline `let {name}`" + (f" ({n} uses)" if n != 1 else "")
    return Plan(title, "refactor.inline", tuple(edits), Expect(fn.name, {}, frozenset({name})))


def _inline_edits(text: str, let: ast.Let) -> list[Edit] | None:
    """Remove the let, write its value at each use; None when refused (see the docstring)."""
    name = let.names[0].id
    value_text = text[let.value.span.start:let.value.span.end]
    if "//" in value_text:
        return None
    edits: list[Edit] = [syn.remove_let(text, let)]
    for use, parent in syn.uses(let, name):
        if syn.under_handle(let, use):
            return None
        edits.append((use.span.start, use.span.end, syn.fits(let.value, text, parent, use)))
    return edits


def find_join(view: View, start: int, end: int) -> list[Args]:
    return find_inline(view, start, end)


def make_join(view: View, args: Args) -> Plan | None:
    found = _the_let(view, args)
    if found is None:
        return None
    fn, let = found
    name = let.names[0].id
    nxt = let.body
    if not isinstance(nxt, ast.Let) or not _chain_head_is(nxt.value, name):
        return None
    if len(syn.uses(let, name)) != 1:
        return None
    edits = _inline_edits(view.text, let)
    if edits is None:
        return None
    return Plan(f"Join `let {name}` into the method chain of the next let", "refactor.rewrite", tuple(edits),
                Expect(fn.name, {}, frozenset({name})))


def _chain_head_is(value: ast.Expr, name: str) -> bool:
    """`value` is a method chain `name.op(..)...` (at least one link) on the bare name."""
    if not isinstance(value, ast.MethodCall):
        return False
    node: ast.Expr = value
    while isinstance(node, ast.MethodCall):
        node = node.receiver
    return isinstance(node, ast.Name) and node.id == name
