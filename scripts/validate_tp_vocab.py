"""Validate StoryLM-0 with the 2-way column-parallel vocabulary (two lm_head shards, logits concatenated).

Compiles examples/distributed/lm_vocab_parallel.kina's `tp_vocab` (and the unsharded
`forward` of examples/storylm.kina), both at StoryLM-0's sizes (VL = V/2 = 4), to .so
files, injects the deterministic weights
and the prompt [1, 4, 2, 6], and checks against the NumPy reference of
scripts/storylm_numpy.py (and the same algebra in torch when torch is importable):

(a) the sharded logits equal the unsharded residual @ lm_head, both from NumPy
    and from the compiled `forward`;
(b) each shard z_i = residual @ lm_head[:, 4i:4i+4] is its [1, 4, 4] block of columns;
(c) causal non-leak: changing the last prompt token leaves the logit rows of the
    earlier positions bit-identical (the masked scores underflow to exactly 0) and
    changes the last row.

Prints one line per comparison with its max error; exits 1 on any mismatch.
"""
from __future__ import annotations

import sys
import tempfile

import numpy as np
from report import BuildFailed, Report, compile_example, section, torch_banner
from storylm_data import FORWARD_ARGS, PROMPT, SIZES, V, inputs, ordered
from storylm_numpy import forward
from storylm_torch import torch_forward

RESIDUAL_ARGS = FORWARD_ARGS[:-1]      # residual takes everything but lm_head
CHANGED_LAST = np.array([[1, 4, 2, 3]], dtype=np.int64)
HALF = V // 2


def residual(tp, p: dict) -> np.ndarray:
    """The replicated body's [B*T, D] residual as [B, T, D]."""
    return tp.residual(*ordered(p, RESIDUAL_ARGS)).reshape(1, -1, p["emb"].shape[1])


def check_unsharded(rep: Report, tp, fwd, torch) -> np.ndarray:
    section("(a) sharded logits = unsharded logits (prompt [1,4,2,6])")
    p = inputs()
    logits, cache = forward(p)
    got = tp.tp_vocab(*ordered(p))
    rep.compare("tp_vocab vs NumPy residual @ lm_head", got, logits)
    rep.compare("tp_vocab vs compiled forward", got, fwd.forward(*ordered(p)), atol=1e-6)
    rep.compare("residual vs NumPy", residual(tp, p), cache["residual"])
    if torch:
        t_logits, _ = torch_forward(torch, p)
        rep.compare("tp_vocab vs torch", got, t_logits.detach().numpy())
    return got


def check_shards(rep: Report, tp, logits: np.ndarray) -> None:
    section("(b) each shard is its [1, 4, 4] block of vocabulary columns")
    p = inputs()
    res = tp.residual(*ordered(p, RESIDUAL_ARGS))           # [B*T, D]
    z0, z1 = tp.tp_shards(res, p["lm_head"])
    lm = p["lm_head"].astype(np.float64)
    for i, z in enumerate((z0, z1)):
        cols = slice(i * HALF, (i + 1) * HALF)
        rep.compare(f"z{i} = residual @ lm_head[:, {cols.start}:{cols.stop}]", z,
                    (res @ lm[:, cols]).reshape(z.shape))
        rep.compare(f"z{i} = logits[..., {cols.start}:{cols.stop}]", z, logits[..., cols], atol=1e-6)
    rep.compare("tp_logits = concat(z0, z1, axis=2)", tp.tp_logits(res, p["lm_head"]),
                np.concatenate([z0, z1], axis=2), atol=0, rtol=0)


def check_causal(rep: Report, tp, torch) -> None:
    section("(c) causal non-leak: last token 6 -> 3")
    before = tp.tp_vocab(*ordered(inputs(PROMPT)))
    after = tp.tp_vocab(*ordered(inputs(CHANGED_LAST)))
    rep.compare("compiled rows 0..2 unchanged (exact)", after[:, :3], before[:, :3], atol=0, rtol=0)
    rep.check("compiled row 3 changed", not np.allclose(after[:, 3], before[:, 3]),
              f"max|diff| = {np.max(np.abs(after[:, 3] - before[:, 3])):.3e}")
    rep.compare("compiled changed-prompt logits vs NumPy", after, forward(inputs(CHANGED_LAST))[0])
    if torch:
        t_before, t_after = (torch_forward(torch, inputs(ids))[0].detach().numpy() for ids in (PROMPT, CHANGED_LAST))
        rep.compare("torch rows 0..2 unchanged", t_after[:, :3], t_before[:, :3], atol=1e-12)


def main() -> int:
    torch = torch_banner()
    rep = Report()
    out = tempfile.mkdtemp(prefix="kina_tp_vocab_")
    try:
        tp = compile_example("distributed/lm_vocab_parallel", out, {**SIZES, "VL": HALF})
        fwd = compile_example("storylm", out)
    except BuildFailed as e:
        print(e)
        rep.check("build distributed/lm_vocab_parallel.kina and storylm.kina", False)
        return rep.exit_code()
    logits = check_unsharded(rep, tp, fwd, torch)
    check_shards(rep, tp, logits)
    check_causal(rep, tp, torch)
    return rep.exit_code()


if __name__ == "__main__":
    sys.exit(main())
