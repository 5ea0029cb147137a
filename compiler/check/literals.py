"""Tensor literals: `Tensor[F32, [2]] { 1.0, 2.0 }` -> ir.Literal.

A literal holds 0 values (zeros), 1 (a splat) or its volume (row-major); with a volume
that depends on the sizes, only 0 or 1.  Every value must fit its dtype; I64 literals
hold integers and Bool literals 0 or 1.
"""
from __future__ import annotations

from collections.abc import Mapping

from compiler.check.scalars import value_problem
from compiler.check.sizes import size_evaluator
from compiler.check.type_exprs import ERROR_TYPE, ErrorType, resolve_tensor_type
from compiler.core.diagnostics import DiagnosticBag
from compiler.core.sizes import Dim, Size
from compiler.core.types import DType
from compiler.ir import nodes as ir
from compiler.syntax import nodes as syntax


def check_tensor_literal(bag: DiagnosticBag, e: syntax.TensorLit, sizes: Mapping[str, Dim]) -> ir.Expr:
    """The literal's IR, or an error Var after its diagnostic."""
    t = resolve_tensor_type(e.type, bag, size_evaluator(sizes, bag))
    if isinstance(t, ErrorType):
        return ir.Var("<error>", ERROR_TYPE, e.span)
    n = len(e.values)
    if isinstance(t.volume, Size) and n > 1:
        bag.error("literal", f"tensor literal of type {t} has {n} values, but its volume {t.volume} "
              "depends on the sizes; give 0 values (zeros) or 1 (a splat)", e.span)
        return ir.Var("<error>", ERROR_TYPE, e.span)
    if n not in (0, 1, t.volume):
        bag.error("literal", f"tensor literal of type {t} has {n} values; give 0 (zeros), 1 (a splat) "
              f"or {t.volume} (the volume, row-major)", e.span)
        return ir.Var("<error>", ERROR_TYPE, e.span)
    too_big = next((i for i, v in enumerate(e.values) if value_problem(v, t, range_only=True)), None)
    if too_big is not None:
        v = e.values[too_big]
        bag.error("literal", f"tensor literal of type {t}: the value {v} does not fit: "
              f"{value_problem(v, t, range_only=True)}", syntax.value_span(e, too_big))
        return ir.Var("<error>", ERROR_TYPE, e.span)
    if t.dtype is DType.I64:
        bad = next((v for v in e.values if not isinstance(v, int) or isinstance(v, bool)), None)
        if bad is not None:
            bag.error("literal", f"tensor literal of type {t} holds indices, so its values must be "
                  f"integers; got {bad}", e.span)
            return ir.Var("<error>", ERROR_TYPE, e.span)
        values: tuple[float, ...] = tuple(int(v) for v in e.values)
    elif not t.is_float:   # Bool: 0 (false) or 1 (true)
        bad = next((v for v in e.values if v not in (0, 1) or isinstance(v, float)), None)
        if bad is not None:
            bag.error("literal", f"tensor literal of type {t} holds truth values, so its values must be "
                  f"0 (false) or 1 (true); got {bad}", e.span)
            return ir.Var("<error>", ERROR_TYPE, e.span)
        values = tuple(int(v) for v in e.values)
    else:
        values = tuple(float(v) for v in e.values)
    return ir.Literal(values, t, e.span)
