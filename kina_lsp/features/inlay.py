"""Inlay hints: the type of every let-bound name, shown after the name.

The label is compact (`: F32[1, 4, 4]`, placement added only when it is not
@host) so chains of lets stay readable; the tooltip carries the full type.
Types come from the checker (Snapshot.type_at on the binding occurrence).
"""
from __future__ import annotations

from lsprotocol import types as lsp

from compiler.core.diagnostics import Span
from compiler.core.types import TensorType, TupleType, Type
from compiler.syntax import nodes as ast

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


def inlay_hints(view: View, span: Span) -> list[lsp.InlayHint]:
    hints: list[lsp.InlayHint] = []
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
                    tooltip=str(typ)))
    return hints
