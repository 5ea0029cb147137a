"""Helpers shared by the emission tests: locate the MLIR/LLVM tools from the pinned
wheels and run emitted text through `mlir-opt --verify` and the host lowering pipeline."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

from compiler import ir
from compiler.types import TensorType


def _wheel_bin(package: str, tool: str) -> str:
    env = os.environ.get(f"KINA_{tool.upper().replace('-', '_')}")
    if env:
        return env
    spec = importlib.util.find_spec(package)
    if spec and spec.submodule_search_locations:
        path = Path(list(spec.submodule_search_locations)[0]) / "bin" / tool
        if path.exists():
            return str(path)
    found = shutil.which(tool)
    assert found, f"{tool} not found (install the xtc-{package}-tools wheel)"
    return found


MLIR_OPT = _wheel_bin("mlir", "mlir-opt")
MLIR_TRANSLATE = _wheel_bin("mlir", "mlir-translate")
FILECHECK = _wheel_bin("llvm", "FileCheck")

# /work/shared/design/toolchain.md's pipeline, plus arith-expand{include-bf16}: without it
# BF16 extf/truncf become calls to __truncsfbf2, which Debian 12's libgcc does not have.
PIPELINE = [
    "--one-shot-bufferize=bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map",
    "--buffer-results-to-out-params=hoist-static-allocs modify-public-functions",
    "--buffer-deallocation-pipeline", "--convert-bufferization-to-memref",
    "--convert-linalg-to-loops", "--lower-affine", "--convert-scf-to-cf", "--expand-strided-metadata",
    "--arith-expand=include-bf16",
    "--convert-math-to-llvm", "--finalize-memref-to-llvm", "--convert-arith-to-llvm",
    "--convert-cf-to-llvm", "--convert-func-to-llvm", "--convert-index-to-llvm",
    "--reconcile-unrealized-casts",
]


def run(cmd: list[str], text: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, input=text, capture_output=True, text=True, timeout=60)


def verify(text: str) -> None:
    """mlir-opt parses and verifies the module."""
    r = run([MLIR_OPT, "-"], text)
    assert r.returncode == 0, r.stderr[:4000] + "\n" + text


def lower_to_llvm(text: str) -> str:
    """The host pipeline to the LLVM dialect, then LLVM IR (so no non-LLVM op survives)."""
    r = run([MLIR_OPT, *PIPELINE, "-"], text)
    assert r.returncode == 0, r.stderr[:4000] + "\n" + text
    t = run([MLIR_TRANSLATE, "--mlir-to-llvmir", "-"], r.stdout)
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
