"""Constant expressions of bare numbers: `1.0 - 1e-3 * 0.01`, `0.9.log()`, `-(2 * 3)`.

An expression built only from bare numbers with the elementwise ops below acts as one
bare number (check/scalars.py): `x * (1.0 - 1e-3 * 0.01)` is `x * 0.99999`.  It is
computed here, once, in the precision of the literals as written (Python int for
integer arithmetic, else float64), and the result is rounded once to the type it
takes, like any bare number; so the interpreter, the PyTorch reference and the
compiled code all see the same splat.  Where nothing gives it a type (a let of only
numbers, a function result) it is refused as a bare number is.

A free call `log(0.9)` folds only when no user function named `log` shadows the op
(docs/language.md §4); the method form `0.9.log()` always means the op.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping

from compiler.syntax import nodes as syntax

Value = int | float

# Integer arithmetic stays exact in Python ints (I64 operands need integers); a result
# beyond I64 becomes a float, which the splat then refuses for I64 as any fraction.
_I64 = 2 ** 63


def _relu(v: float) -> float:
    return v if v > 0 else 0.0 * v


def _sigmoid(v: float) -> float:
    return 1.0 / (1.0 + math.exp(-v)) if v >= 0 else math.exp(v) / (1.0 + math.exp(v))


_UNARY: dict[str, Callable[[float], float]] = {
    "neg": lambda v: -v, "abs": abs, "square": lambda v: v * v,
    "sign": lambda v: float((v > 0) - (v < 0)) if v == v else v,
    "relu": _relu, "exp": math.exp, "log": math.log, "sqrt": math.sqrt,
    "rsqrt": lambda v: 1.0 / math.sqrt(v), "tanh": math.tanh, "sigmoid": _sigmoid, "erf": math.erf,
}
_INT_UNARY = {"neg", "abs", "square", "sign"}   # exact on integers
_BINARY: dict[str, Callable[[float, float], float]] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "maximum": max, "minimum": min,
}
_INT_BINARY = {"add", "sub", "mul", "maximum", "minimum"}
_INFIX = {"+": "add", "-": "sub", "*": "mul", "/": "div"}


def fold(e: syntax.Expr, shadowed: Collection[str] = (),
         known: Mapping[int, Value | None] | None = None) -> syntax.Number | None:
    """The one bare number `e` computes (spanning all of e), or None when e is not made
    of bare numbers and foldable ops only.  `shadowed`: user function names (their free
    calls are not ops).  A domain error or an overflow gives a non-finite value, which
    the caller reports unless the expression wrote `inf` or `nan` itself (writes_nonfinite).
    `known`: the values of sub-expressions folded already, by id (None: not foldable), where
    the walk stops (the checker folds a long flat chain a segment at a time)."""
    value = _value(e, shadowed, known or {})
    return None if value is None else syntax.Number(value, e.span)


def _value(e: syntax.Expr, shadowed: Collection[str], known: Mapping[int, Value | None]) -> Value | None:
    """The value of e; a flat chain (`1 + 2 + ... + 9`, `0.9.exp().log()`) is walked with
    a loop, innermost link first, so only nesting recurses."""
    links: list[syntax.BinOp | syntax.MethodCall] = []
    while isinstance(e, (syntax.BinOp, syntax.MethodCall)) and id(e) not in known:
        links.append(e)
        e = e.lhs if isinstance(e, syntax.BinOp) else e.receiver
    value = known[id(e)] if id(e) in known else _node_value(e, shadowed, known)
    for link in reversed(links):
        if value is None:
            return None
        if isinstance(link, syntax.BinOp):
            value = _apply(_INFIX[link.op], [value, link.rhs], shadowed, known) if link.op in _INFIX else None
        else:
            value = _apply(link.method, [value, *link.args], shadowed, known) if not link.attrs else None
    return value


def _node_value(e: syntax.Expr, shadowed: Collection[str], known: Mapping[int, Value | None]) -> Value | None:
    """The value of a node that continues no chain (or was folded already)."""
    if id(e) in known:
        return known[id(e)]
    if isinstance(e, syntax.Number):
        return e.value
    if isinstance(e, syntax.Neg):
        return _apply("neg", [e.operand], shadowed, known)
    if isinstance(e, syntax.Call) and not e.attrs and e.func not in shadowed:
        return _apply(e.func, list(e.args), shadowed, known)
    return None


def _apply(op: str, operands: list[syntax.Expr | Value], shadowed: Collection[str],
           known: Mapping[int, Value | None]) -> Value | None:
    """op applied to operands (expressions, or values computed already)."""
    if not ((op in _UNARY and len(operands) == 1) or (op in _BINARY and len(operands) == 2)):
        return None
    values = []
    for x in operands:
        v = x if isinstance(x, (int, float)) else _value(x, shadowed, known)
        if v is None:
            return None
        values.append(v)
    if all(isinstance(v, int) for v in values) and op in (_INT_UNARY | _INT_BINARY):
        exact = _UNARY[op](values[0]) if len(values) == 1 else _BINARY[op](values[0], values[1])
        exact = int(exact)
        return exact if -_I64 <= exact < _I64 else _float(exact)
    floats = [_float(v) for v in values]
    try:
        return _UNARY[op](floats[0]) if len(floats) == 1 else _BINARY[op](floats[0], floats[1])
    except ZeroDivisionError:
        return _divide_by_zero(floats[0])
    except OverflowError:
        return math.inf
    except ValueError:     # a math domain error (log of a negative number, sqrt of one)
        return math.nan


def _float(v: Value) -> float:
    try:
        return float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


def _divide_by_zero(a: float) -> float:
    """IEEE division by zero, as the tensors would compute it."""
    if a != a or a == 0:
        return math.nan
    return math.inf if a > 0 else -math.inf


def writes_nonfinite(e: syntax.Expr) -> bool:
    """Whether the constant expression mentions `inf` or `nan` itself: its non-finite
    value is then what was written, not an overflow or a domain error.  (A loop: a flat
    chain of numbers may be long.)"""
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, syntax.Number):
            if isinstance(x.value, float) and not math.isfinite(x.value):
                return True
        elif isinstance(x, syntax.Neg):
            stack.append(x.operand)
        elif isinstance(x, syntax.BinOp):
            stack += [x.lhs, x.rhs]
        elif isinstance(x, syntax.MethodCall):
            stack += [x.receiver, *x.args]
        elif isinstance(x, syntax.Call):
            stack += list(x.args)
    return False
