"""Size-generic helpers in generated programs (issue 24): `fn f_s1[A, B](x: Tensor[F32, [A, B + 1]], ..)`.

A fraction of the cases (GenConfig.generic_fraction) gets one or two generic functions,
built here with their sizes as symbolic Dims (core.sizes.Size), each op typed by its own
rule of ops.OPS exactly as the checker types the body once for every size, so a body is
well-typed for every instantiation by construction:

- sizes in types, in size attributes (`reshape([A*B])`, `broadcast([A, B])`,
  `slice(start=1, stop=B + 1)`, `iota(shape=[A, B], axis=1)`, splat literals
  `Tensor[F32, [A, B]] { 0.5 }`) and as bare numbers (`x * (1.0 / (A*B))`);
- a second function (a third of the cases) calls the first at sizes that are expressions of its own (`s0[B, A*B](..)`
  or inferred: `s0(x, w)`), so instances request instances;
- the entry function f calls the last one at two different sizes: first on f's own result
  (its sizes inferred from that value's shape), then on new parameters; both results are
  results of f, or under reverseMode the second is folded into the first (a sum broadcast
  back), so the AD pass inlines both instances;
- 40% of them get `fn f_gh(..)`: `handle f_s1(..) with reverseMode` (sizes inferred, or
  written `f_s1[2, 3]`), validated against finite differences at that instance.

Bodies obey the reverseMode restrictions (single ops on variables, reduce_keep sum only,
broadcasts that keep the rank), since f_gh or a differentiated f may reach them.  Every
choice goes through the case's Choices, so the shrinker's replays regenerate valid programs.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, cast

from compiler.core.sizes import Dim, Size, Undecidable, nonnegative, subst, subst_shape
from compiler.core.types import DType, TensorType
from compiler.ir.ops import OPS
from compiler.ir.shape_rules import OpError
from compiler.oracle.progen.base import CALL, SCALE
from compiler.oracle.progen.case import AttrValue, GenericFn, Let, Value

if TYPE_CHECKING:
    from compiler.oracle.progen.generate import Choices

NAMES = ("A", "B", "C")
SIZE_VALUES = (1, 2, 3, 4, 5, 7, 8, 16, 17)   # sorted: choice 0 is the smallest
MAX_MAG = 4.0
MAX_STEPS = 3       # body steps (a step is 1-4 lets); a build's time grows with the lets
Env = dict[str, Dim]


def _shape(dims: Sequence[Dim]) -> tuple[int, ...]:
    """A shape of Dims as TensorType holds it (its annotation says int; the checker puts Sizes there too)."""
    return cast("tuple[int, ...]", tuple(dims))


def positive(d: Dim) -> bool:
    """d >= 1 for every size (no empty dimension)."""
    return nonnegative(d - 1)


# ---- one generic body ----------------------------------------------------------------------
class Body:
    """A generic function being built: its values have symbolic shapes."""

    def __init__(self, ch: Choices, dtype: DType, index: int, sizes: tuple[str, ...],
                 callees: list[GenericFn]) -> None:
        self.ch, self.dtype, self.callees = ch, dtype, callees
        self.fn = GenericFn(index, sizes)
        self.vars: list[Dim] = [Size.var(n) for n in sizes]
        self.pool: list[Value] = []
        self._count = 0

    def fresh(self, hint: str) -> str:
        self._count += 1
        return f"{hint}{self._count}"

    def param(self, t: TensorType) -> Value:
        v = Value(self.fresh("x"), t)
        self.fn.params.append(v)
        self.pool.append(v)
        return v

    def like(self, t: TensorType) -> Value:
        cands = [v for v in self.pool if v.type == t]
        if cands and self.ch.coin(0.5):
            return self.ch.pick(cands)
        return self.param(t)

    def operand(self, want: Callable[[TensorType], bool] = lambda t: True) -> Value | None:
        cands = [v for v in self.pool if want(v.type)]
        if not cands:
            return None
        return cands[-1] if not self.ch.coin(0.3) else self.ch.pick(cands)

    def let(self, op_name: str, args: list[Value], t: TensorType, mag: float, **attrs: AttrValue) -> Value:
        v = Value(self.fresh("v"), t, mag)
        self.fn.lets.append(Let(v.name, op_name, [a.name for a in args], dict(attrs), t))
        if t.is_float:
            self.pool.append(v)
        return v

    def emit(self, op_name: str, args: list[Value], mag: float = 1.0, **attrs: AttrValue) -> Value | None:
        """The op typed by its rule with symbolic shapes; None when the rule refuses it, or
        needs an order of sizes that does not hold for every size, or makes an empty dim."""
        try:
            t = OPS[op_name].infer([a.type for a in args], attrs)
            if not all(positive(d) for d in t.shape):
                return None
        except (OpError, Undecidable, TypeError, ValueError, ArithmeticError):
            return None
        return self.let(op_name, args, t, mag, **attrs)

    def scale(self, x: Value, by: Dim) -> Value:
        """x * (1.0 / by): a size used as a bare number."""
        return self.let(SCALE, [x], x.type, x.mag / 2, by=by)

    def bounded(self, v: Value | None) -> Value | None:
        if v is not None and v.mag > MAX_MAG:
            return self.emit("tanh", [v], 1.0)
        return v

    def dim(self) -> Dim:
        """A dim of the function's sizes: mostly a size, sometimes size + 1 or an int."""
        k = self.ch.below(10)
        d = self.ch.pick(self.vars)
        return d if k < 7 else d + 1 if k < 9 else self.ch.pick((2, 3))


# ---- body steps (each adds a few lets; None when it does not apply) -------------------------
def _unary(b: Body) -> Value | None:
    x = b.operand()
    op = b.ch.pick(("tanh", "sigmoid", "neg", "relu", "gelu", "erf", "abs"))
    attrs: dict[str, AttrValue] = {"approximate": b.ch.pick(("none", "tanh"))} if op == "gelu" else {}
    return None if x is None else b.emit(op, [x], min(x.mag, 1.0) if op in ("tanh", "erf") else x.mag, **attrs)


def _binary(b: Body) -> Value | None:
    x = b.operand()
    if x is None:
        return None
    y = b.like(x.type)
    op = b.ch.pick(("add", "sub", "mul", "maximum", "minimum"))
    return b.bounded(b.emit(op, [x, y], x.mag * y.mag if op == "mul" else x.mag + y.mag))


def _scale(b: Body) -> Value | None:
    x = b.operand()
    if x is None:
        return None
    dims = [d for d in x.type.shape if isinstance(d, Size)] or b.vars
    by = b.ch.pick(dims)
    if b.ch.coin(0.3) and len(b.vars) > 1:
        by = by * b.ch.pick(b.vars)
    return b.scale(x, by)


def _centre(b: Body) -> Value | None:
    """x - broadcast(sum(x, axis) * (1.0 / n)): a layer norm's centring with a symbolic n."""
    x = b.operand(lambda t: t.rank >= 1)
    if x is None:
        return None
    axis = b.ch.below(x.type.rank)
    s = b.emit("reduce_keep", [x], x.mag, op="sum", axis=axis)
    if s is None:
        return None
    m = b.scale(s, x.type.shape[axis])
    mb = b.emit("broadcast", [m], x.mag, shape=x.type.shape)
    return None if mb is None else b.emit("sub", [x, mb], 2 * x.mag)


def _transpose(b: Body) -> Value | None:
    x = b.operand(lambda t: t.rank >= 2)
    if x is None:
        return None
    perm = list(range(x.type.rank))
    i = b.ch.below(len(perm) - 1)
    perm[i], perm[-1] = perm[-1], perm[i]
    return b.emit("transpose", [x], x.mag, perm=tuple(perm))


def _regroup(b: Body) -> Value | None:
    """reshape to another grouping of the same factors: [A, B + 1, C] -> [A*(B + 1), C] or a
    product split back into its sizes ([A*B] -> [A, B])."""
    x = b.operand(lambda t: t.rank >= 1)
    if x is None:
        return None
    atoms: list[Dim] = []
    for d in x.type.shape:
        if isinstance(d, Size) and len(d.terms) == 1 and d.terms[0][1] == 1:
            atoms += [Size.var(n) for n in d.terms[0][0]]
        else:
            atoms.append(d)
    shape: list[Dim] = []
    for a in atoms:
        if shape and b.ch.coin(0.5):
            shape[-1] = shape[-1] * a
        else:
            shape.append(a)
    if len(shape) > 5:
        return None
    return b.emit("reshape", [x], x.mag, shape=tuple(shape))


def _matmul(b: Body) -> Value | None:
    x = b.operand(lambda t: t.rank == 2)
    if x is None:
        return None
    k = x.type.shape[1]
    w = b.like(TensorType(b.dtype, _shape((k, b.dim()))))
    y = b.emit("matmul", [x, w], x.mag * w.mag * 2)
    return None if y is None else b.scale(y, k)


def _slice(b: Body) -> Value | None:
    """A part of an axis whose bounds are size expressions that hold for every size:
    `stop=B` of `B + 1`, `start=A, stop=2*A` of a concat's `2*A`."""
    x = b.operand(lambda t: t.rank >= 1)
    if x is None:
        return None
    axis = b.ch.below(x.type.rank)
    d = x.type.shape[axis]
    parts: list[Dim] = list(b.vars) + [v + 1 for v in b.vars] + [1]
    cands = [(start, stop) for start in [0, 1, *b.vars] for stop in [d, d - 1, *parts]
             if _fits(start, stop, d)]
    if not cands:
        return None
    start, stop = b.ch.pick(cands)
    return b.emit("slice", [x], x.mag, axis=axis, start=start, stop=stop)


def _fits(start: Dim, stop: Dim, d: Dim) -> bool:
    return nonnegative(start) and positive(stop - start) and nonnegative(d - stop)


def _concat(b: Body) -> Value | None:
    x = b.operand(lambda t: t.rank >= 1)
    if x is None:
        return None
    axis = b.ch.below(x.type.rank)
    if b.ch.coin(0.5):
        other = b.like(x.type)
    else:
        shape: list[Dim] = list(x.type.shape)
        shape[axis] = b.dim()
        other = b.like(TensorType(b.dtype, _shape(shape)))
    return b.emit("concat", [x, other], max(x.mag, other.mag), axis=axis)


def _softmax(b: Body) -> Value | None:
    x = b.operand(lambda t: t.rank >= 1)
    if x is None:
        return None
    op = b.ch.pick(("softmax", "log_softmax"))
    return b.bounded(b.emit(op, [x], 1.0 if op == "softmax" else x.mag + 4, axis=b.ch.below(x.type.rank)))


def _positions(b: Body) -> Value | None:
    """x + iota(shape of x, axis).cast(dtype) * (1.0 / n): a position encoding."""
    x = b.operand(lambda t: t.rank >= 1)
    if x is None:
        return None
    axis = b.ch.below(x.type.rank)
    pos = b.emit("iota", [], 1.0, shape=x.type.shape, axis=axis)
    f = None if pos is None else b.emit("cast", [pos], 1.0, dtype=b.dtype.value)
    if f is None:
        return None
    s = b.scale(f, x.type.shape[axis])
    return b.emit("add", [x, s], x.mag + 1)


def _tril(b: Body) -> Value | None:
    x = b.operand(lambda t: t.rank >= 2)
    return None if x is None else b.emit("tril", [x], x.mag, k=b.ch.pick((0, -1, 1)))


def _literal(b: Body) -> Value | None:
    """x * Tensor[D, [A, B]] { c }: a splat literal of a symbolic shape."""
    x = b.operand()
    if x is None:
        return None
    c = Value(b.fresh("c"), x.type)
    b.fn.lets.append(Let(c.name, None, [], {}, x.type, (b.ch.pick((0.5, -0.25, 2.0)),)))
    return b.bounded(b.emit(b.ch.pick(("mul", "add")), [x, c], 2 * x.mag + 0.5))


def _call(b: Body) -> Value | None:
    """A call of an earlier generic function at sizes that are expressions of this one's."""
    if not b.callees:
        return None
    callee = b.ch.pick(b.callees)
    first = callee.params[0].type
    matched = [(v, m) for v in b.pool if (m := _match(first, v.type, callee.sizes)) is not None]
    if matched and b.ch.coin(0.7):        # on a value of this function: the chain goes on
        v, sigma = matched[-1] if b.ch.coin(0.6) else b.ch.pick(matched)
        args = [v]
    else:
        sigma = {n: _size_arg(b) for n in callee.sizes}
        args = []
    args += [b.like(_subst_type(p.type, sigma)) for p in callee.params[len(args):]]
    t = _subst_type(callee.types()[callee.result], sigma)
    sizes = tuple(sigma[n] for n in callee.sizes)
    return b.bounded(b.let(CALL, args, t, 2.0, fn=callee.index, sizes=sizes, explicit=b.ch.coin(0.4)))


def _match(param: TensorType, t: TensorType, sizes: tuple[str, ...]) -> Env | None:
    """The callee's sizes that make its first parameter (dims `S`, `S + c` or ints) the type t."""
    if param.rank != t.rank or param.dtype != t.dtype:
        return None
    env: Env = {}
    for p, d in zip(param.shape, t.shape):
        if isinstance(p, Size):
            if len(p.names) != 1:
                return None
            (name,) = p.names
            value = d - (p - Size.var(name))
            if not positive(value) or env.setdefault(name, value) != value:
                return None
        elif p != d:
            return None
    return env if set(env) == set(sizes) else None


def _size_arg(b: Body) -> Dim:
    k = b.ch.below(10)
    v = b.ch.pick(b.vars)
    return v if k < 6 else v * b.ch.pick(b.vars) if k < 8 else v + 1 if k < 9 else 2


STEPS: dict[str, Callable[[Body], Value | None]] = {
    "unary": _unary, "binary": _binary, "scale": _scale, "centre": _centre, "transpose": _transpose,
    "regroup": _regroup, "matmul": _matmul, "slice": _slice, "concat": _concat, "softmax": _softmax,
    "positions": _positions, "tril": _tril, "literal": _literal, "call": _call,
}


def build_fn(ch: Choices, dtype: DType, index: int, sizes: tuple[str, ...], first: Sequence[Dim],
             callees: list[GenericFn]) -> GenericFn:
    """A generic function whose first parameter has the shape `first` (its dims name its sizes)."""
    b = Body(ch, dtype, index, sizes, callees)
    b.param(TensorType(dtype, _shape(first)))
    names = sorted(STEPS)
    calls = 0
    for _ in range(ch.between(1, MAX_STEPS)):
        step = "call" if callees and not calls and ch.coin(0.5) else ch.pick(names)
        calls += step == "call"
        STEPS[step](b)
    if not b.fn.lets:
        b.emit("tanh", [b.pool[-1]], 1.0)
    out = b.pool[-1]
    used = {a for l in b.fn.lets for a in l.args}
    x = b.fn.params[0]
    dead = [v for v in b.pool if v.name not in used and v is not out and v.name.startswith("v")][-1:]
    for v in dead + ([x] if x.name not in used and x is not out else []):
        out = _fold(b, out, v) or out     # dead ends (and an unused first parameter) flow into the result
    b.fn.result = out.name
    return b.fn


def _fold(b: Body, y: Value, v: Value) -> Value | None:
    """y + broadcast(sum of v over every axis), in symbolic shapes (reverseMode-safe)."""
    s: Value | None = v
    if v.type.rank > 1:
        s = b.emit("reshape", [v], v.mag, shape=(math.prod(v.type.shape),))
    if s is not None and s.type.rank == 1:
        s = b.emit("reduce_keep", [s], s.mag, op="sum", axis=0)
    if s is None or v.type.rank == 0 and y.type.rank == 0:
        return None if s is None else b.emit("add", [y, s], y.mag + s.mag)
    s = b.scale(s, math.prod(v.type.shape) if v.type.rank else 1)
    if s.type.rank != y.type.rank:
        s = b.emit("reshape", [s], s.mag, shape=(1,) * y.type.rank)
    if s is not None and s.type.shape != y.type.shape:
        s = b.emit("broadcast", [s], s.mag, shape=y.type.shape)
    return None if s is None else b.emit("add", [y, s], y.mag + s.mag)


# ---- shapes of instances ---------------------------------------------------------------------
def _subst_type(t: TensorType, env: Env) -> TensorType:
    return TensorType(t.dtype, _shape(subst_shape(t.shape, env)), t.placement)


def concrete(t: TensorType, env: Env) -> TensorType:
    return _subst_type(t, env)


def largest(fn: GenericFn, env: Env, fns: Sequence[GenericFn]) -> int:
    """The most elements of any value of fn's instance at env (its callees' instances too)."""
    most = 0
    for t in fn.types().values():
        most = max(most, math.prod(int(cast(int, d)) for d in subst_shape(t.shape, env)))
    for l in fn.lets:
        if l.op == CALL:
            callee = fns[cast(int, l.attrs["fn"])]
            sizes = cast("tuple[Dim, ...]", l.attrs["sizes"])
            most = max(most, largest(callee, {n: subst(d, env) for n, d in zip(callee.sizes, sizes)}, fns))
    return most


def first_shape(ch: Choices, rank: int) -> tuple[tuple[str, ...], list[Dim]]:
    """A free first parameter: one size per axis, sometimes `size + 1`."""
    sizes = NAMES[:rank]
    return sizes, [Size.var(n) + (1 if ch.coin(0.25) else 0) for n in sizes]


def shape_of(ch: Choices, shape: Sequence[int]) -> tuple[tuple[str, ...], list[Dim], tuple[int, ...]]:
    """A first parameter that a value of this concrete shape matches: (sizes, symbolic
    shape, the sizes' values).  Each axis is a new size (`B` or `B + 1`), a size whose value
    it repeats, or its int once three sizes are in use."""
    sizes: list[str] = []
    values: list[int] = []
    dims: list[Dim] = []
    for d in shape:
        same = [n for n, v in zip(sizes, values) if v == d]
        if same and ch.coin(0.5):
            dims.append(Size.var(ch.pick(same)))
        elif len(sizes) < len(NAMES) and not ch.coin(0.1):
            name = NAMES[len(sizes)]
            plus = 1 if d >= 2 and ch.coin(0.25) else 0
            sizes.append(name)
            values.append(d - plus)
            dims.append(Size.var(name) + plus)
        else:
            dims.append(d)
    return tuple(sizes), dims, tuple(values)
