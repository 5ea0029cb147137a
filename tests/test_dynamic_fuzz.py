"""Dynamic exports under differential testing (compiler/oracle/dynamic_fuzz.py, issue 25
part 7): generated programs with size-generic helpers built once without --size, each
helper and a generic reverseMode wrapper of it (dynamic exports) called at three size
assignments and compared with the interpreter on the static program at those sizes and
with the build bound to them.  Builds
at the default level (KINA_OPT_LEVEL), so the Makefile's -O2 pass runs it at -O2; the
1,000-program run is `scripts/fuzz_compile.py --dynamic --n 1000`."""
import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from compiler import analysis, build
from compiler.oracle import differential, dynamic_fuzz, validate
from compiler.oracle.progen import generate as progen

GENERIC = dataclasses.replace(progen.GenConfig(max_lets=6), generic_fraction=1.0)
N_PROGRAMS = 10


def _cases(seeds):
    return [(f"c{s}", progen.generate(s, GENERIC)) for s in seeds]


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    level = build.default_opt_level()
    oracle = dynamic_fuzz.DynamicOracle(tmp_path_factory.mktemp("dynfuzz"), levels=(level,), seed=7, grad=True)
    failures = oracle.run_batch(_cases(range(2000, 2000 + N_PROGRAMS)))
    return oracle, failures, level


def test_dynamic_exports_agree_with_the_interpreter_and_the_static_build(outcome):
    oracle, failures, _ = outcome
    assert failures == [], "\n".join(f.headline() + "\n" + f.detail for f in failures)
    s = oracle.stats
    assert s.programs == N_PROGRAMS and s.exports >= 2 * N_PROGRAMS   # each helper and its gradient wrapper
    assert s.runs == 3 * s.exports            # three size assignments each
    assert s.calls == 2 * s.runs              # the dynamic library and the static one, each run
    assert s.compared == s.runs and s.builds == 4   # one dynamic build, three static ones


def test_the_sizes_are_all_ones_then_random_per_program():
    snap = analysis.analyze(dynamic_fuzz.rename_sizes(_cases([2001])[0][1].source("c2001"), "c2001"))
    program, _ = snap.program_for({})
    fns = [f for n, f in program.functions.items() if f.sizes]
    runs = dynamic_fuzz.size_runs(fns, "c2001", 0)
    assert {n for f in fns for n in f.sizes} == set(runs[1]) == set(runs[2])
    assert len(runs) == 3 and set(runs[0].values()) == {1}
    assert all(n.endswith("_c2001") for n in runs[0])
    assert runs == dynamic_fuzz.size_runs(fns, "c2001", 0) != dynamic_fuzz.size_runs(fns, "c2001", 1)


@pytest.mark.once
def test_sizes_are_renamed_per_program_and_static_builds_keep_the_generic_functions():
    name, case = next((n, c) for n, c in _cases(range(2000, 2100)) if len(c.generics) == 2)
    text = dynamic_fuzz.rename_sizes(case.source(name), name)
    assert f"[A_{name}" in text and "[A," not in text and "A_" + name + "_" not in text
    snap = analysis.analyze(text)
    assert list(snap.diagnostics) == []
    generic = dynamic_fuzz.generic_only(text)
    assert generic.count("\nfn ") + generic.startswith("fn ") == 2 and f"fn {name}(" not in generic
    assert list(analysis.analyze(generic).diagnostics) == []


def test_a_wrong_dynamic_result_is_a_mismatch_against_both_references(tmp_path, monkeypatch):
    load = validate.load_outputs

    def wrong(work, key):   # the dynamic library's results wrong, the static build's as they are
        out = load(work, key)
        if "-dyn" not in str(work):
            return out
        return [o if o.dtype.kind in "biu" else (o.astype(np.float64) * 1.5 + 1).astype(o.dtype) for o in out]
    monkeypatch.setattr(validate, "load_outputs", wrong)
    oracle = dynamic_fuzz.DynamicOracle(tmp_path, levels=(build.default_opt_level(),))
    failures = oracle.run_batch(_cases([2003]))
    kinds = {f.kind for f in failures}
    assert kinds == {"mismatch", "static"}, [f.headline() for f in failures]
    assert all(f.name == "c2003" and "_c2003=" in f.detail for f in failures)


@pytest.mark.once
def test_gradient_wrappers_are_generic_handles_of_every_written_helper():
    for name, case in _cases(range(2000, 2030)):
        text = dynamic_fuzz.unit_of_case(name, case, grad=True).source
        helpers = re.findall(rf"fn ({name}_s\d+)\[", text)
        assert helpers and all(f"handle {h}[" in text for h in helpers), text
        snap = analysis.analyze(text)
        assert [d.message for d in snap.diagnostics if d.severity == "error"] == [], text
        program, _ = snap.program_for({})
        wrappers = [f"{name}_d{h.rpartition('_s')[2]}" for h in helpers]
        assert all(program.functions[w].sizes for w in wrappers)   # exported dynamic


# ---- the programs the dynamic runs found (tests/regressions/dynamic/) ---------------------
DYNAMIC_REGRESSIONS = sorted((Path(__file__).parent / "regressions" / "dynamic").glob("*.kina"))
# Both failed at -O2 with mlir-opt's "failed to peel the last iteration": the dynamic
# matmul's M loop (16, which the 8-row tile divides) was peeled; parallelize.tag_vectorizable
# now peels only the loops the tile may not divide.


@pytest.mark.both_levels
@pytest.mark.parametrize("level", [0, 2])
@pytest.mark.parametrize("path", DYNAMIC_REGRESSIONS, ids=lambda p: p.stem)
def test_dynamic_regression(tmp_path, path, level):
    """Each file's generic functions (named f_s<i> and f_d<i>) built once without --size and
    run at three size assignments against the interpreter and the bound builds."""
    text = differential.rename_functions(path.read_text(), "r_")
    unit = differential.Unit("r_f", dynamic_fuzz.rename_sizes(text, "r_f"), [])
    failures = dynamic_fuzz.DynamicOracle(tmp_path, levels=(level,)).run_units([unit])
    assert failures == [], "\n".join(f.headline() + "\n" + f.detail for f in failures)
    assert unit.functions


BF16_SIZE_NUMBER = """
fn s0[A, B](x1: Tensor[BF16, [A + 1, B]]) -> Tensor[BF16, [A + 1, B]] {
  let v2 = x1.relu() in
  let v3 = v2 * (1.0 / (A + 1)) in
  v3
}
"""


@pytest.mark.both_levels
def test_a_bf16_scalar_captured_by_an_outlined_kernel_builds_and_agrees(tmp_path):
    """Generated case c2009's minimal program: at -O2 the size number `1.0 / (A + 1)`, a
    bf16 scalar, became a bf16 parameter of an outlined kernel, which LLVM promoted through
    `__truncsfbf2` (rewrites.bf16_memory_as_i16 now passes it as i16)."""
    src = tmp_path / "bf.kina"
    src.write_text(BF16_SIZE_NUMBER)
    assert validate.validate_file(src, opt_level=0).ok
    report = validate.validate_file(src, opt_level=2)
    assert report.ok, validate.format_report(report)
