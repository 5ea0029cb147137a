"""-O2's weight updates accumulated into a copy of the weight (compiler/backend/accumulate.py):
which updates are rewritten, which are left alone, and that the libraries agree with -O0
and NumPy without writing their arguments."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from emit_support import o2_module_before

from compiler import build
from compiler.backend import accumulate, block_fills, parallelize, pipelines, rewrites
from compiler.runtime import library as runtime

# A linear layer's SGD step: g_w = x^T @ dy (dy = 1: the seed of the sum).  `update` is the
# update's expression; the M x K @ K x N sizes pick a threaded (16.8 MFLOP) or a serial product.
STEP = """
fn layer(x: Tensor[F32, [{m}, {k}]], w: Tensor[F32, [{k}, {n}]]) -> Tensor[F32, [{m}, {n}]] {{
  let y = x @ w in
  y
}}

fn step(x: Tensor[F32, [{m}, {k}]], w: Tensor[F32, [{k}, {n}]], lr: Tensor[F32, [1, 1]])
    -> {result} {{
  let (y, g_x, g_w) = handle layer(x, w) with reverseMode in
  let s = lr.broadcast([{k}, {n}]) in
  {update}
}}
"""
PLAIN = "w - s * g_w"


def source(update: str = PLAIN, m: int = 256, k: int = 128, n: int = 256, result: str | None = None) -> str:
    return STEP.format(m=m, k=k, n=n, update=update, result=result or f"Tensor[F32, [{k}, {n}]]")


def rewritten(src: str, tmp_path: Path) -> tuple[int, str]:
    """(updates accumulate_updates rewrites, the module's text after it) on the inlined module,
    its matmuls tagged as the slot tags them first."""
    with o2_module_before(src, pipelines.TAG_SLOT, tmp_path) as (ir, module):
        parallelize.tag_vectorizable(ir, module)
        count = accumulate.accumulate_updates(ir, module, parallelize.PARALLEL_MIN_ELEMENTS)
        module.operation.verify()
        return count, str(module)


def run(src: str, tmp_path: Path, level: int, *xs: np.ndarray) -> object:
    path = tmp_path / f"step{level}.kina"
    path.write_text(src)
    res = build.build_file(path, tmp_path / f"step{level}.so", level, cache=False)
    assert res.ok, res.diagnostics
    return runtime.load(res.so_path).step(*xs)


def inputs(m: int = 256, k: int = 128, n: int = 256) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return (rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32),
            np.array([[0.03]], np.float32))


@pytest.mark.parametrize("update", [PLAIN, "w - g_w * s", "w - g_w * 0.03", "w - 0.03 * g_w"])
def test_an_sgd_update_of_a_product_gradient_accumulates_into_a_copy_of_the_weight(update, tmp_path):
    """lr as a broadcast tensor or as a literal (a filled tensor), on either side."""
    count, text = rewritten(source(update), tmp_path)
    assert count == 1
    assert "bufferization.alloc_tensor() copy(%arg1)" in text        # the weight is copied, not written
    assert "arith.subf" not in text
    # -lr scales the smaller operand: x (read transposed, 32,768 floats), not dy (65,536)
    scaled = re.findall(r"arith\.negf [^\n]*\n\s*linalg\.yield [^\n]*\n\s*\} -> (tensor<[^>]*>)", text)
    assert scaled == ["tensor<256x128xf32>"]


@pytest.mark.parametrize("update, why", [
    ("w + s * g_w", "an add is not the update"),
    ("s * g_w - w", "the weight is the subtrahend"),
    ("w - g_w * g_w", "no scalar factor"),
    ("w - w * g_w", "the factor is not a broadcast scalar"),
])
def test_other_elementwise_forms_are_left_alone(update, why, tmp_path):
    count, _ = rewritten(source(update), tmp_path)
    assert count == 0, why


def test_a_gradient_used_twice_is_left_alone(tmp_path):
    src = source("(w - s * g_w, g_w)", result="(Tensor[F32, [128, 256]], Tensor[F32, [128, 256]])")
    assert rewritten(src, tmp_path)[0] == 0


@pytest.mark.parametrize("update", [PLAIN, "w - g_w * 0.03"])
def test_the_accumulated_update_agrees_with_O0_and_numpy_and_leaves_its_arguments(update, tmp_path):
    x, w, lr = inputs()
    before = [a.copy() for a in (x, w, lr)]
    got = run(source(update), tmp_path, 2, x, w, lr)
    for a, b in zip((x, w, lr), before):
        np.testing.assert_array_equal(a, b)
    want = w.astype(np.float64) - 0.03 * (x.T.astype(np.float64) @ np.ones((256, 256)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, run(source(update), tmp_path, 0, x, w, lr), rtol=1e-5, atol=1e-5)


def test_a_small_steps_update_stays_as_written_the_same_bits_as_O0(tmp_path):
    """A product -O2 leaves as a loop nest (6,144 flops) keeps -O0's sums and its update."""
    src = source(m=16, k=8, n=24)
    assert rewritten(src, tmp_path)[0] == 0
    x, w, lr = inputs(16, 8, 24)
    np.testing.assert_array_equal(run(src, tmp_path, 2, x, w, lr), run(src, tmp_path, 0, x, w, lr))


def test_a_threaded_product_copies_the_weight_block_by_block(tmp_path):
    """The forall's blocks each copy their part of w (no whole copy before the loop)."""
    with o2_module_before(source(), pipelines.FILL_SLOT, tmp_path, after=True) as (ir, module):
        copies = rewrites.walk_ops(ir, module, lambda op: op.name == "bufferization.materialize_in_destination")
        assert len(copies) == 1 and copies[0].parent.operation.name == "scf.forall"
        assert not rewrites.walk_ops(ir, module, block_fills.copied)


def test_the_scatter_loop_carries_the_tag_the_rewrite_looks_for():
    from compiler.backend.emit.ops import scatter_rows_function
    assert "{" + accumulate.SCATTER_TAG + "}" in scatter_rows_function('"s"', 4, 8, 16, "f32", "f32")
