"""Dynamic exports of every kind of op (issue 25): tests/programs/dynamic_ops.kina (gather,
slices and concats at size-expression bounds, mean, softmax, iota/tril, casts, a size
number, reshapes between dynamic shapes, transposes, batch matmuls, reverseMode) and
dynamic_new_ops.kina (scans, sort, topk, random draws) are each built ONCE and validated at
three size assignments against the interpreter (kinac validate's dynamic runs), at the
level of the run (-O0, then -O2 in `make test`)."""
from __future__ import annotations

from pathlib import Path

import pytest

from compiler.build import default_opt_level
from compiler.oracle import validate

PROGRAMS = Path(__file__).resolve().parent / "programs"


@pytest.mark.parametrize("name", ["dynamic_ops", "dynamic_new_ops"])
def test_a_dynamic_library_matches_the_interpreter_at_every_size(name):
    report = validate.validate_file(PROGRAMS / f"{name}.kina", opt_level=default_opt_level())
    assert report.build is not None and report.build.ok, report.build and report.build.diagnostics
    runs = [f.name for f in report.functions]
    assert runs and all("[" in r for r in runs)              # every function is a dynamic run
    assert any(r.endswith("=1]") for r in runs)               # the all-ones run
    assert report.ok, validate.format_report(report)


# Fuzz seed 2545 (scripts/fuzz_compile.py --dynamic): an F64 tensor times a number of sizes
# took the number in f32, 1 / A off by 1e-8 for A = 3 or 5 (the static build folds it exactly).
F64_SIZE_NUMBER = """
fn scale[A, B](x: Tensor[F64, [A, B + 1]]) -> Tensor[F64, [A, B + 1]] {
  let y = x * (1.0 / A) in
  y
}
"""


def test_a_number_of_sizes_times_an_f64_tensor_is_computed_in_f64(tmp_path):
    import numpy as np

    from compiler import build
    from compiler.runtime import library as runtime
    src = tmp_path / "scale.kina"
    src.write_text(F64_SIZE_NUMBER)
    res = build.build_file(src, tmp_path / "scale.so", default_opt_level(), cache=False)
    assert res.ok, [d.message for d in res.diagnostics]
    lib = runtime.load(res.so_path)
    x = np.random.default_rng(0).standard_normal((5, 7))
    for a in (3, 5):
        np.testing.assert_array_equal(lib.scale(x[:a]), x[:a] * (1.0 / a))
