"""Dropout in examples/mlp_classifier.kina's train_step_dropout (issue 26 part 6): the mask of
each step is bernoulli(random_fold_in(key, step), 7/8), so a 6-step training run is
reproducible bit for bit run to run and equal to the NumPy interpreter's run of the same key
derivation.  The masks are equal bit for bit at every level (tests/test_random_ops.py); the
losses of -O0 and -O2 differ in the last bit, as any two levels' sums and exps may."""
from pathlib import Path

import numpy as np
import pytest

from compiler import build
from compiler.oracle.interp import run_function
from compiler.runtime import library as runtime

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mlp_classifier.kina"
STEPS = 6


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = {}
    for level in (0, 2):
        d = tmp_path_factory.mktemp(f"mlp{level}")
        res = build.build_file(EXAMPLE, d / "m.so", opt_level=level)
        assert res.ok, [d.message for d in res.diagnostics]
        out[level] = res, runtime.load(res.so_path)
    return out


def _start():
    rng = np.random.default_rng(26)
    x = rng.standard_normal((8, 4)).astype(np.float32)
    labels = rng.integers(0, 3, (8, 1))
    weights = [(rng.standard_normal(s) * 0.5).astype(np.float32) for s in ((4, 16), (1, 16), (16, 3), (1, 3))]
    return x, labels, weights


def _run(step_fn):
    """The losses of STEPS steps with key [3, 26] and step numbers 0 .. STEPS-1."""
    x, labels, weights = _start()
    lr, key = np.array([[0.5]], np.float32), np.array([3, 26], np.int64)
    losses = []
    for step in range(STEPS):
        loss, *weights = step_fn(x, labels, *weights, lr, key, np.array(step, np.int64))
        losses.append(np.asarray(loss).item())
    return np.array(losses, np.float32), weights


def test_the_dropout_run_is_reproducible_and_matches_across_levels(built):
    runs = {level: _run(lib["train_step_dropout"]) for level, (_, lib) in built.items()}
    again = _run(built[2][1]["train_step_dropout"])
    np.testing.assert_array_equal(runs[2][0], again[0])                 # run to run
    np.testing.assert_allclose(runs[0][0], runs[2][0], rtol=1e-6)       # -O0 and -O2: the same masks
    for w0, w2 in zip(runs[0][1], runs[2][1]):
        np.testing.assert_allclose(w0, w2, rtol=1e-5, atol=1e-6)
    res, _ = built[0]
    ref = _run(lambda *a: run_function(res.program, "train_step_dropout", list(a)))
    np.testing.assert_allclose(runs[2][0], ref[0], rtol=1e-5)           # the NumPy reference
    assert runs[2][0][-1] < runs[2][0][0]                                # it trains


def test_dropout_changes_the_loss_and_each_step_draws_its_own_mask(built):
    _, lib = built[2]
    x, labels, weights = _start()
    lr, key = np.array([[0.5]], np.float32), np.array([3, 26], np.int64)
    plain = lib["train_step"](x, labels, *weights, lr)[0]
    dropped = [lib["train_step_dropout"](x, labels, *weights, lr, key, np.array(s, np.int64))[0] for s in (0, 1)]
    assert plain.item() != dropped[0].item() and dropped[0].item() != dropped[1].item()
