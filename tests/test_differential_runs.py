"""The differential oracle's VJP-export and random-value runs (compiler/oracle/differential_runs.py):
they run, they pass on the compiler as it is, and a planted error in a library's result (a
perturbed cotangent, one flipped bit of a random value) is reported as such.  One build at
-O0 for the module."""
import numpy as np
import pytest

from compiler import analysis
from compiler.core.types import DType
from compiler.oracle import differential, validate
from compiler.oracle.differential_runs import bit_differences, extras_of
from compiler.oracle.progen import generate as progen
from compiler.oracle.progen.probe import random_probe

pytestmark = pytest.mark.both_levels   # builds at -O0 itself

SMALL = progen.GenConfig(max_lets=6)
# c0: under reverseMode, draws a normal from a folded-in key (F32); c244: the same in
# F8E5M2; c172: a wrapper differentiates a size-generic helper (a dynamic VJP export).
SEEDS = (0, 172, 244)


def _cases():
    return [(f"c{s}", progen.generate(s, SMALL)) for s in SEEDS]


def _planted(load):
    """load_outputs with c0_vjp's last cotangent off by 1% and one bit of c244's draw flipped."""
    def wrong(work, key):
        out = load(work, key)
        if key == "c0_vjp":
            out[-1] = out[-1] * np.float32(1.01)
        if key == "c244_bits":
            draw = np.array(out[-1])
            draw.view(f"u{draw.dtype.itemsize}").flat[0] ^= 1
            out[-1] = draw
        return out
    return wrong


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    oracle = differential.Oracle(tmp_path_factory.mktemp("runs"), levels=(0,), use_torch=False, fd=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(validate, "load_outputs", _planted(validate.load_outputs))
        failures = oracle.run_batch(_cases())
    return oracle.stats, failures


def test_vjp_exports_static_and_dynamic_are_checked(run):
    stats, _ = run
    assert stats.vjp_checked == 3 and stats.vjp_dynamic == 1      # c0_vjp, c244_vjp, c172_s1_vjp[..]


def test_a_perturbed_cotangent_is_a_vjp_failure(run):
    _, failures = run
    vjp = [f for f in failures if f.kind == "vjp"]
    assert [(f.name, f.level) for f in vjp] == [("c0", 0)], [f.headline() for f in failures]
    assert vjp[0].detail.startswith("c0_vjp: result 2 vs interp (f64)")


def test_random_values_are_compared_bitwise_and_a_flipped_bit_fails(run):
    stats, failures = run
    assert stats.bits_cases == 2 and stats.bits_values == 4       # (key, normal) of c0 and of c244
    bits = [f for f in failures if f.kind == "bits"]
    assert [(f.name, f.level) for f in bits] == [("c244", 0)], [f.headline() for f in failures]
    assert "result 1 (random_normal, F8E5M2): 1 of 4 elements differ, first at [0]" in bits[0].detail
    assert len(failures) == 2, [f.headline() for f in failures]   # nothing else: the rest agree


def test_bit_differences_see_a_sign_of_zero_and_accept_the_same_nan():
    want = [np.array([0.0, np.nan], np.float32), np.array([True, False])]
    assert bit_differences([want[0].copy(), want[1].copy()], want, ["F32", "Bool"]) == []
    (line,) = bit_differences([np.array([-0.0, np.nan], np.float32), want[1]], want, ["F32", "Bool"])
    assert "1 of 2 elements differ, first at [0]: bits 0x80000000" in line
    bf16 = np.array([1.0, 2.0], DType.BF16.np_dtype)
    assert bit_differences([bf16.astype(np.float32)], [bf16], ["BF16"]) == []


def test_a_last_bit_difference_fails_and_names_the_op():
    want = [np.array([1.0, 2.0])]
    got = [np.nextafter(want[0], 3.0)]
    (line,) = bit_differences(got, want, ["F64"], ["random_normal"])
    assert "result 0 (random_normal, F64): 2 of 2 elements differ" in line


def test_the_probe_returns_every_random_value_and_only_their_slice():
    case = progen.generate(0, SMALL)
    probe = random_probe(case)
    assert probe is not None and probe.results == ["v6", "v7"]       # the folded key and the normal
    assert [l.name for l in probe.lets] == ["v6", "v7"] and not probe.ad
    assert random_probe(progen.generate(172, SMALL)) is None
    text = probe.source("c0_bits")
    assert not [d for d in analysis.analyze(text).diagnostics if d.severity == "error"], text


def test_reproducer_of_a_vjp_failure_has_its_vjp_export_and_probe():
    case = progen.generate(0, SMALL)
    text = differential.reproducer(differential.Failure("c0", "vjp", 2, "c0_vjp: result 2 .."), case, case)
    assert "// Reproduce: kinac validate -O2 --vjp f FILE" in text and "fn f_bits(" in text
    assert extras_of("f", case).vjp == ["f"]
    assert not [d for d in analysis.analyze(text).diagnostics if d.severity == "error"]


# Regression: the minimal program of the one bit difference the generated run found (case
# c79, seed 1): an F64 normal's log1p was lowered as math.log1p (-O0: log(1 + y); -O2 other
# bits again) where the interpreter used np.log1p.  Both now compute fdlibm's log in f64
# adds, multiplies and divides (random_rules.LOG64_LG).
NORMAL_F64 = """fn n_bits(i5: Tensor[I64, [2]], i6: Tensor[I64, []]) -> (Tensor[I64, [2]], Tensor[F64, [2, 3, 1, 8, 17]]) {
  let v7 = random_fold_in(i5, i6) in
  let v8 = random_normal(v7, shape=[2, 3, 1, 8, 17], dtype=F64) in
  (v7, v8)
}
"""


def test_f64_normal_has_the_interpreters_bits_at_both_levels(tmp_path):
    oracle = differential.Oracle(tmp_path, levels=(0, 2), use_torch=False, fd=False)
    failures = oracle.run_units([differential.unit_of_source("n", NORMAL_F64)])
    assert failures == [] and oracle.stats.bits_cases == 1
