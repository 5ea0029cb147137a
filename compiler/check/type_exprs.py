"""Checker helpers shared by check/function.py and check/expr.py: the error type, the
resolution of written types (syntax.TypeExpr -> types.Type) and the small
message builders ("did you mean", "how two types differ").

The error type `ERROR` is what a broken expression or binding gets.  Every rule
skips operands whose type is ERROR, so one mistake is reported once and does not
cascade through the rest of the function.
"""
from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import ClassVar, cast

from compiler.core.diagnostics import DiagnosticBag, Note
from compiler.core.sizes import Dim
from compiler.core.types import PLACEMENTS, DType, TensorType, TupleType, Type
from compiler.syntax import nodes as syntax

# How a written type's size expressions are evaluated: (expressions, type) -> dims, or None
# after a diagnostic (check/function.py binds the function's size scope into one).
SizeEval = Callable[[tuple[syntax.SizeExpr, ...], "syntax.TensorTypeExpr"], tuple[Dim, ...] | None]


class ErrorType:
    """The type of something already reported as wrong (never reaches the IR)."""

    _instance: ClassVar[ErrorType | None] = None

    def __new__(cls) -> ErrorType:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __str__(self) -> str:
        return "<error>"

    __repr__ = __str__


ERROR = ErrorType()
# ERROR where an IR node wants a Type: the placeholder type of the IR the checker builds for
# a broken expression.  That IR never leaves the checker (a broken function has no IR).
ERROR_TYPE = cast(Type, ERROR)
DTYPE_NAMES = tuple(d.value for d in DType)


def ir_type(t: Type | ErrorType) -> Type:
    """t where an IR node wants a Type: ERROR becomes ERROR_TYPE (the same object)."""
    return ERROR_TYPE if isinstance(t, ErrorType) else t


def is_error(t: Type | ErrorType) -> bool:
    """True for ERROR and for a tuple that contains it anywhere."""
    if t is ERROR:
        return True
    return isinstance(t, TupleType) and any(is_error(i) for i in t.items)


def did_you_mean(word: str, candidates: Iterable[str], what: str = "") -> tuple[Note, ...]:
    """A "did you mean `x`?" note (empty when nothing is close).  Only called on
    the error path, so difflib's cost never touches a clean check."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    if not close:
        return ()
    return (Note(f"did you mean {what}`{close[0]}`?"),)


def resolve_type(texpr: syntax.TypeExpr | None, bag: DiagnosticBag,
                 sizes: SizeEval | None = None) -> Type | ErrorType:
    """A written type -> a Type, or ERROR after reporting `type-annotation`.  `sizes`
    evaluates the size expressions of its shapes (None: only integers are allowed)."""
    if texpr is None:
        return ERROR
    if isinstance(texpr, syntax.TupleTypeExpr):
        items = [resolve_type(i, bag, sizes) for i in texpr.items]
        types = [i for i in items if not isinstance(i, ErrorType)]
        return TupleType(tuple(types)) if len(types) == len(items) else ERROR
    return resolve_tensor_type(texpr, bag, sizes)


def resolve_tensor_type(texpr: syntax.TensorTypeExpr, bag: DiagnosticBag,
                        sizes: SizeEval | None = None) -> TensorType | ErrorType:
    ok = True
    if texpr.dtype not in DTYPE_NAMES:
        bag.error("type-annotation", f"unknown dtype `{texpr.dtype}` (expected one of {', '.join(DTYPE_NAMES)})",
                  texpr.span, *did_you_mean(texpr.dtype, DTYPE_NAMES))
        ok = False
    placement = "host" if texpr.placement is None else texpr.placement
    if placement not in PLACEMENTS:
        bag.error("type-annotation", f"unknown placement `@{placement}` (expected @host or @device)",
                  texpr.span, *did_you_mean(placement, PLACEMENTS, "@"))
        ok = False
    if sizes is not None:
        evaluated = sizes(texpr.shape, texpr)   # None: reported
        if evaluated is None:
            return ERROR
        shape = evaluated
    elif all(isinstance(d, int) for d in texpr.shape):
        shape = tuple(d for d in texpr.shape if isinstance(d, int))
    else:
        bag.error("type-annotation", f"shape [{', '.join(map(syntax.size_text, texpr.shape))}] uses sizes, "
                  "which only a size-generic function's types may use", texpr.span)
        return ERROR
    negative = [d for d in shape if isinstance(d, int) and d < 0]
    if negative:
        bag.error("type-annotation", f"shape [{', '.join(map(str, shape))}] has a negative dimension "
                  f"({negative[0]}); dimensions are non-negative integers", texpr.span)
        ok = False
    if not ok:
        return ERROR
    # a symbolic Size stands where an int does (core/sizes.py); only a generic function's
    # own check sees one, and no IR that holds one leaves the checker
    return TensorType(DType.named(texpr.dtype), cast(tuple[int, ...], shape), placement)


def mismatch(expected: Type, got: Type) -> tuple[str, str]:
    """(code, detail) saying how `got` differs from `expected`: the first of
    dtype, placement, rank or a dimension, or that one side is a tuple."""
    if not (isinstance(expected, TensorType) and isinstance(got, TensorType)):
        if isinstance(expected, TupleType) and isinstance(got, TupleType) and len(expected.items) == len(got.items):
            i = next(i for i, (e, g) in enumerate(zip(expected.items, got.items)) if e != g)
            code, detail = mismatch(expected.items[i], got.items[i])
            return code, f"item {i}: {detail}"
        return "shape", "a tuple and a tensor, or tuples of different lengths"
    if expected.dtype != got.dtype:
        return "dtype", f"dtype {got.dtype}, not {expected.dtype}"
    if expected.placement != got.placement:
        return "placement", f"placement @{got.placement}, not @{expected.placement}"
    if expected.rank != got.rank:
        return "shape", f"rank {got.rank}, not {expected.rank}"
    d = next(i for i in range(got.rank) if got.shape[i] != expected.shape[i])
    return "shape", f"dimension {d} is {got.shape[d]}, not {expected.shape[d]}"


@dataclass
class Signature:
    """A user function's type, as callers see it (broken parts are ERROR).
    `opaque`: the function exists but did not parse, so calls of it are not
    checked against it and have the error type (no cascade of `unknown-name`).
    `sizes`: a generic function's size parameters, which its types hold as symbols."""
    name: str
    params: list[tuple[str, TensorType | ErrorType]]   # a tuple-typed parameter is an error
    ret: Type | ErrorType
    opaque: bool = False
    sizes: tuple[str, ...] = ()
