"""Training StoryLM-0 with the compiled train_step of examples/storylm.kina: the loss falls, and the
compiled trajectory is the NumPy one (and the PyTorch one when torch is installed)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from report import compile_example  # noqa: E402
from storylm_data import PROMPT, T, corpus_windows, decode, load_story, window_split  # noqa: E402
from storylm_train import DEMO_LR, CompiledTrainer, train_numpy, train_torch  # noqa: E402

LR = DEMO_LR
EPOCH = len(corpus_windows())          # 28 windows of the 32-token story
TRAJECTORY_STEPS = 20


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return compile_example("storylm", tmp_path_factory.mktemp("train"))


def test_windows_are_next_token_pairs():
    story, windows = load_story(), corpus_windows()
    assert windows.shape == (len(story) - T, 1, T + 1)
    ids, targets = window_split(windows[3])
    np.testing.assert_array_equal(ids[0], story[3:7])
    np.testing.assert_array_equal(targets[0, :, 0], story[4:8])


def test_loss_falls(lib):
    losses = CompiledTrainer(lib, LR).train(10 * EPOCH)
    first, last = np.mean(losses[:EPOCH]), np.mean(losses[-EPOCH:])
    assert np.all(np.isfinite(losses))
    assert last < 0.5 * first, (first, last)
    assert losses[0] > 2.0 and last < 0.7


def test_compiled_trajectory_equals_numpy(lib):
    trainer = CompiledTrainer(lib, LR)
    compiled = trainer.train(TRAJECTORY_STEPS)
    reference, w_ref = train_numpy(TRAJECTORY_STEPS, LR)
    np.testing.assert_allclose(compiled, reference, atol=1e-4)
    for name, value in trainer.w.items():
        np.testing.assert_allclose(value, w_ref[name], atol=1e-4, err_msg=name)


def test_compiled_trajectory_equals_torch(lib):
    torch = pytest.importorskip("torch")
    compiled = CompiledTrainer(lib, LR).train(TRAJECTORY_STEPS)
    reference, _ = train_torch(torch, TRAJECTORY_STEPS, LR)
    np.testing.assert_allclose(compiled, reference, atol=1e-4)


def test_greedy_continuation_follows_the_story(lib):
    """Every generated token continues its 4-token context the way the story does somewhere."""
    trainer = CompiledTrainer(lib, LR)
    trainer.train(10 * EPOCH)
    text = trainer.greedy(PROMPT, 8)
    assert text.shape == (T + 8,) and np.array_equal(text[:T], PROMPT[0])
    seen = {tuple(w) for w in corpus_windows()[:, 0].tolist()}
    for i in range(T, len(text)):
        assert tuple(text[i - T:i + 1].tolist()) in seen, decode(text[:i + 1])


def test_demo_script_runs(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "train_storylm0.py"), "--steps", str(2 * EPOCH),
                           "--no-torch", "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "final loss" in proc.stdout and "greedy: the cat sat down |" in proc.stdout
    assert f"step {2 * EPOCH:>4}/{2 * EPOCH}" in proc.stdout
    assert (tmp_path / "storylm0_loss.png").exists() or "plot: skipped" in proc.stdout
