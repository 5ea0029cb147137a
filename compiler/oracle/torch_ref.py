"""A PyTorch evaluator of the typed IR: a second, independent reference for the
differential tests (compiler/oracle/differential.py), used when torch is importable.

`run_function(program, name, args)` evaluates the *checked* program (handles not
lowered) in float64, one torch call per op (`TORCH_OPS`, one row per op of ops.OPS).
`handle f(..) with reverseMode` is evaluated by torch.autograd (the gradient of the sum
of f's result, i.e. the seed of ones), so the comparison checks the VJP table and the
AD pass against autograd, and the NumPy interpreter against a second implementation.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from compiler.core.types import TensorType
from compiler.ir import nodes as ir

if TYPE_CHECKING:
    from torch import Tensor
    from torch import dtype as torch_dtype

# An op's attributes, as the checker normalised them (ir.OpApp.attrs).
Attrs = dict[str, Any]
# What an IR expression evaluates to: a tensor, or a tuple of them (MakeTuple, handle).
Value = Union["Tensor", tuple["Tensor", ...]]



def available() -> bool:
    try:
        import torch  # noqa: F401
    except Exception:   # ImportError, or a broken install: the comparison is skipped
        return False
    return True


_CONFIGURED = False


def _t() -> ModuleType:
    """torch, on one thread: the tensors are small, and the test runs share two cores.
    (The table's rows call it; the typed helpers below `import torch` themselves, after
    _Evaluator has called this once.)"""
    global _CONFIGURED
    torch = importlib.import_module("torch")   # a ModuleType whether or not mypy can see torch
    if not _CONFIGURED:
        torch.set_num_threads(1)
        _CONFIGURED = True
    return torch


def _scatter_add(a: list[Tensor], at: Attrs, t: TensorType) -> Tensor:
    import torch
    upd, idx = a
    out = torch.zeros(t.shape, dtype=upd.dtype)
    return out.index_add(0, idx.reshape(-1), upd.reshape(-1, t.shape[1]))


def _scatter_along_axis(a: list[Tensor], at: Attrs, t: TensorType) -> Tensor:
    import torch
    upd, idx = a
    return torch.zeros(t.shape, dtype=upd.dtype).scatter_add(at["axis"], idx, upd)


_REDUCERS: dict[str, Callable[[Tensor, int], Tensor]] = {
    "sum": lambda x, axis: x.sum(dim=axis, keepdim=True),
    "mean": lambda x, axis: x.mean(dim=axis, keepdim=True),
    "max": lambda x, axis: _t().amax(x, dim=axis, keepdim=True),
    "min": lambda x, axis: _t().amin(x, dim=axis, keepdim=True),
}
# Kina's gelu `approximate` choice -> torch.nn.functional.gelu's `approximate` argument.
_GELU_APPROXIMATE = {"none": "none", "tanh": "tanh"}


# sort's and argsort's `descending` -> torch.sort's
_DESCENDING = {"false": False, "true": True}


def _sort(a: list[Tensor], at: Attrs, t: TensorType) -> Tensor:
    import torch
    values, idx = torch.sort(a[0], dim=at["axis"], descending=_DESCENDING[at["descending"]], stable=True)
    return values if t.is_float else idx


def _topk(a: list[Tensor], at: Attrs, t: TensorType) -> Tensor:
    # torch.topk does not promise an order among ties: the stable descending sort does
    import torch
    values, idx = torch.sort(a[0], dim=at["axis"], descending=True, stable=True)
    return (values if t.is_float else idx).narrow(at["axis"], 0, at["k"])


def _random(op: str) -> OpFn:
    """PyTorch has no Threefry: the random ops evaluate the NumPy reference on the key (the
    draws are a pure function of it, so this row checks what consumes them)."""
    def row(a: list[Tensor], at: Attrs, t: TensorType) -> Tensor:
        import torch

        from compiler.oracle.interp_random import RANDOM_OPS
        out = np.asarray(RANDOM_OPS[op]([np.asarray(x.detach().numpy()) for x in a], at, t))
        return torch.from_numpy(out.astype(np.float64) if t.is_float else out)
    return row


def _reduce(a: list[Tensor], at: Attrs, t: TensorType) -> Tensor:
    return _REDUCERS[at["op"]](a[0], at["axis"])


def _maximum_grad(a: list[Tensor], at: Attrs, t: TensorType) -> Tensor:
    g, x, y = a
    import torch
    return torch.where(x > y, g, torch.where(x == y, g / 2, torch.zeros_like(g)))


def _clamp_grad(a: list[Tensor], at: Attrs, t: TensorType) -> Tensor:
    g, x = a
    import torch
    keep = torch.ones_like(x, dtype=torch.bool)
    if at.get("min") is not None:
        keep &= x >= at["min"]
    if at.get("max") is not None:
        keep &= x <= at["max"]
    return torch.where(keep, g, torch.zeros_like(g))


def _gelu_grad(a: list[Tensor], at: Attrs, t: TensorType) -> Tensor:
    g, x = a
    import torch
    x = x.detach().requires_grad_(True)
    with torch.enable_grad():
        y = torch.nn.functional.gelu(x, approximate=_GELU_APPROXIMATE[at["approximate"]])
        (d,) = torch.autograd.grad(y, x, g)
    return d


def _cast(a: list[Tensor], at: Attrs, t: TensorType) -> Tensor:
    # float64 evaluation: a float result stays float64 (the reference does not round), but an
    # integer or Bool converts through float32, as the lowering (sitofp to f32) and the
    # interpreter do: an I64 beyond 2^24 (random_bits) rounds there; to F64 directly (sitofp to f64)
    import torch
    x = a[0]
    if t.is_float and t.dtype.value != "F64" and not (x.is_floating_point() or x.is_complex()):
        x = x.to(torch.float32)
    return x.to(_dtype_of(t))


def _iota(a: list[Tensor], at: Attrs, t: TensorType) -> Tensor:
    import torch
    axis, shape = at["axis"], list(t.shape)
    view = [1] * len(shape)
    view[axis] = shape[axis]
    return torch.arange(shape[axis], dtype=torch.int64).reshape(view).expand(shape).clone()


def _dtype_of(t: TensorType) -> torch_dtype:
    import torch
    if t.is_float:
        return torch.float64
    return torch.bool if t.dtype.value == "Bool" else torch.int64


OpFn = Callable[[list["Tensor"], Attrs, TensorType], "Tensor"]

TORCH_OPS: dict[str, OpFn] = {
    "add": lambda a, at, t: a[0] + a[1],
    "sub": lambda a, at, t: a[0] - a[1],
    "mul": lambda a, at, t: a[0] * a[1],
    "div": lambda a, at, t: a[0] / a[1],
    "neg": lambda a, at, t: -a[0],
    "exp": lambda a, at, t: _t().exp(a[0]),
    "log": lambda a, at, t: _t().log(a[0]),
    "tanh": lambda a, at, t: _t().tanh(a[0]),
    "sqrt": lambda a, at, t: _t().sqrt(a[0]),
    "rsqrt": lambda a, at, t: _t().rsqrt(a[0]),
    "sigmoid": lambda a, at, t: _t().sigmoid(a[0]),
    "relu": lambda a, at, t: _t().relu(a[0]),
    "relu_grad": lambda a, at, t: _t().where(a[1] > 0, a[0], _t().zeros_like(a[0])),
    "matmul": lambda a, at, t: _t().matmul(a[0], a[1]),
    "transpose": lambda a, at, t: a[0].permute(*at["perm"]) if at["perm"] else a[0],
    "reshape": lambda a, at, t: a[0].reshape(t.shape),
    "broadcast": lambda a, at, t: _t().broadcast_to(a[0], t.shape),
    "slice": lambda a, at, t: a[0].narrow(at["axis"], at["start"], at["stop"] - at["start"]),
    "concat": lambda a, at, t: _t().cat(a, dim=at["axis"]),
    "gather": lambda a, at, t: a[0][a[1]],
    "reduce_keep": _reduce,
    "softmax": lambda a, at, t: _t().softmax(a[0], dim=at["axis"]),
    "log_softmax": lambda a, at, t: _t().log_softmax(a[0], dim=at["axis"]),
    "take_along_axis": lambda a, at, t: _t().take_along_dim(a[0], a[1], dim=at["axis"]),
    "scatter_add": _scatter_add,
    "scatter_along_axis": _scatter_along_axis,
    "maximum": lambda a, at, t: _t().maximum(a[0], a[1]),
    "minimum": lambda a, at, t: _t().minimum(a[0], a[1]),
    "abs": lambda a, at, t: _t().abs(a[0]),
    "sign": lambda a, at, t: _t().sign(a[0]),
    "square": lambda a, at, t: _t().square(a[0]),
    "erf": lambda a, at, t: _t().erf(a[0]),
    "pow": lambda a, at, t: _t().pow(a[0], at["p"]),
    "pow_tensor": lambda a, at, t: _t().pow(a[0], a[1]),
    "cumsum": lambda a, at, t: _t().cumsum(a[0], dim=at["axis"]),
    "cumprod": lambda a, at, t: _t().cumprod(a[0], dim=at["axis"]),
    "logsumexp": lambda a, at, t: _t().logsumexp(a[0], dim=at["axis"], keepdim=True),
    "sort": _sort,
    "argsort": _sort,
    "topk": _topk,
    "argtopk": _topk,
    **{op: _random(op) for op in ("random_split", "random_fold_in", "random_bits", "random_uniform",
                                  "random_normal", "bernoulli", "categorical")},
    "clamp": lambda a, at, t: _t().clamp(a[0], at.get("min"), at.get("max")),
    "gelu": lambda a, at, t: _t().nn.functional.gelu(a[0], approximate=_GELU_APPROXIMATE[at["approximate"]]),
    "cast": _cast,
    "iota": _iota,
    "tril": lambda a, at, t: _t().tril(a[0], at["k"]),
    "argmax": lambda a, at, t: _t().argmax(a[0], dim=at["axis"], keepdim=True),
    "lt": lambda a, at, t: a[0] < a[1],
    "le": lambda a, at, t: a[0] <= a[1],
    "gt": lambda a, at, t: a[0] > a[1],
    "ge": lambda a, at, t: a[0] >= a[1],
    "eq": lambda a, at, t: a[0] == a[1],
    "ne": lambda a, at, t: a[0] != a[1],
    "where": lambda a, at, t: _t().where(a[0], a[1], a[2]),
    "maximum_grad": _maximum_grad,
    "clamp_grad": _clamp_grad,
    "gelu_grad": _gelu_grad,
}

# The rows of each enum attribute's choices (tests/test_tables.py: one per choice).
ATTR_CHOICES: dict[tuple[str, str], Mapping[str, object]] = {
    ("reduce_keep", "op"): _REDUCERS,
    ("gelu", "approximate"): _GELU_APPROXIMATE,
    ("gelu_grad", "approximate"): _GELU_APPROXIMATE,
    ("sort", "descending"): _DESCENDING,
    ("argsort", "descending"): _DESCENDING,
}


class _Evaluator:
    def __init__(self, program: ir.Program) -> None:
        _t()   # torch imported and configured
        self.program = program

    def from_numpy(self, value: np.ndarray, t: TensorType) -> Tensor:
        import torch
        arr = np.asarray(value)
        if t.is_float:
            return torch.from_numpy(arr.astype(np.float64))
        return torch.from_numpy(arr.astype(np.bool_ if t.dtype.value == "Bool" else np.int64))

    def call(self, fn: ir.Function, args: list[Tensor]) -> Value:
        env: dict[str, Value] = dict(zip((p.name for p in fn.params), args))
        for b in fn.lets:
            value = self.eval(b.value, env)
            if b.destructure:
                assert isinstance(value, tuple), b.names   # the checker typed the value a tuple
                env.update(zip(b.names, value))
            else:
                env[b.names[0]] = value
        return self.eval(fn.result, env)

    def eval(self, e: ir.Expr, env: dict[str, Value]) -> Value:
        import torch
        if isinstance(e, ir.Var):
            return env[e.name]
        if isinstance(e, ir.Literal):
            dtype = _dtype_of(e.type)
            if not e.values:
                return torch.zeros(e.type.shape, dtype=dtype)
            if len(e.values) == 1:
                return torch.full(e.type.shape, e.values[0], dtype=dtype)
            return torch.tensor(e.values, dtype=dtype).reshape(e.type.shape)
        if isinstance(e, ir.OpApp):
            assert isinstance(e.type, TensorType), e.op   # every op yields one tensor
            return TORCH_OPS[e.op]([self.tensor(e, a, env) for a in e.args], e.attrs, e.type)
        if isinstance(e, ir.CallFn):
            return self.call(self.program.functions[e.fn], [self.tensor(e, a, env) for a in e.args])
        if isinstance(e, ir.MakeTuple):
            return tuple(self.tensor(e, x, env) for x in e.items)
        if isinstance(e, ir.Handle):
            return self.handle(e, [self.tensor(e, a, env) for a in e.args])
        raise TypeError(f"unknown IR node {type(e).__name__}")

    def tensor(self, parent: ir.Expr, e: ir.Expr, env: dict[str, Value]) -> Tensor:
        """The value of an operand, argument or tuple item: always one tensor (parameters and
        op operands are tensors, and a tuple's items are tensors)."""
        value = self.eval(e, env)
        assert not isinstance(value, tuple), type(parent).__name__
        return value

    def handle(self, h: ir.Handle, args: list[Tensor]) -> Value:
        """(R, g0, ..): the primal and d(sum R)/d(each float argument), by autograd."""
        import torch
        fn = self.program.functions[h.fn]
        leaves = [a.detach().clone().requires_grad_(True) if p.type.is_float else a
                  for a, p in zip(args, fn.params)]
        with torch.enable_grad():
            y = self.call(fn, leaves)
            assert not isinstance(y, tuple), h.fn     # reverseMode differentiates a tensor result
            wrt = [x for x, p in zip(leaves, fn.params) if p.type.is_float]
            found: Sequence[Tensor | None] = torch.autograd.grad(y.sum(), wrt, allow_unused=True) \
                if wrt and y.requires_grad else [None] * len(wrt)
        grads = [g if g is not None else torch.zeros_like(x) for g, x in zip(found, wrt)]
        return (y.detach(), *[g.detach() for g in grads]) if wrt else y.detach()


def run_function(program: ir.Program, name: str, args: list[np.ndarray]) -> np.ndarray | tuple[np.ndarray, ...]:
    """Evaluate `name` in float64 with PyTorch; an ndarray or a tuple of them."""
    ev = _Evaluator(program)
    fn = program.functions[name]
    out = ev.call(fn, [ev.from_numpy(a, p.type) for a, p in zip(args, fn.params)])
    if isinstance(out, tuple):
        return tuple(np.asarray(o.detach().numpy()) for o in out)
    return np.asarray(out.detach().numpy())
