"""Validate examples/storylm.kina's greedy decoding at StoryLM-0's sizes: argmax in Kina.

Builds the example at -O0 and -O2 and checks that its `greedy` (12 next tokens, each
the argmax of the last position's logits over the last 4 tokens, all inside one
library call) gives the same continuation as the demo's host loop
(scripts/train_storylm0.py: the compiled `forward`, numpy.argmax on the host, one
call per token):

- from the committed weights;
- from the weights the demo trains (420 SGD steps on the story at lr 0.3, by the
  compiled train_step of examples/storylm.kina, as `make demo` does);
- every chosen token has the largest logit of the NumPy reference decoder (and of the
  same decoder in torch when torch is importable), up to float rounding.

Prints one line per comparison; exits 1 on any mismatch.
"""
from __future__ import annotations

import _examples as E
import numpy as np
from report import Report, compile_example, section
from storylm_data import PROMPT, T, attention_scale, causal_mask, decode, inputs, load_weights
from storylm_numpy import forward
from storylm_torch import torch_forward
from storylm_train import DEMO_LR, CompiledTrainer

N_NEW = 12
DEMO_STEPS = 420


def weights_args(w: dict) -> list[np.ndarray]:
    return [w["emb"], causal_mask(), attention_scale(), w["wq"], w["wk"], w["wv"], w["wo"], w["lm_head"]]


def best_logit_gap(torch, toks: np.ndarray, w: dict) -> float:
    """max over steps of (largest logit - logit of the chosen token), NumPy or torch decoder."""
    gap = 0.0
    for i in range(T, T + N_NEW):
        p = inputs(toks[None, i - T:i], w)
        if torch is None:
            logits, _ = forward(p)
        else:
            logits = torch_forward(torch, p)[0].detach().numpy()
        last = logits[0, -1]
        gap = max(gap, float(last.max() - last[toks[i]]))
    return gap


def check_weights(rep: Report, built: E.Built, host, w: dict, label: str, torch) -> None:
    section(f"{label}: Kina greedy vs the demo's host loop")
    want = host.greedy(PROMPT, N_NEW)
    print(f"  host loop: {decode(want[:T])} | {decode(want[T:])}")
    for level, lib in built.libs.items():
        got = lib.greedy(PROMPT, *weights_args(w))[0]
        rep.check(f"-O{level} greedy = host loop", np.array_equal(got, want), decode(got[T:]))
    rep.check("every token is the NumPy decoder's argmax", best_logit_gap(None, want, w) < 1e-5)
    if torch:
        rep.check("every token is the torch decoder's argmax", best_logit_gap(torch, want, w) < 1e-5)


def check(rep: Report, built: E.Built, torch) -> None:
    host = CompiledTrainer(compile_example("storylm"), DEMO_LR)
    w0 = load_weights()
    check_weights(rep, built, host, w0, "committed weights", torch)
    losses = host.train(DEMO_STEPS)
    print(f"\n  trained {DEMO_STEPS} steps like the demo: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    check_weights(rep, built, host, host.w, f"after {DEMO_STEPS} demo steps", torch)


def main() -> int:
    return E.run("storylm", check)


if __name__ == "__main__":
    raise SystemExit(main())
