"""LLVM's part of a build: the lowered module (LLVM dialect) -> an object file (-O1..-O3: for the host CPU).

* `dedupe_kernels`: the -O2 pipeline outlines every loop nest into a private function
  (`kina.kernel*`, see transform_library.OUTLINE_LIBRARY); kernels with the same body (the same
  op on the same shapes: the four [D, D] SGD updates, a layer's kernels repeated in the
  next layer, a forward kernel the exported forward and the train step both contain)
  are merged into one, so LLVM optimises and compiles each distinct kernel once.
* `llvm_object`: the lowered module's LLVM IR (compiler/backend/engine.py translates it), `opt -O<n>` (vector math from glibc's
  libmvec, `vector_math`) and `llc -O<n>` for the host CPU (-mcpu=native), as processes.  MLIR's ExecutionEngine did the same work in
  this process, but took 2.7x the CPU time of opt + llc on the same module (7.7-8.6 s
  against 2.7-3.1 s for the scaled StoryLM step), and a tool that LLVM aborts does not
  take the caller with it (it is reported as a crash of that tool).
* `DialectTools` (and `llvm_dialect_object`): the -O0 tools' finish, mlir-translate and llc
  (no opt, no -mcpu: the reference lowering), started ahead of their input, shared by the
  whole module (compiler/backend/toolchain.py), its parts and their entry module
  (compiler/backend/parts.py).
"""
from __future__ import annotations

import functools
import os
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from compiler.backend import cache as build_cache
from compiler.backend.errors import StageFailed
from compiler.backend.split import min_bytes
from compiler.backend.tools import StartedTool, find_tool, run_tool

if TYPE_CHECKING:
    from types import ModuleType

    from mlir.ir import Module, OpView, WalkResult

KERNEL_PREFIX = "kina.kernel"


_FUNCS = ("func.func", "llvm.func")
_CALLS = ("func.call", "llvm.call")


def dedupe_kernels(mlir_ir: ModuleType, module: Module) -> int:
    """Merge outlined kernels with identical bodies (func or LLVM dialect); returns how
    many went.  The pipeline merges them right after outlining (the "@merge-kernels" slot:
    the lowering passes then see each distinct kernel once) and again in the LLVM dialect
    (kernels that differed only in what the lowering folded away)."""
    kernels: dict[str, OpView] = {}
    for op in module.body.operations:
        if op.operation.name not in _FUNCS:
            continue
        name = mlir_ir.StringAttr(op.attributes["sym_name"]).value
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

    def visit(op: OpView) -> WalkResult:
        if op.name in _CALLS and "callee" in op.attributes:
            callee = mlir_ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            if callee in replace:
                op.attributes["callee"] = mlir_ir.FlatSymbolRefAttr.get(replace[callee])
        return mlir_ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    for name in replace:
        kernels[name].operation.erase()
    return len(replace)


@functools.lru_cache(maxsize=1)
def host_target() -> list[str]:
    """-mtriple/-mcpu flags for the host: mlir-translate writes no target triple, and
    without one `opt` has no target machine (no cost model: AVX-512 code is not chosen)."""
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


# Both cores: a lowered module of at least SPLIT_MIN_BYTES of LLVM IR is cut into
# LLVM_PARTS modules (`llvm-split`: whole functions, each part's internal symbols made
# hidden globals the other parts may call), and each part's opt and llc run beside the
# other's; `cc -r` joins the objects into one.  The kernels are never inlined into their
# callers (OUTLINE_LIBRARY's `noinline`), so a part loses no inlining: the scaled StoryLM
# library is bit-identical in its results and as fast, and its opt + llc take 1.4-1.5 s of
# CPU on the critical path instead of 2.3-2.7 s (75 and 63 of its 138 functions, each half's
# time within 15% of the other's).  A small module (StoryLM-0,
# the tests' programs) is one part: three more processes would cost more than they gain.
# KINA_LLVM_SPLIT_BYTES overrides the threshold (0: every module is split); a one-core
# machine splits only when it asks (split.min_bytes).
LLVM_PARTS = 2
SPLIT_MIN_BYTES = 200_000
# Functions dealt out in turn, not by llvm-split's default hash of their names: the hash
# gave the scaled StoryLM's halves 60 and 47 functions and 0.83 against 0.53 s of opt + llc
# (the bigger half is the critical path); in turn, 54 and 53 functions, 0.69 and 0.63 s
# (both halves side by side: 0.71-0.86 s against 0.89-1.02 s).
SPLIT_FLAGS = ["-round-robin"]
# With the build cache on, a module is cut finer, one part per CACHED_PART_BYTES of LLVM IR
# (at most MAX_CACHED_PARTS), each part's object cached (compiler/backend/cache.py
# `object_key`): an edit of one function recompiles the parts its changed functions fall
# in, with the unchanged functions that share those parts.  The GPT block (0.81 MB, 129
# functions) after an edit of layer_norm's eps (3 functions change), opt + llc of its
# parts on two cores: 8 parts 0.43-0.48 s (the first build 0.77-0.84 s), 12 parts
# 0.28 s (0.87 s), 16 or 24 parts 0.29-0.30 s (0.91-1.10 s): each part's tools cost
# their start-up again (benchmarks/README.md, "Objects cached per part").
CACHED_PART_BYTES = 64_000
MAX_CACHED_PARTS = 12
# llc's Loop Strength Reduction took 22% of its time on the scaled StoryLM (0.29 of 1.3 s,
# `bench_build.py --profile`): without it llc takes 0.8 instead of 1.1-1.2 s of CPU (both
# halves) and the train step is as fast (interleaved in one run, load 5: 59.7 vs 59.9 ms,
# 64.5 vs 72.0 ms; f32 matmul 512: 6.7 vs 7.3 ms; StoryLM-0's step within the noise).
LLC_FLAGS = ["-disable-lsr"]
# opt runs without its SLP vectoriser: on AVX2 hosts (no AVX-512) LLVM 22's SLP pass
# miscompiles straight-line code that the -O2 pipeline emits for small matmuls (the
# regression tests/regressions/issue11_transposed_weight_matmul.kina: [4, 5] @ [5, 8] plus
# [4, 3] @ transpose([8, 3]), then @ [8, 5], returned values off by up to 6.2; the bisection
# `opt -opt-bisect-limit` names slp-vectorizer, -O1 has none, none of its sub-options avoids
# it).  Vectorisation does not depend on it: the transform script vectorises the kernels,
# LLVM's loop vectoriser the rest.  KINA_LLVM_SLP=1 turns it back on (to test a newer LLVM).
# opt does not unroll loops of unknown trip count (-unroll-runtime=false): the loops that
# matter are unrolled already (the transform script's register tiles, LLVM's full unrolling
# of known trip counts, which stays on), and the runtime-unrolled copies of the rest were
# code for llc to compile for nothing: on the GPT block opt takes 0.99 instead of 1.12 s and
# llc 0.86 instead of 1.04 (least of 4), with the same train steps (scaled, static 22.7 vs
# 22.8 ms and dynamic 22.9 vs 23.5; large 335 vs 338 ms, medians of 15-25 interleaved
# rounds, benchmarks/ab_step.py).  -disable-loop-unrolling, which also stops full
# unrolling, made the scaled step 1.57x slower.
OPT_FLAGS = ["-unroll-runtime=false"] + ([] if os.environ.get("KINA_LLVM_SLP") == "1" else ["-vectorize-slp=false"])


class DialectTools:
    """The tools back end's finish (-O0, whole or in parts, and the parts' entry module) for
    a module in the LLVM dialect: mlir-translate (to LLVM IR) and `llc -O<llvm_level>` into
    `obj`, both started when this is made, reading their input from stdin, so that their
    start-up overlaps the stage before (mlir-opt; a small program's -O0 build in a warm
    process: 0.14-0.18 -> 0.11-0.12 s).  `finish(text, timings)` returns the LLVM IR; timings get
    "mlir-translate" and "llc".  Use it in a `with` block: the tools stop if it is left
    before `finish` (a failed mlir-opt)."""

    def __init__(self, obj: Path, llvm_level: int) -> None:
        self._stack = ExitStack()
        self._translate = self._stack.enter_context(StartedTool("mlir-translate", ["--mlir-to-llvmir", "-"]))
        self._llc = self._stack.enter_context(StartedTool(
            "llc", [f"-O{llvm_level}", "-filetype=obj", "-relocation-model=pic", "-", "-o", str(obj)]))

    def __enter__(self) -> DialectTools:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def finish(self, llvm_mlir_text: str, timings: dict[str, float]) -> str:
        ll = self._translate.finish(llvm_mlir_text, timings, "mlir-translate")
        self._llc.finish(ll, timings, "llc")
        return ll


def llvm_dialect_object(llvm_mlir_text: str, obj: Path, llvm_level: int, timings: dict[str, float]) -> str:
    """DialectTools for a module with no stage before it to overlap; returns the LLVM IR."""
    with DialectTools(obj, llvm_level) as tools:
        return tools.finish(llvm_mlir_text, timings)


def llvm_object(ll: Path, obj: Path, llvm_level: int, timings: dict[str, float], part: bool = False,
                objects: Path | None = None) -> None:
    """Optimise and compile the lowered module's LLVM IR (a .ll file, written by the
    engine's translation) into `obj`.  `part`: the module is one part of a library built in
    parts (compiler/backend/parts.py), whose objects are joined: the symbols llvm-split made
    hidden globals are made local again, so that two parts' kernels of one name never clash.
    `objects`: the build cache's root, where each part's object is looked up and stored
    (None: the cache is off)."""
    work = obj.parent
    count = _part_count(ll.stat().st_size, objects is not None)
    if count == 1:
        _opt_and_llc([(ll, work / "optimised.bc", obj)], llvm_level, timings, objects)
    else:
        # Cached parts are cut by llvm-split's hash of each function's name, so that a function
        # lands in the same part in every build; uncached ones are dealt in turn (SPLIT_FLAGS).
        flags = [] if objects is not None else SPLIT_FLAGS
        run_tool("llvm-split", [f"-j{count}", *flags, "-o", str(work / "part"), str(ll)], timings, "llvm-opt")
        parts = [(work / f"part{k}", work / f"part{k}.bc", work / f"part{k}.o") for k in range(count)]
        _opt_and_llc(parts, llvm_level, timings, objects)
        run_tool("cc", ["-r", "-nostdlib", "-o", str(obj), *(str(o) for _, _, o in parts)], timings, "codegen")
        if part:   # defined hidden symbols only: the undefined `_kina_fail` stays global
            run_tool("llvm-objcopy", ["--localize-hidden", str(obj)], timings, "codegen")
    if not obj.exists():
        raise StageFailed("llc", "llc wrote no object file")


def _part_count(size: int, cached: bool) -> int:
    """How many parts a lowered module of `size` bytes of LLVM IR is compiled in: one below
    the split threshold; else LLVM_PARTS, or with the object cache on one per
    CACHED_PART_BYTES (at most MAX_CACHED_PARTS), so that an edit recompiles a few parts."""
    if size < min_bytes("KINA_LLVM_SPLIT_BYTES", SPLIT_MIN_BYTES, LLVM_PARTS):
        return 1
    if not cached:
        return LLVM_PARTS
    return max(LLVM_PARTS, min(MAX_CACHED_PARTS, -(-size // CACHED_PART_BYTES)))


def _opt_and_llc(parts: list[tuple[Path, Path, Path]], llvm_level: int, timings: dict[str, float],
                 objects: Path | None = None) -> None:
    """opt (input -> bitcode) then llc (bitcode -> object) for every (input, bitcode, object)
    part, each part's two tools one after the other and the parts side by side (one per
    core, the largest first): a part whose opt ends first starts its llc at once (no barrier
    between the phases).  With `objects` (the build cache's root), a part whose object the
    cache holds is not compiled, and a compiled one is stored.  timings get each phase's
    longest time over the parts."""
    vector_lib = ["-vector-library=LIBMVEC"] if vector_math() else []
    opt_args = [f"-O{llvm_level}", *OPT_FLAGS, *host_target(), *vector_lib]
    llc_args = [f"-O{llvm_level}", *LLC_FLAGS, *host_target(), "-relocation-model=pic", "-filetype=obj"]
    salt = build_cache.object_salt(opt_args, llc_args) if objects is not None else None

    def chain(part: tuple[Path, Path, Path]) -> dict[str, float]:
        src, bc, o = part
        key = None if salt is None else build_cache.object_key(salt, src.read_bytes())
        if key is not None and build_cache.fetch(key, o, objects):
            return {}
        spent: dict[str, float] = {}
        run_tool("opt", [*opt_args, str(src), "-o", str(bc)], spent, "llvm-opt")
        run_tool("llc", [*llc_args, str(bc), "-o", str(o)], spent, "codegen")
        if key is not None:
            build_cache.store(key, o, {"kind": "object"}, objects, file=build_cache.OBJECT, bound=False)
        return spent

    t0 = time.perf_counter()
    if len(parts) == 1:
        spents = [chain(parts[0])]
    else:
        largest_first = sorted(parts, key=lambda part: -part[0].stat().st_size)
        with ThreadPoolExecutor(min(len(parts), len(os.sched_getaffinity(0)))) as pool:   # processes: no GIL held
            spents = list(pool.map(chain, largest_first))
    if objects is not None:
        build_cache.evict(objects, build_cache.max_bytes())
    # The phase's wall time, shared between the two stages as their summed times are (more
    # parts than cores queue, so no one part's time is the critical path).
    wall, total = time.perf_counter() - t0, sum(sum(sp.values()) for sp in spents)
    for stage in ("llvm-opt", "codegen"):
        share = sum(sp.get(stage, 0.0) for sp in spents) / total if total else 0.5
        timings[stage] = timings.get(stage, 0.0) + wall * share
