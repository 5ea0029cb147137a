"""Validate examples/adamw_step.kina: AdamW written in Kina against torch.optim.AdamW.

Builds the example at -O0 and -O2 and runs its train_step for 50 steps from the
inputs of its `main` (the moments and the step count are parameters and results).
At both levels the trajectory (every loss, the final weights and both moments) must
match, within float tolerance:

- a NumPy twin in float32 (the MLP's backward by hand, AdamW as torch computes it);
- when torch is importable, torch.optim.AdamW(lr=1e-2, betas=(0.9, 0.999), eps=1e-8,
  weight_decay=1e-2) on the same model with autograd, and its exp_avg / exp_avg_sq.

Also main() = the first step.  Prints one line per comparison; exits 1 on any mismatch.
"""
from __future__ import annotations

import _examples as E
import numpy as np
from report import Report, section

STEPS = 50
LR, BETAS, EPS, WD = 1e-2, (0.9, 0.999), 1e-8, 1e-2
WEIGHTS = ("w1", "b1", "w2")


def numpy_grads(p: dict, w: dict) -> tuple[np.float32, dict]:
    x, y = p["x"], p["y"]
    z = x @ w["w1"] + w["b1"]
    a = np.tanh(z)
    err = a @ w["w2"] - y
    n = np.float32(len(x))
    loss = np.float32((err * err).sum() / n)
    d_y = 2 * err / n
    d_z = (d_y @ w["w2"].T) * (1 - a * a)
    return loss, {"w2": a.T @ d_y, "w1": x.T @ d_z, "b1": d_z.sum(0, keepdims=True)}


def numpy_trajectory(p: dict, steps: int):
    """AdamW in float32 NumPy, in torch's order of operations."""
    w = {k: p[k].copy() for k in WEIGHTS}
    m = {k: np.zeros_like(v) for k, v in w.items()}
    v = {k: np.zeros_like(x) for k, x in w.items()}
    losses = []
    for t in range(1, steps + 1):
        loss, g = numpy_grads(p, w)
        losses.append(float(loss))
        bc1, bc2 = 1 - BETAS[0] ** t, 1 - BETAS[1] ** t
        for k in WEIGHTS:
            w[k] = w[k] * np.float32(1 - LR * WD)
            m[k] = m[k] + np.float32(1 - BETAS[0]) * (g[k] - m[k])
            v[k] = v[k] * np.float32(BETAS[1]) + np.float32(1 - BETAS[1]) * g[k] * g[k]
            denom = np.sqrt(v[k]) / np.float32(np.sqrt(bc2)) + np.float32(EPS)
            w[k] = w[k] - np.float32(LR / bc1) * (m[k] / denom)
    return losses, w, m, v


def torch_trajectory(torch, p: dict, steps: int):
    w = {k: torch.tensor(p[k], requires_grad=True) for k in WEIGHTS}
    opt = torch.optim.AdamW([w[k] for k in WEIGHTS], lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    x, y, losses = torch.tensor(p["x"]), torch.tensor(p["y"]), []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((torch.tanh(x @ w["w1"] + w["b1"]) @ w["w2"] - y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    state = [opt.state[w[k]] for k in WEIGHTS]
    flat = lambda key: np.concatenate([s[key].numpy().reshape(-1) for s in state])  # noqa: E731
    return losses, {k: t.detach().numpy() for k, t in w.items()}, flat("exp_avg"), flat("exp_avg_sq")


def compiled_trajectory(lib, p: dict, steps: int):
    w, m, v, t = [p[k] for k in WEIGHTS], p["m"], p["v"], p["t"]
    losses = []
    for _ in range(steps):
        loss, *w, m, v, t = lib.train_step(p["x"], p["y"], *w, m, v, t)
        losses.append(float(loss[0, 0]))
    return losses, dict(zip(WEIGHTS, w)), m, v, t


def check(rep: Report, built: E.Built, torch) -> None:
    p = E.main_inputs(built.program)
    np_losses, np_w, np_m, np_v = numpy_trajectory(p, STEPS)
    flat = lambda d: np.concatenate([d[k].reshape(-1) for k in WEIGHTS])  # noqa: E731
    ref = torch_trajectory(torch, p, STEPS) if torch else None
    for level, lib in built.libs.items():
        section(f"-O{level}: main() = the first step")
        first = lib.train_step(*(p[k] for k in ("x", "y", "w1", "b1", "w2", "m", "v", "t")))
        for i, (got, want) in enumerate(zip(lib.main(), first)):
            rep.compare(f"main() result {i} = the step's", got, want, atol=0, rtol=0)
        section(f"-O{level}: {STEPS} AdamW steps")
        losses, w, m, v, t = compiled_trajectory(lib, p, STEPS)
        rep.check("the step count advances", float(t[0]) == STEPS + 1, f"t = {float(t[0])}")
        rep.check("the loss decreases", losses[-1] < 0.5 * losses[0], f"{losses[0]:.4f} -> {losses[-1]:.4f}")
        rep.compare("loss trajectory vs NumPy AdamW", losses, np_losses, atol=1e-5, rtol=1e-4)
        for k in WEIGHTS:
            rep.compare(f"final {k} vs NumPy AdamW", w[k], np_w[k], atol=1e-5, rtol=1e-4)
        rep.compare("first moment vs NumPy", m, flat(np_m), atol=1e-6, rtol=1e-4)
        rep.compare("second moment vs NumPy", v, flat(np_v), atol=1e-8, rtol=1e-4)
        if ref is not None:
            t_losses, t_w, t_m, t_v = ref
            rep.compare("loss trajectory vs torch.optim.AdamW", losses, t_losses, atol=1e-5, rtol=1e-4)
            for k in WEIGHTS:
                rep.compare(f"final {k} vs torch.optim.AdamW", w[k], t_w[k], atol=1e-5, rtol=1e-4)
            rep.compare("first moment vs torch exp_avg", m, t_m, atol=1e-6, rtol=1e-4)
            rep.compare("second moment vs torch exp_avg_sq", v, t_v, atol=1e-8, rtol=1e-4)


def main() -> int:
    return E.run("adamw_step", check)


if __name__ == "__main__":
    raise SystemExit(main())
