"""A Kina function as a torch.library custom op, so torch.compile can trace a model that
calls it (compiler/interop/torch_bridge.py uses it under tracing; eager calls take the
cheaper torch.autograd.Function).

Two ops per function, in the namespace `kina`: `kina::<name>_<k>(Tensor[] xs) -> Tensor`
and `kina::<name>_<k>_vjp(Tensor[] xs, Tensor g_y) -> Tensor[]` (the cotangents of the
float parameters), each with a fake implementation that gives the result shapes (the
manifest's; for a dynamic function, its sizes bound from the inputs' shapes), and an
autograd formula on the first that calls the second.  Dynamo sees one opaque node per
call; the library runs when the compiled graph runs.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any, cast

import torch

from compiler.interop.compiled import CompiledFunction
from compiler.runtime import DynamicKinaFunction

_COUNTER = itertools.count()
_DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
           "I64": torch.int64, "Bool": torch.bool}


def _shape(compiled: CompiledFunction, xs: Sequence[torch.Tensor]) -> tuple[int, ...]:
    fn = compiled.fn
    if isinstance(fn, DynamicKinaFunction):
        return tuple(fn.prepared(*xs).results[0].shape)
    return tuple(cast(tuple[int, ...], fn.results[0].shape))   # a static function's shapes are ints


def _plain(t: torch.Tensor) -> torch.Tensor:
    return t.detach() if t.requires_grad else t


def register(compiled: CompiledFunction) -> Callable[[list[torch.Tensor]], torch.Tensor]:
    """Register the two ops of `compiled`; returns the forward op."""
    base = f"kina::{compiled.name}_{next(_COUNTER)}"
    floats = compiled.float_params
    out_dtype = _DTYPES[compiled.result_dtype.value]

    @torch.library.custom_op(base, mutates_args=())
    def forward(xs: list[torch.Tensor]) -> torch.Tensor:
        result: torch.Tensor = compiled.fn(*map(_plain, xs), like="torch")
        return result

    @forward.register_fake
    def _(xs: list[torch.Tensor]) -> torch.Tensor:
        return xs[0].new_empty(_shape(compiled, xs), dtype=out_dtype)

    @torch.library.custom_op(base + "_vjp", mutates_args=())
    def vjp(xs: list[torch.Tensor], g_y: torch.Tensor) -> list[torch.Tensor]:
        outs = compiled.vjp(*map(_plain, xs), g_y.contiguous(), like="torch")
        return list(outs[1:]) if isinstance(outs, tuple) else []

    @vjp.register_fake
    def _(xs: list[torch.Tensor], g_y: torch.Tensor) -> list[torch.Tensor]:
        return [torch.empty_like(xs[i]) for i in floats]

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        ctx.save_for_backward(*inputs[0])

    def backward(ctx: Any, g_y: torch.Tensor) -> tuple[list[torch.Tensor | None]]:
        xs = list(ctx.saved_tensors)
        grads: list[torch.Tensor | None] = [None] * len(xs)
        for i, g in zip(floats, vjp(xs, g_y)):
            grads[i] = g
        return (grads,)

    forward.register_autograd(backward, setup_context=setup_context)
    op: Callable[[list[torch.Tensor]], torch.Tensor] = forward   # a CustomOpDef: called like the function
    return op
