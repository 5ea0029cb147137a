"""A small PyTorch language model whose decoder block is a Kina function, trained side by side
with the same model in pure PyTorch (issue 28; docs/interop.md).

    PYTHONPATH=. .venv/bin/python examples/interop/train_decoder.py [--steps 100] [-O0] [--no-compile]

Both models: token embedding (nn.Embedding, vocabulary 16, width 8) -> the pre-norm decoder
block of examples/decoder_block.kina (B=2, T=4, D=8, 2 causal heads, a GELU MLP) -> a linear
head -> cross entropy on the next token.  In the first model the block is
`compiler.interop.TorchModule` over the Kina function `block` (its ten weights are
nn.Parameters; autograd calls `block_vjp` in the backward pass); in the second it is written
with torch.nn.functional.  Same initial weights, same batches, torch.optim.AdamW on both:
the two loss curves agree within float32 noise.  Prints the losses every 10 steps, the
largest difference, and the mean step time of Kina-in-PyTorch, PyTorch eager and (unless
--no-compile, or when it fails here) the pure model under torch.compile.
"""
from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from compiler.interop import TorchModule  # noqa: E402

BLOCK = ROOT / "examples" / "decoder_block.kina"
B, T, D, H, V = 2, 4, 8, 2, 16
WEIGHTS = ["ln1_g", "ln1_b", "wq", "wk", "wv", "wo", "ln2_g", "ln2_b", "w_up", "w_down"]
SHAPES = {"ln1_g": (D,), "ln1_b": (D,), "wq": (D, D), "wk": (D, D), "wv": (D, D), "wo": (D, D),
          "ln2_g": (D,), "ln2_b": (D,), "w_up": (D, 2 * D), "w_down": (2 * D, D)}


def initial_weights(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    w = {}
    for name, shape in SHAPES.items():
        if name.endswith("_g"):
            w[name] = torch.ones(shape)
        elif name.endswith("_b"):
            w[name] = torch.zeros(shape)
        else:
            w[name] = torch.randn(shape, generator=g) / shape[0] ** 0.5
    return w


class TorchBlock(torch.nn.Module):
    """examples/decoder_block.kina's `block` in torch.nn.functional."""

    def __init__(self, weights: dict[str, torch.Tensor]) -> None:
        super().__init__()
        for name in WEIGHTS:
            self.register_parameter(name, torch.nn.Parameter(weights[name].clone()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        F = torch.nn.functional

        def heads(a: torch.Tensor) -> torch.Tensor:
            return a.reshape(B, T, H, D // H).permute(0, 2, 1, 3)
        n1 = F.layer_norm(x, (D,), self.ln1_g, self.ln1_b, eps=1e-5)
        ctx = F.scaled_dot_product_attention(heads(n1 @ self.wq), heads(n1 @ self.wk), heads(n1 @ self.wv),
                                             is_causal=True)
        h = x + ctx.permute(0, 2, 1, 3).reshape(B, T, D) @ self.wo
        return h + F.gelu(F.layer_norm(h, (D,), self.ln2_g, self.ln2_b, eps=1e-5) @ self.w_up) @ self.w_down


class LM(torch.nn.Module):
    def __init__(self, block: torch.nn.Module, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed = torch.nn.Embedding(V, D)
        self.head = torch.nn.Linear(D, V)
        self.block = block

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(self.embed(ids)))


def batches(steps: int, seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Sequences of a noisy counter mod V: the next token is mostly the current one + 1."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        start = torch.randint(0, V, (B, 1), generator=g)
        seq = (start + torch.arange(T + 1)) % V
        noise = torch.rand(seq.shape, generator=g) < 0.1
        seq = torch.where(noise, torch.randint(0, V, seq.shape, generator=g), seq)
        out.append((seq[:, :T], seq[:, 1:]))
    return out


def train(model: torch.nn.Module, data: list, step_fn=None) -> tuple[list[float], float]:
    """Losses and the mean step time (forward, backward, AdamW) after the first step."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    forward = step_fn if step_fn is not None else model
    losses, times = [], []
    for ids, target in data:
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(forward(ids).reshape(-1, V), target.reshape(-1))
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    return losses, sum(times[1:]) / max(len(times) - 1, 1)


def models(opt_level: int = 2) -> tuple[LM, LM]:
    w = initial_weights()
    kina = LM(TorchModule(BLOCK, "block", inputs=["x"], init=w, opt_level=opt_level))
    pure = LM(TorchBlock(w))
    pure.embed.load_state_dict(kina.embed.state_dict())
    pure.head.load_state_dict(kina.head.state_dict())
    return kina, pure


def main(steps: int = 100, opt_level: int = 2, compile_: bool = True) -> dict:
    torch.set_num_threads(1)   # both models single-threaded: a like-for-like step time
    kina, pure = models(opt_level)
    references = {"pure PyTorch (torch.compile)": copy.deepcopy(pure),
                  "Kina block in PyTorch (torch.compile)": copy.deepcopy(kina)}
    data = batches(steps)
    kina_losses, kina_time = train(kina, data)
    pure_losses, pure_time = train(pure, data)
    worst = max(abs(a - b) for a, b in zip(kina_losses, pure_losses))
    print(f"{'step':>5} {'Kina-in-PyTorch':>16} {'pure PyTorch':>13}")
    for i in range(0, steps, 10):
        print(f"{i:>5} {kina_losses[i]:>16.6f} {pure_losses[i]:>13.6f}")
    print(f"{steps - 1:>5} {kina_losses[-1]:>16.6f} {pure_losses[-1]:>13.6f}")
    print(f"largest loss difference over {steps} steps: {worst:.2e}")
    rows = [("Kina block in PyTorch (eager)", kina_time), ("pure PyTorch (eager)", pure_time)]
    for name, model in references.items() if compile_ else ():
        # the Kina block is one custom op in the compiled graph (compiler/interop/custom_op.py)
        try:
            losses, t = train(model, data, torch.compile(model))
            rows.append((name, t))
            worst_compiled = max(abs(a - b) for a, b in zip(losses, pure_losses))
            print(f"{name}: largest loss difference to pure PyTorch eager {worst_compiled:.2e}")
        except Exception as e:   # no C compiler for inductor, ...: say so, keep the rest
            rows.append((f"{name} failed: {type(e).__name__}: {str(e).splitlines()[0][:60]}", float("nan")))
    print(f"mean step time (forward + backward + AdamW; the first step, which compiles, left out), "
          f"{steps} steps, 1 thread:")
    for name, t in rows:
        print(f"  {name:<40} {t * 1e3:8.3f} ms")
    return {"kina": kina_losses, "pure": pure_losses, "worst": worst, "times": dict(rows)}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("-O0", dest="opt_level", action="store_const", const=0, default=2)
    ap.add_argument("--no-compile", action="store_true")
    a = ap.parse_args()
    main(a.steps, a.opt_level, not a.no_compile)
