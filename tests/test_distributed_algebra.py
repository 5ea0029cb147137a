"""The distributed pieces that need no torch (tests/test_distributed.py runs the launches).

- the partition of a step's predictions over the ranks, and the aligned gradient buffer;
- checkpoint files (compiler/distributed/checkpoint.py): round trip, mismatches, interrupted writes;
- the shared build's failure reaching the waiting ranks, the watchdog;
- the data-parallel trainer and the vocab-parallel step of the scripts, with the ranks as
  threads of this process and the collectives done in NumPy (ThreadWorld), against the
  NumPy reference: the sharded algebra is checked even where torch is not installed.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import _dist_lm as L  # noqa: E402
from storylm_data import window_split  # noqa: E402
from storylm_train import train_numpy  # noqa: E402

from compiler import build  # noqa: E402
from compiler.distributed import checkpoint  # noqa: E402
from compiler.distributed import world as distributed  # noqa: E402

OPT = build.default_opt_level()


# ---- the partition of a step's predictions ---------------------------------------------------
@pytest.mark.parametrize("batch,T,world", [(1, 4, 1), (1, 4, 2), (1, 4, 4), (4, 64, 2), (4, 64, 4),
                                           (4, 64, 8), (2, 4, 8), (6, 4, 3)])
def test_partition_gives_every_prediction_to_exactly_one_rank(batch, T, world):
    cfg = L.Config("t", batch=batch, T=T, D=4, H=2, V=8, lr=0.1, steps=1)
    total = np.zeros((batch, T, 1), np.float32)
    sizes = set()
    for r in range(world):
        share = L.partition(cfg, world, r)
        total[share.rows[0]:share.rows[1]] += share.weight
        sizes.add(share.rows[1] - share.rows[0])
    assert np.array_equal(total, np.full_like(total, np.float32(1.0 / (batch * T))))
    assert len(sizes) == 1       # every rank calls the same compiled function


@pytest.mark.parametrize("batch,T,world,message", [
    (1, 4, 3, "cannot shard the 1 x 4 next-token predictions of a step (4) over 3 processes"),
    (3, 4, 2, "into parts of 6, which neither cover whole windows nor divide one")])
def test_partition_rejects_uneven_splits(batch, T, world, message):
    cfg = L.Config("t", batch=batch, T=T, D=4, H=2, V=8, lr=0.1, steps=1)
    with pytest.raises(distributed.ShardingError, match=message.replace("(", r"\(").replace(")", r"\)")):
        L.partition(cfg, world, 0)


def test_gradient_buffer_views_are_aligned_and_contiguous():
    flat, views = L.aligned_views([(1, 1), (8, 4), (4, 4), (3, 5)])
    for v in views:
        assert v.flags.c_contiguous and v.ctypes.data % 64 == 0 and np.shares_memory(v, flat)
    assert flat.ctypes.data % 64 == 0


# ---- checkpoint files -----------------------------------------------------------------------
def test_checkpoint_round_trip_and_mismatches(tmp_path):
    path = tmp_path / "ck.npz"
    w = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(4, np.float32)}
    checkpoint.write(path, 7, w, {"lr": 0.3, "losses": [1.0, 0.5]})
    step, meta, arrays = checkpoint.read(path, w)
    assert step == 7 and meta == {"lr": 0.3, "losses": [1.0, 0.5]}
    assert all(np.array_equal(arrays[k], w[k]) for k in w)
    with pytest.raises(checkpoint.CheckpointError, match=r"'a' is float32\[2, 3\], this run needs float32\[3, 2\]"):
        checkpoint.read(path, {"a": np.zeros((3, 2), np.float32)})
    with pytest.raises(checkpoint.CheckpointError, match="has no array 'c'"):
        checkpoint.read(path, {"c": np.zeros(1, np.float32)})
    np.savez(tmp_path / "other.npz", x=np.zeros(2))
    with pytest.raises(checkpoint.CheckpointError, match="is not a Kina checkpoint"):
        checkpoint.read(tmp_path / "other.npz", w)
    (tmp_path / "junk.npz").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(checkpoint.CheckpointError, match="cannot read checkpoint"):
        checkpoint.read(tmp_path / "junk.npz", w)
    with pytest.raises(checkpoint.CheckpointError, match="no checkpoint at"):
        checkpoint.read(tmp_path / "missing.npz", w)


def test_an_interrupted_checkpoint_write_keeps_the_previous_one(tmp_path, monkeypatch):
    path = tmp_path / "ck.npz"
    w = {"a": np.ones(3, np.float32)}
    checkpoint.write(path, 1, w, {})

    def crash(f, **arrays):
        f.write(b"PK\x03\x04 half a file")
        raise KeyboardInterrupt
    monkeypatch.setattr(checkpoint.np, "savez", crash)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.write(path, 2, {"a": np.zeros(3, np.float32)}, {})
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["ck.npz"]
    step, _, arrays = checkpoint.read(path, w)
    assert step == 1 and np.array_equal(arrays["a"], w["a"])


# ---- the shared build -----------------------------------------------------------------------
def test_a_failed_shared_build_reaches_the_waiting_ranks(tmp_path):
    bad = "fn f(x: Tensor[F32, [2]]) -> Tensor[F32, [3]] { x }\n"
    with pytest.raises(distributed.LaunchError, match="building bad failed"):
        distributed.build_shared(bad, "bad", 0, distributed.Launch(0, 2, 0, 2, "h", 1), cache_dir=tmp_path)
    assert [p.suffix for p in tmp_path.iterdir()] == [".failed"]
    # a rank started just before local rank 0 failed sees the marker instead of waiting
    os.utime(next(tmp_path.iterdir()), (time.time() + 1, time.time() + 1))
    with pytest.raises(distributed.LaunchError, match="local rank 0 failed to build bad.so"):
        distributed.build_shared(bad, "bad", 0, distributed.Launch(1, 2, 1, 2, "h", 1), cache_dir=tmp_path,
                                 wait_timeout=5)


# ---- the sharded algebra without torch: ranks as threads, collectives in NumPy --------------
class ThreadWorld:
    """World's collectives for `size` ranks that are threads of this process (a test double:
    the real transport is torch.distributed; the algebra and the trainers are the same code)."""

    def __init__(self, size: int):
        self.size, self.slots, self.barrier = size, [None] * size, threading.Barrier(size)

    def rank_view(self, rank: int) -> ThreadWorld:
        view = object.__new__(ThreadWorld)
        view.__dict__.update(self.__dict__, rank=rank, seconds=0.0, calls=0)
        return view

    def _exchange(self, a: np.ndarray) -> list[np.ndarray]:
        self.slots[self.rank] = a.copy()
        self.barrier.wait()
        got = list(self.slots)
        self.barrier.wait()
        return got

    def all_reduce(self, a, op="sum", what=""):
        parts = self._exchange(a)
        a[...] = np.max(parts, axis=0) if op == "max" else sum(parts[1:], parts[0])
        return a

    def all_gather(self, a, out=None, what=""):
        return np.stack(self._exchange(a))

    def broadcast(self, a, src=0, what=""):
        a[...] = self._exchange(a)[src]
        return a


def run_ranks(size: int, body) -> list:
    """body(world, rank) on `size` threads; their results in rank order (re-raises a failure)."""
    world = ThreadWorld(size)
    with ThreadPoolExecutor(size) as pool:
        return [f.result(timeout=120) for f in [pool.submit(body, world.rank_view(r), r) for r in range(size)]]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("thread-cache")


@pytest.mark.parametrize("world_size", [2, 4])
def test_data_parallel_trainer_sums_to_the_single_process_step(world_size, cache):
    cfg, steps = L.STORYLM0, 12
    lib = L.dp_library(cfg, 1, OPT, cache_dir=cache)

    def rank(world, r):
        trainer = L.DataParallelTrainer(lib, cfg, world, L.partition(cfg, world_size, r), L.initial_weights(cfg))
        return [trainer.step(k) for k in range(steps)], trainer.weights
    results = run_ranks(world_size, rank)
    ref_losses, ref_w = train_numpy(steps, cfg.lr)
    for losses, weights in results:
        np.testing.assert_allclose(losses, ref_losses, atol=1e-5)
        for n in L.WEIGHTS:
            np.testing.assert_allclose(weights[n], ref_w[n], atol=1e-5)


@pytest.mark.parametrize("world_size", [2, 4])
def test_vocab_parallel_step_algebra_equals_the_numpy_step(world_size, cache):
    import vocab_parallel_storylm0 as VPS
    cfg, steps, width = L.STORYLM0, 6, L.STORYLM0.V // world_size
    lib = L.vp_library(cfg, width, OPT, cache_dir=cache)
    full = L.initial_weights(cfg)
    lr = np.full((1, 1), cfg.lr, np.float32)
    wins = L.windows(cfg)

    def rank(world, r):
        lo, hi = r * width, (r + 1) * width
        vp = VPS.VocabParallelStep(lib, world, cfg, lo, hi, full, np.ascontiguousarray(full["lm_head"][:, lo:hi]))
        losses = [vp.step(*map(np.ascontiguousarray, window_split(L.step_windows(cfg, wins, k))), lr)[0]
                  for k in range(steps)]
        return losses, vp.body, vp.lm
    results = run_ranks(world_size, rank)
    ref_losses, ref_w = train_numpy(steps, cfg.lr)
    lm = np.concatenate([lm for _, _, lm in results], axis=1)
    np.testing.assert_allclose(lm, ref_w["lm_head"], atol=1e-5)
    for losses, body, _ in results:
        np.testing.assert_allclose(losses, ref_losses, atol=1e-5)
        for n, b in zip(VPS.BODY, body):
            np.testing.assert_allclose(b, ref_w[n], atol=1e-5)
    # the per-rank functions never see the full [B*T, V] logits
    assert VPS.full_shapes(lib, cfg) == []


def test_the_watchdog_ends_a_process_whose_collective_never_returns():
    code = ("import time; from compiler.distributed.world import _Watchdog; "
            "w = _Watchdog('rank 0/2'); w.arm('all_reduce (sum, 4 bytes)', 0.3); time.sleep(30)")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert time.monotonic() - t0 < 20
    assert proc.returncode == distributed.EXIT_PEER_LOST
    assert "kina.distributed: rank 0/2: all_reduce (sum, 4 bytes) did not complete in time: a peer process " \
           "has died or stopped answering; exiting" in proc.stderr


def test_a_disarmed_watchdog_stays_quiet():
    w = distributed._Watchdog("rank 0/1")
    w.arm("barrier", 0.2)
    w.disarm()
    time.sleep(0.4)       # still alive: the deadline was cleared before it passed
