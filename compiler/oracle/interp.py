"""NumPy reference interpreter of the typed IR: the oracle the compiled code is checked against.

`run_function(program, name, args)` evaluates a function's let chain with
one NumPy implementation per op (`NUMPY_OPS`, one row per op of ops.OPS).
`handle f(..) with reverseMode` is first lowered by autodiff.lower_handles, so
the interpreter runs exactly the backward graph the compiler emits.

Dtypes: by default every tensor is stored in its declared dtype (F32 ->
float32, F64 -> float64, F16 -> float16, BF16 / F8 through ml_dtypes).  Narrow floats are
computed in float32 and rounded after every op, like the host lowering's
`arith-emulate-unsupported-floats`.  `dtype=np.float64` computes every float
tensor in float64 (for finite differences).

Out-of-range gather / scatter indices raise KinaRuntimeError with the same
message the compiled code asserts, never numpy's IndexError.
"""
from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from compiler.core.types import Attrs, DType, TensorType
from compiler.ir.nodes import CallFn, Expr, Function, Handle, Literal, MakeTuple, OpApp, Program, Var, as_tensor
from compiler.ir.uses import Uses
from compiler.oracle.interp_random import RANDOM_OPS
from compiler.oracle.interp_scan import DESCENDING, SCAN_OPS
from compiler.runtime.arrays import Array
from compiler.runtime.loader import KinaRuntimeError

# What a Kina expression evaluates to: a tensor's array, or a tuple.
Value = Array | tuple["Value", ...]

# A run-time failure of a Kina program (bad argument, out-of-range index) is the same error
# as the compiled library's: one class, defined with the library loader.


# Storage of each dtype (types.DType.np_dtype: F8E4M3 is ml_dtypes.float8_e4m3fn, like the library).
class _Storage(dict[DType, "np.dtype[Any]"]):
    """DType -> NumPy dtype, resolved on first use: BF16 / F8 import ml_dtypes, which costs
    more than a small program's whole validation."""

    def __missing__(self, d: DType) -> np.dtype[Any]:
        self[d] = d.np_dtype
        return self[d]


NP_DTYPES: dict[DType, np.dtype[Any]] = _Storage()
_NATIVE = (np.dtype(np.float32), np.dtype(np.float64))


# ---- per-op NumPy implementations --------------------------------------------------
def _check_indices(idx: Array, bound: int, what: str) -> None:
    if idx.size and (idx.min() < 0 or idx.max() >= bound):
        bad = idx[(idx < 0) | (idx >= bound)].flat[0]
        raise KinaRuntimeError(f"{what} index out of bounds: index {int(bad)} is not in [0, {bound})")


def _softmax(x: Array, axis: int) -> Array:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    out: Array = e / e.sum(axis=axis, keepdims=True)
    return out


def _log_softmax(x: Array, axis: int) -> Array:
    shifted = x - x.max(axis=axis, keepdims=True)
    out: Array = shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
    return out


def _gather(args: list[Array], attrs: Attrs, out: TensorType) -> Array:
    values, idx = args
    _check_indices(idx, values.shape[0], "gather")
    return values[idx]


def _take_along_axis(args: list[Array], attrs: Attrs, out: TensorType) -> Array:
    x, idx = args
    axis = attrs["axis"]
    _check_indices(idx, x.shape[axis], "take_along_axis")
    return np.take_along_axis(x, idx, axis=axis)


def _scatter_add(args: list[Array], attrs: Attrs, out: TensorType) -> Array:
    # ScatterAdd: out[v, d] = sum over indices[i] = v of updates[i ++ [d]]; duplicates add.
    updates, idx = args
    dest = np.zeros(out.shape, dtype=updates.dtype)
    _check_indices(idx, out.shape[0], "scatter_add")
    np.add.at(dest, idx.reshape(-1), updates.reshape(-1, out.shape[1]))
    return dest


def _scatter_along_axis(args: list[Array], attrs: Attrs, out: TensorType) -> Array:
    # zeros(dest) with updates added at idx along axis: the adjoint of take_along_axis.
    updates, idx = args
    axis = attrs["axis"]
    dest = np.zeros(out.shape, dtype=updates.dtype)
    _check_indices(idx, out.shape[axis], "scatter_along_axis")
    where: list[Array] = list(np.indices(idx.shape, sparse=True))
    where[axis] = idx
    np.add.at(dest, tuple(where), updates)
    return dest


_REDUCE: dict[str, Callable[..., Array]] = {"sum": np.sum, "mean": np.mean, "max": np.max,  # reduce_keep's op
                                            "min": np.min}


_erf = np.frompyfunc(math.erf, 1, 1)   # NumPy has no erf; math.erf is exact to double precision
_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


def _erf_f(x: Array) -> Array:
    # np.asarray: on a rank-0 array frompyfunc returns a Python float, not an array
    return np.asarray(_erf(np.asarray(x, np.float64)), np.float64)


def _gelu_tanh_grad(x: Array) -> Array:
    t = np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x ** 3))
    out: Array = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x)
    return out


# gelu's and gelu_grad's `approximate`: gelu(x), and its derivative gelu'(x)
_GELU: dict[str, Callable[[Array], Array]] = {
    "none": lambda x: 0.5 * x * (1 + _erf_f(x / math.sqrt(2))),
    "tanh": lambda x: 0.5 * x * (1 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x ** 3))),
}
_GELU_GRAD: dict[str, Callable[[Array], Array]] = {
    "none": lambda x: 0.5 * (1 + _erf_f(x / math.sqrt(2))) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi),
    "tanh": _gelu_tanh_grad,
}


def _maximum_grad(args: list[Array], attrs: Attrs, out: TensorType) -> Array:
    # the cotangent of x in maximum(x, y): all of g where x wins, half on a tie (PyTorch's rule)
    g, x, y = args
    return np.where(x > y, g, np.where(x == y, g / 2, 0))


def _in_bounds(x: Array, attrs: Attrs) -> Array:
    lo, hi = attrs["min"], attrs["max"]
    keep = np.ones(x.shape, bool)
    if lo is not None:
        keep &= x >= lo
    if hi is not None:
        keep &= x <= hi
    return keep


def _cast(args: list[Array], attrs: Attrs, out: TensorType) -> Array:
    # Integers and booleans convert through float32, as the lowering does (sitofp to f32,
    # then the store rounds to the target dtype), but to F64 directly (sitofp to f64);
    # floats convert directly (F64 to a narrow float through float32: _Interpreter.op).
    x = args[0]
    if x.dtype.kind in "iub" and out.is_float:
        return x.astype(np.float64 if out.dtype is DType.F64 else np.float32)
    return x


def _iota(args: list[Array], attrs: Attrs, out: TensorType) -> Array:
    axis = attrs["axis"]
    shape = [1] * out.rank
    shape[axis] = out.shape[axis]
    return np.broadcast_to(np.arange(out.shape[axis], dtype=np.int64).reshape(shape), out.shape).copy()

# A NumPy row: operand arrays, the op's attributes and its result type -> the result.
def _sigmoid(x: Array) -> Array:
    # exp(-x) overflows to inf for x below about -709 (f64), and 1 / inf is the right 0:
    # the overflow is no error of the program, so NumPy must not warn about it
    with np.errstate(over="ignore"):
        out: Array = 1 / (1 + np.exp(-x))
    return out


OpFn = Callable[[list[Array], Attrs, TensorType], Array]

NUMPY_OPS: dict[str, OpFn] = {
    "add": lambda a, at, t: a[0] + a[1],
    "sub": lambda a, at, t: a[0] - a[1],
    "mul": lambda a, at, t: a[0] * a[1],
    "div": lambda a, at, t: a[0] / a[1],
    "neg": lambda a, at, t: -a[0],
    "exp": lambda a, at, t: np.exp(a[0]),
    "log": lambda a, at, t: np.log(a[0]),
    "tanh": lambda a, at, t: np.tanh(a[0]),
    "sqrt": lambda a, at, t: np.sqrt(a[0]),
    "rsqrt": lambda a, at, t: 1 / np.sqrt(a[0]),
    "sigmoid": lambda a, at, t: _sigmoid(a[0]),
    "relu": lambda a, at, t: np.maximum(a[0], 0),
    "relu_grad": lambda a, at, t: np.where(a[1] > 0, a[0], 0),
    "matmul": lambda a, at, t: np.matmul(a[0], a[1]),
    "transpose": lambda a, at, t: np.transpose(a[0], at["perm"]),
    "reshape": lambda a, at, t: a[0].reshape(t.shape),
    "broadcast": lambda a, at, t: np.broadcast_to(a[0], t.shape).copy(),
    "slice": lambda a, at, t: np.take(a[0], range(at["start"], at["stop"]), axis=at["axis"]),
    "concat": lambda a, at, t: np.concatenate(a, axis=at["axis"]),
    "gather": _gather,
    "reduce_keep": lambda a, at, t: _REDUCE[at["op"]](a[0], axis=at["axis"], keepdims=True),
    "softmax": lambda a, at, t: _softmax(a[0], at["axis"]),
    "log_softmax": lambda a, at, t: _log_softmax(a[0], at["axis"]),
    "take_along_axis": _take_along_axis,
    "scatter_add": _scatter_add,
    "scatter_along_axis": _scatter_along_axis,
    "maximum": lambda a, at, t: np.maximum(a[0], a[1]),
    "minimum": lambda a, at, t: np.minimum(a[0], a[1]),
    "abs": lambda a, at, t: np.abs(a[0]),
    "sign": lambda a, at, t: np.sign(a[0]),
    "square": lambda a, at, t: np.square(a[0]),
    "erf": lambda a, at, t: _erf_f(a[0]),
    "pow": lambda a, at, t: np.power(a[0], at["p"]),
    **SCAN_OPS,     # pow_tensor, cumsum, cumprod, logsumexp, the sorts (compiler/oracle/interp_scan.py)
    **RANDOM_OPS,   # random_split .. categorical: Threefry-2x32 as JAX (compiler/oracle/interp_random.py)
    "clamp": lambda a, at, t: np.clip(a[0], at["min"], at["max"]),
    "gelu": lambda a, at, t: _GELU[at["approximate"]](a[0]),
    "cast": _cast,
    "iota": _iota,
    "tril": lambda a, at, t: np.tril(a[0], at["k"]),
    "argmax": lambda a, at, t: np.argmax(a[0], axis=at["axis"], keepdims=True),
    "maximum_grad": _maximum_grad,
    "clamp_grad": lambda a, at, t: np.where(_in_bounds(a[1], at), a[0], 0),
    "gelu_grad": lambda a, at, t: a[0] * _GELU_GRAD[at["approximate"]](a[1]),
    "lt": lambda a, at, t: np.less(a[0], a[1]),
    "le": lambda a, at, t: np.less_equal(a[0], a[1]),
    "gt": lambda a, at, t: np.greater(a[0], a[1]),
    "ge": lambda a, at, t: np.greater_equal(a[0], a[1]),
    "eq": lambda a, at, t: np.equal(a[0], a[1]),
    "ne": lambda a, at, t: np.not_equal(a[0], a[1]),
    "where": lambda a, at, t: np.where(a[0], a[1], a[2]),
}


# The rows of each enum attribute's choices (tests/test_tables.py: one per choice).
ATTR_CHOICES: dict[tuple[str, str], Mapping[str, object]] = {
    ("reduce_keep", "op"): _REDUCE,
    ("gelu", "approximate"): _GELU,
    ("gelu_grad", "approximate"): _GELU_GRAD,
    ("sort", "descending"): DESCENDING,
    ("argsort", "descending"): DESCENDING,
}


# ---- evaluation -----------------------------------------------------------------------
# Called with every op application and its operand arrays (as the row receives them),
# before the row runs: compiler/oracle/kinks.py records where non-smooth ops branch.
Observer = Callable[[OpApp, list[Array]], None]


class _Interpreter:
    def __init__(self, program: Program, float_dtype: DTypeLike | None = None,
                 observe: Observer | None = None, jitter: np.random.Generator | None = None) -> None:
        self.program = program
        self.float_dtype = None if float_dtype is None else np.dtype(float_dtype)
        self.observe = observe
        self.jitter = jitter

    def storage(self, t: TensorType) -> np.dtype[Any]:
        if t.is_float and self.float_dtype is not None:
            return self.float_dtype
        return NP_DTYPES[t.dtype]

    def coerce(self, value: object, t: TensorType, what: str) -> Array:
        arr = np.asarray(value)
        if arr.shape != t.shape:
            raise KinaRuntimeError(f"{what}: expected {t}, got an array of shape {list(arr.shape)}")
        if t.dtype is DType.Bool:
            if not (arr.dtype == np.bool_ or (np.issubdtype(arr.dtype, np.integer) and np.isin(arr, (0, 1)).all())):
                raise KinaRuntimeError(f"{what}: expected truth values (bool, or 0 / 1) for {t}, got {arr.dtype}")
        elif not t.is_float and not np.issubdtype(arr.dtype, np.integer):
            raise KinaRuntimeError(f"{what}: expected integer indices for {t}, got dtype {arr.dtype}")
        return arr.astype(self.storage(t))

    def call(self, fn: Function, args: list[object]) -> Value:
        if len(args) != len(fn.params):
            raise KinaRuntimeError(f"`{fn.name}` takes {len(fn.params)} arguments, got {len(args)}")
        env: dict[str, Value] = {p.name: self.coerce(a, p.type, f"argument `{p.name}` of `{fn.name}`")
                                 for p, a in zip(fn.params, args)}
        for b in fn.lets:
            value = self.eval(b.value, env)
            if b.destructure:
                assert isinstance(value, tuple), b.names   # the checker typed it a tuple
                env.update(zip(b.names, value))
            else:
                env[b.names[0]] = value
        return self.eval(fn.result, env)

    def eval(self, expr: Expr, env: dict[str, Value]) -> Value:
        if isinstance(expr, Var):
            return env[expr.name]
        if isinstance(expr, Literal):
            return self.literal(expr)
        if isinstance(expr, OpApp):
            return self.op(expr, [self.tensor(a, env) for a in expr.args])
        if isinstance(expr, CallFn):
            return self.call(self.program.functions[expr.fn], [self.eval(a, env) for a in expr.args])
        if isinstance(expr, MakeTuple):
            return tuple(self.eval(e, env) for e in expr.items)
        if isinstance(expr, Handle):
            raise KinaRuntimeError(f"internal: handle {expr.fn} was not lowered")
        raise TypeError(f"unknown IR node {type(expr).__name__}")

    def tensor(self, expr: Expr, env: dict[str, Value]) -> Array:
        """An op's operand: a tensor (the checker typed it so)."""
        value = self.eval(expr, env)
        assert isinstance(value, np.ndarray), expr
        return value

    def literal(self, lit: Literal) -> Array:
        t, dtype = lit.type, self.storage(lit.type)
        addressable(t, dtype)
        if not lit.values:
            return np.zeros(t.shape, dtype)
        if len(lit.values) == 1:
            return np.full(t.shape, lit.values[0], dtype)
        return np.asarray(lit.values, dtype).reshape(t.shape)

    def _jittered(self, a: Array, e: Expr) -> Array:
        t = as_tensor(e.type)
        if a.dtype.kind != "f" or not t.is_float or self.jitter is None:
            return a
        return a * (1 + unit_roundoff(t.dtype) * self.jitter.uniform(-1, 1, a.shape))

    def op(self, node: OpApp, args: list[Array]) -> Array:
        out_type = as_tensor(node.type)      # ops make tensors
        out_dtype = self.storage(out_type)
        addressable(out_type, out_dtype)
        # Narrow floats compute in float32 and round per op (host emulation does the same);
        # an op making a narrow float from F64 (a cast) reads it as float32, as the lowering
        # converts f64 to f16 / bf16 / f8 through f32 (a float64 run rounds nothing).
        narrow = out_dtype not in _NATIVE and out_type.is_float
        args = [a if a.dtype.kind in "ib" or (a.dtype in _NATIVE and not (narrow and a.dtype == np.float64))
                else a.astype(np.float32) for a in args]
        if self.jitter is not None:
            args = [self._jittered(a, e) for a, e in zip(args, node.args)]
        if self.observe is not None:
            self.observe(node, args)
        try:
            result = NUMPY_OPS[node.op](args, node.attrs, out_type)
        except (KinaRuntimeError, MemoryError):
            raise
        except Exception as err:   # a bug in a NumPy row: a Kina error naming the op, not a traceback
            raise KinaRuntimeError(f"{node.op}: internal error in its NumPy reference ({type(err).__name__}: "
                                   f"{err}); this is a compiler bug, please report it") from err
        return np.asarray(result).astype(out_dtype, copy=False)


@functools.cache
def unit_roundoff(dtype: DType) -> float:
    """Half the distance from 1 to the next value of a float dtype (2^-24 for F32)."""
    if dtype.np_dtype.kind == "f":    # NumPy's own floats: no ml_dtypes import
        return float(np.finfo(dtype.np_dtype).eps) / 2
    import ml_dtypes
    return float(ml_dtypes.finfo(dtype.np_dtype).eps) / 2   # type: ignore[no-untyped-call]


def run_function(program: Program, name: str, args: Iterable[object], dtype: DTypeLike | None = None,
                 observe: Observer | None = None, jitter: int | None = None) -> Value:
    """Evaluate function `name` on args (arrays or nested lists); returns an ndarray or a tuple of them.
    `observe(node, operands)` sees every op application in evaluation order.  `jitter` (a
    seed): every float operand of every op is multiplied by 1 + u * U(-1, 1), u the unit
    roundoff of its declared dtype, as rounding would (validate.references estimates from
    it the magnitude each result element was computed from)."""
    lowered = _lowered(program)
    if name not in lowered.functions:
        raise KinaRuntimeError(f"no function named `{name}`")
    # IEEE arithmetic is the semantics (an overflow is inf, 0/0 is NaN, a cast out of range
    # rounds as the dtype rounds): NumPy's warnings about it are noise in `kinac` output.
    with np.errstate(all="ignore"):
        rng = None if jitter is None else np.random.default_rng(jitter)
        return _Interpreter(lowered, dtype, observe, rng).call(lowered.functions[name], list(args))


# The last few programs' lowerings: `kinac validate` runs one program hundreds of times
# (finite differences), and lowering its handles cost more than running it.  Keyed by the
# program object, its function objects (held here, so their ids stay theirs) and the VJP
# rows: a program whose function table changed, or a VJP row a test replaced, is lowered again.
_LOWERED: list[tuple[Program, tuple[object, ...], Program]] = []
_LOWERED_KEEP = 8


def _lowered(program: Program) -> Program:
    from compiler.ad import VJPS, lower_handles  # lazy: `kinac run` of a program without handles never loads AD

    key = (*((n, id(f)) for n, f in program.functions.items()), *map(id, VJPS.values()))
    for prog, k, low in list(_LOWERED):
        if prog is program and k == key:
            return low
    lowered, diags = lower_handles(program)
    if diags:
        raise KinaRuntimeError("cannot run: " + "; ".join(f"[{d.code}] {d.message}" for d in diags))
    _LOWERED.append((program, key, lowered))
    del _LOWERED[:-_LOWERED_KEEP]
    return lowered


# ---- deterministic inputs ---------------------------------------------------------------
_DEFAULT_INDEX_BOUND = 4   # an I64 parameter that indexes nothing


def addressable(t: TensorType, dtype: np.dtype[Any]) -> None:
    """MemoryError (`kinac run`: "out of memory") for a tensor larger than the address space:
    NumPy would raise a ValueError ("array is too big") there, and MemoryError only below it."""
    size = math.prod(t.shape) * dtype.itemsize
    if size > sys.maxsize:
        raise MemoryError(f"a {t.dtype.value}{list(t.shape)} tensor needs {size} bytes, "
                          "more than this machine can address")


def random_inputs(fn: Function, seed: int = 0, program: Program | None = None) -> list[Array]:
    """Deterministic arguments for fn: floats ~ N(0, 1) (uniform in [0.5, 2) where log/sqrt/rsqrt need
    positives); I64 indices uniform in the range their uses allow (gather: < V, take_along_axis: < dim);
    Bool values a fair coin."""
    rng = np.random.default_rng(seed)
    uses = Uses(program)
    out = []
    for p in fn.params:
        t = p.type
        addressable(t, NP_DTYPES[t.dtype])
        if t.is_float:
            data = rng.uniform(0.5, 2.0, t.shape) if uses.positive(fn, p.name) else rng.standard_normal(t.shape)
            out.append(data.astype(NP_DTYPES[t.dtype]))
        elif t.dtype is DType.Bool:
            out.append(rng.integers(0, 2, t.shape).astype(np.bool_))
        else:
            bound = uses.index_bound(fn, p.name)      # an int here: the inputs of a static function
            out.append(rng.integers(0, bound if isinstance(bound, int) and bound else _DEFAULT_INDEX_BOUND,
                                    t.shape, dtype=np.int64))
    return out
