"""Names inside one function: which parameter, let or size parameter each name refers
to, which functions it calls, and what a rename would clash with.  Spans are item-local
(the incremental front end, analysis.py, keeps one Symbols per function text).

A size parameter (`fn f[B, T](..)`) is used in the function's types, integer lists,
size attributes (`stop=T - 1`; a lone `stop=T` where the op's attribute is an integer,
as the checker reads it), the sizes of a call (`g[B, 4](..)`) and as a bare number in
expressions (`1.0 / B`, where no parameter or let of that name is in scope)."""
from __future__ import annotations

from dataclasses import dataclass, field

from compiler.core.diagnostics import Span
from compiler.ir.ops import SURFACE_OPS
from compiler.syntax import nodes as ast
from compiler.syntax import walk as ast_walk


@dataclass
class Symbols:
    """Name resolution inside one function, in item-local spans.
    defs: binding span -> name (parameters and lets); uses: reference span ->
    binding span; calls: (span, function name) for every user-function mention;
    handled: the functions called under `handle`.  Size parameters are in defs too
    (their uses map to the SizeParam's span)."""
    defs: dict[Span, str] = field(default_factory=dict)
    uses: dict[Span, Span] = field(default_factory=dict)
    calls: list[tuple[Span, str]] = field(default_factory=list)
    handled: set[str] = field(default_factory=set)


def resolve(fn: ast.FnDef) -> Symbols:
    """Bind every Name to its parameter or let (lexical scope: a let's value sees
    only earlier bindings), and every size name to its size parameter.  Iterative over
    the let chain; expressions are at most MAX_DEPTH (compiler/syntax/builder.py) deep."""
    sym = Symbols()
    sizes: dict[str, Span] = {}
    for s in fn.sizes:
        sym.defs[s.span] = s.name
        sizes.setdefault(s.name, s.span)     # a size declared twice is a `duplicate` error; keep the first
    scope: dict[str, Span] = {}
    for p in fn.params:
        sym.defs[p.name_span] = p.name
        scope.setdefault(p.name, p.name_span)
        _resolve_type(p.type, sizes, sym)
    _resolve_type(fn.ret, sizes, sym)
    body = fn.body
    while isinstance(body, ast.Let):
        _resolve_expr(body.value, scope, sizes, sym)
        for n in body.names:
            sym.defs[n.span] = n.id
            if n.id != "_":                  # `_` binds nothing
                scope.setdefault(n.id, n.span)   # a rebinding is a `duplicate` error; keep the first
        body = body.body
    _resolve_expr(body, scope, sizes, sym)
    return sym


def _resolve_sizes(values: object, sizes: dict[str, Span], sym: Symbols) -> None:
    """The size names in a size expression, or in a tuple of them."""
    if not sizes:
        return
    for v in values if isinstance(values, tuple) else (values,):
        if isinstance(v, (ast.SizeName, ast.SizeBin)):
            for n in ast.size_names(v):
                if n.id in sizes:
                    sym.uses[n.span] = sizes[n.id]


def _resolve_type(t: ast.TypeExpr, sizes: dict[str, Span], sym: Symbols) -> None:
    if isinstance(t, ast.TupleTypeExpr):
        for item in t.items:
            _resolve_type(item, sizes, sym)
    else:
        _resolve_sizes(t.shape, sizes, sym)


def _resolve_attrs(e: ast.Call | ast.MethodCall, sizes: dict[str, Span], sym: Symbols) -> None:
    """Sizes in attributes: expressions and lists, and a lone word where the op takes an integer."""
    op = SURFACE_OPS.get(e.func if isinstance(e, ast.Call) else e.method)
    for a in e.attrs:
        if isinstance(a.value, str):
            spec = op.attr(a.name) if op is not None else None
            if a.value in sizes and spec is not None and spec.kind == "int":
                sym.uses[a.value_span] = sizes[a.value]
        else:
            _resolve_sizes(a.value, sizes, sym)


def _resolve_expr(e: ast.Expr, scope: dict[str, Span], sizes: dict[str, Span], sym: Symbols) -> None:
    stack = [e]
    while stack:
        e = stack.pop()
        if isinstance(e, ast.Name):
            if e.id in scope:
                sym.uses[e.span] = scope[e.id]
            elif e.id in sizes:              # a size as a bare number: `1.0 / B`
                sym.uses[e.span] = sizes[e.id]
        elif isinstance(e, ast.Call):
            sym.calls.append((e.func_span, e.func))
            if e.sizes is not None:
                _resolve_sizes(e.sizes.values, sizes, sym)
        elif isinstance(e, ast.Handle):
            sym.handled.add(e.call.func)
        elif isinstance(e, ast.IntList):
            _resolve_sizes(e.values, sizes, sym)
        elif isinstance(e, ast.TensorLit):
            _resolve_type(e.type, sizes, sym)
        if isinstance(e, (ast.Call, ast.MethodCall)) and sizes:
            _resolve_attrs(e, sizes, sym)
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
    """Why renaming the parameter, let or size parameter bound at `target` to `new` would change fn:
    `new` is already bound in fn (a rebinding is an error), or fn uses an unbound `new`
    that the renamed binding would capture."""
    if sym.defs.get(target) == new:
        return None
    params = {p.name_span for p in fn.params}
    sizes = {s.span for s in fn.sizes}
    for span, name in sym.defs.items():
        if name == new:
            what = "a parameter" if span in params else "a size parameter" if span in sizes else "a let"
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
