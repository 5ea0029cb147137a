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
from storylm_train import DEMO_LR, CompiledTrainer  # noqa: E402

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
