"""The benchmarks' own machinery: the let-chain generator, the peers' model code, the timing
helpers and the report parsers.  No timing is asserted (figures belong to benchmarks/);
these check that what the benchmarks compare computes the same thing."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

import bench_build  # noqa: E402
import letgen  # noqa: E402
import peers  # noqa: E402
import scaled_model as M  # noqa: E402
import timing  # noqa: E402

from compiler import analysis, build  # noqa: E402
from compiler.oracle import interp  # noqa: E402
from compiler.runtime import library as runtime  # noqa: E402

TINY = M.sizes(1, 4, 8, 2, 16)


def test_let_chain_has_n_lets_checks_and_is_deterministic():
    text = letgen.let_chain(40, seed=3)
    assert text == letgen.let_chain(40, seed=3)
    assert text != letgen.let_chain(40, seed=4)
    assert text.count("  let ") == 40
    snap = analysis.analyze(text, "chain.kina")
    assert not snap.diagnostics, snap.diagnostics
    with pytest.raises(ValueError):
        letgen.let_chain(0)


def test_let_chain_builds_and_matches_the_interpreter(tmp_path):
    text = letgen.let_chain(60, rows=4, cols=8, seed=1)
    src = tmp_path / "chain.kina"
    src.write_text(text)
    res = build.build_file(src, tmp_path / "chain.so")
    assert res.ok, res.diagnostics
    fn = res.program.functions["chain"]
    args = interp.random_inputs(fn, seed=0, program=res.program)
    want = interp.run_function(res.program, "chain", args)
    got = runtime.load(res.so_path).chain(*args)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_numpy_reference_gradient_matches_finite_differences():
    """The hand-written NumPy backward (every peer is checked against it) is a gradient."""
    w = M.make_inputs(TINY)
    w64 = {k: (v.astype(np.float64) if v.dtype == np.float32 else v) for k, v in w.items()}
    _, *new = M.np_train_step(w64, TINY)
    lr = float(w["lr"][0, 0])
    grad = (w64["wq"] - new[M.WEIGHTS.index("wq")]) / lr

    def loss(wq):
        ww = dict(w64, wq=wq)
        return float(M.np_train_step(ww, TINY)[0])

    eps, (i, j) = 1e-6, (1, 2)
    plus, minus = w64["wq"].copy(), w64["wq"].copy()
    plus[i, j] += eps
    minus[i, j] -= eps
    assert abs((loss(plus) - loss(minus)) / (2 * eps) - grad[i, j]) < 1e-6


@pytest.mark.parametrize("make", [peers.numpy_impl, peers.torch_eager_impl, peers.jax_impl],
                         ids=["numpy", "torch_eager", "jax"])
def test_peer_matches_numpy_reference(make):
    """torch.compile shares torch eager's model code (and takes ~15 s to compile): not run here."""
    w = M.make_inputs(TINY)
    impl = make(w, TINY)
    if isinstance(impl, peers.Skipped):
        pytest.skip(impl.reason)
    ref = {"forward": M.np_forward(w, TINY, M.token_ids(w, TINY))[0], "train step": M.np_train_step(w, TINY)}
    for what in ("forward", "train step"):
        assert M.max_error(impl.results[what], ref[what]) < 1e-5, what
        impl.fns[what]()   # the timed callable runs


def test_scaled_model_at_tiny_size_matches_numpy(tmp_path):
    """examples/storylm.kina built with --size at a tiny config (B=1 T=4 D=8 H=2 V=16): only
    forward and train_step (and what they call) are compiled, both agree with the NumPy reference."""
    w = M.make_inputs(TINY)
    res = M.build(TINY, tmp_path / "lm.so", 0)
    assert res.ok, res.diagnostics
    assert res.manifest["sizes"] == {"B": 1, "DH": 4, "H": 2, "T": 4, "V": 16}
    lib = runtime.load(res.so_path)
    # forward and train_step, and the exports they call (compiled once: a call of `attn`
    # at the --size values is a call of the export)
    assert sorted(f["name"] for f in res.manifest["functions"]) == ["attn", "forward", "mean_nll", "train_step"]
    step = lib.train_step(w["window"], w["emb"], w["mask"], w["scale"], w["wq"], w["wk"], w["wv"], w["wo"],
                          w["lm_head"], w["lr"])
    assert M.max_error(tuple(step), M.np_train_step(w, TINY)) < 1e-5
    logits = lib.forward(M.token_ids(w, TINY), w["emb"], w["mask"], w["scale"], w["wq"], w["wk"], w["wv"],
                         w["wo"], w["lm_head"])
    assert M.max_error(logits, M.np_forward(w, TINY, M.token_ids(w, TINY))[0]) < 1e-5


def test_flops_of_the_issue_config():
    assert M.flops(M.sizes(*M.CONFIGS["scaled"]))["train step"] == pytest.approx(1.258e9, rel=1e-3)


def test_interleaved_times_every_function_every_round():
    calls = {"a": 0, "b": 0}

    def bump(k):
        calls[k] += 1

    import time
    t0 = time.perf_counter()
    out = timing.interleaved({"a": lambda: bump("a"), "b": lambda: bump("b")}, rounds=3, budget=0.001, settle=0.02)
    assert set(out) == {"a", "b"} and all(t > 0 for t in out.values())
    assert calls["a"] > 3 and calls["b"] > 3
    assert time.perf_counter() - t0 >= 3 * 2 * 0.02     # a pause before each implementation's calls


MLIR_REPORT = """\
  ----Wall Time----  ----Name----
    0.0400 ( 40.0%)  Canonicalizer
    0.0100 ( 10.0%)  CSE
    0.0500 ( 50.0%)  Rest
    0.1000 (100.0%)  Total
"""
LLVM_REPORT = """\
===-------------------------------------------------------------------------===
                      ... Pass execution timing report ...
===-------------------------------------------------------------------------===
  Total Execution Time: 1.0 seconds (1.0 wall clock)

   ---User Time---   --System Time--   --User+System--   ---Wall Time---  --- Name ---
   0.3000 ( 30.0%)   0.0000 (  0.0%)   0.3000 ( 30.0%)   0.6000 ( 60.0%)  IndVarSimplifyPass
   0.1000 ( 10.0%)   0.0000 (  0.0%)   0.1000 ( 10.0%)   0.2000 ( 20.0%)  GVNPass
   1.0000 (100.0%)   0.0000 (  0.0%)   1.0000 (100.0%)   1.0000 (100.0%)  Total

===-------------------------------------------------------------------------===
                      Instruction Selection and Scheduling
===-------------------------------------------------------------------------===
   0.9000 ( 90.0%)   0.0000 (  0.0%)   0.9000 ( 90.0%)   0.9000 ( 90.0%)  DAG Combining 1
"""


def test_profile_report_parsers_rank_passes():
    assert [r.split("%")[-1].strip() for r in bench_build._top(MLIR_REPORT, 5)] == ["Canonicalizer", "CSE"]
    top = bench_build._llvm_top(LLVM_REPORT, 5)
    assert [r.split("%")[-1].strip() for r in top] == ["IndVarSimplifyPass", "GVNPass"]
    assert "0.600 s" in top[0]


def test_profile_kernels_profiles_a_small_step(tmp_path, capsys):
    """benchmarks/profile_kernels.py rebuilds the emitted MLIR with a tick before every op; the
    reprinted module had lost the exports' `// kina-abi:` comments, so every profile failed
    with "takes 17 descriptors, but the emitted module declares no such function"."""
    import profile_kernels
    src = tmp_path / "two.kina"
    src.write_text("fn two(x: Tensor[F32, [4, 8]], w: Tensor[F32, [8, 8]]) -> Tensor[F32, [4, 8]] {\n"
                   "  let y = x @ w in\n  let z = y * y in\n  z\n}\n")
    assert profile_kernels.main([str(src), "--fn", "two", "-O", "0", "--calls", "3"]) == 0
    out = capsys.readouterr().out
    assert "`two` at -O0:" in out and "matmul" in out and "elementwise" in out


def test_bench_tiles_child_builds_checks_and_times_a_product():
    """benchmarks/bench_tiles.py's child builds a product with this process's register tile,
    checks it against NumPy (an assertion inside) and reports the tile it was built with."""
    import bench_tiles

    from compiler.backend import transform_library
    [row] = bench_tiles.child(["16x32x64"], rounds=1)
    assert row["shape"] == "16x32x64" and row["tile"] == "x".join(map(str, transform_library.REGISTER_TILE))
    assert row["kina"] > 0 and row["numpy"] > 0
