"""Random initialisation of StoryLM in Kina (issue 26 part 6): `init` of examples/storylm.kina
draws the six weights from one key, equal bit for bit at -O0, at -O2, in the interpreter and
in a NumPy derivation of the same keys (split into six, a normal per weight, / sqrt(D)).
Only `init` is built (keep_exports), at StoryLM-0's sizes; training from these weights is in
tests/test_dynamic_storylm.py."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler import build, runtime
from compiler.oracle import interp_random as R
from compiler.oracle.interp import run_function

STORYLM = Path(__file__).resolve().parents[1] / "examples" / "storylm.kina"
pytestmark = pytest.mark.both_levels   # builds at -O0 and -O2 itself
SIZES = {"H": 2, "DH": 2, "V": 8}
SHAPES = [(8, 4), (4, 4), (4, 4), (4, 4), (4, 4), (4, 8)]   # emb, wq, wk, wv, wo, lm_head
KEYS = ([0, 26], [2 ** 32 - 1, 7])


@pytest.fixture(scope="module")
def inits(tmp_path_factory):
    """{level: init results per key} and the interpreter's, from one build per level."""
    out = {}
    for level in (0, 2):
        so = tmp_path_factory.mktemp(f"init{level}") / "init.so"
        res = build.build_file(STORYLM, so, opt_level=level, sizes=SIZES, transform=build.keep_exports(["init"]))
        assert res.ok, [d.message for d in res.diagnostics]
        lib = runtime.load(so)
        out[level] = [lib.init(np.array(k, np.int64)) for k in KEYS]
    out["interp"] = [run_function(res.program, "init", [np.array(k, np.int64)]) for k in KEYS]
    return out


def _numpy_init(key: list[int]) -> list[np.ndarray]:
    keys = R.split(np.array(key, np.int64), 6)
    scale = np.float32(1.0 / np.sqrt(4.0))
    return [R.normal(keys[i], shape) * scale for i, shape in enumerate(SHAPES)]


def test_init_is_the_same_bits_everywhere(inits):
    for i, key in enumerate(KEYS):
        want = _numpy_init(key)
        for where in (0, 2, "interp"):
            got = inits[where][i]
            assert [g.shape for g in got] == SHAPES
            for n, (g, w) in enumerate(zip(got, want)):
                np.testing.assert_array_equal(g, w, err_msg=f"{where}, key {key}, weight {n}")


def test_each_weight_draws_from_its_own_key(inits):
    first, other = inits[2]
    flat = np.concatenate([w.ravel() for w in first])
    assert len(np.unique(flat)) == flat.size                      # no two weights share draws
    assert not any(np.array_equal(a, b) for a, b in zip(first, other))
    assert 0.3 < float(np.std(flat)) < 0.7                         # scaled by 1/sqrt(D) = 0.5
