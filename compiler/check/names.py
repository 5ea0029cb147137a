"""Names inside one function: which parameter or let each name refers to, which
functions it calls, and what a rename would clash with.  Spans are item-local (the
incremental front end, analysis.py, keeps one Symbols per function text)."""
from __future__ import annotations

from dataclasses import dataclass, field

from compiler.core.diagnostics import Span
from compiler.syntax import nodes as ast
from compiler.syntax import walk as ast_walk


@dataclass
class Symbols:
    """Name resolution inside one function, in item-local spans.
    defs: binding span -> name (parameters and lets); uses: reference span ->
    binding span; calls: (span, function name) for every user-function mention;
    handled: the functions called under `handle`."""
    defs: dict[Span, str] = field(default_factory=dict)
    uses: dict[Span, Span] = field(default_factory=dict)
    calls: list[tuple[Span, str]] = field(default_factory=list)
    handled: set[str] = field(default_factory=set)


def resolve(fn: ast.FnDef) -> Symbols:
    """Bind every Name to its parameter or let (lexical scope: a let's value sees
    only earlier bindings).  Iterative over the let chain; expressions are at most
    MAX_DEPTH (compiler/syntax/builder.py) deep."""
    sym = Symbols()
    scope: dict[str, Span] = {}
    for p in fn.params:
        sym.defs[p.name_span] = p.name
        scope.setdefault(p.name, p.name_span)
    body = fn.body
    while isinstance(body, ast.Let):
        _resolve_expr(body.value, scope, sym)
        for n in body.names:
            sym.defs[n.span] = n.id
            if n.id != "_":                  # `_` binds nothing
                scope.setdefault(n.id, n.span)   # a rebinding is a `duplicate` error; keep the first
        body = body.body
    _resolve_expr(body, scope, sym)
    return sym


def _resolve_expr(e: ast.Expr, scope: dict[str, Span], sym: Symbols) -> None:
    stack = [e]
    while stack:
        e = stack.pop()
        if isinstance(e, ast.Name):
            if e.id in scope:
                sym.uses[e.span] = scope[e.id]
        elif isinstance(e, ast.Call):
            sym.calls.append((e.func_span, e.func))
        elif isinstance(e, ast.Handle):
            sym.handled.add(e.call.func)
        stack.extend(ast_walk.children(e))


def mentions(sym: Symbols, fn: ast.FnDef) -> frozenset[str]:
    """Names whose signatures can change this function's check: calls and free names."""
    free = set()
    stack = [fn.body]
    while stack:
        e = stack.pop()
        if isinstance(e, ast.Name) and e.span not in sym.uses:
            free.add(e.id)
        stack.extend(ast_walk.children(e))
    return frozenset(free | {name for _, name in sym.calls})


def free_names(sym: Symbols, fn: ast.FnDef) -> dict[str, Span]:
    """Names used in fn that no parameter or let binds (the first use of each)."""
    out: dict[str, Span] = {}
    stack = [fn.body]
    while stack:
        e = stack.pop()
        if isinstance(e, ast.Name) and e.span not in sym.uses and e.span not in sym.defs:
            if e.id not in out or e.span.start < out[e.id].start:
                out[e.id] = e.span
        stack.extend(ast_walk.children(e))
    return out


def local_rename_conflict(sym: Symbols, fn: ast.FnDef, target: Span, new: str) -> tuple[str, Span] | None:
    """Why renaming the parameter or let bound at `target` to `new` would change fn:
    `new` is already bound in fn (a rebinding is an error), or fn uses an unbound `new`
    that the renamed binding would capture."""
    if sym.defs.get(target) == new:
        return None
    params = {p.name_span for p in fn.params}
    for span, name in sym.defs.items():
        if name == new:
            what = "a parameter" if span in params else "a let"
            return f"`{new}` is already {what} of `{fn.name}`", span
    free = free_names(sym, fn)
    if new in free:
        return f"`{fn.name}` uses an unbound `{new}`; the renamed binding would capture it", free[new]
    return None


def function_rename_conflict(items: list[tuple[int, str, ast.FnDef | None, Symbols | None]], old: str,
                             new: str) -> tuple[str, Span] | None:
    """Why renaming function `old` to `new` would change the program.  items: (offset,
    name, FnDef or None, Symbols or None) of every top-level item; spans come back in
    document offsets."""
    if old == new:
        return None
    for offset, name, fn, _sym in items:
        if name == new:
            return f"a function named `{new}` already exists", (fn.name_span.shift(offset) if fn
                                                                   else Span(offset, offset))
    for offset, name, _fn, sym in items:
        for span, callee in (sym.calls if sym else ()):
            if callee == new:
                return (f"`{name}` calls an undefined `{new}`; the renamed function would capture that call",
                        span.shift(offset))
    return None
