"""A Kina function as a PyTorch op: `torch_function` and `TorchModule` (docs/interop.md).

The forward calls the library's `name` on the tensors' own memory (the runtime's DLPack
path: CPU, C-contiguous, the declared dtypes, else a KinaArgumentError); the backward of the
torch.autograd.Function calls `name_vjp(args.., g_y)` with the cotangent autograd hands it
(made contiguous: autograd's cotangents are often expanded views) and returns the
cotangents of the float inputs that need one (the library computes all of them; the others
are dropped).  `name_vjp` runs the forward again, so nothing but the inputs is saved.

torch.compile: eager calls take the torch.autograd.Function above (the cheapest path);
under tracing the call goes through a custom op registered with torch.library.custom_op
(compiler/interop/custom_op.py), which torch.compile keeps in its graph as one opaque op
with a fake (shape) implementation and an autograd formula calling `name_vjp`.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from compiler.interop import custom_op
from compiler.interop.compiled import CompiledFunction, compile_function


def _plain(t: object) -> object:
    """A tensor without its autograd history (the runtime refuses tensors that require grad)."""
    return t.detach() if isinstance(t, torch.Tensor) and t.requires_grad else t


class _KinaAutograd(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, compiled: CompiledFunction, *inputs: torch.Tensor) -> torch.Tensor:
        ctx.compiled = compiled
        ctx.save_for_backward(*inputs)
        result: torch.Tensor = compiled.fn(*map(_plain, inputs), like="torch")
        return result

    @staticmethod
    def backward(ctx: Any, g_y: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        compiled: CompiledFunction = ctx.compiled
        inputs = ctx.saved_tensors
        wanted = ctx.needs_input_grad[1:]
        grads: list[torch.Tensor | None] = [None] * len(inputs)
        if any(wanted):
            outs = compiled.vjp(*map(_plain, inputs), g_y.detach().contiguous(), like="torch")
            cotangents = outs[1:] if isinstance(outs, tuple) else ()
            for i, g in zip(compiled.float_params, cotangents):
                if wanted[i]:
                    grads[i] = g
        return (None, *grads)


class TorchFunction:
    """`f(*tensors) -> tensor`, differentiable by torch autograd (see the module docstring)."""

    def __init__(self, compiled: CompiledFunction) -> None:
        self.compiled = compiled
        self.__name__ = compiled.name
        self.__doc__ = f"{compiled.fn.signature()} (Kina, differentiable by torch autograd)"
        self._op = custom_op.register(compiled)

    def __call__(self, *inputs: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():      # traced: the registered custom op (custom_op.py)
            traced: torch.Tensor = self._op(list(inputs))
            return traced
        if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs):
            result: torch.Tensor = _KinaAutograd.apply(self.compiled, *inputs)   # type: ignore[no-untyped-call]
            return result
        plain: torch.Tensor = self.compiled.fn(*map(_plain, inputs), like="torch")   # nothing to record
        return plain

    def __repr__(self) -> str:
        return f"<torch_function {self.compiled.fn.signature()}>"

    def __deepcopy__(self, memo: dict[int, object]) -> TorchFunction:
        """Itself: the loaded library is immutable and shared (copy.deepcopy of a TorchModule
        copies its parameters, not the machine code)."""
        return self


def torch_function(source_or_path: str | Path, name: str, opt_level: int = 2,
                   sizes: Mapping[str, int] | None = None) -> TorchFunction:
    """The Kina function `name` of a source file (a path, or source text) as a callable over
    torch.Tensors, differentiable by torch autograd; built at `opt_level` with `name_vjp`.
    `sizes` binds a generic function's sizes (one library per size set); without it a
    generic function is built dynamic and takes any sizes."""
    return TorchFunction(compile_function(source_or_path, name, opt_level, sizes))


def _default_init(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """nn.Linear's default for a matrix (U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = shape[-2]),
    ones for a vector (a norm's scale; pass `init` for a bias), zeros for a scalar."""
    if len(shape) >= 2:
        bound = 1.0 / math.sqrt(shape[-2])
        return (torch.rand(shape, generator=generator) * 2 - 1) * bound
    return torch.ones(shape) if shape else torch.zeros(shape)


class TorchModule(torch.nn.Module):
    """An nn.Module over a Kina function: the float parameters not named in `inputs` are
    nn.Parameters (so torch.optim trains them), `forward(*inputs)` takes the others in the
    order `inputs` names them.  `init` gives parameters' initial values (name -> tensor or
    array; required for a dynamic function, whose shapes depend on sizes), the rest start
    as _default_init says."""

    def __init__(self, source_or_path: str | Path, name: str, inputs: tuple[str, ...] | list[str],
                 init: Mapping[str, Any] | None = None, opt_level: int = 2,
                 sizes: Mapping[str, int] | None = None, seed: int = 0) -> None:
        super().__init__()
        self.kina = torch_function(source_or_path, name, opt_level, sizes)
        compiled = self.kina.compiled
        names = [p.name for p in compiled.params]
        unknown = [n for n in [*inputs, *(init or {})] if n not in names]
        if unknown:
            raise ValueError(f"`{name}` has no parameter `{unknown[0]}` (its parameters: {', '.join(names)})")
        self.inputs = tuple(inputs)
        self.param_names = [p.name for p in compiled.params if p.name not in self.inputs]
        not_float = [p.name for p in compiled.params if p.name in self.param_names and not p.differentiable]
        if not_float:
            raise ValueError(f"`{name}`'s parameter `{not_float[0]}` is not a float tensor: name it in `inputs`")
        generator = torch.Generator().manual_seed(seed)
        dtypes = {p.name: p.dtype for p in compiled.params}
        for p_name, spec in zip(names, compiled.fn.params):
            if p_name not in self.param_names:
                continue
            value = (init or {}).get(p_name)
            if value is None:
                shape = tuple(spec.shape)
                if not all(isinstance(d, int) for d in shape):
                    raise ValueError(f"`{name}` is generic (built without sizes): give parameter `{p_name}` "
                                     f"an initial value in init=, or pass sizes=")
                value = _default_init(shape, generator)   # type: ignore[arg-type]  # ints, checked above
            tensor = torch.as_tensor(value).detach().clone().to(_TORCH_DTYPES[dtypes[p_name].value])
            self.register_parameter(p_name, torch.nn.Parameter(tensor.contiguous()))

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        if len(inputs) != len(self.inputs):
            raise TypeError(f"{type(self).__name__}({self.kina.compiled.name}) takes {len(self.inputs)} input(s) "
                            f"({', '.join(self.inputs)}), got {len(inputs)}")
        given = dict(zip(self.inputs, inputs))
        args = [given[p.name] if p.name in given else getattr(self, p.name) for p in self.kina.compiled.params]
        return self.kina(*args)


# Kina dtype -> torch dtype (docs/interop.md, "Dtypes"); F64 joins with the F64 dtype.
_TORCH_DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
                 "I64": torch.int64, "Bool": torch.bool}
