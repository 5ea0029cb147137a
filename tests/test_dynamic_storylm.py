"""Issue 25's acceptance: ONE library built from examples/storylm.kina without --size trains
StoryLM-0 (B=1, T=4) to the losses of the static build, runs the scaled configuration's
step (B=4, T=64, H=8, DH=32, V=2048) and decodes over a growing sequence (T = 4, 5, ...),
all from the same .so; wrong sizes from Python are a KinaArgumentError naming both sources.
Built at the level of the run (KINA_OPT_LEVEL: -O0, then -O2 in `make test`)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from compiler import build, runtime
from compiler.analysis import analyze
from compiler.oracle import interp
from compiler.runtime.library import KinaArgumentError

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import _dist_lm as L  # noqa: E402
from report import compile_example  # noqa: E402
from storylm_data import PROMPT, STORYLM, causal_mask  # noqa: E402
from storylm_train import DEMO_LR, CompiledTrainer, kina_init  # noqa: E402

STEPS = 56    # two epochs of the story


@pytest.fixture(scope="module")
def dynamic(tmp_path_factory):
    out = tmp_path_factory.mktemp("dyn") / "storylm.so"
    res = build.build_file(STORYLM, out)
    assert res.ok, res.diagnostics
    assert res.manifest is not None
    sizes = {f["name"]: f.get("sizes") for f in res.manifest["functions"]}
    assert sizes["train_step"] == ["B", "T", "H", "DH", "V"] and sizes["slide"] == ["B", "T"]
    return runtime.load(out)


def test_one_library_trains_storylm0_like_the_static_build(dynamic, tmp_path):
    static = compile_example("storylm", tmp_path)          # --size B=1 T=4 H=2 DH=2 V=8
    want = CompiledTrainer(static, DEMO_LR).train(STEPS)
    got = CompiledTrainer(dynamic, DEMO_LR).train(STEPS)
    assert np.max(np.abs(np.array(got) - np.array(want))) <= 1e-6
    assert np.mean(got[-28:]) < np.mean(got[:28])


def test_the_same_library_runs_the_scaled_step(dynamic):
    cfg = L.config("scaled")
    w = L.initial_weights(cfg)
    mask, scale = L.constants(cfg)
    window = L.step_windows(cfg, L.windows(cfg), 0)
    args = [window, w["emb"], mask, scale, w["wq"], w["wk"], w["wv"], w["wo"], w["lm_head"],
            np.full((1, 1), cfg.lr, np.float32)]
    got = dynamic.train_step(*args, H=cfg.H)
    sizes = {"B": cfg.batch, "T": cfg.T, "H": cfg.H, "DH": cfg.DH, "V": cfg.V}
    program, _ = analyze(STORYLM.read_text(), str(STORYLM)).program_for(sizes, want_dynamic=False)
    want = interp.run_function(program, "train_step", args, dtype=np.float64)
    assert [g.shape for g in got] == [(1, 1), (2048, 256), (256, 256), (256, 256), (256, 256), (256, 256),
                                      (256, 2048)]
    for g, r in zip(got, want):
        r = np.asarray(r)
        assert np.max(np.abs(g - r)) <= 1e-4 * (1 + np.max(np.abs(r))), np.max(np.abs(g - r))


def test_greedy_over_a_growing_sequence_calls_one_library(dynamic):
    """next_token reads the whole sequence at T = 4, 5, 6: each call at a new size, each the
    interpreter's argmax at that T."""
    trainer = CompiledTrainer(dynamic, DEMO_LR)
    toks = trainer.greedy_growing(PROMPT, 3)
    snap = analyze(STORYLM.read_text(), str(STORYLM))
    w = trainer.w
    for t in (4, 5, 6):
        program, _ = snap.program_for({"B": 1, "T": t, "H": 2, "DH": 2, "V": 8}, want_dynamic=False)
        args = [toks[None, :t], w["emb"], causal_mask(t), trainer.consts[1], w["wq"], w["wk"], w["wv"], w["wo"],
                w["lm_head"]]
        assert int(interp.run_function(program, "next_token", args)[0, 0]) == toks[t]


def test_wrong_sizes_name_both_sources(dynamic):
    trainer = CompiledTrainer(dynamic, DEMO_LR)
    w = trainer.w
    window = np.zeros((1, 5), np.int64)
    args = [window, w["emb"], causal_mask(3), trainer.consts[1], w["wq"], w["wk"], w["wv"], w["wo"], w["lm_head"],
            trainer.lr]
    with pytest.raises(KinaArgumentError, match=r"train_step: size T is 4 from window \(dimension 1, T \+ 1 = 5\) "
                                                r"but 3 from mask \(dimension 2\)"):
        dynamic.train_step(*args, H=2)
    args[2] = causal_mask(4)
    with pytest.raises(KinaArgumentError, match="size H is not determined"):
        dynamic.train_step(*args)
    with pytest.raises(KinaArgumentError, match="H"):
        dynamic.train_step(*args, H=3)        # 3 does not divide D = 4


def test_training_from_kina_initialised_weights(dynamic):
    """init (normals drawn in Kina, tests/test_storylm_init.py) gives weights the same
    library trains: the loss falls over two epochs."""
    start = kina_init(dynamic, (0, 26))
    losses = CompiledTrainer(dynamic, DEMO_LR, start).train(STEPS)
    assert np.mean(losses[-28:]) < 0.8 * np.mean(losses[:28])


def _kept(logits: np.ndarray, temperature: float, top_k: int, top_p: float) -> set[int]:
    """The tokens sample_next may draw, by the host: the top k of logits / temperature, then
    the prefix of them whose softmax probability before each is below top_p."""
    scaled = logits.astype(np.float64) / temperature
    order = np.argsort(-scaled, kind="stable")[:top_k]
    p = np.exp(scaled[order] - scaled[order].max())
    p /= p.sum()
    return {int(t) for t in order[(np.cumsum(p) - p) < top_p]}


def test_sampling_continuations_from_the_trained_weights(dynamic):
    """sample_next over StoryLM-0 trained from examples/storylm0_weights.npz: one library call
    per token; top-k 1 is greedy decoding, each draw is a kept token, a key gives the same
    continuation twice and the interpreter draws the same tokens."""
    trainer = CompiledTrainer(dynamic, DEMO_LR)
    trainer.train(4 * 28)
    np.testing.assert_array_equal(trainer.sample(PROMPT, 6, (0, 1), top_k=1), trainer.greedy(PROMPT, 6))
    toks = trainer.sample(PROMPT, 8, (0, 26), temperature=1.5, top_k=4, top_p=0.9)
    np.testing.assert_array_equal(toks, trainer.sample(PROMPT, 8, (0, 26), temperature=1.5, top_k=4, top_p=0.9))
    w = trainer.w
    weights = [w["emb"], *trainer.consts, w["wq"], w["wk"], w["wv"], w["wo"], w["lm_head"]]
    program, _ = analyze(STORYLM.read_text(), str(STORYLM)).program_for(
        {"B": 1, "T": 4, "H": 2, "DH": 2, "V": 8}, want_dynamic=False)
    knobs = [np.full((1, 1), 1 / 1.5, np.float32), np.full((1, 1), 4, np.int64), np.full((1, 1), 0.9, np.float32)]
    for k in range(8):
        ids = toks[None, k:k + 4]
        logits = dynamic.forward(ids, *weights, H=2)[0, -1]
        assert int(toks[k + 4]) in _kept(logits, 1.5, 4, 0.9), (k, logits, toks)
        if k < 3:
            args = [ids, *weights, np.array([0, 26], np.int64), np.array(k, np.int64), *knobs]
            assert int(interp.run_function(program, "sample_next", args)[0, 0]) == toks[k + 4]
    draws = {tuple(trainer.sample(PROMPT, 8, (0, s), temperature=1.5)) for s in range(4)}
    assert len(draws) > 1                                           # the key matters
