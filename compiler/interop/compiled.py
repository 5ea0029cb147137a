"""One Kina function and its VJP, built into a library and loaded (the part of
torch_function / jax_function that knows neither framework).

`compile_function(source_or_path, name, opt_level, sizes)` builds `name` with `--vjp name`
(only `name`, `name_vjp` and what they call are exported) and loads the library.  Built
libraries are kept per process by (source text, name, opt level, sizes), and the build
cache (compiler/backend/cache.py) makes a second process's build a copy.  A generic
function built without `sizes` is exported dynamic: one library takes every size, bound
from the arguments' shapes at each call (docs/compiling.md, "Dynamic sizes").
"""
from __future__ import annotations

import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from compiler import build
from compiler.ad import vjp_name
from compiler.core.diagnostics import SourceText
from compiler.core.types import DType
from compiler.runtime import KinaFunction, Library, load


class KinaBuildError(Exception):
    """The Kina source did not build: the message holds the compiler's diagnostics."""


@dataclass(frozen=True)
class Param:
    name: str
    dtype: DType
    differentiable: bool   # a float parameter: it has a cotangent in name_vjp's results


@dataclass(frozen=True)
class CompiledFunction:
    """`fn` and `vjp` (name_vjp) of one loaded library, with fn's parameters."""
    name: str
    library: Library
    fn: KinaFunction
    vjp: KinaFunction
    params: tuple[Param, ...]
    result_dtype: DType

    @property
    def float_params(self) -> list[int]:
        """Indices of the parameters name_vjp returns a cotangent for, in its result order."""
        return [i for i, p in enumerate(self.params) if p.differentiable]


_LIBRARIES: dict[tuple[str, str, int, tuple[tuple[str, int], ...]], CompiledFunction] = {}
_LOCK = threading.Lock()


def read(source_or_path: str | Path) -> tuple[str, str]:
    """(text, path for messages): a Path, or a str naming an existing `.kina` file, is read;
    any other str is Kina source text."""
    if isinstance(source_or_path, Path) or (source_or_path.endswith(".kina") and "\n" not in source_or_path):
        path = Path(source_or_path)
        try:
            return path.read_text(), str(path)
        except OSError as e:
            raise KinaBuildError(f"cannot read {path}: {e.strerror or e}") from None
    return source_or_path, "<source>"


def compile_function(source_or_path: str | Path, name: str, opt_level: int = 2,
                     sizes: Mapping[str, int] | None = None) -> CompiledFunction:
    """Build (or take from this process's cache) `name` and `name_vjp`, loaded."""
    text, path = read(source_or_path)
    key = (text, name, opt_level, tuple(sorted((sizes or {}).items())))
    with _LOCK:
        hit = _LIBRARIES.get(key)
        if hit is None:
            hit = _LIBRARIES[key] = _build(text, path, name, opt_level, sizes)
    return hit


def _build(text: str, path: str, name: str, opt_level: int, sizes: Mapping[str, int] | None) -> CompiledFunction:
    # The runtime dlopens a private copy of the library, so the files can go at once.
    with tempfile.TemporaryDirectory(prefix="kina-interop-") as tmp:
        so = Path(tmp) / "lib.so"
        result = build.build_source(text, path, so, opt_level=opt_level, sizes=sizes,
                                    transform=build.keep_exports([name]), vjp=[name])
        if not result.ok:
            source = result.source or SourceText(text, path)
            rendered = "\n".join(source.render(d) for d in result.diagnostics)
            raise KinaBuildError(f"building `{name}` (with its VJP) from {path} failed:\n{rendered}")
        library = load(so)
    program = result.program
    assert program is not None   # set by a build that is ok
    ir_fn = program.functions[name]
    params = tuple(Param(p.name, p.type.dtype, p.type.is_float) for p in ir_fn.params)
    result_types = build.result_types(ir_fn)
    if len(result_types) != 1:   # add_vjp_exports refuses a tuple result: never reached
        raise KinaBuildError(f"`{name}` returns {len(result_types)} tensors; a differentiable Kina function "
                             "returns one")
    return CompiledFunction(name, library, library[name], library[vjp_name(name)], params, result_types[0].dtype)
