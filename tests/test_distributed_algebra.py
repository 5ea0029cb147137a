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
from dataclasses import replace
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
                                           (4, 64, 8), (2, 4, 8), (6, 4, 3), (3, 4, 2), (5, 4, 2),
                                           (1, 4, 3), (2, 4, 3), (7, 8, 4), (5, 8, 3)])
def test_partition_gives_every_prediction_to_exactly_one_rank(batch, T, world):
    cfg = L.Config("t", batch=batch, T=T, D=4, H=2, V=8, lr=0.1, steps=1)
    total = np.zeros((batch, T, 1), np.float32)
    rows, owned = [], []
    for r in range(world):
        share = L.partition(cfg, world, r)
        assert share.weight.shape == (share.rows[1] - share.rows[0], T, 1)
        total[share.rows[0]:share.rows[1]] += share.weight
        rows.append(share.rows[1] - share.rows[0])
        owned.append(int(np.count_nonzero(share.weight)))
    assert np.array_equal(total, np.full_like(total, np.float32(1.0 / (batch * T))))
    if batch >= world:      # whole windows: B or B+1 each, in rank order
        assert sorted(rows, reverse=True) == rows and set(rows) <= {batch // world, -(-batch // world)}
        assert owned == [r * T for r in rows]
    else:                   # positions: floor/ceil of the predictions
        assert set(owned) <= {batch * T // world, -(-batch * T // world)}


@pytest.mark.parametrize("batch,T,world,message", [
    (1, 4, 5, "cannot split the 1 x 4 next-token predictions of a step (4) over 5 processes: every process "
              "needs at least one prediction (at most 4 processes)"),
    (3, 4, 0, "cannot split the 3 x 4 next-token predictions of a step (12) over 0 processes")])
def test_partition_rejects_what_cannot_be_split(batch, T, world, message):
    cfg = L.Config("t", batch=batch, T=T, D=4, H=2, V=8, lr=0.1, steps=1)
    with pytest.raises(distributed.ShardingError, match=message.replace("(", r"\(").replace(")", r"\)")):
        L.partition(cfg, world, 0)


def test_epoch_batches_walk_the_corpus_with_a_shorter_last_batch():
    cfg = L.config("scaled", batch=5, T=8, D=16, H=2, V=32, corpus_len=40, epoch_batches=True)
    wins = L.windows(cfg)
    assert len(wins) == 32 and L.steps_per_epoch(cfg, 32) == 7 and L.batch_sizes(cfg, 32) == [5, 2]
    epoch = [L.step_windows(cfg, wins, k) for k in range(7)]
    assert [len(w) for w in epoch] == [5, 5, 5, 5, 5, 5, 2]
    assert np.array_equal(np.concatenate(epoch), wins)            # every window once, in order
    assert np.array_equal(L.step_windows(cfg, wins, 7), wins[:5])  # the next epoch starts over
    assert L.batch_sizes(L.config("scaled", batch=4, corpus_len=40, T=8, epoch_batches=True), 32) == [4]
    assert L.batch_sizes(replace(cfg, epoch_batches=False), 32) == [5]


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


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_data_parallel_trainer_sums_to_the_single_process_step(world_size, cache):
    cfg, steps = L.STORYLM0, 12
    lib = L.dp_library(cfg, OPT, cache_dir=cache)

    def rank(world, r):
        trainer = L.DataParallelTrainer(lib, cfg, world, L.initial_weights(cfg))
        return [trainer.step(k) for k in range(steps)], trainer.weights
    results = run_ranks(world_size, rank)
    ref_losses, ref_w = train_numpy(steps, cfg.lr)
    for losses, weights in results:
        np.testing.assert_allclose(losses, ref_losses, atol=1e-5)
        for n in L.WEIGHTS:
            np.testing.assert_allclose(weights[n], ref_w[n], atol=1e-5)


# A small scaled configuration (T=8, D=16, H=2, V=32, a corpus of 40 tokens: 32 windows).
SMALL = L.config("scaled", T=8, D=16, H=2, V=32, corpus_len=40)


def grad_call(lib, cfg, w, wins, weight):
    mask, scale = L.constants(cfg)
    return lib.grad(np.ascontiguousarray(wins), w["emb"], mask, scale, w["wq"], w["wk"], w["wv"], w["wo"],
                    w["lm_head"], weight)


@pytest.mark.parametrize("batch,world_size", [(3, 2), (5, 2), (5, 3), (1, 2)])
def test_uneven_shares_sum_to_the_whole_batch_gradient(batch, world_size, cache):
    """Ranks with B and B+1 windows (or parts of one window) call one dynamic library; their
    summed (loss part, gradients) are the whole batch's, and one SGD step with them is the
    single-process train_step of examples/storylm.kina (another program, dynamic too)."""
    cfg = replace(SMALL, batch=batch)
    lib = L.dp_library(cfg, OPT, cache_dir=cache)
    assert lib.grad.sizes == ("B",)
    w = L.initial_weights(cfg)
    wins = L.step_windows(cfg, L.windows(cfg), 1)
    parts, rows = [], []
    for r in range(world_size):
        share = L.partition(cfg, world_size, r)
        rows.append(share.rows[1] - share.rows[0])
        parts.append(grad_call(lib, cfg, w, wins[share.rows[0]:share.rows[1]], share.weight))
    summed = [sum(p[i] for p in parts) for i in range(len(parts[0]))]
    whole = grad_call(lib, cfg, w, wins, np.full((batch, cfg.T, 1), 1.0 / (batch * cfg.T), np.float32))
    for name, got, want in zip(["loss", *L.WEIGHTS], summed, whole):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7, err_msg=name)
    if batch >= world_size:
        assert len(set(rows)) == (1 if batch % world_size == 0 else 2)
    single = L.single_library(OPT, cache_dir=cache)
    mask, scale = L.constants(cfg)
    lr = np.full((1, 1), cfg.lr, np.float32)
    loss, *stepped = single.train_step(np.ascontiguousarray(wins), w["emb"], mask, scale, w["wq"], w["wk"], w["wv"],
                                       w["wo"], w["lm_head"], lr, H=cfg.H)
    np.testing.assert_allclose(summed[0], loss, rtol=1e-5)
    for name, g, want in zip(L.WEIGHTS, summed[1:], stepped):
        np.testing.assert_allclose(w[name] - cfg.lr * g, want, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("batch,epochs", [(3, False), (5, True)])
def test_data_parallel_trainer_with_uneven_and_shorter_batches(batch, epochs, cache):
    """Two ranks, one library: batch 3 as 2 + 1 windows; batch 5 in epochs (3 + 2 windows, and
    the last batch of each epoch, 2 windows, as 1 + 1), against single-process training."""
    cfg, steps = replace(SMALL, batch=batch, epoch_batches=epochs), 16
    lib = L.dp_library(cfg, OPT, cache_dir=cache)

    def rank(world, r):
        trainer = L.DataParallelTrainer(lib, cfg, world, L.initial_weights(cfg))
        return [trainer.step(k) for k in range(steps)], trainer.rows_called
    results = run_ranks(2, rank)
    ref = L.single_process_losses(cfg, steps, OPT, cache_dir=cache)
    for losses, _ in results:
        np.testing.assert_allclose(losses, ref, rtol=1e-5, atol=1e-6)
    assert [rows for _, rows in results] == ([{2}, {1}] if not epochs else [{3, 1}, {2, 1}])


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
