"""Inlay hints: the type of every let-bound name, shown after the name, and the
parameter names at the arguments of calls of user functions (`attn(q: a, k_t: b)`;
setting `kina.inlayHints.parameterNames`).

The label is compact (`: F32[1, 4, 4]`, placement added only when it is not
@host) so chains of lets stay readable; the tooltip carries the full type and is
filled in lazily (inlayHint/resolve: `resolve`), as rust-analyzer does: the editor asks
only for the hint the mouse is on.  Types come from the checker (Snapshot.type_at on the
binding occurrence).
"""
from __future__ import annotations

from lsprotocol import types as lsp

from compiler.core.diagnostics import Span
from compiler.core.types import TensorType, TupleType, Type
from compiler.syntax import nodes as ast
from compiler.syntax import walk as ast_walk

from ..documents import View
from . import astutil


def compact(t: Type) -> str:
    if isinstance(t, TensorType):
        dims = ", ".join(str(d) for d in t.shape)
        where = "" if t.placement == "host" else f" @{t.placement}"
        return f"{t.dtype}[{dims}]{where}"
    if isinstance(t, TupleType):
        return "(" + ", ".join(compact(i) for i in t.items) + ")"
    return str(t)


def _binding_type(view: View, name: ast.Name) -> Type | None:
    """The checker's type of a binding occurrence, or None."""
    try:
        fact = view.snapshot.type_at(name.span.start)
    except Exception:
        return None
    if fact is None or fact.span != name.span:
        return None  # no fact for this very binding (function not checked)
    return fact.type


def inlay_hints(view: View, span: Span, uri: str = "", parameters: bool = True,
                lazy: bool = False) -> list[lsp.InlayHint]:
    """The hints in span; `lazy`: the client resolves tooltips (inlayHint/resolve), so
    they are left out here."""
    hints: list[lsp.InlayHint] = []
    params = {fn.name: [p.name for p in fn.params] for _, fn in view.snapshot.local_functions()} if parameters else {}
    for offset, local in view.snapshot.local_functions():   # only the functions in range are copied
        if offset + local.span.end < span.start or offset + local.span.start > span.end:
            continue
        fn = view.snapshot.function_at(offset)
        if fn is None:
            continue
        for let in astutil.lets(fn):
            for name in let.names:
                if not (span.start <= name.span.end <= span.end):
                    continue
                typ = _binding_type(view, name)
                if typ is None:
                    continue
                hints.append(lsp.InlayHint(
                    position=view.index.position(name.span.end), label=": " + compact(typ),
                    kind=lsp.InlayHintKind.Type, padding_left=False, padding_right=True,
                    tooltip=None if lazy else str(typ), data={"uri": uri, "offset": name.span.start}))
        if params:
            hints += _parameter_hints(view, fn, span, params)
    return hints


def _parameter_hints(view: View, fn: ast.FnDef, span: Span, params: dict[str, list[str]]) -> list[lsp.InlayHint]:
    """`name:` before each positional argument of a call of a user function, unless the
    argument is a name equal to the parameter's (`f(q, k)` for `fn f(q, k)` says it)."""
    out: list[lsp.InlayHint] = []
    stack: list[ast.Expr] = [fn.body]
    while stack:
        node = stack.pop()
        stack += ast_walk.children(node)
        if not isinstance(node, ast.Call) or node.func not in params:
            continue
        for arg, name in zip(node.args, params[node.func]):
            if not span.start <= arg.span.start <= span.end:
                continue
            if isinstance(arg, ast.Name) and arg.id == name:
                continue
            out.append(lsp.InlayHint(position=view.index.position(arg.span.start), label=f"{name}:",
                                     kind=lsp.InlayHintKind.Parameter, padding_right=True))
    return sorted(out, key=lambda h: (h.position.line, h.position.character))


def resolve(view: View | None, hint: lsp.InlayHint) -> lsp.InlayHint:
    """The hint with its tooltip (the full type of the binding), computed on demand."""
    data = hint.data if isinstance(hint.data, dict) else {}
    offset = data.get("offset")
    if view is not None and isinstance(offset, int):
        try:
            fact = view.snapshot.type_at(offset)
        except Exception:
            fact = None
        if fact is not None and fact.span.start == offset:
            hint.tooltip = str(fact.type)
    return hint
