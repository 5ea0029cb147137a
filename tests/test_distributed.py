"""Distributed StoryLM through torch.distributed (compiler/distributed/world.py, compiler/distributed/checkpoint.py,
scripts/train_storylm0_ddp.py, scripts/vocab_parallel_storylm0.py), every process on 127.0.0.1.

The launches (torchrun, or ranks started with torchrun's environment by hand where the test
must control each process) skip cleanly without torch; the error paths that need no torch
(torch missing, bad sharding, no launcher, checkpoint files) always run.  Every launch has
a timeout and runs in its own process group, killed whole if it outlives it.
"""
from __future__ import annotations

import importlib.util
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
sys.path.insert(0, str(SCRIPTS))

import _dist_lm as L  # noqa: E402

from compiler import build  # noqa: E402
from compiler.distributed import checkpoint  # noqa: E402
from compiler.distributed import world as distributed  # noqa: E402

HAVE_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed (optional)")
DDP = str(SCRIPTS / "train_storylm0_ddp.py")
VP = str(SCRIPTS / "vocab_parallel_storylm0.py")
OPT = str(build.default_opt_level())
LAUNCH_TIMEOUT = 240.0      # seconds per launch, builds included, on a loaded 2-core machine
PEER_TIMEOUT = 4.0          # the collective timeout of the peer-failure tests
STEPS = 100
# The uneven run: a small scaled model, 5 windows per step over 2 ranks, epochs with a shorter last batch.
UNEVEN_SIZES = {"T": 8, "D": 16, "H": 2, "V": 32, "corpus_len": 40, "batch": 5, "epoch_batches": True}
UNEVEN_ARGS = ["--config", "scaled", "--batch", "5", "--T", "8", "--D", "16", "--H", "2", "--V", "32",
               "--corpus-len", "40", "--epoch-batches", "--steps", "14", "--compare"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """The launches' environment: a private build cache, loopback only, no injected fault."""
    e = dict(os.environ, KINA_CACHE_DIR=str(tmp_path_factory.mktemp("kina-cache")), GLOO_SOCKET_IFNAME="lo",
             PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    e.pop("KINA_DIST_FAULT", None)
    return e


def free_port() -> int:
    """A port nothing listens on now, below the kernel's ephemeral range: the launcher binds
    it a second or two later, and a port from bind(0) could meanwhile be handed to one of
    the other launches started with it (torchrun --standalone picks its own that way; a
    launcher that met another's store failed once with RendezvousClosedError)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0]) \
        if Path("/proc/sys/net/ipv4/ip_local_port_range").exists() else 32768
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(max(1024, low - 12_000), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


class Background:
    """A command running in its own process group; result() waits (bounded) for it."""

    def __init__(self, cmd: list[str], env: dict):
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.done: subprocess.CompletedProcess | None = None

    def result(self, timeout: float = LAUNCH_TIMEOUT) -> subprocess.CompletedProcess:
        if self.done is None:
            try:
                out, err = self.proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                out, err = self.proc.communicate()
                pytest.fail(f"{' '.join(self.cmd)} did not finish in {timeout:.0f} s:\n{out}\n{err}")
            self.done = subprocess.CompletedProcess(self.cmd, self.proc.returncode, out, err)
        return self.done

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)


def run(cmd: list[str], env: dict, timeout: float = LAUNCH_TIMEOUT) -> subprocess.CompletedProcess:
    return Background(cmd, env).result(timeout)


TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, f"exit code {proc.returncode}:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return proc.stdout


def ddp_args(out: Path, *extra: str) -> list[str]:
    return [DDP, "--steps", str(STEPS), "--opt-level", OPT, "--quiet", "--losses-out", str(out), *extra]


def two_hosts(port: int, args: list[str]) -> list[list[str]]:
    """Two launcher invocations, one per "host", meeting at a c10d rendezvous on loopback."""
    return [[*TORCHRUN, "--nnodes=2", f"--node-rank={node}", "--nproc-per-node=1", "--rdzv-backend=c10d",
             f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=kina-test", "--local-addr=127.0.0.1",
             f"--rdzv-conf=is_host={int(node == 0)}", *args[node]] for node in (0, 1)]


@pytest.fixture(scope="module")
def launched(env, tmp_path_factory):
    """Every torchrun launch of this module, started at once (they mostly wait on each other's
    start-up, so on 2 cores running them together takes about half the time of one by one).
    The libraries are built here first, so the launches find them in the cache."""
    if not HAVE_TORCH:
        pytest.skip("torch is not installed (optional)")
    cache = Path(env["KINA_CACHE_DIR"]) / "distributed"       # where build_shared looks (cache_root)
    L.dp_library(L.STORYLM0, int(OPT), cache_dir=cache)
    L.dp_library(L.config("scaled", **UNEVEN_SIZES), int(OPT), cache_dir=cache)
    L.single_library(int(OPT), cache_dir=cache)
    L.vp_library(L.STORYLM0, L.STORYLM0.V // 2, int(OPT), cache_dir=cache)
    tmp = tmp_path_factory.mktemp("launches")
    ck = tmp / "resume" / "run.npz"
    ck.parent.mkdir()
    resume = ["--standalone", "--nproc-per-node=2",
              *ddp_args(ck.parent / "losses.json", "--checkpoint", str(ck), "--checkpoint-every", "20", "--resume")]
    jobs = {
        "uninterrupted": Background([*TORCHRUN, "--standalone", "--nproc-per-node=2",
                                     *ddp_args(tmp / "losses.json")], env),
        "killed": Background([*TORCHRUN, *resume], dict(env, KINA_DIST_FAULT="kill:1:47")),
        "uneven": Background([*TORCHRUN, "--standalone", "--nproc-per-node=2",
                              *ddp_args(tmp / "uneven.json", *UNEVEN_ARGS)], env),
        "vocab": Background([*TORCHRUN, "--standalone", "--nproc-per-node=2", VP, "--steps", "10",
                             "--opt-level", OPT], env),
    }
    hosts = two_hosts(free_port(), [ddp_args(tmp / f"hosts{node}.json") for node in (0, 1)])
    jobs["host0"], jobs["host1"] = (Background(cmd, env) for cmd in hosts)
    jobs["peer_killed"] = spawn_ranks(env, "kill:1:20")
    jobs["peer_stopped"] = spawn_ranks(env, "stop:1:20")
    jobs["lone"] = spawn_ranks(env, "", ranks=range(1))       # rank 1 of 2 never starts
    jobs["resume_args"], jobs["dir"] = resume, tmp
    jobs["respawn"] = lambda fault: spawn_ranks(env, fault)
    yield jobs
    for job in jobs.values():
        for b in job if isinstance(job, list) else [job]:
            if isinstance(b, Background):
                b.kill()


@pytest.fixture(scope="module")
def reference():
    """Single-process training on the whole batch: `make demo`'s trainer."""
    return np.array(L.single_process_losses(L.STORYLM0, STEPS))


@pytest.fixture(scope="module")
def uninterrupted(launched):
    stdout = ok(launched["uninterrupted"].result())
    return json.loads((launched["dir"] / "losses.json").read_text()), stdout


# ---- data parallel --------------------------------------------------------------------------
@needs_torch
def test_data_parallel_two_processes_equal_single_process(uninterrupted, reference):
    got, stdout = uninterrupted
    assert got["world_size"] == 2 and len(got["losses"]) == STEPS
    diff = np.max(np.abs(np.array(got["losses"]) - reference))
    assert diff < 1e-5, f"max |loss_ddp - loss_single| = {diff:.3e}"
    assert "2 process(es)" in stdout and f"initial loss {reference[0]:.4f}" in stdout


@needs_torch
def test_resume_from_checkpoint_continues_the_same_trajectory(launched, env, uninterrupted):
    killed = launched["killed"].result()
    ck_dir = launched["dir"] / "resume"
    assert killed.returncode != 0 and "kill after step 47" in killed.stderr, killed.stderr[-3000:]
    assert [p.name for p in ck_dir.iterdir()] == ["run.npz"]      # no losses, no torn temporary file
    with np.load(ck_dir / "run.npz") as z:
        assert int(z[checkpoint.STEP_KEY]) == 40
    resumed = ok(run([*TORCHRUN, *launched["resume_args"]], env))
    assert "resuming from" in resumed and "at step 40" in resumed
    got = json.loads((ck_dir / "losses.json").read_text())
    assert got["first_step"] == 40
    assert got["losses"] == uninterrupted[0]["losses"]      # bit for bit: same computations in the same order


@needs_torch
def test_two_hosts_as_two_launchers_on_loopback(launched, uninterrupted):
    for node in (0, 1):
        ok(launched[f"host{node}"].result())
    # Global rank 0 writes the losses.  c10d orders the hosts by (address, pid), not by
    # --node-rank, so either launcher may hold it; exactly one does.
    written = [p for p in (launched["dir"] / f"hosts{node}.json" for node in (0, 1)) if p.exists()]
    assert len(written) == 1, written
    got = json.loads(written[0].read_text())
    assert got["world_size"] == 2 and got["losses"] == uninterrupted[0]["losses"]


@needs_torch
def test_uneven_batches_and_a_shorter_last_batch_through_one_library(launched, env):
    """Batch 5 over 2 ranks (3 + 2 windows), the corpus's 32 windows in epochs whose last
    batch has 2 (1 + 1): every rank calls the one B-dynamic library at its row count, and
    the losses are single-process training's (the dynamic storylm library, H as a keyword)."""
    stdout = ok(launched["uneven"].result())
    assert "windows per rank: batch 5: 3, 2; batch 2: 1, 1" in stdout, stdout
    m = re.search(r"max \|loss_ddp - loss_single\| over 14 steps = (\S+) \(ok", stdout)
    assert m and float(m[1]) < 1e-5, stdout
    got = json.loads((launched["dir"] / "uneven.json").read_text())
    assert len(got["losses"]) == 14 and got["config"]["epoch_batches"] and got["config"]["batch"] == 5
    built = sorted(p.name.split("-")[0] for p in (Path(env["KINA_CACHE_DIR"]) / "distributed").iterdir()
                   if p.name.startswith("scaled_dp"))
    assert built == ["scaled_dp"]          # one library, not one per row count


# ---- tensor- and vocab-parallel -------------------------------------------------------------
def section(stdout: str, title: str) -> list[str]:
    lines = stdout.split(f"== {title}")[1].split("\n== ")[0].strip().splitlines()
    return lines[1:]


@needs_torch
def test_tensor_parallel_logits_two_processes(launched):
    lines = section(ok(launched["vocab"].result()), "tensor-parallel logits on 2 processes")
    checks = [ln.split()[0] for ln in lines]
    assert checks == ["(a)", "(a)", "(b)", "(b)", "(c)", "(c)"], lines
    assert all(ln.endswith(" ok") for ln in lines), lines


@needs_torch
def test_vocab_parallel_step_equals_single_process_step(launched):
    lines = section(ok(launched["vocab"].result()), "vocab-parallel mean-NLL step on 2 processes")
    assert len(lines) == 17 and all(ln.endswith(" ok") for ln in lines[:-1]), lines
    text = "\n".join(lines)
    for what in ("no per-rank function holds [B*T, V] logits", "step 0: g_lm_head vs NumPy",
                 "losses of 10 steps vs single-process train_step", "weights after 10 steps: lm_head",
                 "replicated weights identical on every rank"):
        assert what in text
    assert lines[-1] == "all 22 comparisons passed"


# ---- a peer that dies or hangs --------------------------------------------------------------
def spawn_ranks(env: dict, fault: str, world: int = 2, ranks: range | None = None) -> list[Background]:
    """The ranks started by hand with torchrun's environment: no agent that would kill the survivor."""
    base = dict(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(world),
                LOCAL_WORLD_SIZE=str(world), KINA_DIST_FAULT=fault)
    return [Background([sys.executable, DDP, "--steps", "100000", "--opt-level", OPT, "--quiet",
                        "--timeout", str(PEER_TIMEOUT)], dict(base, RANK=str(r), LOCAL_RANK=str(r)))
            for r in (range(world) if ranks is None else ranks)]


def survivor(ranks: list[Background], respawn: Callable[[], list[Background]]) -> tuple[float, str]:
    """(seconds rank 0's failed collective lasted, rank 0's stderr); rank 0 must have exited
    with EXIT_PEER_LOST within the launch timeout, whatever happened to rank 1.  A launch
    whose port another process took between free_port's probe and rank 0's bind (EADDRINUSE:
    a CI run failed so, once) is started again on another port, at most twice; `ranks` is
    updated in place, so the caller reads the launch that ran."""
    for attempt in range(3):
        try:
            res = ranks[0].result()
        finally:
            for r in ranks:
                r.kill()
        if "EADDRINUSE" not in res.stderr or attempt == 2:
            break
        ranks[:] = respawn()
    assert res.returncode == distributed.EXIT_PEER_LOST, res.stderr
    m = re.search(r"kina.distributed: rank 0/2: gradient all-reduce of step 21 \(sum, \d+ bytes\) "
                  r"failed after ([\d.]+) s: a peer process has died or stopped answering \((.*)\)", res.stderr)
    assert m, res.stderr
    return float(m[1]), m[2]


@needs_torch
def test_a_killed_peer_makes_the_other_rank_exit_with_a_message(launched):
    seconds, why = survivor(launched["peer_killed"], lambda: launched["respawn"]("kill:1:20"))
    assert seconds < PEER_TIMEOUT, why           # the closed connection is noticed at once
    assert "KINA_DIST_FAULT: kill after step 20" in launched["peer_killed"][1].result().stderr


@needs_torch
def test_a_hung_peer_makes_the_other_rank_exit_after_the_timeout(launched):
    seconds, why = survivor(launched["peer_stopped"], lambda: launched["respawn"]("stop:1:20"))
    assert "Timed out" in why and PEER_TIMEOUT - 0.5 < seconds < PEER_TIMEOUT + distributed.WATCHDOG_GRACE, why


@needs_torch
def test_a_rank_whose_peers_never_come_exits_after_the_timeout(launched):
    res = launched["lone"][0].result()
    assert res.returncode == distributed.EXIT_PEER_LOST, res.stderr
    assert "kina.distributed: rank 0/2: could not join the process group at 127.0.0.1:" in res.stderr
    assert f"within {PEER_TIMEOUT:.0f} s" in res.stderr


# ---- errors that need no torch --------------------------------------------------------------
def rank_env(env: dict, rank: int, world: int) -> dict:
    return dict(env, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(free_port()))


def test_world_size_must_fit_the_sharded_dimension(env):
    vp = run([sys.executable, VP], rank_env(env, 0, 3), timeout=60)
    assert vp.returncode == distributed.EXIT_USAGE
    assert "cannot shard the vocabulary V (8) over 3 processes: the world size must divide it " \
           "(divisors: 1, 2, 4, 8)" in vp.stderr, vp.stderr
    dp = run([sys.executable, DDP], rank_env(env, 4, 5), timeout=60)
    assert dp.returncode == distributed.EXIT_USAGE
    assert "rank 4/5: cannot split the 1 x 4 next-token predictions of a step (4) over 5 processes: every " \
           "process needs at least one prediction (at most 4 processes)" in dp.stderr, dp.stderr


def test_a_script_not_started_by_a_launcher_says_how_to_start_it(env):
    bare = {k: v for k, v in env.items() if k not in distributed.Launch.REQUIRED}
    proc = run([sys.executable, DDP], bare, timeout=60)
    assert proc.returncode == distributed.EXIT_USAGE
    assert "not started by a distributed launcher" in proc.stderr and "torchrun --nproc-per-node N" in proc.stderr


def test_without_torch_the_scripts_say_how_to_install_it(env):
    code = ("import os, runpy, sys; sys.modules['torch'] = None; sys.argv = [sys.argv[1]]; "
            "sys.path.insert(0, os.path.dirname(sys.argv[0])); runpy.run_path(sys.argv[0], run_name='__main__')")
    for script in (DDP, VP):
        proc = run([sys.executable, "-c", code, script], rank_env(env, 0, 2), timeout=60)
        assert proc.returncode == distributed.EXIT_USAGE, proc.stderr
        assert "cannot import torch" in proc.stderr and "PyTorch is an optional dependency" in proc.stderr


def test_require_torch_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(distributed.TorchUnavailable, match=r"make setup.*pip install"):
        distributed.require_torch()


def test_launch_environment_errors():
    with pytest.raises(distributed.LaunchError, match="RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT unset"):
        distributed.Launch.from_env({})
    good = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "h", "MASTER_PORT": "29500"}
    assert distributed.Launch.from_env(good) == distributed.Launch(1, 2, 1, 2, "h", 29500)
    with pytest.raises(distributed.LaunchError, match="RANK=2 is not in 0..WORLD_SIZE-1"):
        distributed.Launch.from_env(dict(good, RANK="2"))
    with pytest.raises(distributed.LaunchError, match="MASTER_PORT='x' is not an integer"):
        distributed.Launch.from_env(dict(good, MASTER_PORT="x"))


def test_fault_injection_spec_is_checked(monkeypatch):
    monkeypatch.setenv("KINA_DIST_FAULT", "explode:1:3")
    with pytest.raises(distributed.LaunchError, match="KIND:RANK:STEP"):
        distributed.inject_fault(distributed.Launch(1, 2, 1, 2, "h", 1), 3)
