"""The VJP table: one row per op of ops.OPS, used by autodiff.transform_ad.

A rule receives the forward node (an OpApp whose operands are Vars), the Var
`y` bound to its result, the result cotangent `g` (a Var of y's type) and
`needs[i]` (does operand i want a cotangent?).  It emits backward lets through
a `Builder` and returns one cotangent Var (or None) per operand.  Every
emitted node is a single op on Vars, typed by ops.OPS[op].infer, so the
backward graph is as checkable and lowerable as a hand-written one.

Rows without a rule say why (`unsupported`); rows whose rule only covers some
instances of the op carry a `reject(node) -> message | None` check (e.g.
reduce_keep(op=mean), rank-changing broadcast).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from compiler.core.diagnostics import Span
from compiler.core.sizes import Dim, Undecidable
from compiler.core.types import TensorType
from compiler.ir.nodes import (
    NO_SPAN,
    Binding,
    Expr,
    Function,
    Literal,
    OpApp,
    Param,
    Var,
    as_tensor,
    scatter_add,
    scatter_along_axis,
)
from compiler.ir.ops import OPS


def user_name(name: str) -> str:
    """The name a user wrote, for messages: the AD pass's generated names are
    `<prefix>.<n>.<name>` (Builder.fresh here, and the inliner's fresh names of a helper's
    lets and parameters), so `layer_norm.1.mu` is the helper's `mu`."""
    return name.rsplit(".", 1)[-1]


class Builder:
    """Emits single-op lets with fresh, printable names (`<prefix>.<n>.<hint>`).

    The dot makes generated names impossible to spell in Kina source, so they
    never capture a user's name.  Tests use the same builder (with explicit
    names) to write forward graphs by hand."""

    def __init__(self, prefix: str = "ct") -> None:
        self.prefix = prefix
        self.lets: list[tuple[str, Expr]] = []
        self._count = 0
        # The source span given to emitted nodes: autodiff sets it to the forward
        # node being differentiated, so the backward graph's MLIR `loc`s (and any
        # toolchain error) point at the Kina op the cotangent comes from.
        self.span: Span = NO_SPAN

    def fresh(self, hint: str) -> str:
        self._count += 1
        return f"{self.prefix}.{self._count}.{hint}"

    def bind(self, value: Expr, name: str | None = None, hint: str = "t") -> Var:
        name = name or self.fresh(hint)
        if value.span == NO_SPAN:   # e.g. a ScatterAdd built by ir.scatter_add
            value = dataclasses.replace(value, span=self.span)
        self.lets.append((name, value))
        return Var(name, value.type, value.span)

    def emit(self, op_name: str, args: list[Var], name: str | None = None,
             span: Span = NO_SPAN, **attrs: Any) -> Var:
        """Bind `op_name(args, attrs)`; the result type comes from the op's shape rule.
        `attrs` are the op's attribute values (types.Attrs: what each holds is the op's row)."""
        ty = OPS[op_name].infer([a.tensor_type for a in args], attrs)
        return self.bind(OpApp(op_name, list(args), attrs, ty, span if span != NO_SPAN else self.span),
                         name, op_name)

    def literal(self, ty: TensorType, values: tuple[float, ...] = (), name: str | None = None) -> Var:
        """A constant: () zeros, (x,) splat."""
        return self.bind(Literal(tuple(values), ty, self.span), name, "zeros" if not values else "const")

    def expr(self, value: Expr, name: str | None = None, hint: str = "t") -> Var:
        return self.bind(value, name, hint)

    def function(self, name: str, params: list[Var], result: Expr) -> Function:
        """Wrap the emitted lets into a function (how tests write forward graphs by hand)."""
        return Function(name, [Param(p.name, p.tensor_type) for p in params], result.type,
                        [Binding([n], v, span=v.span) for n, v in self.lets], result)


Rule = Callable[[Builder, OpApp, Var, Var, list[bool]], list[Var | None]]


@dataclass(frozen=True)
class VJP:
    rule: Rule | None
    unsupported: str = ""                                  # why there is no rule
    reject: Callable[[OpApp], str | None] | None = None    # instances the rule does not cover


# ---- small builders ----------------------------------------------------------
def _args(node: OpApp) -> list[Var]:
    """The operands of a forward op: Vars, since the AD pass differentiates single ops on Vars."""
    args = [a for a in node.args if isinstance(a, Var)]
    if len(args) != len(node.args):
        raise TypeError(f"{node.op}: the AD pass differentiates ops on Vars only")
    return args


def _const(b: Builder, like: TensorType, value: float) -> Var:
    return b.literal(like, (value,))


def _transpose_last_two(b: Builder, x: Var) -> Var:
    """The transpose a batched matmul's VJP needs: identity on the batch prefix, swap the last two axes."""
    r = x.tensor_type.rank
    return b.emit("transpose", [x], perm=tuple(range(r - 2)) + (r - 1, r - 2))


def _sum_to(b: Builder, g: Var, shape: tuple[int, ...]) -> Var:
    """keepdims-sum g over every axis where `shape` has a 1 that g expanded."""
    for axis, (src, dst) in enumerate(zip(shape, g.tensor_type.shape)):
        if src == 1 and dst != 1:
            g = b.emit("reduce_keep", [g], op="sum", axis=axis)
    return g


def _only(needs: list[bool], i: int, make: Callable[[], Var]) -> Var | None:
    return make() if needs[i] else None


# ---- rules: elementwise --------------------------------------------------------
def _add(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    return [g if needs[0] else None, g if needs[1] else None]


def _sub(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    return [g if needs[0] else None, _only(needs, 1, lambda: b.emit("neg", [g]))]


def _mul(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    x0, x1 = _args(node)
    return [_only(needs, 0, lambda: b.emit("mul", [g, x1])),
            _only(needs, 1, lambda: b.emit("mul", [g, x0]))]


def _div(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    # y = a / b:  g_a = g / b,  g_b = -g * y / b
    _, den = _args(node)
    return [_only(needs, 0, lambda: b.emit("div", [g, den])),
            _only(needs, 1, lambda: b.emit("neg", [b.emit("div", [b.emit("mul", [g, y]), den])]))]


def _unary(make: Callable[[Builder, Var, Var, Var], Var]) -> Rule:
    """A rule for a unary elementwise op from g_x = make(b, x, y, g)."""
    return lambda b, node, y, g, needs: [_only(needs, 0, lambda: make(b, _args(node)[0], y, g))]


_neg = _unary(lambda b, x, y, g: b.emit("neg", [g]))
_exp = _unary(lambda b, x, y, g: b.emit("mul", [g, y]))                       # d e^x = e^x
_log = _unary(lambda b, x, y, g: b.emit("div", [g, x]))                       # d log x = 1/x
_tanh = _unary(lambda b, x, y, g: b.emit("mul", [g, b.emit(                   # 1 - y^2
    "sub", [_const(b, y.tensor_type, 1.0), b.emit("mul", [y, y])])]))
_sqrt = _unary(lambda b, x, y, g: b.emit("div", [                             # 1 / (2 sqrt x)
    b.emit("mul", [g, _const(b, y.tensor_type, 0.5)]), y]))
_rsqrt = _unary(lambda b, x, y, g: b.emit("mul", [                            # -1/2 x^-3/2 = -y^3/2
    b.emit("mul", [g, _const(b, y.tensor_type, -0.5)]), b.emit("mul", [y, b.emit("mul", [y, y])])]))
_sigmoid = _unary(lambda b, x, y, g: b.emit("mul", [                          # y (1 - y)
    b.emit("mul", [g, y]), b.emit("sub", [_const(b, y.tensor_type, 1.0), y])]))
_relu = _unary(lambda b, x, y, g: b.emit("relu_grad", [g, x]))                # g where x > 0


# ---- rules: contractions and layout ---------------------------------------------
def _matmul(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    a, c = _args(node)                       # y = a @ c: g_a = g @ c^T, g_c = a^T @ g (batch prefix kept)
    return [_only(needs, 0, lambda: b.emit("matmul", [g, _transpose_last_two(b, c)])),
            _only(needs, 1, lambda: b.emit("matmul", [_transpose_last_two(b, a), g]))]


def _transpose(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    perm = node.attrs["perm"]
    inverse = tuple(sorted(range(len(perm)), key=lambda i: perm[i]))
    return [_only(needs, 0, lambda: b.emit("transpose", [g], perm=inverse))]


def _reshape(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    return [_only(needs, 0, lambda: b.emit("reshape", [g], shape=_args(node)[0].tensor_type.shape))]


def _broadcast(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    return [_only(needs, 0, lambda: _sum_to(b, g, _args(node)[0].tensor_type.shape))]


def _reject_broadcast(node: OpApp) -> str | None:
    arg = node.args[0]
    x, shape = as_tensor(arg.type), tuple(node.attrs["shape"])
    if len(shape) == x.rank:
        return None
    unit = [1] * (len(shape) - x.rank) + list(x.shape)
    name = user_name(arg.name) if isinstance(arg, Var) else "x"
    return (f"broadcast of {x} to rank-{len(shape)} shape {list(shape)} changes the rank, and reverseMode "
            f"only differentiates same-rank broadcast (expanding axes of size 1); add the axes with a "
            f"reshape first: `let t = {name}.reshape({unit}) in t.broadcast({list(shape)})`")


def _may_be_positive(d: Dim) -> bool:
    """d > 0 for some sizes (a dynamic function's part of `N - 1` elements may be empty:
    concatenating an empty part is harmless, dropping a non-empty one is not)."""
    try:
        return bool(d > 0)
    except Undecidable:
        return True


def _slice(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    # g_x = zeros with g inserted: concat(zeros before, g, zeros after) along the axis.
    def make() -> Var:
        x = _args(node)[0].tensor_type
        axis, start, stop = node.attrs["axis"], node.attrs["start"], node.attrs["stop"]
        parts = []
        for lo, hi in ((0, start), (start, stop), (stop, x.shape[axis])):
            if lo == start and hi == stop:
                parts.append(g)
            elif _may_be_positive(hi - lo):
                parts.append(b.literal(x.with_shape(x.shape[:axis] + (hi - lo,) + x.shape[axis + 1:])))
        return parts[0] if len(parts) == 1 else b.emit("concat", parts, axis=axis)
    return [_only(needs, 0, make)]


def _concat(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    axis, out, offset = node.attrs["axis"], [], 0
    for i, arg in enumerate(_args(node)):
        n = arg.tensor_type.shape[axis]
        out.append(b.emit("slice", [g], axis=axis, start=offset, stop=offset + n) if needs[i] else None)
        offset += n
    return out


def _reduce_keep(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    # y = reduce_keep(op=sum, axis=i) x  =>  g_x = broadcast(shape(x), g).
    return [_only(needs, 0, lambda: b.emit("broadcast", [g], shape=_args(node)[0].tensor_type.shape))]


def _extremum_share(b: Builder, x: Var, y: Var, g: Var, axis: int) -> Var:
    """The cotangent of x in y = max or min of x along axis (keepdims): g goes to the
    elements equal to y, split evenly among ties (torch.amax / amin's rule)."""
    shape = x.tensor_type.shape
    hit = b.emit("cast", [b.emit("eq", [x, b.emit("broadcast", [y], shape=shape)])], dtype=x.tensor_type.dtype.value)
    share = b.emit("div", [g, b.emit("reduce_keep", [hit], op="sum", axis=axis)])
    return b.emit("mul", [hit, b.emit("broadcast", [share], shape=shape)])


def _reduce_keep_rule(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    if node.attrs["op"] in ("max", "min"):
        return [_only(needs, 0, lambda: _extremum_share(b, _args(node)[0], y, g, node.attrs["axis"]))]
    return _reduce_keep(b, node, y, g, needs)


# reduce_keep's op: None where _reduce_keep_rule is its VJP, else why reverseMode rejects it.
_REDUCE_KEEP_REJECT: dict[str, str | None] = {
    "sum": None,
    "mean": ("reduce_keep(op=mean) cannot be differentiated under reverseMode (there is no reduce_mean "
             "VJP); use reduce_keep(op=sum) and multiply by a host 1/n tensor parameter"),
    "max": None,
    "min": None,
}


def _reject_reduce_keep(node: OpApp) -> str | None:
    return _REDUCE_KEEP_REJECT[node.attrs["op"]]


# ---- rules: normalisations and indexing ------------------------------------------
def _softmax(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    # g_x = y * (g - sum(g * y, axis) broadcast)
    def make() -> Var:
        axis = node.attrs["axis"]
        dot = b.emit("reduce_keep", [b.emit("mul", [g, y])], op="sum", axis=axis)
        return b.emit("mul", [y, b.emit("sub", [g, b.emit("broadcast", [dot], shape=y.tensor_type.shape)])])
    return [_only(needs, 0, make)]


def _log_softmax(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    # g_x = g - exp(y) * sum(g, axis) broadcast
    def make() -> Var:
        axis = node.attrs["axis"]
        total = b.emit("broadcast", [b.emit("reduce_keep", [g], op="sum", axis=axis)], shape=y.tensor_type.shape)
        return b.emit("sub", [g, b.emit("mul", [b.emit("exp", [y]), total])])
    return [_only(needs, 0, make)]


def _take_along_axis(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    x, idx = _args(node)
    return [_only(needs, 0, lambda: b.expr(scatter_along_axis(g, idx, node.attrs["axis"], x.tensor_type), hint="scatter")),
            None]


def _gather(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    # g_values[v, d] = sum over indices[i] = v of g[i ++ [d]]  (ScatterAdd, duplicates add).
    # ScatterAdd's rule wants indices of rank >= 1: a rank-0 index (one row) is scattered as
    # indices [1] and updates [1, D].
    values, idx = _args(node)

    def make() -> Var:
        i, upd = idx, g
        if idx.tensor_type.rank == 0:
            i = b.emit("reshape", [idx], shape=(1,))
            upd = b.emit("reshape", [g], shape=(1,) + g.tensor_type.shape)
        return b.expr(scatter_add(upd, i, values.tensor_type), hint="scatter_add")
    return [_only(needs, 0, make), None]


# ---- rules: elementwise math, casts, masks -----------------------------------------
def _maximum(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    x0, x1 = _args(node)                      # PyTorch's rule: a tie gives each side g / 2
    return [_only(needs, 0, lambda: b.emit("maximum_grad", [g, x0, x1])),
            _only(needs, 1, lambda: b.emit("maximum_grad", [g, x1, x0]))]


def _minimum(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    x0, x1 = _args(node)                      # min(a, b) picks a where b > a
    return [_only(needs, 0, lambda: b.emit("maximum_grad", [g, x1, x0])),
            _only(needs, 1, lambda: b.emit("maximum_grad", [g, x0, x1]))]


_abs = _unary(lambda b, x, y, g: b.emit("mul", [g, b.emit("sign", [x])]))       # sign(0) = 0
_sign = _unary(lambda b, x, y, g: b.literal(x.tensor_type))                           # piecewise constant
_square = _unary(lambda b, x, y, g: b.emit("mul", [b.emit("mul", [g, x]), _const(b, x.tensor_type, 2.0)]))
_erf = _unary(lambda b, x, y, g: b.emit("mul", [g, b.emit("mul", [             # 2/sqrt(pi) e^(-x^2)
    b.emit("exp", [b.emit("neg", [b.emit("mul", [x, x])])]), _const(b, x.tensor_type, 2 / math.sqrt(math.pi))])]))


def _pow(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    p = node.attrs["p"]

    def make() -> Var:
        x = _args(node)[0]
        if p == 0:
            return b.literal(x.tensor_type)                    # x^0 = 1: no dependence on x (PyTorch: 0)
        if p == 1:
            return g
        lower = b.emit("pow", [x], p=p - 1)             # p x^(p-1)
        return b.emit("mul", [g, b.emit("mul", [lower, _const(b, x.tensor_type, p)])])
    return [_only(needs, 0, make)]


def _pow_tensor(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    # y = x^e: g_x = g e x^(e-1); g_e = g y log(x), 0 where x = 0 (PyTorch's rule: no NaN from 0 log 0)
    x, e = _args(node)

    def base() -> Var:
        lower = b.emit("pow_tensor", [x, b.emit("sub", [e, _const(b, e.tensor_type, 1.0)])])
        return b.emit("mul", [g, b.emit("mul", [e, lower])])

    def exponent() -> Var:
        zero = b.literal(x.tensor_type)
        term = b.emit("mul", [b.emit("mul", [g, y]), b.emit("log", [x])])
        return b.emit("where", [b.emit("eq", [x, zero]), zero, term])
    return [_only(needs, 0, base), _only(needs, 1, exponent)]


def _reverse_cumsum(b: Builder, g: Var, axis: int) -> Var:
    """sum of g[k] over k >= j along axis, as total - cumsum(g) + g (no reverse scan op)."""
    total = b.emit("broadcast", [b.emit("reduce_keep", [g], op="sum", axis=axis)], shape=g.tensor_type.shape)
    return b.emit("add", [b.emit("sub", [total, b.emit("cumsum", [g], axis=axis)]), g])


def _cumsum(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    return [_only(needs, 0, lambda: _reverse_cumsum(b, g, node.attrs["axis"]))]


def _cumprod(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    # g_x[j] = sum over k >= j of g[k] y[k] / x[j]: not finite where x[j] = 0 (documented)
    return [_only(needs, 0, lambda: b.emit("div", [
        _reverse_cumsum(b, b.emit("mul", [g, y]), node.attrs["axis"]), _args(node)[0]]))]


def _logsumexp(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    # g_x = g exp(x - y), both broadcast along the axis (softmax(x) * g)
    def make() -> Var:
        x = _args(node)[0]
        shape = x.tensor_type.shape
        p = b.emit("exp", [b.emit("sub", [x, b.emit("broadcast", [y], shape=shape)])])
        return b.emit("mul", [p, b.emit("broadcast", [g], shape=shape)])
    return [_only(needs, 0, make)]


def _sort(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    # y = x taken at argsort(x): g_x = g scattered back to where each value came from
    def make() -> Var:
        x = _args(node)[0]
        idx = b.emit("argsort", [x], axis=node.attrs["axis"], descending=_SORT_DESCENDING[node.attrs["descending"]])
        return b.expr(scatter_along_axis(g, idx, node.attrs["axis"], x.tensor_type), hint="scatter")
    return [_only(needs, 0, make)]


# sort's `descending` -> the argsort its VJP scatters through
_SORT_DESCENDING = {"false": "false", "true": "true"}


def _topk(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    def make() -> Var:
        x = _args(node)[0]
        idx = b.emit("argtopk", [x], k=node.attrs["k"], axis=node.attrs["axis"])
        return b.expr(scatter_along_axis(g, idx, node.attrs["axis"], x.tensor_type), hint="scatter")
    return [_only(needs, 0, make)]


def _clamp(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    bounds = {"min": node.attrs["min"], "max": node.attrs["max"]}
    return [_only(needs, 0, lambda: b.emit("clamp_grad", [g, _args(node)[0]], **bounds))]


def _gelu(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    return [_only(needs, 0, lambda: b.emit("gelu_grad", [g, _args(node)[0]],
                                           approximate=_GELU_GRAD_APPROXIMATE[node.attrs["approximate"]]))]


# gelu's `approximate` -> the gelu_grad that differentiates it
_GELU_GRAD_APPROXIMATE = {"none": "none", "tanh": "tanh"}


def _cast(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    # float -> float: cast the cotangent back; from I64 / Bool the operand is discrete
    x = _args(node)[0]
    return [b.emit("cast", [g], dtype=x.tensor_type.dtype.value) if needs[0] and x.tensor_type.is_float else None]


def _where(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    # the condition is discrete; each value gets g where it was chosen, zeros elsewhere
    cond, a, _ = _args(node)

    def zeros() -> Var:
        return b.literal(a.tensor_type)
    return [None, _only(needs, 1, lambda: b.emit("where", [cond, g, zeros()])),
            _only(needs, 2, lambda: b.emit("where", [cond, zeros(), g]))]


def _tril(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    return [_only(needs, 0, lambda: b.emit("tril", [g], k=node.attrs["k"]))]


_BACKWARD_ONLY = "is IR-internal: the AD pass inserts it only in backward graphs, and it has no VJP"
_DISCRETE = ("has a discrete ({dtype}) result, so it never receives a cotangent: its let is skipped by "
             "reverseMode (cast the result to a float dtype to compute with it)")

# The rows of each enum attribute's choices that a VJP reads (tests/test_tables.py).
ATTR_CHOICES: dict[tuple[str, str], Mapping[str, object]] = {
    ("reduce_keep", "op"): _REDUCE_KEEP_REJECT,
    ("gelu", "approximate"): _GELU_GRAD_APPROXIMATE,
    ("sort", "descending"): _SORT_DESCENDING,
}

VJPS: dict[str, VJP] = {
    "add": VJP(_add),
    "sub": VJP(_sub),
    "mul": VJP(_mul),
    "div": VJP(_div),
    "neg": VJP(_neg),
    "exp": VJP(_exp),
    "log": VJP(_log),
    "tanh": VJP(_tanh),
    "sqrt": VJP(_sqrt),
    "rsqrt": VJP(_rsqrt),
    "sigmoid": VJP(_sigmoid),
    "relu": VJP(_relu),
    "matmul": VJP(_matmul),
    "transpose": VJP(_transpose),
    "reshape": VJP(_reshape),
    "broadcast": VJP(_broadcast, reject=_reject_broadcast),
    "slice": VJP(_slice),
    "concat": VJP(_concat),
    "gather": VJP(_gather),
    "reduce_keep": VJP(_reduce_keep_rule, reject=_reject_reduce_keep),
    "softmax": VJP(_softmax),
    "log_softmax": VJP(_log_softmax),
    "take_along_axis": VJP(_take_along_axis),
    "scatter_add": VJP(None, f"scatter_add {_BACKWARD_ONLY}"),
    "scatter_along_axis": VJP(None, f"scatter_along_axis {_BACKWARD_ONLY}"),
    "relu_grad": VJP(None, f"relu_grad {_BACKWARD_ONLY}"),
    "maximum": VJP(_maximum),
    "minimum": VJP(_minimum),
    "abs": VJP(_abs),
    "sign": VJP(_sign),
    "square": VJP(_square),
    "erf": VJP(_erf),
    "pow": VJP(_pow),
    "pow_tensor": VJP(_pow_tensor),
    "cumsum": VJP(_cumsum),
    "cumprod": VJP(_cumprod),
    "logsumexp": VJP(_logsumexp),
    "sort": VJP(_sort),
    "argsort": VJP(None, "argsort " + _DISCRETE.format(dtype="I64")),
    "topk": VJP(_topk),
    "argtopk": VJP(None, "argtopk " + _DISCRETE.format(dtype="I64")),
    **{op: VJP(None, f"{op} " + _DISCRETE.format(dtype=dtype)) for op, dtype in (
        ("random_split", "I64"), ("random_fold_in", "I64"), ("random_bits", "I64"), ("bernoulli", "Bool"),
        ("categorical", "I64"))},
    # draws are functions of the key alone (discrete): nothing flows back to any operand
    "random_uniform": VJP(lambda b, node, y, g, needs: [None]),
    "random_normal": VJP(lambda b, node, y, g, needs: [None]),
    "clamp": VJP(_clamp),
    "gelu": VJP(_gelu),
    "cast": VJP(_cast),
    "tril": VJP(_tril),
    "iota": VJP(None, "iota " + _DISCRETE.format(dtype="I64")),
    "argmax": VJP(None, "argmax " + _DISCRETE.format(dtype="I64")),
    **{op: VJP(None, f"{op} " + _DISCRETE.format(dtype="Bool")) for op in ("lt", "le", "gt", "ge", "eq", "ne")},
    "where": VJP(_where),
    "maximum_grad": VJP(None, f"maximum_grad {_BACKWARD_ONLY}"),
    "clamp_grad": VJP(None, f"clamp_grad {_BACKWARD_ONLY}"),
    "gelu_grad": VJP(None, f"gelu_grad {_BACKWARD_ONLY}"),
}
