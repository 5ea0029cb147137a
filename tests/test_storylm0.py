"""StoryLM-0 examples: validation scripts, generated mains, typing of the seed instances.

The three validation scripts compile the examples to host libraries and compare
them with an independent NumPy model (and torch when installed); here they run as
subprocesses and must exit 0.  The other tests pin what the seeds state about the
examples' types (StoryLM-0 is examples/storylm.kina at storylm_data.SIZES), that
every `main` literal equals examples/storylm0_weights.npz, and that the NumPy
reference itself agrees with finite differences.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from compiler.analysis import analyze
from compiler.core.types import TupleType, f32
from compiler.ir import nodes as ir
from compiler.oracle.interp import run_function

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import gen_example_mains as G  # noqa: E402
from storylm_data import (  # noqa: E402
    EXAMPLES,
    FLOAT_ARGS,
    MASK_NEG,
    PROMPT,
    SIZES,
    TRAINABLE,
    V,
    decode,
    inputs,
    load_story,
    load_weights,
    ordered,
    targets_for,
)
from storylm_numpy import forward, nll_grads, sgd_step  # noqa: E402
from storylm_torch import torch_or_none  # noqa: E402

POSITIVE = sorted(set(G.MAINS) - {"invalid_reduce_mean_ad"})


def checked(name: str) -> ir.Program:
    """The checked program of an example (examples/invalid_* break reverseMode's restrictions)."""
    snap = analyze((EXAMPLES / f"{name}.kina").read_text())
    allowed = [d for d in snap.diagnostics if name.startswith("invalid_") and d.code.startswith("ad-")]
    assert snap.diagnostics == allowed, snap.diagnostics
    return snap.program


def storylm(sizes: dict[str, int] = SIZES) -> ir.Program:
    """examples/storylm.kina's program with its generic functions exported at `sizes`."""
    snap = analyze((EXAMPLES / "storylm.kina").read_text())
    assert snap.diagnostics == []
    program, diags = snap.program_for(sizes)
    assert [d for d in diags if d.severity == "error"] == []
    return program


def handle_types(fn: ir.Function) -> list:
    return [b.value.type for b in fn.lets if isinstance(b.value, ir.Handle)]


# ---- the validation scripts ----------------------------------------------------------
@pytest.mark.parametrize("script", ["validate_decoder_ad.py", "validate_mean_nll.py", "validate_tp_vocab.py"])
def test_validation_script_passes(script):
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / script)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "MISMATCH" not in proc.stdout and "all " in proc.stdout
    assert ("torch: skipped (not installed)" in proc.stdout) == (torch_or_none() is None)


def test_validation_without_torch_skips_cleanly():
    """`import torch` fails (sys.modules entry None): the script prints the skip line and still passes."""
    code = ("import runpy, sys; sys.modules['torch'] = None; sys.argv = ['validate_tp_vocab.py']; "
            "sys.path.insert(0, 'scripts'); runpy.run_path('scripts/validate_tp_vocab.py', run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "torch: skipped (not installed)" in proc.stdout and "vs torch" not in proc.stdout


# ---- generated mains and the weights -----------------------------------------------------
def test_generated_mains_are_up_to_date():
    assert G.main(["--check"]) == 0


def main_literals(name: str) -> dict[str, np.ndarray]:
    """The `let NAME = Tensor[..] {..}` bindings of an example's main, as arrays."""
    fn = checked(name).functions["main"]
    out = {}
    for b in fn.lets:
        if isinstance(b.value, ir.Literal):
            t = b.value.type
            dtype = np.int64 if not t.is_float else np.float32
            out[b.names[0]] = np.broadcast_to(np.array(b.value.values, dtype), t.shape) \
                if len(b.value.values) == 1 else np.array(b.value.values, dtype).reshape(t.shape)
    return out


@pytest.mark.parametrize("name", sorted(G.MAINS))
def test_main_literals_equal_the_npz(name):
    weights = load_weights()
    lits = main_literals(name)
    assert lits, f"{name}: main binds no literals"
    for key, value in lits.items():
        if key in weights:
            np.testing.assert_array_equal(value, weights[key], err_msg=f"{name}: {key}")
    if "mask" in lits:
        above = np.triu(np.ones((4, 4), bool), 1)
        assert np.all(lits["mask"][0, 0][above] == MASK_NEG) and np.all(lits["mask"][0, 0][~above] == 0)
    if "scale" in lits:
        assert lits["scale"].item() == np.float32(1 / np.sqrt(2))
    if "token_ids" in lits:
        np.testing.assert_array_equal(lits["token_ids"], [[1, 4, 2, 6]])


def test_weights_are_the_seeded_draw():
    for key, value in G.make_weights().items():
        np.testing.assert_array_equal(load_weights()[key], value)
        hundredths = value.astype(np.float64) * 100   # rounded to 2 decimals, so literals print exactly
        np.testing.assert_allclose(hundredths, np.round(hundredths), atol=1e-4)


def test_story_fixture():
    story = load_story()
    assert story.shape == (32,) and story.min() >= 0 and story.max() < V
    assert decode(PROMPT) == "the cat sat down"


# ---- what the seeds state about the examples' types ---------------------------------------
def test_gather_tuple_omits_the_i64_parameter():
    (t,) = handle_types(checked("ad_gather").functions["step"])
    assert t == TupleType((f32(1, 4, 4), f32(8, 4)))


def test_ad_step_result_and_tuple():
    prog = storylm()
    assert prog.functions["embedding_step"].ret_type == f32(8, 4)
    (t,) = handle_types(prog.functions["embedding_step"])
    assert len(t.items) == 9 and t.items[0] == f32(1, 4, 8) and t.items[1] == f32(8, 4)


def test_mean_nll_tuple():
    (t,) = handle_types(storylm().functions["train_step"])
    # (mean, g_emb, g_mask, g_scale, g_wq, g_wk, g_wv, g_wo, g_lm): both I64 params omitted;
    # 1/(B*T) is a size number, not a parameter, so it has no cotangent
    assert len(t.items) == 9 and t.items[0] == f32(1, 1) and t.items[2] == f32(1, 1, 4, 4)
    assert t.items[-1] == f32(4, 8)


def test_storylm_instantiates_at_the_scaled_sizes():
    """The same source at the benchmark's sizes: every shape follows the sizes."""
    prog = storylm({"B": 4, "T": 64, "H": 8, "DH": 32, "V": 2048})
    step = prog.functions["train_step"]
    assert [p.type.shape for p in step.params[:2]] == [(4, 65), (2048, 256)]
    assert prog.functions["forward"].ret_type == f32(4, 64, 2048)
    assert prog.functions["greedy"].ret_type.shape == (4, 76)


def test_storylm_build_with_some_sizes_leaves_the_others_dynamic(tmp_path):
    """--size B=1 --size T=4: the uncalled generic functions are exported dynamic in H, DH
    and V (issue 25), the functions others call are instantiated where they are called."""
    from compiler.build import build_file
    res = build_file(EXAMPLES / "storylm.kina", tmp_path / "s.so", 0, sizes={"B": 1, "T": 4})
    assert res.ok, res.diagnostics
    entries = {f["name"]: f for f in res.manifest["functions"]}
    assert entries["train_step"]["sizes"] == ["H", "DH", "V"]
    assert entries["train_step"]["params"][0]["shape"] == [1, 5]
    assert entries["slide"].get("sizes") is None and "forward" not in entries


def test_invalid_reduce_mean_fails_at_the_reduce_keep(tmp_path):
    from compiler.build import build_file
    path = EXAMPLES / "invalid_reduce_mean_ad.kina"
    text = path.read_text()
    result = build_file(str(path), out_so=str(tmp_path / "lib.so"))
    assert not result.ok
    (diag,) = [d for d in result.diagnostics if d.severity == "error"]
    assert diag.code == "ad-unsupported" and "reduce_mean" in diag.message
    assert "reduce_keep(op=mean" in text[diag.span.start:diag.span.end]
    cli = subprocess.run([sys.executable, "-m", "compiler.cli", "check", str(path)],
                         capture_output=True, text=True, cwd=ROOT)
    assert cli.returncode == 1 and "ad-unsupported" in cli.stdout


# ---- the mains run in the interpreter and agree with NumPy ------------------------------
def test_forward_matches_numpy():
    got = run_function(storylm(), "forward", ordered(inputs()))
    np.testing.assert_allclose(got, forward(inputs())[0], atol=1e-5)


def test_train_step_main_is_one_sgd_step_on_the_first_window():
    loss, *new = run_function(checked("storylm"), "main", [])
    window = load_story()[None, :5]
    want_loss, want = sgd_step(load_weights(), targets_for(window[:, :4], window[0, 4]), window[:, :4],
                                 lr=G.LR, dtype=np.float64)
    np.testing.assert_allclose(loss, [[want_loss]], atol=1e-5)
    for key, value in zip(TRAINABLE, new):
        np.testing.assert_allclose(value, want[key], atol=1e-5, err_msg=key)


# ---- the NumPy reference against central differences ---------------------------------------
@pytest.mark.parametrize("ids", [PROMPT, np.array([[1, 4, 1, 4]])])
def test_numpy_backward_matches_finite_differences(ids):
    p = {k: (v.astype(np.float64) if k != "token_ids" else v) for k, v in inputs(ids).items()}
    targets = targets_for(ids)
    _, grads = nll_grads(p, targets)
    rng = np.random.default_rng(0)
    for name in FLOAT_ARGS:
        for flat in rng.choice(p[name].size, size=min(4, p[name].size), replace=False):
            idx = np.unravel_index(flat, p[name].shape)
            hi, lo = dict(p), dict(p)
            hi[name], lo[name] = p[name].copy(), p[name].copy()
            hi[name][idx] += 1e-6
            lo[name][idx] -= 1e-6
            fd = (nll_grads(hi, targets)[0] - nll_grads(lo, targets)[0]) / 2e-6
            assert abs(fd - grads[name][idx]) < 1e-6 + 1e-4 * abs(fd), (name, idx, fd, grads[name][idx])
