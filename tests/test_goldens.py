"""MLIR goldens: for every example that should compile, the emitter's output equals
examples/NAME.mlir (regenerate with `python scripts/regen_goldens.py` after an
intended change, and review the diff), and mlir-opt accepts the golden.  Also the
result types the seeds name for their example programs."""
from __future__ import annotations

import re

import pytest
from emit_support import MLIR_OPT, regen, run

EXAMPLES = regen.examples()

# Seed-stated result types of exported functions: (example, function) -> MLIR result list.
SEED_RESULTS = {
    ("storylm", "embedding_step"): "tensor<8x4xf32>",                   # StoryLM-0's embedding SGD step
    ("storylm", "forward"): "tensor<1x4x8xf32>",                        # StoryLM-0's logits
    ("ad_reduce_sum", "step"): "tensor<2x1xf32>, tensor<2x3xf32>",       # (y, g_x)
}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_golden_matches_emitter(example):
    golden = regen.golden_path(example)
    mlir, errors = regen.emit_example(example)
    assert mlir is not None, "\n".join(errors)
    assert golden.exists(), f"{golden.name} is missing: run scripts/regen_goldens.py {example.stem}"
    assert mlir == golden.read_text(), (f"{golden.name} is stale: run scripts/regen_goldens.py "
                                        f"{example.stem} and review the diff")


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_mlir_opt_accepts_golden(example):
    golden = regen.golden_path(example)
    if not golden.exists():
        pytest.fail(f"{golden.name} is missing: run scripts/regen_goldens.py {example.stem}")
    r = run([MLIR_OPT, str(golden)], "")
    assert r.returncode == 0, r.stderr[:4000]


@pytest.mark.parametrize("example,fn", sorted(SEED_RESULTS), ids=lambda x: str(x))
def test_seed_result_types(example, fn):
    golden = regen.golden_path(regen.EXAMPLES / f"{example}.kina")
    if not golden.exists():
        pytest.skip(f"examples/{example}.kina is not in this checkout")
    m = re.search(rf"func\.func @kina_{fn}\([^)]*\) -> \(([^)]*)\) attributes \{{llvm\.emit_c_interface\}}",
                  golden.read_text())
    assert m, f"no exported @kina_{fn} in {golden.name}"
    assert m.group(1) == SEED_RESULTS[(example, fn)]


def test_invalid_examples_get_no_golden():
    for bad in regen.EXAMPLES.glob("invalid_*.kina"):
        mlir, errors = regen.emit_example(bad)
        assert mlir is None and errors, f"{bad.name} is meant to fail but compiled"
        assert not regen.golden_path(bad).exists()
