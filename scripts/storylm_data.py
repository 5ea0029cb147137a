"""StoryLM-0's constants and data: sizes, the prompt, the story, the weights, the forward inputs.

StoryLM-0 is the generic one-layer causal decoder of examples/storylm.kina at
B=1, T=4, H=2 heads of Dh=2 (D=4), V=8.  This module gives

- the sizes (B, T, H, DH, D, V; SIZES: the `--size` values StoryLM-0 is built
  with, `size_args()` the same as kinac arguments), PROMPT and its targets (`targets_for`), the
  vocabulary (`decode`) and the 32-token training story (`load_story`), cut into
  training windows (`corpus_windows`, `window_split`);
- `load_weights()`, the one set of deterministic weights
  (examples/storylm0_weights.npz, written by scripts/gen_example_mains.py), and
  the constant inputs (`causal_mask`, `attention_scale`);
- `inputs` / `ordered`: every forward input by its Kina parameter name, and in
  parameter order.

Importing it puts the repository root on sys.path, so `python scripts/x.py` can
import the compiler from anywhere.  It imports no other script module; every
StoryLM-0 script, benchmark and test uses it (storylm_numpy, storylm_torch,
storylm_train and report build on it).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
WEIGHTS_NPZ = EXAMPLES / "storylm0_weights.npz"
if str(ROOT) not in sys.path:   # `python scripts/x.py` from anywhere can import the compiler
    sys.path.insert(0, str(ROOT))

B, T, H, DH, D, V = 1, 4, 2, 2, 4, 8
# examples/storylm.kina's size parameters at StoryLM-0 (build_source(..., sizes=SIZES)).
SIZES = {"B": B, "T": T, "H": H, "DH": DH, "V": V}
STORYLM = EXAMPLES / "storylm.kina"
PROMPT = np.array([[1, 4, 2, 6]], dtype=np.int64)
# Next-token targets of PROMPT: the prompt shifted left by one.  The last
# position has no next prompt token; its target is token 0 ('.'): the prompt
# reads "the cat sat down" and the story's sentences end with '.'.
LAST_TARGET = 0
WEIGHT_NAMES = ("emb", "wq", "wk", "wv", "wo", "lm_head")
TRAINABLE = WEIGHT_NAMES
MASK_NEG = -1.0e4   # additive mask above the diagonal (exp underflows to exactly 0 in F32)
# The vocabulary of the training story (examples/storylm0_story.txt); PROMPT reads "the cat sat down".
VOCAB = (".", "the", "sat", "mat", "cat", "on", "down", "dog")
STORY = EXAMPLES / "storylm0_story.txt"


def size_args(sizes: dict[str, int] | None = None) -> list[str]:
    """`--size B=1 --size T=4 ...`: the kinac arguments that build StoryLM-0 (or `sizes`)."""
    return [a for k, v in (sizes or SIZES).items() for a in ("--size", f"{k}={v}")]


def load_story() -> np.ndarray:
    """The committed 32-token training story as I64 token ids."""
    words = STORY.read_text().split()
    return np.array([VOCAB.index(w) for w in words], dtype=np.int64)


def decode(ids) -> str:
    return " ".join(VOCAB[int(i)] for i in np.asarray(ids).reshape(-1))


def targets_for(ids: np.ndarray, last: int = LAST_TARGET) -> np.ndarray:
    """[B, T] ids -> [B, T, 1] I64 next-token targets (ids shifted by one, `last` at the end)."""
    nxt = np.concatenate([ids[:, 1:], np.full((ids.shape[0], 1), last, dtype=np.int64)], axis=1)
    return nxt.astype(np.int64)[:, :, None]


def corpus_windows(story: np.ndarray | None = None) -> np.ndarray:
    """Every run of T+1 consecutive story tokens, [N, 1, T+1]: inputs w[:, :T], next-token targets w[:, 1:]."""
    s = load_story() if story is None else story
    return np.stack([s[None, i:i + T + 1] for i in range(len(s) - T)])


def window_split(window: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[1, T+1] -> (token_ids [1, T], targets [1, T, 1])."""
    return window[:, :T], window[:, 1:, None]


def causal_mask(t: int = T) -> np.ndarray:
    """[1, 1, t, t]: 0 on and below the diagonal, MASK_NEG above (t tokens: T by default)."""
    upper = np.triu(np.ones((t, t), dtype=bool), k=1)
    return np.where(upper, MASK_NEG, 0.0).astype(np.float32).reshape(1, 1, t, t)


def attention_scale() -> np.ndarray:
    """[1, 1, 1, 1] holding 1/sqrt(Dh), rounded to F32."""
    return np.full((1, 1, 1, 1), 1.0 / np.sqrt(DH), dtype=np.float32)


def load_weights() -> dict[str, np.ndarray]:
    """The committed deterministic weights, as F32 arrays keyed by WEIGHT_NAMES."""
    with np.load(WEIGHTS_NPZ) as z:
        return {k: z[k].astype(np.float32) for k in WEIGHT_NAMES}


def inputs(ids: np.ndarray = PROMPT, weights: dict | None = None) -> dict[str, np.ndarray]:
    """Every forward input by its Kina parameter name (token_ids, emb, mask, scale, wq, ..., lm_head)."""
    w = load_weights() if weights is None else weights
    return {"token_ids": ids.astype(np.int64), "emb": w["emb"], "mask": causal_mask(),
            "scale": attention_scale(), "wq": w["wq"], "wk": w["wk"], "wv": w["wv"],
            "wo": w["wo"], "lm_head": w["lm_head"]}


FORWARD_ARGS = ("token_ids", "emb", "mask", "scale", "wq", "wk", "wv", "wo", "lm_head")
# The floating parameters of the decoder, in reverseMode cotangent order.
FLOAT_ARGS = ("emb", "mask", "scale", "wq", "wk", "wv", "wo", "lm_head")


def ordered(values: dict, names=FORWARD_ARGS) -> list[np.ndarray]:
    return [values[n] for n in names]
