"""Threading of the -O2 kernels: MLIR's OpenMP dialect on LLVM's OpenMP runtime (libomp).

The -O2 transform script makes the big kernels scf.forall loops (backend/parallelize.py tags the
matmuls of at least PARALLEL_MIN_FLOPS, row-parallel generics of at least
PARALLEL_MIN_ELEMENTS).  The "@threads" slot of the pass pipeline turns them into
`omp.parallel` + `omp.wsloop` (`convert-scf-to-openmp`); LLVM's OpenMPIRBuilder then
outlines each loop body once and calls `__kmpc_fork_call` / `__kmpc_for_static_init_*`
of libomp.  The library links libomp with an absolute rpath, only when its object calls it.

Why not MLIR's async runtime (what -O2 used before): `async-parallel-for` emits, per
parallel loop, a compute function, an "aligned loops" copy of it, a recursive dispatch
function and coroutines; on the scaled StoryLM step (105 parallel loops) that was 70%
of the optimised LLVM IR and 12.6 of the 19 s of CPU its -O2 build took.  The OpenMP
form adds a few dozen instructions per loop (build: 4.7 s of CPU in all).

The runtime comes from the `cmeel-libomp` wheel (LLVM's libomp, pinned in pyproject.toml).
KINA_OPENMP=0 builds every kernel serial; KINA_OPENMP=/path/to/libomp.so uses another
copy.  Without a runtime the forall loops become serial loops (`scf-forall-to-for`):
the same results, one core.  At run time the usual OpenMP variables apply
(OMP_NUM_THREADS, KMP_BLOCKTIME, ...).  Each thread computes whole blocks or rows in
the order a serial loop would, so results are bit-identical to the serial kernels.

The loops keep convert-scf-to-openmp's static schedule: thread t takes the t-th contiguous
share of a loop's iterations, so the rows a thread writes in one loop are the rows it
reads in the next (row-parallel generics and fills split rows, a matmul's forall its
row-major blocks, in the same halves).  A row another core wrote is fetched from that
core's cache: a [256, 256] @ [256, 256] product right after a serial op wrote A took
0.098 against 0.070 ms on two Zen 5 cores.  schedule(dynamic), which this replaced (a
descheduled thread then held back no share of its own), hands out the blocks in arrival
order: on a quiet machine the scaled StoryLM step ran 3-6% faster static (benchmarks/
ab_step.py, three runs), and under a process spinning on one of the two cores the two
were alike (13.1 against 13.3 ms: the barrier waits for the descheduled thread either way).
"""
from __future__ import annotations

import functools
import os
from pathlib import Path

WHEEL = "cmeel-libomp"
LIBRARY = "libomp.so"
FORK_SYMBOL = b"__kmpc_fork_call"
THREAD_SLOT = "@threads"
LOWER_SLOT = "@openmp-to-llvm"


@functools.lru_cache(maxsize=4)
def _find(setting: str) -> Path | None:
    if setting in ("0", "off", "false", "no"):
        return None
    if setting:
        path = Path(setting)
        return path if path.is_file() else None
    try:
        from importlib import metadata
        files = metadata.files(WHEEL) or []
    except Exception:   # not installed, or unreadable metadata: serial kernels
        return None
    for f in files:
        if f.name == LIBRARY:
            path = Path(f.locate()).resolve()
            if path.is_file():
                return path
    return None


def openmp_library() -> Path | None:
    """libomp.so to link parallel kernels against, or None (kernels stay serial)."""
    return _find(os.environ.get("KINA_OPENMP", "").strip())


def slot_passes(slot: str) -> list[str]:
    """The passes of the "@threads" and "@openmp-to-llvm" slots of the -O2 pipeline."""
    threaded = openmp_library() is not None
    if slot == THREAD_SLOT:
        return ["--scf-forall-to-parallel", "--convert-scf-to-openmp"] if threaded else ["--scf-forall-to-for"]
    if slot == LOWER_SLOT:
        return ["--convert-openmp-to-llvm"] if threaded else []
    raise ValueError(slot)


def uses_openmp(obj: Path) -> bool:
    """Whether the object file calls the OpenMP runtime (its symbol table names it)."""
    return FORK_SYMBOL in obj.read_bytes()


def link_args() -> list[str]:
    lib = openmp_library()
    if lib is None:   # the object was built while a runtime was there, and now it is not
        raise FileNotFoundError(f"parallel kernels need {LIBRARY} (pip install {WHEEL})")
    return [f"-L{lib.parent}", "-lomp", f"-Wl,-rpath,{lib.parent}"]


# libomp's threads spin this many milliseconds after a parallel loop before they sleep
# (the master too, at the join).  Its default, 200 ms, kept both cores busy between steps:
# on a shared machine the spinning threads took the core the caller's own serial kernels
# needed.  1 ms: a thread that finishes a loop waits 1 ms for the next one before it
# sleeps.  0 (sleep at once) was better with other processes on both cores (load 5-7:
# the scaled train step 1.19-1.23x jax.jit with 0, 1.36-1.53x with 1 ms) but worse on a
# quiet machine, where every one of the ~40 parallel loops of a step then pays a wake-up
# (load 1: forward 5.24 ms with 0 against 3.96 ms with 1 ms, train step 16.3 against
# 15.6 ms, bench_scaled.py in one run each): the default serves the quiet machine, and
# KMP_BLOCKTIME=0 is the setting for a loaded one (the user's value wins).
BLOCKTIME_MS = "1"


def prepare_process() -> None:
    """Before a library that links libomp is loaded (the environment is read when libomp
    starts).  A second OpenMP runtime in the process (Intel's libiomp5 under an MKL NumPy,
    another libomp) makes libomp abort the process at its first parallel loop unless
    KMP_DUPLICATE_LIB_OK is set; both runtimes then run their own threads (correct, only
    oversubscribed).  KMP_BLOCKTIME: see BLOCKTIME_MS.  The user's settings win."""
    os.environ.setdefault("KMP_DUPLICATE_LIB_OK", "TRUE")
    if "OMP_WAIT_POLICY" not in os.environ:
        os.environ.setdefault("KMP_BLOCKTIME", BLOCKTIME_MS)
