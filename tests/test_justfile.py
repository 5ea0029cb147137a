"""The justfile mirrors the Makefile: one recipe per Makefile target, each running that target.

The spec names `just validate-decoder-ad`; the commands themselves live only in the
Makefile, so this test checks the two stay in step and that the spec's recipe runs."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
JUST = Path(sys.executable).parent / "just"


def _just() -> str:
    found = str(JUST) if JUST.exists() else shutil.which("just")
    if found is None:   # `make setup` installs the rust-just wheel: missing means a broken venv
        pytest.fail("`just` is not installed in this environment; run `make setup` (rust-just wheel)")
    return found


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    phony = re.search(r"^\.PHONY:((?:.*\\\n)*.*)$", text, re.M)
    assert phony, "the Makefile declares its targets in .PHONY"
    names = set(phony[1].replace("\\\n", " ").split())
    rules = set(re.findall(r"^([a-z][\w-]*):(?!=)", text, re.M))
    assert names <= rules, f".PHONY names targets without a rule: {sorted(names - rules)}"
    return names


def just_recipes() -> set[str]:
    out = subprocess.run([_just(), "--summary"], cwd=ROOT, capture_output=True, text=True, check=True)
    return set(out.stdout.split()) - {"default"}


def test_every_make_target_has_a_just_recipe_and_nothing_more():
    assert just_recipes() == make_targets()


def test_every_recipe_runs_its_make_target():
    for recipe in sorted(just_recipes()):
        out = subprocess.run([_just(), "--dry-run", recipe], cwd=ROOT, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert re.search(rf"^make NPROC=\d+ {re.escape(recipe)}$", out.stderr, re.M), (recipe, out.stderr)


# The recipe's scripts pick their own -O levels: one run covers it (the Makefile's -O2
# pass deselects both_levels), and `make validate` in CI runs the same scripts again.
@pytest.mark.both_levels
def test_just_validate_decoder_ad_runs():
    out = subprocess.run([_just(), "validate-decoder-ad"], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "passed" in out.stdout.lower(), out.stdout[-2000:]
