"""VJP rules of the elementwise ops: arithmetic, unary math (a rule from g_x = make(b, x, y, g)),
maximum / minimum, pow, clamp, gelu, cast, where and tril (rows in compiler/ad/vjp.py)."""
from __future__ import annotations

import math
from collections.abc import Callable

from compiler.ad.builder import Builder, Rule, args_of, const, only
from compiler.ir.nodes import (
    OpApp,
    Var,
)


# ---- rules: elementwise --------------------------------------------------------
def _add(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    return [g if needs[0] else None, g if needs[1] else None]


def _sub(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    return [g if needs[0] else None, only(needs, 1, lambda: b.emit("neg", [g]))]


def _mul(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    x0, x1 = args_of(node)
    return [only(needs, 0, lambda: b.emit("mul", [g, x1])),
            only(needs, 1, lambda: b.emit("mul", [g, x0]))]


def _div(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    # y = a / b:  g_a = g / b,  g_b = -g * y / b
    _, den = args_of(node)
    return [only(needs, 0, lambda: b.emit("div", [g, den])),
            only(needs, 1, lambda: b.emit("neg", [b.emit("div", [b.emit("mul", [g, y]), den])]))]


def unary(make: Callable[[Builder, Var, Var, Var], Var]) -> Rule:
    """A rule for a unary elementwise op from g_x = make(b, x, y, g)."""
    return lambda b, node, y, g, needs: [only(needs, 0, lambda: make(b, args_of(node)[0], y, g))]


_neg = unary(lambda b, x, y, g: b.emit("neg", [g]))
_exp = unary(lambda b, x, y, g: b.emit("mul", [g, y]))                       # d e^x = e^x
_log = unary(lambda b, x, y, g: b.emit("div", [g, x]))                       # d log x = 1/x
_tanh = unary(lambda b, x, y, g: b.emit("mul", [g, b.emit(                   # 1 - y^2
    "sub", [const(b, y.tensor_type, 1.0), b.emit("mul", [y, y])])]))
_sqrt = unary(lambda b, x, y, g: b.emit("div", [                             # 1 / (2 sqrt x)
    b.emit("mul", [g, const(b, y.tensor_type, 0.5)]), y]))
_rsqrt = unary(lambda b, x, y, g: b.emit("mul", [                            # -1/2 x^-3/2 = -y^3/2
    b.emit("mul", [g, const(b, y.tensor_type, -0.5)]), b.emit("mul", [y, b.emit("mul", [y, y])])]))
_sigmoid = unary(lambda b, x, y, g: b.emit("mul", [                          # y (1 - y)
    b.emit("mul", [g, y]), b.emit("sub", [const(b, y.tensor_type, 1.0), y])]))
_relu = unary(lambda b, x, y, g: b.emit("relu_grad", [g, x]))                # g where x > 0



# ---- rules: elementwise math, casts, masks -----------------------------------------
def _maximum(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    x0, x1 = args_of(node)                      # PyTorch's rule: a tie gives each side g / 2
    return [only(needs, 0, lambda: b.emit("maximum_grad", [g, x0, x1])),
            only(needs, 1, lambda: b.emit("maximum_grad", [g, x1, x0]))]


def _minimum(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    x0, x1 = args_of(node)                      # min(a, b) picks a where b > a
    return [only(needs, 0, lambda: b.emit("maximum_grad", [g, x1, x0])),
            only(needs, 1, lambda: b.emit("maximum_grad", [g, x0, x1]))]


_abs = unary(lambda b, x, y, g: b.emit("mul", [g, b.emit("sign", [x])]))       # sign(0) = 0
_sign = unary(lambda b, x, y, g: b.literal(x.tensor_type))                           # piecewise constant
_square = unary(lambda b, x, y, g: b.emit("mul", [b.emit("mul", [g, x]), const(b, x.tensor_type, 2.0)]))
_erf = unary(lambda b, x, y, g: b.emit("mul", [g, b.emit("mul", [             # 2/sqrt(pi) e^(-x^2)
    b.emit("exp", [b.emit("neg", [b.emit("mul", [x, x])])]), const(b, x.tensor_type, 2 / math.sqrt(math.pi))])]))


def _pow(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    p = node.attrs["p"]

    def make() -> Var:
        x = args_of(node)[0]
        if p == 0:
            return b.literal(x.tensor_type)                    # x^0 = 1: no dependence on x (PyTorch: 0)
        if p == 1:
            return g
        lower = b.emit("pow", [x], p=p - 1)             # p x^(p-1)
        return b.emit("mul", [g, b.emit("mul", [lower, const(b, x.tensor_type, p)])])
    return [only(needs, 0, make)]


def _pow_tensor(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    # y = x^e: g_x = g e x^(e-1); g_e = g y log(x), 0 where x = 0 (PyTorch's rule: no NaN from 0 log 0)
    x, e = args_of(node)

    def base() -> Var:
        lower = b.emit("pow_tensor", [x, b.emit("sub", [e, const(b, e.tensor_type, 1.0)])])
        return b.emit("mul", [g, b.emit("mul", [e, lower])])

    def exponent() -> Var:
        zero = b.literal(x.tensor_type)
        term = b.emit("mul", [b.emit("mul", [g, y]), b.emit("log", [x])])
        return b.emit("where", [b.emit("eq", [x, zero]), zero, term])
    return [only(needs, 0, base), only(needs, 1, exponent)]



def _clamp(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    bounds = {"min": node.attrs["min"], "max": node.attrs["max"]}
    return [only(needs, 0, lambda: b.emit("clamp_grad", [g, args_of(node)[0]], **bounds))]


def _gelu(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    return [only(needs, 0, lambda: b.emit("gelu_grad", [g, args_of(node)[0]],
                                           approximate=_GELU_GRAD_APPROXIMATE[node.attrs["approximate"]]))]


# gelu's `approximate` -> the gelu_grad that differentiates it
_GELU_GRAD_APPROXIMATE = {"none": "none", "tanh": "tanh"}


def _cast(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    # float -> float: cast the cotangent back; from I64 / Bool the operand is discrete
    x = args_of(node)[0]
    return [b.emit("cast", [g], dtype=x.tensor_type.dtype.value) if needs[0] and x.tensor_type.is_float else None]


def _where(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    # the condition is discrete; each value gets g where it was chosen, zeros elsewhere
    cond, a, _ = args_of(node)

    def zeros() -> Var:
        return b.literal(a.tensor_type)
    return [None, only(needs, 1, lambda: b.emit("where", [cond, g, zeros()])),
            only(needs, 2, lambda: b.emit("where", [cond, zeros(), g]))]


def _tril(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    return [only(needs, 0, lambda: b.emit("tril", [g], k=node.attrs["k"]))]
