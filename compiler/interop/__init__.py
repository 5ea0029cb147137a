"""Interop: a compiled Kina function as a differentiable op of PyTorch or JAX (issue 28).

Takes Kina source (a path or text) and the name of a function `f` returning one float
tensor; builds it with its VJP export `f_vjp(args.., g_y) -> (y, cotangents)` (`kinac build
--vjp f`, compiler/ad/vjp_export.py) and gives:

  torch_function(source_or_path, name, opt_level=2, sizes=None) -> TorchFunction: a callable
    over torch.Tensors whose backward (a torch.autograd.Function) calls f_vjp
  TorchModule(source_or_path, name, inputs, init=None, ...): an nn.Module whose
    nn.Parameters are f's float parameters not named in `inputs` (trained by torch.optim)
  jax_function(source_or_path, name, opt_level=2, sizes=None): a jax.custom_vjp function
    whose primal and VJP call the library through jax.pure_callback (jit, grad)
  compile_function, CompiledFunction, KinaBuildError (compiled: the framework-free part)

Tensors cross without copies through the runtime's DLPack path (compiler/runtime/dlpack.py).
torch and JAX are optional: torch_function / TorchModule import torch and jax_function
imports jax on first use, so `import compiler.interop` needs neither.  docs/interop.md
explains the entry points, the dtype mapping, the DLPack rules and the VJP export.

Inside: compiled (build + load, cached per process), torch_bridge, jax_bridge.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from compiler.interop.compiled import CompiledFunction, KinaBuildError, compile_function

if TYPE_CHECKING:
    from compiler.interop.torch_bridge import TorchFunction, TorchModule

__all__ = ["CompiledFunction", "KinaBuildError", "TorchFunction", "TorchModule", "compile_function",
           "jax_function", "torch_function"]


def torch_function(*args: Any, **kwargs: Any) -> TorchFunction:
    """compiler.interop.torch_bridge.torch_function (imports torch)."""
    from compiler.interop import torch_bridge
    return torch_bridge.torch_function(*args, **kwargs)


def jax_function(*args: Any, **kwargs: Any) -> Any:
    """compiler.interop.jax_bridge.jax_function (imports jax)."""
    from compiler.interop import jax_bridge
    return jax_bridge.jax_function(*args, **kwargs)


def __getattr__(name: str) -> Any:
    if name in ("TorchModule", "TorchFunction"):    # a class: imported (with torch) when first named
        from compiler.interop import torch_bridge
        return getattr(torch_bridge, name)
    raise AttributeError(f"module 'compiler.interop' has no attribute {name!r}")
