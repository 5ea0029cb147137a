"""Distributed runtime: compiled Kina libraries on N processes, through torch.distributed.

    launch = distributed.Launch.from_env()        # RANK, WORLD_SIZE, ... as torchrun sets them
    start, stop = distributed.shard_range(V, launch.world_size, launch.rank, "vocabulary V")
    lib = distributed.build_shared(source, "model", opt_level=2, launch=launch)
    world = distributed.connect(launch, timeout=30)
    world.all_reduce(grads)                       # in place, on the NumPy buffer itself

Every rank loads the same compiled library (`build_shared`: local rank 0 of each host
builds it once into a content-addressed cache, the others wait for it) and calls its
functions with NumPy arrays through compiler.runtime.library.  The collectives are
torch.distributed's (gloo: CPUs, loopback and real networks; torchrun launches the
ranks and runs the rendezvous); Kina adds no transport of its own.  A collective works
on the caller's NumPy buffer: torch.from_numpy shares its memory, so nothing is copied
on the way in or out.

Failures end in a DistributedError with a message, never a hang:

- TorchUnavailable: torch (an optional dependency) is not installed;
- LaunchError: not started by torchrun (or a malformed environment), rendezvous failed;
- ShardingError: the world size does not divide the dimension being sharded;
- PeerLost: a collective failed or timed out because another rank died or stopped
  (CollectiveError: the backend rejected a collective, e.g. buffers that differ by rank).
  gloo enforces the timeout given to connect(); a watchdog thread also ends the process
  (exit code EXIT_PEER_LOST, with the same kind of message) if a collective outlives it
  by WATCHDOG_GRACE seconds, in case the backend does not return at all.

`fail(err)` prints an error as `kina.distributed: rank R/N: ...` and exits the process
without the process-group teardown, which could block on a dead peer.
Checkpoints (rank 0 writes an .npz atomically; restoring reads it on rank 0 and
broadcasts) are in compiler/distributed/checkpoint.py.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from compiler.runtime.arrays import Array

if TYPE_CHECKING:
    from compiler.runtime.library import Library

_T = TypeVar("_T")

EXIT_PEER_LOST = 3       # a peer died or stopped answering
EXIT_USAGE = 2           # torch missing, bad launch environment, bad sharding
WATCHDOG_GRACE = 5.0     # seconds past the collective timeout before the watchdog ends the process
INSTALL_HINT = ("PyTorch is an optional dependency of Kina, needed only for distributed runs: "
                "`make setup` installs the local CPU wheel (torch-2.13.0+cpu in $TORCH_WHEELS, "
                "default /opt/wheels); elsewhere `pip install -e '.[distributed]'` or a CPU-only "
                "build with `pip install torch --index-url https://download.pytorch.org/whl/cpu`")


class DistributedError(Exception):
    """A distributed run cannot go on; the message says why and what to do."""
    exit_code = EXIT_USAGE


class TorchUnavailable(DistributedError):
    pass


class LaunchError(DistributedError):
    pass


class ShardingError(DistributedError):
    pass


class PeerLost(DistributedError):
    exit_code = EXIT_PEER_LOST


class CollectiveError(DistributedError):
    """A collective the backend rejected (mismatched buffers across ranks: a program bug)."""
    exit_code = 1


# How gloo reports a dead or silent peer ("Connection closed by peer", "Timed out waiting
# 5000ms for recv operation", "Connection reset by peer", "Broken pipe", ...).
PEER_FAILURES = ("closed", "timed out", "timeout", "connection", "broken pipe", "reset by peer",
                 "unreachable", "refused")


def require_torch() -> ModuleType:
    """torch and torch.distributed with the gloo backend, or TorchUnavailable."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        raise TorchUnavailable(f"cannot import torch ({e}). {INSTALL_HINT}") from None
    if not dist.is_available() or not dist.is_gloo_available():
        raise TorchUnavailable(f"this torch {torch.__version__} has no torch.distributed gloo backend. "
                               f"{INSTALL_HINT}")
    return torch


# ---- the launch: what torchrun tells each rank -------------------------------------------
@dataclass(frozen=True)
class Launch:
    """One rank's place in the run, from the environment torchrun sets."""
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int

    REQUIRED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> Launch:
        env = os.environ if env is None else env
        missing = [k for k in Launch.REQUIRED if not env.get(k)]
        if missing:
            raise LaunchError(f"not started by a distributed launcher ({', '.join(missing)} unset): run "
                              f"`torchrun --nproc-per-node N {Path(sys.argv[0]).name} ...` "
                              f"(see docs/distributed.md)")
        values: dict[str, int] = {}
        for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_PORT"):
            # LOCAL_WORLD_SIZE defaults to WORLD_SIZE; every other one is set (checked above)
            raw = env.get(k, env["WORLD_SIZE"])
            try:
                values[k] = int(raw)
            except ValueError:
                raise LaunchError(f"environment variable {k}={raw!r} is not an integer") from None
        rank, world = values["RANK"], values["WORLD_SIZE"]
        if world < 1 or not 0 <= rank < world:
            raise LaunchError(f"RANK={rank} is not in 0..WORLD_SIZE-1 (WORLD_SIZE={world})")
        return Launch(rank, world, values["LOCAL_RANK"], values["LOCAL_WORLD_SIZE"],
                      env["MASTER_ADDR"], values["MASTER_PORT"])

    def __str__(self) -> str:
        return f"rank {self.rank}/{self.world_size}"


def shard_range(dim: int, world_size: int, rank: int, what: str) -> tuple[int, int]:
    """[start, stop) of rank's equal block of a dimension of size `dim`, or ShardingError."""
    if world_size < 1 or dim % world_size:
        raise ShardingError(f"cannot shard the {what} ({dim}) over {world_size} processes: the world "
                            f"size must divide it (divisors: "
                            f"{', '.join(str(d) for d in range(1, dim + 1) if dim % d == 0)})")
    size = dim // world_size
    return rank * size, (rank + 1) * size


def pin_single_thread(local_rank: int = 0) -> int:
    """Run this rank on one CPU, single-threaded; returns the CPU.

    At -O2 the big kernels are OpenMP parallel loops (compiler/backend/threads.py): LLVM's libomp
    starts as many threads as the CPUs in the process's affinity mask when its first
    parallel loop runs, unless OMP_NUM_THREADS says otherwise.  Pinned (and OMP_NUM_THREADS=1)
    before the first kernel call, every parallel loop runs on the calling thread alone.
    torch (only the transport here) gets one intra-op thread too."""
    cpus = sorted(os.sched_getaffinity(0))
    cpu = cpus[local_rank % len(cpus)]
    os.sched_setaffinity(0, {cpu})
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        pass
    return cpu


def inject_fault(launch: Launch, step: int) -> None:
    """Fault injection for the tests: KINA_DIST_FAULT=KIND:RANK:STEP makes rank RANK, after
    step STEP, kill itself (KIND=kill, SIGKILL: a crashed peer) or stop (KIND=stop, SIGSTOP:
    a hung peer, which the test kills afterwards)."""
    spec = os.environ.get("KINA_DIST_FAULT")
    if not spec:
        return
    try:
        kind, rank_text, at_text = spec.split(":")
        rank, at = int(rank_text), int(at_text)
        sig = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP}[kind]
    except (ValueError, KeyError):
        raise LaunchError(f"KINA_DIST_FAULT={spec!r} is not KIND:RANK:STEP with KIND kill or stop") from None
    if launch.rank == rank and step == at:
        print(f"{launch}: KINA_DIST_FAULT: {kind} after step {step}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), sig)


# ---- one library for every rank ------------------------------------------------------------
def cache_root() -> Path:
    base = os.environ.get("KINA_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kina")
    return Path(base) / "distributed"


def _compiler_fingerprint() -> str:
    """A hash of the compiler's own files: a cached library is reused only by the same compiler."""
    h = hashlib.sha256()
    here = Path(__file__).resolve().parent
    for p in sorted(here.iterdir()):
        if p.suffix in (".py", ".lark", ".c"):
            h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def build_shared(source: str, name: str, opt_level: int, launch: Launch | None = None,
                 cache_dir: Path | None = None, wait_timeout: float = 900.0,
                 sizes: Mapping[str, int] | None = None, exports: Sequence[str] | None = None) -> Library:
    """Load the library compiled from `source`, building it once per host.  `sizes`: the
    `--size` values of its generic functions; `exports`: build only these (and what they call).

    The library lives in cache_dir/<name>-<hash>/ (hash of the source, the sizes, the exports,
    the level and the compiler).  Local rank 0 builds it there (into a temporary directory renamed into place,
    so a reader never sees half a library); the other ranks of the host wait for it."""
    from compiler import build, runtime
    variant = f"{sorted((sizes or {}).items())}\0{sorted(exports or ())}"
    key = hashlib.sha256(f"{source}\0{variant}\0{opt_level}\0{_compiler_fingerprint()}".encode()).hexdigest()[:20]
    root = Path(cache_dir) if cache_dir else cache_root()
    final = root / f"{name}-{key}"
    so = final / f"{name}.so"
    failed = root / f"{name}-{key}.failed"
    if not so.exists():
        if launch is None or launch.local_rank == 0:
            _build_into(source, name, opt_level, final, failed, build, sizes, exports)
        else:
            _wait_for(so, failed, wait_timeout, launch)
    return runtime.load(so)


def _build_into(source: str, name: str, opt_level: int, final: Path, failed: Path, build: ModuleType,
                sizes: Mapping[str, int] | None = None, exports: Sequence[str] | None = None) -> None:
    final.parent.mkdir(parents=True, exist_ok=True)
    failed.unlink(missing_ok=True)
    tmp = final.parent / f".{final.name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    transform = build.keep_exports(exports) if exports else None
    res = build.build_source(source, f"{name}.kina", tmp / f"{name}.so", opt_level=opt_level, sizes=sizes,
                             transform=transform)
    if not res.ok:
        text = "\n".join(res.source.render(d) if res.source else f"[{d.code}] {d.message}"
                         for d in res.diagnostics)
        failed.write_text(text)
        shutil.rmtree(tmp, ignore_errors=True)
        raise LaunchError(f"building {name} failed:\n{text}")
    try:
        os.rename(tmp, final)
    except OSError:   # another builder (a host sharing this cache) got there first
        shutil.rmtree(tmp, ignore_errors=True)


def _wait_for(so: Path, failed: Path, timeout: float, launch: Launch) -> None:
    start = time.time()
    while not so.exists():
        if failed.exists() and failed.stat().st_mtime >= start - 1.0:
            raise LaunchError(f"local rank 0 failed to build {so.name}:\n{failed.read_text()}")
        if time.time() - start > timeout:
            raise LaunchError(f"{launch}: local rank 0 did not build {so} within {timeout:.0f} s")
        time.sleep(0.1)


# ---- the process group and its collectives -------------------------------------------------
class _Watchdog:
    """Ends the process if one collective lasts longer than its deadline."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.deadline: float | None = None
        self.what = ""
        self._cv = threading.Condition()
        threading.Thread(target=self._run, name="kina-dist-watchdog", daemon=True).start()

    def arm(self, what: str, seconds: float) -> None:
        with self._cv:
            self.what, self.deadline = what, time.monotonic() + seconds
            self._cv.notify()

    def disarm(self) -> None:
        with self._cv:
            self.deadline = None

    def _run(self) -> None:
        with self._cv:
            while True:
                if self.deadline is None:
                    self._cv.wait()
                    continue
                left = self.deadline - time.monotonic()
                if left > 0:
                    self._cv.wait(left)
                    continue
                _die(f"{self.label}: {self.what} did not complete in time: a peer process has died "
                     f"or stopped answering; exiting", EXIT_PEER_LOST)


def _die(message: str, code: int) -> None:
    sys.stdout.flush()
    print(f"kina.distributed: {message}", file=sys.stderr, flush=True)
    os._exit(code)


def fail(err: DistributedError, launch: Launch | None = None) -> None:
    """Print `err` and end the process now (no teardown that could wait for a dead peer)."""
    _die(f"{launch}: {err}" if launch else str(err), err.exit_code)


def _first_line(e: BaseException) -> str:
    """The gist of a torch/gloo error: its first line, without gloo's source location prefix
    ("[.../gloo/transport/tcp/pair.cc:537] ") and generic advice."""
    text = str(e).strip()
    line = text.splitlines()[0] if text else type(e).__name__
    line = re.sub(r"^\[[^\]]*\]\s*", "", line)
    return line.split(". This is typically caused")[0]


_OPS = {"sum": "SUM", "max": "MAX", "min": "MIN"}


class World:
    """The connected ranks.  Collectives work in place on NumPy arrays (C-contiguous)."""

    def __init__(self, launch: Launch, timeout: float, torch: ModuleType, watchdog: _Watchdog) -> None:
        self.launch, self.rank, self.size = launch, launch.rank, launch.world_size
        self.timeout = timeout
        self._torch, self._dist, self._watchdog = torch, torch.distributed, watchdog
        self.seconds = 0.0          # time spent in collectives (for the benchmarks)
        self.calls = 0

    def _run(self, what: str, fn: Callable[[], _T]) -> _T:
        self._watchdog.arm(what, self.timeout + WATCHDOG_GRACE)
        t0 = time.perf_counter()
        try:
            return fn()
        except RuntimeError as e:
            detail, seconds = _first_line(e), time.perf_counter() - t0
            if not any(p in detail.lower() for p in PEER_FAILURES):
                raise CollectiveError(f"{what} failed: {detail}") from None
            raise PeerLost(f"{what} failed after {seconds:.1f} s: a peer process has died or stopped "
                           f"answering ({detail})") from None
        finally:
            self._watchdog.disarm()
            self.seconds += time.perf_counter() - t0
            self.calls += 1

    def _tensor(self, a: Array, what: str) -> Any:
        """A torch tensor sharing a's memory (torch is optional and typed here as Any)."""
        if not (isinstance(a, np.ndarray) and a.flags.c_contiguous and a.flags.writeable):
            raise TypeError(f"{what} needs a writeable C-contiguous NumPy array")
        return self._torch.from_numpy(a)      # shares a's memory: no copy

    def all_reduce(self, a: Array, op: str = "sum", what: str = "all_reduce") -> Array:
        """Replace `a` on every rank by the elementwise op (sum, max, min) over the ranks."""
        t = self._tensor(a, what)
        reduce_op = getattr(self._dist.ReduceOp, _OPS[op])
        self._run(f"{what} ({op}, {a.nbytes} bytes)", lambda: self._dist.all_reduce(t, op=reduce_op))
        return a

    def all_gather(self, a: Array, out: Array | None = None, what: str = "all_gather") -> Array:
        """[world, *a.shape]: every rank's `a`, in rank order (into `out` when given)."""
        out = np.empty((self.size,) + a.shape, a.dtype) if out is None else out
        if out.shape != (self.size,) + a.shape or out.dtype != a.dtype:
            raise TypeError(f"{what}: out= must be {a.dtype}{[self.size, *a.shape]}")
        src = self._torch.from_numpy(np.ascontiguousarray(a).reshape(-1))
        dst = self._tensor(out, what).view(-1)     # the concatenation form: rank r at [r*n, (r+1)*n)
        gather = getattr(self._dist, "all_gather_single", None) or self._dist.all_gather_into_tensor
        self._run(f"{what} ({a.nbytes} bytes per rank)", lambda: gather(dst, src))
        return out

    def broadcast(self, a: Array, src: int = 0, what: str = "broadcast") -> Array:
        t = self._tensor(a, what)
        self._run(f"{what} ({a.nbytes} bytes from rank {src})", lambda: self._dist.broadcast(t, src=src))
        return a

    def barrier(self, what: str = "barrier") -> None:
        flag = np.zeros(1, np.int32)
        self.all_reduce(flag, what=what)

    def close(self) -> None:
        """Leave the process group (only after a clean run; after a failure use fail())."""
        self._dist.destroy_process_group()


def connect(launch: Launch | None = None, timeout: float = 60.0, backend: str = "gloo") -> World:
    """Join the process group of the launch (env:// rendezvous on MASTER_ADDR:MASTER_PORT)."""
    from datetime import timedelta
    torch = require_torch()
    launch = Launch.from_env() if launch is None else launch
    watchdog = _Watchdog(str(launch))
    watchdog.arm(f"joining the process group at {launch.master_addr}:{launch.master_port}",
                 timeout + WATCHDOG_GRACE)
    try:
        torch.distributed.init_process_group(backend, init_method="env://", rank=launch.rank,
                                             world_size=launch.world_size,
                                             timeout=timedelta(seconds=timeout))
    except ValueError as e:
        raise LaunchError(f"cannot start the process group: {_first_line(e)}") from None
    except (RuntimeError, TimeoutError) as e:
        raise PeerLost(f"could not join the process group at {launch.master_addr}:{launch.master_port} "
                       f"within {timeout:.0f} s ({_first_line(e)})") from None
    finally:
        watchdog.disarm()
    return World(launch, timeout, torch, watchdog)
