"""Tensors of other libraries in and out of a call, without copies (issue 28).

A Kina function takes, besides NumPy arrays, any object that implements the DLPack
protocol (`__dlpack__` / `__dlpack_device__`: PyTorch and JAX tensors, CuPy host arrays,
NumPy 2 arrays), as an argument or an out= buffer:

- its device must be the CPU (DLPack device type 1); any other is refused with a
  KinaArgumentError naming the device (`cuda:0`), never copied to the host behind the
  caller's back;
- the C fast path (compiler/runtime/_dlpack.h) reads it itself, without a copy: a torch
  tensor through torch's DLPack C exchange API, anything else through the capsule of its
  `__dlpack__`; it checks everything below and declines what does not pass.  This module is
  the Python path behind it, which gives the messages (and runs every call when the C
  helper is not built): the object becomes a NumPy array over the same memory
  (`np.from_dlpack`; for a torch.Tensor the same view through `is_cpu` and
  `Tensor.numpy()`, five times cheaper than torch's DLPack methods), so the library reads
  (or, for out=, writes) the caller's buffer;
- it must be C-contiguous: a strided view is refused (copying it is the caller's decision,
  `x.contiguous()`), unlike a NumPy view, which the runtime copies as it always has;
- the dtype and shape are then checked like a NumPy array's, with the same messages;
- a torch.Tensor that requires grad is refused: the runtime records no gradient (the
  differentiable entry points are in compiler.interop).

`like=` turns the results into the caller's kind of tensor, again without a copy:
`lib.f(x_t, w_t, like=x_t)` (or `like="torch"`, `"jax"`, `"numpy"`) returns torch tensors
over the result buffers the runtime allocated.  For torch the C fast path allocates them
itself and makes each tensor through torch's DLPack C exchange API (`fresh_kind` below,
compiler/runtime/_results.h); the Python path (`wrap`) makes them from NumPy arrays.
"""
from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from compiler.runtime.arrays import Array
from compiler.runtime.errors import KinaArgumentError

try:  # the C fast path, built by `pip install -e .` (setup.py)
    from compiler.runtime import _fastcall
except ImportError:  # pragma: no cover - exercised by the tests with fastcall=False
    _fastcall = None  # type: ignore[assignment]  # (results are then made by wrap)

CPU = 1
# DLPack's DLDeviceType codes (dlpack.h) for the messages.
DEVICE_NAMES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal", 9: "vpi", 10: "rocm",
                11: "rocm_host", 12: "ext_dev", 13: "cuda_managed", 14: "oneapi", 15: "webgpu", 16: "hexagon",
                17: "maia"}


def _describe(value: object) -> str:
    t = type(value)
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    return f"a {t.__module__.split('.')[0]}.{t.__name__}" + (f" of dtype {dtype}" if dtype is not None else "") + (
        f" and shape {list(shape)}" if shape is not None else "")


def _torch_tensor() -> type | None:
    """torch.Tensor when torch is imported (the runtime never imports it)."""
    torch = sys.modules.get("torch")
    return getattr(torch, "Tensor", None)


def _torch_array(fn: str, what: object, value: Any) -> Array:
    """as_array for a torch.Tensor through its own attributes: torch's __dlpack_device__ and
    __dlpack__ are Python methods that cost 7 us each; `is_cpu` and `numpy()` say the same."""
    if not value.is_cpu:
        raise KinaArgumentError(f"{fn}: {what} is {_describe(value)} on device {value.device}; Kina libraries run "
                                f"on the CPU and copy nothing behind your back: move it first (e.g. `x.cpu()`)")
    if value.requires_grad:
        raise KinaArgumentError(f"{fn}: {what} is {_describe(value)} that requires grad; the runtime records no "
                                f"gradient: use compiler.interop.torch_function for a differentiable call, or "
                                f"pass `x.detach()`")
    try:
        arr: Array = value.numpy()      # np.from_dlpack's array (zero-copy) at a third of its cost
    except (TypeError, RuntimeError) as e:
        raise KinaArgumentError(f"{fn}: {what} is {_describe(value)} that NumPy cannot view without a copy "
                                f"({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
    if not arr.flags.c_contiguous:
        raise KinaArgumentError(f"{fn}: {what} is {_describe(value)} that is not C-contiguous (strides "
                                f"{list(value.stride())}); a Kina library reads row-major memory and the runtime "
                                f"copies no tensor silently: pass `x.contiguous()` (a copy you choose)")
    return arr


def as_array(fn: str, what: object, value: Any) -> Array:
    """The NumPy array over a DLPack object's memory; KinaArgumentError (naming `what`, e.g.
    "parameter `x`") for another device, a strided layout, a tensor that requires grad, or
    a dtype NumPy cannot view."""
    tensor = _torch_tensor()
    if tensor is not None and isinstance(value, tensor):
        return _torch_array(fn, what, value)
    try:
        device = value.__dlpack_device__()
        kind, index = int(device[0]), int(device[1])
    except Exception as e:
        raise KinaArgumentError(f"{fn}: {what} is {_describe(value)} whose __dlpack_device__() failed ({e})") from None
    if kind != CPU:
        name = DEVICE_NAMES.get(kind, f"DLPack device type {kind}")
        raise KinaArgumentError(f"{fn}: {what} is {_describe(value)} on device {name}:{index}; Kina libraries run "
                                f"on the CPU and copy nothing behind your back: move it first (e.g. `x.cpu()`)")
    if getattr(value, "requires_grad", False):
        raise KinaArgumentError(f"{fn}: {what} is {_describe(value)} that requires grad; the runtime records no "
                                f"gradient: use compiler.interop.torch_function for a differentiable call, or "
                                f"pass `x.detach()`")
    try:
        arr = np.from_dlpack(value)
    except Exception as e:    # whatever a producer's __dlpack__ raises, it is a bad argument

        raise KinaArgumentError(f"{fn}: {what} is {_describe(value)} that NumPy cannot view without a copy "
                                f"({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
    if not arr.flags.c_contiguous:
        strides = getattr(value, "stride", None)
        layout = f" (strides {list(strides())})" if callable(strides) else ""
        raise KinaArgumentError(f"{fn}: {what} is {_describe(value)} that is not C-contiguous{layout}; a Kina "
                                f"library reads row-major memory and the runtime copies no tensor silently: "
                                f"pass `x.contiguous()` (a copy you choose)")
    return arr


class _Label:
    """`parameter `x`` / `out= result 0`, formatted only for a message (a call formats none)."""
    __slots__ = ("names", "i", "out")

    def __init__(self, names: Sequence[object], i: int, out: bool) -> None:
        self.names, self.i, self.out = names, i, out

    def __str__(self) -> str:
        if self.out:
            return f"out= result {self.i}"
        if self.i < len(self.names):
            return f"parameter `{getattr(self.names[self.i], 'name', self.names[self.i])}`"
        return f"argument {self.i}"


def convert(fn: str, params: Sequence[object], args: tuple[object, ...], outs: tuple[object, ...],
            ) -> tuple[tuple[object, ...], tuple[object, ...]] | None:
    """args and outs with every DLPack object as a NumPy array, or None when there is none.
    params: the parameters' specs (or names), for the messages."""
    tensor = _torch_tensor()
    found = False
    converted: list[tuple[object, ...]] = []
    for out, values in ((False, args), (True, outs)):
        new = list(values)
        for i, v in enumerate(values):
            if type(v) is np.ndarray:
                continue
            if tensor is not None and isinstance(v, tensor):
                new[i] = _torch_array(fn, _Label(params, i, out), v)
            elif hasattr(type(v), "__dlpack__"):
                new[i] = as_array(fn, _Label(params, i, out), v)
            else:
                continue
            found = True
        converted.append(tuple(new))
    return (converted[0], converted[1]) if found else None


# ---- results as the caller's kind of tensor -------------------------------------------------
def _module_of(like: object) -> str:
    if isinstance(like, str):
        return like
    return type(like).__module__.split(".")[0]


def _wrapper(module: str) -> Callable[[Array], object]:
    if module == "numpy":
        return lambda a: a
    if module == "torch":
        torch = sys.modules.get("torch") or importlib.import_module("torch")
        return torch.from_numpy   # type: ignore[no-any-return]  # zero-copy, as torch.from_dlpack
    if module in ("jax", "jaxlib"):
        jnp = importlib.import_module("jax.numpy")
        return jnp.from_dlpack  # type: ignore[no-any-return]
    try:
        lib = sys.modules.get(module) or importlib.import_module(module)
        from_dlpack: Callable[[Array], object] = lib.from_dlpack
    except (ImportError, AttributeError):
        raise KinaArgumentError(f"like={module!r}: no module `{module}` with a from_dlpack function "
                                f"(use 'numpy', 'torch', 'jax' or a tensor of the kind wanted)") from None
    return from_dlpack


class _FreshKinds(dict[object, "type | None"]):
    """like= (a module name, or a tensor's type) -> the type whose tensors the C fast path
    allocates as results (`_fastcall.fresh`), or None (NumPy arrays, then `wrap`).  Only
    torch, as torch.Tensor: its results are plain tensors whatever like's type (a Parameter),
    as `wrap` makes them; a torch without the DLPack C exchange API takes `wrap`."""

    def __missing__(self, key: object) -> type | None:
        module = key if isinstance(key, str) else getattr(key, "__module__", "").split(".")[0]
        kind = None
        if module == "torch" and _fastcall is not None:
            torch = sys.modules.get("torch") or importlib.import_module("torch")
            kind = torch.Tensor if _fastcall.allocates(torch.Tensor) else None
        self[key] = kind
        return kind


# `FRESH_KINDS[like if type(like) is str else type(like)]`: resolved once per key.
FRESH_KINDS = _FreshKinds()


# like= (a module name, or a tensor's type) -> its wrapper: resolved once, since a call
# costs about a microsecond and resolving it a third of that.
_WRAPPERS: dict[object, Callable[[Array], object]] = {}


def wrap(results: Array | tuple[Array, ...], like: object) -> object:
    """The results as tensors of like's library (`like` a tensor or a module name)."""
    key = like if isinstance(like, str) else type(like)
    to = _WRAPPERS.get(key)
    if to is None:
        to = _WRAPPERS[key] = _wrapper(_module_of(like))
    if isinstance(results, tuple):
        return tuple(to(r) for r in results)
    return to(results)
