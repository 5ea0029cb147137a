"""Dropout in examples/mlp_classifier.kina's train_step_dropout (issue 26 part 6): the mask of
step s is dropout_mask(key, s) = bernoulli(random_fold_in(key, s), 7/8), the same bits at -O0,
at -O2, in the interpreter and in NumPy's derivation of the same keys; a 6-step training run is
reproducible bit for bit run to run at each level and level to level (losses and weights:
exp and log_softmax's log are Kina's own at both levels, compiler/backend/math_lowering.py,
and at the classifier's shapes -O2's matmuls and reductions add in -O0's order with no
fused multiply-add, docs/compiling.md "Numerics across levels"), and equals a NumPy
implementation of the same training (hand-written forward and backward, the NumPy-derived
masks) within float rounding."""
import sys
from pathlib import Path

import numpy as np
import pytest

from compiler import build
from compiler.oracle import interp_random as R
from compiler.oracle.interp import run_function
from compiler.runtime import library as runtime

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from validate_random import numpy_dropout_step  # noqa: E402  (scripts/: make validate-dropout's reference)

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mlp_classifier.kina"
STEPS = 6
KEY = np.array([3, 26], np.int64)
pytestmark = pytest.mark.both_levels   # builds at -O0 and -O2 itself


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
    """The losses of STEPS steps with key KEY and step numbers 0 .. STEPS-1."""
    x, labels, weights = _start()
    lr = np.array([[0.5]], np.float32)
    losses = []
    for step in range(STEPS):
        loss, *weights = step_fn(x, labels, *weights, lr, KEY, np.array(step, np.int64))
        losses.append(np.asarray(loss).item())
    return np.array(losses, np.float32), weights


def _numpy_mask(step: int) -> np.ndarray:
    """The mask by NumPy: Threefry fold_in of the step, uniforms, < 7/8 (as jax.random)."""
    return R.uniform(R.fold_in(KEY, np.int64(step)), (8, 16)) < np.float32(0.875)


def _numpy_step(x, labels, w1, b1, w2, b2, lr, key, step):
    """One SGD step of the dropout MLP in float64 NumPy, by hand (no Kina): make
    validate-dropout's implementation, with the mask by NumPy."""
    loss, weights = numpy_dropout_step([w1, b1, w2, b2], np.asarray(x, np.float64), labels,
                                       _numpy_mask(int(step)), float(lr[0, 0]))
    return (np.array([[loss]]), *weights)


def test_the_masks_are_the_same_bits_everywhere(built):
    res, _ = built[0]
    for step in (0, 1, 2 ** 33 + 5):
        want = _numpy_mask(step)
        args = [KEY, np.array(step, np.int64)]
        for level, (_, lib) in built.items():
            np.testing.assert_array_equal(lib["dropout_mask"](*args), want, err_msg=f"-O{level}, step {step}")
        np.testing.assert_array_equal(run_function(res.program, "dropout_mask", args), want)


def test_the_dropout_run_is_reproducible_at_each_level_across_levels_and_matches_numpy(built):
    runs = {level: _run(lib["train_step_dropout"]) for level, (_, lib) in built.items()}
    for level, (_, lib) in built.items():
        again = _run(lib["train_step_dropout"])
        np.testing.assert_array_equal(runs[level][0], again[0])               # run to run, bit for bit
        for w, w_again in zip(runs[level][1], again[1]):
            np.testing.assert_array_equal(w, w_again)
    np.testing.assert_array_equal(runs[0][0].view(np.uint32), runs[2][0].view(np.uint32))   # -O0 = -O2
    for w0, w2 in zip(runs[0][1], runs[2][1]):
        np.testing.assert_array_equal(w0.view(np.uint32), w2.view(np.uint32))
    ref = _run(_numpy_step)
    np.testing.assert_allclose(runs[2][0], ref[0], rtol=1e-5)                 # the NumPy implementation
    for w, w_ref in zip(runs[2][1], ref[1]):
        np.testing.assert_allclose(w, w_ref, rtol=1e-4, atol=1e-5)
    res, _ = built[0]
    interp = _run(lambda *a: run_function(res.program, "train_step_dropout", list(a)))
    np.testing.assert_allclose(runs[2][0], interp[0], rtol=1e-5)              # the interpreter
    assert runs[2][0][-1] < runs[2][0][0]                                      # it trains


def test_dropout_changes_the_loss_and_each_step_draws_its_own_mask(built):
    _, lib = built[2]
    x, labels, weights = _start()
    lr = np.array([[0.5]], np.float32)
    plain = lib["train_step"](x, labels, *weights, lr)[0]
    dropped = [lib["train_step_dropout"](x, labels, *weights, lr, KEY, np.array(s, np.int64))[0] for s in (0, 1)]
    assert plain.item() != dropped[0].item() and dropped[0].item() != dropped[1].item()
    assert not np.array_equal(_numpy_mask(0), _numpy_mask(1))
