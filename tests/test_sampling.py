"""examples/storylm0_sample.kina (issue 26 part 6): temperature + top-k + top-p sampling in
Kina.  20,000 rows of fixed logits drawn in one call: the frequencies match the softmax
probabilities of the kept tokens (Pearson's chi-square, a fixed key, deterministic), the
compiled library at -O0 and -O2 draws what the interpreter draws, and greedy_choice is the
host's argmax."""
from pathlib import Path

import numpy as np
import pytest

from compiler import build
from compiler.oracle.interp import run_function
from compiler.runtime import library as runtime

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "storylm0_sample.kina"
pytestmark = pytest.mark.both_levels   # builds at -O0 and -O2 itself
ROWS = 20_000
LOGITS = np.array([2.0, 0.5, 1.5, -1.0, 1.8, 0.0, 1.0, -2.0], np.float32)
TEMPERATURE, TOP_P = 0.8, 0.9
# chi-square 0.999 quantiles by degrees of freedom (kept tokens - 1)
CHI2_999 = {1: 10.83, 2: 13.82, 3: 16.27}


def _expected() -> np.ndarray:
    """The sampler's distribution, by the host: top 4 of logits / T, then the prefix whose
    probability before each token is below top_p, renormalised."""
    scaled = LOGITS.astype(np.float64) / TEMPERATURE
    order = np.argsort(-scaled, kind="stable")[:4]
    p = np.exp(scaled[order] - scaled[order].max())
    p /= p.sum()
    kept = order[(np.cumsum(p) - p) < TOP_P]
    probs = np.zeros(8)
    probs[kept] = np.exp(scaled[kept] - scaled[kept].max())
    return probs / probs.sum()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = {}
    for level in (0, 2):
        d = tmp_path_factory.mktemp(f"sample{level}")
        res = build.build_file(EXAMPLE, d / "s.so", opt_level=level, sizes={"B": ROWS})
        assert res.ok, [d.message for d in res.diagnostics]
        out[level] = res, runtime.load(res.so_path)
    return out


def _args(key=(0, 26)):
    return [np.broadcast_to(LOGITS, (ROWS, 8)).copy(), np.array(key, np.int64),
            np.array([[1 / TEMPERATURE]], np.float32), np.array([[TOP_P]], np.float32)]


def test_frequencies_match_the_kept_softmax_by_chi_square(built):
    res, lib = built[2]
    fn = next(name for name in lib.functions if name.startswith("sample"))
    tokens = lib[fn](*_args()).ravel()
    probs = _expected()
    counts = np.bincount(tokens, minlength=8)
    assert set(np.flatnonzero(counts)) <= set(np.flatnonzero(probs)), (counts, probs)   # only kept tokens
    kept = probs > 0
    expected = ROWS * probs[kept]
    chi2 = float(((counts[kept] - expected) ** 2 / expected).sum())
    assert chi2 < CHI2_999[int(kept.sum()) - 1], (counts, expected, chi2)


def test_levels_and_the_interpreter_draw_the_same_tokens(built):
    draws = []
    for _res, lib in built.values():
        fn = next(name for name in lib.functions if name.startswith("sample"))
        draws.append(lib[fn](*_args((7, 8))))
    res, _ = built[0]
    name = next(n for n in res.program.functions if n.startswith("sample"))
    draws.append(run_function(res.program, name, _args((7, 8))))
    np.testing.assert_array_equal(draws[0], draws[1])
    np.testing.assert_array_equal(draws[0], draws[2])


def test_greedy_choice_is_the_host_argmax(built):
    res, lib = built[0]
    fn = next(name for name in lib.functions if name.startswith("greedy_choice"))
    logits = np.random.default_rng(1).standard_normal((ROWS, 8)).astype(np.float32)
    np.testing.assert_array_equal(lib[fn](logits).ravel(), logits.argmax(axis=1))
