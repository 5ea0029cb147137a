"""Validate examples/mlp_classifier.kina: a batched MLP classifier's SGD training step.

Builds the example at -O0 and -O2 and, from the inputs of its `main`, checks at both
levels against a NumPy twin written by hand (forward, cross entropy, backward derived
on paper) and, when torch is importable, against torch.nn.functional.cross_entropy +
autograd + the same SGD update:

- one train_step: the mean cross entropy and every updated weight; main() = that step;
- a 20-step trajectory (losses and final weights), which must also lower the loss;
- predict (argmax in Kina) = the argmax of the NumPy logits, before and after training,
  and accuracy (eq, cast, mean in Kina) = the fraction NumPy counts.

Prints one line per comparison with its max error; exits 1 on any mismatch.
"""
from __future__ import annotations

import _examples as E
import numpy as np
from report import Report, section

STEPS = 20
WEIGHTS = ("w1", "b1", "w2", "b2")


def numpy_step(p: dict, w: dict) -> tuple[float, dict, np.ndarray]:
    """(mean cross entropy, updated weights, logits) in float64, backward by hand."""
    x, labels, lr = p["x"].astype(np.float64), p["labels"][:, 0], float(p["lr"][0, 0])
    w = {k: v.astype(np.float64) for k, v in w.items()}
    z = x @ w["w1"] + w["b1"]
    a = np.maximum(z, 0)
    logits = a @ w["w2"] + w["b2"]
    shifted = logits - logits.max(axis=1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    n = len(labels)
    loss = -logp[np.arange(n), labels].sum() / n
    d_logits = np.exp(logp)
    d_logits[np.arange(n), labels] -= 1
    d_logits /= n
    d_z = (d_logits @ w["w2"].T) * (z > 0)
    grads = {"w2": a.T @ d_logits, "b2": d_logits.sum(0, keepdims=True),
             "w1": x.T @ d_z, "b1": d_z.sum(0, keepdims=True)}
    return loss, {k: w[k] - lr * grads[k] for k in WEIGHTS}, logits


def torch_trajectory(torch, p: dict, steps: int):
    w = {k: torch.tensor(p[k], requires_grad=True) for k in WEIGHTS}
    x, labels, lr = torch.tensor(p["x"]), torch.tensor(p["labels"][:, 0]), float(p["lr"][0, 0])
    losses = []
    for _ in range(steps):
        logits = torch.relu(x @ w["w1"] + w["b1"]) @ w["w2"] + w["b2"]
        loss = torch.nn.functional.cross_entropy(logits, labels)
        grads = torch.autograd.grad(loss, [w[k] for k in WEIGHTS])
        with torch.no_grad():
            for k, g in zip(WEIGHTS, grads):
                w[k] -= lr * g
        losses.append(loss.item())
    return losses, {k: v.detach().numpy() for k, v in w.items()}


def compiled_trajectory(lib, p: dict, steps: int):
    w, losses = {k: p[k] for k in WEIGHTS}, []
    for _ in range(steps):
        loss, *new = lib.train_step(p["x"], p["labels"], *(w[k] for k in WEIGHTS), p["lr"])
        w = dict(zip(WEIGHTS, new))
        losses.append(float(loss[0, 0]))
    return losses, w


def check(rep: Report, built: E.Built, torch) -> None:
    p = E.main_inputs(built.program)
    w0 = {k: p[k] for k in WEIGHTS}
    loss0, w1_np, logits0 = numpy_step(p, w0)
    np_losses, w_np = [], dict(w0)
    for _ in range(STEPS):
        loss, w_np, _ = numpy_step(p, w_np)
        np_losses.append(loss)
    torch_losses, w_torch = torch_trajectory(torch, p, STEPS) if torch else (None, None)
    for level, lib in built.libs.items():
        section(f"-O{level}: one step from main's inputs (batch 8, 4 -> 16 -> 3)")
        loss, *new = lib.train_step(p["x"], p["labels"], *(w0[k] for k in WEIGHTS), p["lr"])
        rep.compare("mean cross entropy vs NumPy", loss, [[loss0]], atol=1e-6, rtol=1e-5)
        for k, got in zip(WEIGHTS, new):
            rep.compare(f"SGD {k}' vs NumPy (hand-written backward)", got, w1_np[k], atol=1e-6, rtol=1e-5)
        for i, (got, want) in enumerate(zip(lib.main(), (loss, *new))):
            rep.compare(f"main() result {i} = the step's", got, want, atol=0, rtol=0)
        rep.check("predict = argmax of the NumPy logits",
                  np.array_equal(lib.predict(p["x"], *(w0[k] for k in WEIGHTS))[:, 0], logits0.argmax(1)))
        section(f"-O{level}: {STEPS} SGD steps")
        losses, w = compiled_trajectory(lib, p, STEPS)
        rep.compare("loss trajectory vs NumPy", losses, np_losses, atol=1e-5, rtol=1e-4)
        for k in WEIGHTS:
            rep.compare(f"final {k} vs NumPy", w[k], w_np[k], atol=1e-5, rtol=1e-4)
        rep.check("the loss decreases", losses[-1] < 0.5 * losses[0], f"{losses[0]:.4f} -> {losses[-1]:.4f}")
        _, _, logits = numpy_step(p, w)
        rep.check("predict after training = argmax of the NumPy logits",
                  np.array_equal(lib.predict(p["x"], *(w[k] for k in WEIGHTS))[:, 0], logits.argmax(1)))
        for label, weights, lg in (("before", w0, logits0), ("after", w, logits)):
            want_acc = float(np.mean(lg.argmax(1) == p["labels"][:, 0]))
            rep.compare(f"accuracy {label} training (eq + cast + mean in Kina)",
                        lib.accuracy(p["x"], p["labels"], *(weights[k] for k in WEIGHTS)), [[want_acc]], atol=1e-7)
        if torch:
            rep.compare("loss trajectory vs torch cross_entropy + autograd", losses, torch_losses,
                        atol=1e-5, rtol=1e-4)
            for k in WEIGHTS:
                rep.compare(f"final {k} vs torch", w[k], w_torch[k], atol=1e-5, rtol=1e-4)


def main() -> int:
    return E.run("mlp_classifier", check)


if __name__ == "__main__":
    raise SystemExit(main())
