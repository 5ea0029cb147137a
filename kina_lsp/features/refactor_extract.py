"""Refactors that add lets: extract the selected expression into a let (refactor.extract),
and split a method chain into one let per link (refactor.rewrite).

Extract: the selection must be exactly one expression (blanks around it do not count).  The
new let goes right before the statement that uses the expression (the let whose value holds
it, or the chain's final expression), so everything the expression names is already bound
there; its name is fresh: no word of the function, no function or import of the file.

    let y = x.exp().reduce_keep(op=sum, axis=1) * s in       (selecting `x.exp()`)
  becomes
    let x_exp = x.exp() in
    let y = x_exp.reduce_keep(op=sum, axis=1) * s in

Split a chain: `let y = x.exp().reduce_keep(op=sum, axis=1) in` becomes
`let y_exp = x.exp() in let y = y_exp.reduce_keep(op=sum, axis=1) in`: each link but the
last gets a let of its own, the last keeps the let it was in (outside a let's value the
chain becomes a name for its last-but-one link and that link).  This is the shape reverseMode
asks for (docs/language.md §8, rule 2).

Both are offered only when the edited text re-checks with the same types (refactor_check).
"""
from __future__ import annotations

from typing import Any

from compiler.syntax import nodes as ast

from ..documents import View
from . import astutil
from . import refactor_syntax as syn
from .refactor_check import Edit, Expect, Plan, type_of

Args = dict[str, Any]


# ---- extract ---------------------------------------------------------------------------
def find_extract(view: View, start: int, end: int) -> list[Args]:
    if start == end:
        return []
    s, e = syn.trimmed(view.text, start, end)
    return [{"start": s, "end": e}] if s < e else []


def _target(view: View, args: Args) -> tuple[ast.FnDef, int, int, ast.Expr, ast.Expr | None] | None:
    """(the function, start, end, the expression spanning [start, end), its parent) that a
    refactor's arguments name, or None when they name none."""
    s, e = args.get("start"), args.get("end")
    if not (isinstance(s, int) and isinstance(e, int)):
        return None
    fn = view.snapshot.function_at(s)
    found = syn.node_spanning(fn, s, e) if fn is not None else None
    if fn is None or found is None:
        return None
    return fn, s, e, found[0], found[1]


def make_extract(view: View, args: Args) -> Plan | None:
    target = _target(view, args)
    if target is None:
        return None
    fn, s, e, node, parent = target
    if not _extractable(node, parent):
        return None
    typ = type_of(view.snapshot, s, e)
    if typ is None:
        return None
    text = view.text
    name = syn.fresh(syn.label(node), syn.taken_names(view, fn))
    value = text[s:e]
    if syn.parenthesized(value):       # `let t = a + b in`, not `let t = (a + b) in`
        value = value[1:-1].strip()
    edits = (syn.insert_let(text, syn.statement_start(fn, s), name, value), (s, e, name))
    return Plan(f"Extract `{_short(text[s:e])}` into `let {name}`", "refactor.extract", edits,
                Expect(fn.name, {name: typ}))


def _extractable(node: ast.Expr, parent: ast.Expr | None) -> bool:
    """Not a let's whole value (it has its let), not the call of a `handle` (which is part of
    the handle's syntax, not a value), not a name, a bare number or size list (no type of their own)."""
    if isinstance(parent, ast.Let) and parent.value is node:
        return False
    if isinstance(parent, ast.Handle):
        return False
    return not isinstance(node, (ast.Name, ast.Number, ast.IntList, ast.Let))   # (a name: an alias)


def _short(text: str, limit: int = 40) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= limit else one_line[:limit - 3] + "..."


# ---- a method chain -> one let per link --------------------------------------------------
def _links(node: ast.Expr) -> list[ast.MethodCall]:
    """The links of a method chain, innermost first: `x.a().b().c()` -> [x.a(), x.a().b(), all]."""
    out: list[ast.MethodCall] = []
    while isinstance(node, ast.MethodCall):
        out.append(node)
        node = node.receiver
    return out[::-1]


def find_split(view: View, start: int, end: int) -> list[Args]:
    fn = view.snapshot.function_at(start)
    if fn is None:
        return []
    chains = [n for n in astutil.path_at(fn, start) if len(_links(n)) >= 2]
    return [{"start": chains[0].span.start, "end": chains[0].span.end}] if chains else []


def make_split(view: View, args: Args) -> Plan | None:
    target = _target(view, args)
    if target is None:
        return None
    fn, s, e, node, parent = target
    links = _links(node)
    if len(links) < 2 or isinstance(parent, ast.Handle):
        return None
    text = view.text
    own = parent if isinstance(parent, ast.Let) and parent.value is node and not parent.destructure else None
    base = own.names[0].id if own is not None else None
    taken = syn.taken_names(view, fn)
    added: dict[str, str] = {}
    edits: list[Edit] = []
    at = syn.statement_start(fn, s)
    prev_end, prev_name = None, None
    for link in links[:-1]:
        piece = _piece(text, link, prev_end, prev_name)
        typ = type_of(view.snapshot, link.span.start, link.span.end)
        if piece is None or typ is None:
            return None
        name = syn.fresh(f"{base}_{link.method}" if base else syn.label(link), taken)
        added[name] = typ
        edits.append(syn.insert_let(text, at, name, piece))
        prev_end, prev_name = link.span.end, name
    last = _piece(text, links[-1], prev_end, prev_name)
    if last is None:
        return None
    edits.append((s, e, last))
    return Plan("Split the method chain into one let per link", "refactor.rewrite",
                tuple(edits), Expect(fn.name, added))


def _piece(text: str, link: ast.MethodCall, prev_end: int | None, prev_name: str | None) -> str | None:
    """The text of one link: the first as written, each later one as `prev_name.method(..)`
    (the `.method(..)` as written, without the line breaks of a chain written over lines).
    None when a comment sits inside (it would swallow the rest of a joined line)."""
    if prev_end is None or prev_name is None:
        piece = text[link.span.start:link.span.end]
    else:
        piece = prev_name + text[prev_end:link.span.end].lstrip()
    return None if "//" in piece else piece
