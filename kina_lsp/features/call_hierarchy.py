"""Call hierarchy of user functions: prepare (on a function's name or on a call of
it), incoming calls (the functions that call it, with each call site) and
outgoing calls (the user functions it calls).  `handle f(..) with reverseMode`
is a call of f.  Built-in ops are not user functions and never appear.

A Kina program is one file (no imports), so calls are searched in the document
of the item; the item's `data` carries the document URI and the function name,
and the answer is recomputed from the current text, so an item prepared before
an edit still resolves (to nothing if the function is gone).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from compiler.core.diagnostics import Span
from compiler.syntax import nodes as ast
from compiler.syntax import walk as ast_walk

from ..documents import View
from . import astutil

if TYPE_CHECKING:
    from ..base import Safe, Server


def calls_in(fn: ast.FnDef) -> list[ast.Call]:
    """Every free-form call in a function body, `handle` calls included, in text order."""
    out: list[ast.Call] = []
    stack: list[ast.Expr] = [fn.body]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Call):
            out.append(node)
        stack.extend(ast_walk.children(node))
    return sorted(out, key=lambda c: c.func_span.start)


def _functions(view: View) -> dict[str, ast.FnDef]:
    """First definition of each name (a duplicate is an error; the first one counts)."""
    out: dict[str, ast.FnDef] = {}
    for fn in (view.snapshot.module.functions if view.snapshot.module else ()):
        out.setdefault(fn.name, fn)
    return out


def _range(view: View, span: Span) -> lsp.Range:
    a, b = view.index.positions([span.start, span.end])
    return lsp.Range(start=a, end=b)


def item(view: View, uri: str, fn: ast.FnDef) -> lsp.CallHierarchyItem:
    return lsp.CallHierarchyItem(name=fn.name, kind=lsp.SymbolKind.Function, uri=uri,
                                 detail=astutil.signature(fn), range=_range(view, fn.span),
                                 selection_range=_range(view, fn.name_span),
                                 data={"uri": uri, "name": fn.name})


def prepare(view: View, uri: str, offset: int) -> list[lsp.CallHierarchyItem] | None:
    fns = _functions(view)
    here = astutil.function_at(view.snapshot.module, offset)
    name = None
    if here is not None and here.name_span.contains(offset):
        name = here.name
    elif here is not None:
        name = next((c.func for c in calls_in(here) if c.func_span.contains(offset)), None)
    target = fns.get(name) if name else None
    return [item(view, uri, target)] if target is not None else None


def _target(params_item: lsp.CallHierarchyItem) -> tuple[str, str] | None:
    data = params_item.data if isinstance(params_item.data, dict) else {}
    name = data.get("name") or params_item.name
    uri = data.get("uri") or params_item.uri
    return (uri, name) if isinstance(name, str) and isinstance(uri, str) else None


def incoming(view: View, uri: str, name: str) -> list[lsp.CallHierarchyIncomingCall]:
    out: list[lsp.CallHierarchyIncomingCall] = []
    for fn in _functions(view).values():
        sites = [c.func_span for c in calls_in(fn) if c.func == name]
        if sites:
            out.append(lsp.CallHierarchyIncomingCall(from_=item(view, uri, fn),
                                                     from_ranges=[_range(view, s) for s in sites]))
    return out


def outgoing(view: View, uri: str, name: str) -> list[lsp.CallHierarchyOutgoingCall]:
    fns = _functions(view)
    caller = fns.get(name)
    if caller is None:
        return []
    by_callee: dict[str, list[Span]] = {}
    for c in calls_in(caller):
        if c.func in fns:
            by_callee.setdefault(c.func, []).append(c.func_span)
    return [lsp.CallHierarchyOutgoingCall(to=item(view, uri, fns[callee]),
                                          from_ranges=[_range(view, s) for s in sites])
            for callee, sites in by_callee.items()]


def register(server: Server, safe: Safe) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_PREPARE_CALL_HIERARCHY)
    @safe()
    async def on_prepare(ls: Server, params: lsp.CallHierarchyPrepareParams) -> list[lsp.CallHierarchyItem] | None:
        view = await ls.view(params.text_document.uri, wait=True)
        return prepare(view, params.text_document.uri, view.index.offset(params.position)) if view else None

    @server.feature(lsp.CALL_HIERARCHY_INCOMING_CALLS)
    @safe(default=list)
    async def on_incoming(ls: Server,
                          params: lsp.CallHierarchyIncomingCallsParams) -> list[lsp.CallHierarchyIncomingCall]:
        target = _target(params.item)
        if target is None:
            return []
        view = await ls.view(target[0], wait=True)
        return incoming(view, target[0], target[1]) if view else []

    @server.feature(lsp.CALL_HIERARCHY_OUTGOING_CALLS)
    @safe(default=list)
    async def on_outgoing(ls: Server,
                          params: lsp.CallHierarchyOutgoingCallsParams) -> list[lsp.CallHierarchyOutgoingCall]:
        target = _target(params.item)
        if target is None:
            return []
        view = await ls.view(target[0], wait=True)
        return outgoing(view, target[0], target[1]) if view else []
