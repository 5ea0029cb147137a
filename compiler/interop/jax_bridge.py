"""A Kina function as a JAX function: `jax_function` (docs/interop.md).

A `jax.custom_vjp` whose primal calls the library's `name` and whose backward calls
`name_vjp(args.., g_y)`, each through `jax.pure_callback` (so both run under jax.jit and
jax.grad; the callback receives the host arrays XLA hands it).  The result's shape is
the manifest's, or for a dynamic function the one its sizes give at the arguments' shapes.

JAX without `jax_enable_x64` has no int64: an I64 parameter given as int32 is widened
inside the callback (a copy of the indices); float arrays are passed as they are, so their
dtypes must be the declared ones (F32 for F32).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

import jax
import numpy as np

from compiler.interop.compiled import CompiledFunction, compile_function
from compiler.runtime import DynamicKinaFunction


def _result_shape(compiled: CompiledFunction, args: tuple[Any, ...]) -> tuple[int, ...]:
    fn = compiled.fn
    if isinstance(fn, DynamicKinaFunction):
        structs = [jax.ShapeDtypeStruct(a.shape, np.dtype(p.dtype.np_dtype)) for a, p in zip(args, compiled.params)]
        return tuple(fn.prepared(*structs).results[0].shape)
    return tuple(cast(tuple[int, ...], fn.results[0].shape))   # a static function's shapes are ints


def _host(compiled: CompiledFunction, arrays: tuple[Any, ...]) -> list[np.ndarray]:
    """The callback's arguments in the declared dtypes (int32 indices widened to int64)."""
    out = []
    for a, p in zip(arrays, compiled.params):
        arr = np.asarray(a)
        if p.dtype.value == "I64" and arr.dtype != np.int64 and arr.dtype.kind in "iu":
            arr = arr.astype(np.int64)
        out.append(arr)
    out += [np.asarray(a) for a in arrays[len(compiled.params):]]   # name_vjp's g_y
    return out


def jax_function(source_or_path: str | Path, name: str, opt_level: int = 2,
                 sizes: Mapping[str, int] | None = None) -> Callable[..., Any]:
    """The Kina function `name` as a JAX function differentiable by jax.grad / jax.vjp and
    usable under jax.jit (see the module docstring); arguments as for torch_function."""
    compiled = compile_function(source_or_path, name, opt_level, sizes)
    out_dtype = np.dtype(compiled.result_dtype.np_dtype)

    def primal(*args: Any) -> Any:
        struct = jax.ShapeDtypeStruct(_result_shape(compiled, args), out_dtype)
        return jax.pure_callback(lambda *a: compiled.fn(*_host(compiled, a)), struct, *args,
                                 vmap_method="sequential")

    f = jax.custom_vjp(primal)

    def fwd(*args: Any) -> tuple[Any, tuple[Any, ...]]:
        return primal(*args), args

    def bwd(args: tuple[Any, ...], g_y: Any) -> tuple[Any, ...]:
        floats = compiled.float_params
        structs = [jax.ShapeDtypeStruct(np.shape(g_y), out_dtype)]
        structs += [jax.ShapeDtypeStruct(args[i].shape, np.dtype(compiled.params[i].dtype.np_dtype)) for i in floats]

        def call(*a: Any) -> tuple[np.ndarray, ...]:
            outs = compiled.vjp(*_host(compiled, a))
            return outs if isinstance(outs, tuple) else (outs,)
        outs = jax.pure_callback(call, tuple(structs), *args, g_y, vmap_method="sequential")
        grads: list[Any] = [None] * len(args)
        for i, g in zip(floats, outs[1:]):
            grads[i] = g
        return tuple(grads)

    f.defvjp(fwd, bwd)
    f.__name__ = name
    f.__doc__ = f"{compiled.fn.signature()} (Kina, a jax.custom_vjp through jax.pure_callback)"
    wrapped: Callable[..., Any] = f
    return wrapped
