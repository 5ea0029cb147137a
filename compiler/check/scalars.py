"""Bare numbers in expressions: scalar constants and the fixes offered elsewhere.

A bare number is a tensor only as an operand of an op whose row in ops.OPS
lists that position in `scalars` (the elementwise binary ops, comparisons,
`where`'s two values): there `x * 0.5` means `x * Tensor[T] { 0.5 }` with T
the type of the first tensor operand among those positions (the "anchor").
The IR gets an ordinary splat `ir.Literal` marked `scalar=True`, so every later
stage (interpreter, VJPs, lowering) sees a tensor (reverseMode binds it to a let
of its own: it receives no cotangent).

Anywhere else a bare number is an error whose message offers a tensor literal
that type-checks there (the expected type when the context knows it).
"""
from __future__ import annotations

import math

from compiler.check.type_exprs import ERROR_TYPE, ErrorType, is_error
from compiler.core.diagnostics import DiagnosticBag, Span
from compiler.core.types import DType, TensorType, Type
from compiler.ir import nodes as ir
from compiler.ir.ops import OpDef
from compiler.syntax import nodes as syntax

_BOOL = tuple(d for d in DType if d.value == "Bool")   # the boolean dtype, once it exists


def literal_text(value: int | float | str, t: TensorType | None) -> str:
    """`Tensor[F32, [2, 3]] { 0.5 }` (placement shown only when it is not the default)."""
    if t is None:
        t = TensorType(DType.F32, ())
    dims = ", ".join(str(d) for d in t.shape)
    where = "" if t.placement == "host" else f", @{t.placement}"
    if isinstance(value, str):   # the number as written in the source
        shown = value
    else:
        shown = str(int(value)) if t.dtype in (DType.I64,) + _BOOL and float(value).is_integer() else str(value)
    return f"Tensor[{t.dtype}, [{dims}]{where}] {{ {shown} }}"


def splat_operands(bag: DiagnosticBag, op: OpDef,
                   items: list[tuple[ir.Expr | syntax.Number, Span]]) -> list[tuple[ir.Expr, Span]] | None:
    """items: (checked ir.Expr or syntax.Number, span) per operand, numbers only at
    `op.scalars` positions.  Numbers become splat Literals of the anchor's type; None
    after a diagnostic (both operands numbers, a fraction for an integer tensor)."""
    numbers = [(e, span) for e, span in items if isinstance(e, syntax.Number)]
    if not numbers:
        return [(e, span) for e, span in items if not isinstance(e, syntax.Number)]   # all of them
    anchor = next((e for i, (e, _) in enumerate(items)
                   if i in op.scalars and not isinstance(e, syntax.Number)), None)
    if anchor is None:
        (first, first_span), last_span = numbers[0], numbers[-1][1]
        bag.error("literal", f"{op.name}: every operand is a bare number, so none has a type for the others "
                  f"to take; make one a tensor literal, e.g. `{literal_text(first.value, None)}`",
                  first_span.cover(last_span))
        return None
    out: list[tuple[ir.Expr, Span]] = []
    for e, span in items:
        if isinstance(e, syntax.Number):
            splat = _splat(bag, op, e, anchor.type)
            if splat is None:
                return None
            e = splat
        out.append((e, span))
    return out


def _splat(bag: DiagnosticBag, op: OpDef, num: syntax.Number, t: Type) -> ir.Expr | None:
    if is_error(t) or not isinstance(t, TensorType):
        # a broken or tuple-typed anchor is reported by the op itself
        return ir.Var("<error>", ERROR_TYPE if is_error(t) else t, num.span)
    value = num.value
    problem = value_problem(value, t)
    if problem:
        bag.error("literal", f"{op.name}: the number {value} cannot be a splat of the other operand's type "
                  f"{t}: {problem}", num.span)
        return None
    if not t.is_float:
        return ir.Literal((int(value),), t, num.span, scalar=True)
    return ir.Literal((float(value),), t, num.span, scalar=True)


def value_problem(value: int | float, t: TensorType, range_only: bool = False) -> str:
    """Why `value` cannot be an element of a `t` tensor ("" when it can): a fraction for
    I64 or Bool, anything but 0 / 1 for Bool, an integer outside I64 (MLIR would reject
    the constant), a finite number that overflows a float dtype (it would silently become
    an infinity, or NaN in F8E4M3), an infinity in F8E4M3 (which has none).  range_only:
    only the range problems (literals report the others themselves)."""
    if t.is_float:
        return float_problem(value, t.dtype)
    if not float(value).is_integer():
        return "" if range_only else f"{t.dtype} holds integers"
    if _BOOL and t.dtype is _BOOL[0] and value not in (0, 1):
        return "" if range_only else "a Bool tensor holds 0 (false) or 1 (true)"
    if not -2 ** 63 <= int(value) < 2 ** 63:
        return "it is outside the range of I64"
    return ""


def float_problem(value: int | float, dtype: DType) -> str:
    """Why `value` is not a value of the float dtype ("" when it is): it overflows it, or
    it is an infinity and the dtype has none.  NaN is a value of every float dtype."""
    try:
        overflow = dtype.overflows(float(value))
    except OverflowError:      # an integer beyond every float
        overflow = True
    if overflow:
        hint = "write `inf` or `-inf` for an infinity" if dtype.has_inf else "it would round to NaN"
        return f"it overflows {dtype}, whose largest finite value is {dtype.finite_max:g} ({hint})"
    if math.isinf(value) and not dtype.has_inf:
        return (f"{dtype} has no infinities (its largest value is {dtype.finite_max:g}; "
                "an overflow there is NaN, written `nan`)")
    return ""


def number_message(e: syntax.Number | syntax.IntList, expected: Type | ErrorType | None = None,
                   where: str = "") -> str:
    """The message for a bare number (or an integer list) that cannot be a tensor here."""
    if isinstance(e, syntax.IntList):
        return ("an integer list is not a tensor value; only op attributes take plain lists "
                f"(a tensor literal is written `Tensor[I64, [{len(e.values)}]] "
                f"{{ {', '.join(map(str, e.values))} }}`)")
    scalar_rule = ("a bare number is a tensor only as an operand of an elementwise op "
                   "(`x * 0.5`, `1e-5 + v`), where it takes the other operand's type")
    if isinstance(expected, TensorType):
        return f"{scalar_rule}; {where or 'here'}, {expected} is expected: write `{literal_text(e.value, expected)}`"
    return (f"{scalar_rule}; {where or 'here'}, write a tensor literal with its type, "
            f"e.g. `{literal_text(e.value, None)}`")
