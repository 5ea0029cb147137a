"""Validate the examples that draw random numbers (issue 26), each built at -O0 and -O2:

    python scripts/validate_random.py sample | dropout | init

- sample: examples/storylm0_sample.kina's sampler (temperature 0.8, top-4, top-p 0.9) on
  20,000 rows of fixed logits: the same tokens at -O0, -O2 and in the interpreter, and
  the frequencies against the kept tokens' softmax probabilities (chi-square, 0.999);
  greedy_choice = the host's argmax;
- dropout: examples/mlp_classifier.kina's dropout_mask bit for bit at both levels, in the
  interpreter and in NumPy (Threefry fold_in of the step, uniforms < 7/8), and 6 steps of
  train_step_dropout run twice (bit for bit), at -O0 and -O2 (bit for bit) and against
  a NumPy twin with those masks;
- init: `init` of examples/storylm.kina (only it is built) bit for bit at both levels, in
  the interpreter and in NumPy (the key split into six, a normal per weight, / sqrt(D)).

Prints one line per comparison; exits 1 on any mismatch.  Each part takes seconds.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
from report import Report, section
from storylm_data import EXAMPLES

LEVELS = (0, 2)
ROWS = 20_000
LOGITS = np.array([2.0, 0.5, 1.5, -1.0, 1.8, 0.0, 1.0, -2.0], np.float32)
CHI2_999 = {1: 10.83, 2: 13.82, 3: 16.27}


def build(rep: Report, name: str, sizes=None, exports=None):
    """({level: library}, checked program) of examples/<name>.kina, or None on a failed build."""
    from compiler.build import build_file, keep_exports
    from compiler.runtime.library import load
    out, libs, program = Path(tempfile.mkdtemp(prefix=f"kina_{name}_")), {}, None
    for level in LEVELS:
        res = build_file(str(EXAMPLES / f"{name}.kina"), out / f"{name}_O{level}.so", level, sizes=sizes,
                         transform=keep_exports(exports) if exports else None)
        if not rep.check(f"build examples/{name}.kina at -O{level}", res.ok):
            for d in res.diagnostics:
                print(res.source.render(d) if res.source else f"[{d.code}] {d.message}")
            return None
        libs[level], program = load(str(res.so_path)), res.program
    return libs, program


def same_everywhere(rep: Report, what: str, got: dict, want: np.ndarray, ref: str = "NumPy") -> None:
    for where, g in got.items():
        rep.check(f"{what}: {where} = {ref}, bit for bit", np.array_equal(np.asarray(g), want))


def check_sample(rep: Report) -> None:
    from compiler.oracle.interp import run_function
    section(f"examples/storylm0_sample.kina: {ROWS} draws from fixed logits")
    built = build(rep, "storylm0_sample", sizes={"B": ROWS})
    if built is None:
        return
    libs, program = built
    name = next(n for n in program.functions if n.startswith("sample"))
    args = [np.broadcast_to(LOGITS, (ROWS, 8)).copy(), np.array([0, 26], np.int64),
            np.array([[1 / 0.8]], np.float32), np.array([[0.9]], np.float32)]
    draws = {f"-O{level}": lib[name](*args) for level, lib in libs.items()}
    want = run_function(program, name, args)
    same_everywhere(rep, "tokens", draws, want, "interpreter")
    scaled = LOGITS.astype(np.float64) / 0.8
    order = np.argsort(-scaled, kind="stable")[:4]
    p = np.exp(scaled[order] - scaled[order].max())
    p /= p.sum()
    kept = order[(np.cumsum(p) - p) < 0.9]
    probs = np.zeros(8)
    probs[kept] = np.exp(scaled[kept] - scaled[kept].max())
    probs /= probs.sum()
    counts = np.bincount(want.ravel(), minlength=8)
    rep.check("only kept tokens are drawn", set(np.flatnonzero(counts)) <= set(kept.tolist()), str(counts))
    expected = ROWS * probs[kept]
    chi2 = float(((counts[kept] - expected) ** 2 / expected).sum())
    rep.check("frequencies = kept softmax (chi-square)", chi2 < CHI2_999[len(kept) - 1], f"chi2 = {chi2:.2f}")
    logits = np.random.default_rng(1).standard_normal((ROWS, 8)).astype(np.float32)
    greedy = next(n for n in program.functions if n.startswith("greedy_choice"))
    for level, lib in libs.items():
        rep.check(f"-O{level} greedy_choice = host argmax", np.array_equal(lib[greedy](logits).ravel(),
                                                                         logits.argmax(axis=1)))


def numpy_dropout_step(w: list[np.ndarray], x, labels, keep, lr: float):
    """(loss, weights') of the dropout MLP in float64, backward by hand."""
    w1, b1, w2, b2 = (a.astype(np.float64) for a in w)
    z = x @ w1 + b1
    dropped = np.where(keep, np.maximum(z, 0) * (8 / 7), 0.0)
    logits = dropped @ w2 + b2
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    onehot = np.eye(3)[labels[:, 0]]
    g = (p - onehot) / len(x)
    g_z = np.where(keep, g @ w2.T * (8 / 7), 0.0) * (z > 0)
    grads = (x.T @ g_z, g_z.sum(0, keepdims=True), dropped.T @ g, g.sum(0, keepdims=True))
    loss = -np.mean(np.log((p * onehot).sum(axis=1)))
    return loss, [(a - lr * d).astype(np.float32) for a, d in zip((w1, b1, w2, b2), grads)]


def check_dropout(rep: Report) -> None:
    from compiler.oracle import interp_random as R
    from compiler.oracle.interp import run_function
    section("examples/mlp_classifier.kina: dropout masks and a 6-step run")
    built = build(rep, "mlp_classifier", exports=["dropout_mask", "train_step_dropout"])
    if built is None:
        return
    libs, program = built
    key = np.array([3, 26], np.int64)
    for step in (0, 5, 2 ** 33 + 1):
        args = [key, np.array(step, np.int64)]
        got = {f"-O{level}": lib.dropout_mask(*args) for level, lib in libs.items()}
        got["interpreter"] = run_function(program, "dropout_mask", args)
        same_everywhere(rep, f"mask of step {step}", got, R.uniform(R.fold_in(key, args[1]), (8, 16)) < 0.875)
    rng = np.random.default_rng(26)
    x = rng.standard_normal((8, 4)).astype(np.float32)
    labels = rng.integers(0, 3, (8, 1))
    start = [(rng.standard_normal(s) * 0.5).astype(np.float32) for s in ((4, 16), (1, 16), (16, 3), (1, 3))]
    lr = np.array([[0.5]], np.float32)

    def run(step_fn):
        w, losses = start, []
        for step in range(6):
            loss, *w = step_fn(x, labels, *w, lr, key, np.array(step, np.int64))
            losses.append(float(np.asarray(loss).reshape(-1)[0]))
        return np.array(losses), w

    ref_w, ref = start, []
    for step in range(6):
        loss, ref_w = numpy_dropout_step(ref_w, x.astype(np.float64), labels,
                                         R.uniform(R.fold_in(key, np.int64(step)), (8, 16)) < 0.875, 0.5)
        ref.append(loss)
    runs = {}
    for level, lib in libs.items():
        first, again = run(lib.train_step_dropout), run(lib.train_step_dropout)
        runs[level] = first
        rep.check(f"-O{level} run twice: losses and weights bit for bit",
                  np.array_equal(first[0], again[0]) and all(np.array_equal(a, b) for a, b in zip(first[1], again[1])))
        rep.compare(f"-O{level} losses vs the NumPy twin", first[0], ref, atol=1e-5, rtol=1e-5)
        for n, (a, b) in enumerate(zip(first[1], ref_w)):
            rep.compare(f"-O{level} weight {n} after 6 steps vs the NumPy twin", a, b, atol=1e-5, rtol=1e-4)
    (l0, w0), (l2, w2) = runs[0], runs[2]
    rep.check("-O0 and -O2: the loss curves and weights bit for bit",
              np.array_equal(l0, l2) and all(np.array_equal(a, b) for a, b in zip(w0, w2)))


def check_init(rep: Report) -> None:
    from compiler.oracle import interp_random as R
    from compiler.oracle.interp import run_function
    section("examples/storylm.kina: init at StoryLM-0's sizes")
    built = build(rep, "storylm", sizes={"H": 2, "DH": 2, "V": 8}, exports=["init"])
    if built is None:
        return
    libs, program = built
    shapes = [(8, 4), (4, 4), (4, 4), (4, 4), (4, 4), (4, 8)]
    for key in ([0, 26], [2 ** 32 - 1, 7]):
        k = np.array(key, np.int64)
        keys = R.split(k, 6)
        want = [R.normal(keys[i], s) * np.float32(0.5) for i, s in enumerate(shapes)]
        got = {f"-O{level}": lib.init(k) for level, lib in libs.items()}
        got["interpreter"] = run_function(program, "init", [k])
        for n, name in enumerate(("emb", "wq", "wk", "wv", "wo", "lm_head")):
            same_everywhere(rep, f"key {key} {name}", {w: g[n] for w, g in got.items()}, want[n])


PARTS = {"sample": check_sample, "dropout": check_dropout, "init": check_init}


def main(argv: list[str]) -> int:
    parts = argv or list(PARTS)
    if any(p not in PARTS for p in parts):
        print(f"usage: validate_random.py [{' | '.join(PARTS)}] ...")
        return 2
    rep = Report()
    for part in parts:
        PARTS[part](rep)
    return rep.exit_code()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
