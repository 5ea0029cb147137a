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
