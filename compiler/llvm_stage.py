"""LLVM's part of -O1..-O3: the lowered module (LLVM dialect) -> an object file for the host CPU.

* `dedupe_kernels`: the -O2 pipeline outlines every loop nest into a private function
  (`kina.kernel*`, see transform_library.OUTLINE_LIBRARY); kernels with the same body (the same
  op on the same shapes: the four [D, D] SGD updates, a layer's kernels repeated in the
  next layer, a forward kernel the exported forward and the train step both contain)
  are merged into one, so LLVM optimises and compiles each distinct kernel once.
* `llvm_object`: `mlir-translate --mlir-to-llvmir`, `opt -O<n>` (vector math from glibc's
  libmvec, `vector_math`) and `llc -O<n>` for the host CPU (-mcpu=native), as processes.  MLIR's ExecutionEngine did the same work in
  this process, but took 2.7x the CPU time of opt + llc on the same module (7.7-8.6 s
  against 2.7-3.1 s for the scaled StoryLM step), and a tool that LLVM aborts does not
  take the caller with it (it is reported as a crash of that tool).
"""
from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

from .toolchain_errors import StageFailed

KERNEL_PREFIX = "kina.kernel"


def dedupe_kernels(ir, module) -> int:
    """Merge outlined kernels with identical bodies (LLVM dialect); returns how many went."""
    kernels = {}
    for op in module.body.operations:
        if op.operation.name != "llvm.func":
            continue
        name = ir.StringAttr(op.attributes["sym_name"]).value
        if name.startswith(KERNEL_PREFIX) and len(op.regions[0].blocks):
            kernels[name] = op
    first: dict[str, str] = {}
    replace: dict[str, str] = {}
    for name, op in kernels.items():
        # use_local_scope: print without walking the module (its default printing state
        # covers the whole module: merging 545 kernels took 80 s that way).
        text = op.operation.get_asm(use_local_scope=True, assume_verified=True)
        body = text.replace(f'@"{name}"', "@K", 1).replace(f"@{name}", "@K", 1)
        keep = first.setdefault(body, name)
        if keep != name:
            replace[name] = keep
    if not replace:
        return 0

    def visit(op):
        if op.name == "llvm.call" and "callee" in op.attributes:
            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            if callee in replace:
                op.attributes["callee"] = ir.FlatSymbolRefAttr.get(replace[callee])
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    for name in replace:
        kernels[name].operation.erase()
    return len(replace)


@functools.lru_cache(maxsize=1)
def host_target() -> list[str]:
    """-mtriple/-mcpu flags for the host: mlir-translate writes no target triple, and
    without one `opt` has no target machine (no cost model: AVX-512 code is not chosen)."""
    from .toolchain import find_tool
    out = subprocess.run([str(find_tool("llc")), "--version"], capture_output=True, text=True).stdout
    m = re.search(r"Default target:\s*(\S+)", out)
    return ([f"-mtriple={m[1]}"] if m else []) + ["-mcpu=native"]


# Vector math: with glibc's libmvec as opt's vector library, the loop vectoriser turns the
# per-element expf / logf / tanhf calls of exp, log, softmax and their VJPs into calls of
# 4- or 8-wide vector variants (_ZGVbN4v_expf, _ZGVdN8v_expf, ...); without one, a vector
# of exp was 16 scalar expf calls.  libmvec's functions are accurate to a few ULP (glibc's
# figures), within every dtype's tolerance of the differential tests.  KINA_VECTOR_MATH=0
# keeps the scalar calls; without libmvec (a non-glibc host) so does every build.
VECTOR_MATH_LIBRARY = "libmvec.so.1"
VECTOR_MATH_SYMBOL = b"_ZGV"


@functools.lru_cache(maxsize=4)
def _libmvec(setting: str) -> bool:
    if setting in ("0", "off", "false", "no"):
        return False
    import ctypes
    try:
        ctypes.CDLL(VECTOR_MATH_LIBRARY)
    except OSError:
        return False
    return True


def vector_math() -> bool:
    """Whether opt may call libmvec's vector math functions."""
    import os
    return _libmvec(os.environ.get("KINA_VECTOR_MATH", "").strip())


def uses_vector_math(obj: Path) -> bool:
    """Whether the object calls libmvec (the link then names it: -l:libmvec.so.1)."""
    return VECTOR_MATH_SYMBOL in obj.read_bytes()


def llvm_object(lowered: str, obj: Path, llvm_level: int, timings: dict) -> None:
    """Translate, optimise and compile the lowered module text into `obj`."""
    work = obj.parent
    src, ll, bc = work / "lowered.mlir", work / "lowered.ll", work / "optimised.bc"
    src.write_text(lowered)
    from .toolchain import _run  # with its timeout and crash report
    _run("mlir-translate", ["--mlir-to-llvmir", str(src), "-o", str(ll)], timings, "llvm-opt")
    vector_lib = ["-vector-library=LIBMVEC"] if vector_math() else []
    _run("opt", [f"-O{llvm_level}", *host_target(), *vector_lib, str(ll), "-o", str(bc)], timings, "llvm-opt")
    _run("llc", [f"-O{llvm_level}", *host_target(), "-relocation-model=pic", "-filetype=obj", str(bc),
                 "-o", str(obj)], timings, "codegen")
    if not obj.exists():
        raise StageFailed("llc", "llc wrote no object file")
