"""Every program in tests/regressions/ (the minimal programs of the bugs issue 11 listed
and the generator found; each file says what broke and how it was fixed) is built at -O0
and -O2 and must agree with the float64 interpreter, PyTorch (when installed) and, for
its differentiated functions, finite differences: the differential oracle of
scripts/fuzz_compile.py, on all files in one library per level."""
from pathlib import Path

import pytest

from compiler import build
from compiler.oracle import differential
from compiler.runtime import library as runtime

pytestmark = pytest.mark.both_levels   # builds at -O0 and -O2 itself

REGRESSIONS = Path(__file__).parent / "regressions"
FILES = sorted(p for p in REGRESSIONS.glob("*.kina") if p.read_text().strip())


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    oracle = differential.Oracle(tmp_path_factory.mktemp("regressions"), levels=(0, 2))
    units = [differential.unit_of_source(p.stem, differential.rename_functions(p.read_text(), f"r{i}_"))
             for i, p in enumerate(FILES)]
    failures = oracle.run_units(units)
    return {u.name: u for u in units}, failures, oracle.stats


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_regression_program_matches_the_references_at_both_levels(outcome, path):
    units, failures, _ = outcome
    assert units[path.stem].functions, f"{path.name} has no function to run"
    mine = [f for f in failures if f.name == path.stem]
    assert not mine, "\n".join(f.headline() + "\n" + f.detail for f in mine)


def test_every_regression_ran_at_both_levels(outcome):
    units, _, stats = outcome
    assert stats.functions == sum(len(u.functions) for u in units.values())
    assert stats.builds >= 2 and stats.fd_checked >= 5


@pytest.mark.parametrize("level", [0, 2])
def test_an_empty_file_builds_an_empty_library(tmp_path, level):
    """Issue 11, problem 6: an empty file tripped an MLIR assertion at -O2 (the
    ExecutionEngine expects one object; a module without functions made none)."""
    res = build.build_file(REGRESSIONS / "empty.kina", tmp_path / "empty.so", level)
    assert res.ok, [d.message for d in res.diagnostics]
    lib = runtime.load(res.so_path)
    assert res.manifest["functions"] == [] and "f" not in lib
