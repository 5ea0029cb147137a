"""Compiled Kina at scale: a scaled StoryLM and f32 matmul, -O0 vs -O2 vs NumPy vs PyTorch eager.

    .venv/bin/python benchmarks/bench_scaled.py [--B 4 --T 64 --D 256 --H 8 --V 2048] [--repeats 5]

Prints ONE table; every figure comes from this run:

- the scaled StoryLM of benchmarks/templates/scaled_lm.kina.in (StoryLM-0's
  decoder with the sizes substituted): `forward` (logits) and `train_step` (mean
  NLL, backward, SGD on every weight), as compiled Kina at -O0 and -O2 (called
  through compiler.runtime with out= buffers), a hand-written float32 NumPy
  implementation, and PyTorch eager (autograd; skipped when torch is not
  importable).  Time is the median over --repeats runs of a few calls each; the
  ratio column is time / PyTorch's time (target for the -O2 training step: <= 1.5);
- f32 matmul (benchmarks/templates/matmul.kina.in) at 256, 512 and 1024:
  GFLOP/s of Kina -O2 and of NumPy (its BLAS uses every core it may), and the
  machine's peak: a register-only FMA kernel compiled by `cc -O3 -march=native`,
  on one core and times the cores this process may use.

Before timing, the compiled results are checked against NumPy (max |error| is
printed).  The header reports the cores (os.sched_getaffinity) and the load
average before and after: other processes on the machine skew every column.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compiler import build, runtime  # noqa: E402

TEMPLATES = ROOT / "benchmarks" / "templates"
WEIGHTS = ("emb", "wq", "wk", "wv", "wo", "lm_head")
LR = 0.1


# ---- sizes, inputs, building -------------------------------------------------------
def sizes(args) -> dict[str, int]:
    if args.D % args.H:
        raise SystemExit(f"D={args.D} must be a multiple of H={args.H}")
    return {"B": args.B, "T": args.T, "D": args.D, "H": args.H, "DH": args.D // args.H, "V": args.V,
            "BT": args.B * args.T, "T1": args.T + 1}


def render(template: str, subs: dict) -> str:
    return string.Template((TEMPLATES / template).read_text()).substitute(subs)


def build_lib(source: str, name: str, opt_level: int, tmp: Path):
    path = tmp / f"{name}.kina"
    path.write_text(source)
    timings: dict = {}
    res = build.build_file(path, tmp / f"{name}_O{opt_level}.so", opt_level, timings)
    if not res.ok:
        build.print_diagnostics(res)
        raise SystemExit(f"building {name} at -O{opt_level} failed")
    return runtime.load(res.so_path), sum(timings.values())


def make_inputs(s: dict, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    D, V, T = s["D"], s["V"], s["T"]
    w = {"emb": rng.normal(0, 0.5, (V, D)), "lm_head": rng.normal(0, D ** -0.5, (D, V))}
    for n in ("wq", "wk", "wv", "wo"):
        w[n] = rng.normal(0, D ** -0.5, (D, D))
    w = {k: v.astype(np.float32) for k, v in w.items()}
    w["window"] = rng.integers(0, V, (s["B"], T + 1)).astype(np.int64)
    w["mask"] = np.triu(np.full((T, T), -1.0e4, np.float32), 1).reshape(1, 1, T, T)
    w["scale"] = np.full((1, 1, 1, 1), s["DH"] ** -0.5, np.float32)
    w["inv_n"] = np.full((1, 1), 1.0 / (s["B"] * T), np.float32)
    w["lr"] = np.full((1, 1), LR, np.float32)
    return w


def kina_args(w: dict, s: dict, train: bool) -> tuple:
    ids = w["window"] if train else np.ascontiguousarray(w["window"][:, :s["T"]])
    tail = (w["inv_n"], w["lr"]) if train else ()
    return (ids, w["emb"], w["mask"], w["scale"], w["wq"], w["wk"], w["wv"], w["wo"], w["lm_head"], *tail)


# ---- NumPy (float32, backward written by hand) ------------------------------------------
def _softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_forward(w: dict, s: dict, ids: np.ndarray):
    B, T, H, DH, D = s["B"], s["T"], s["H"], s["DH"], s["D"]
    heads = lambda a: a.reshape(B, T, H, DH).transpose(0, 2, 1, 3)  # noqa: E731
    x = w["emb"][ids].reshape(B * T, D)
    q, k, v = heads(x @ w["wq"]), heads(x @ w["wk"]), heads(x @ w["wv"])
    probs = _softmax((q @ k.swapaxes(-1, -2)) * w["scale"] + w["mask"])
    merged = (probs @ v).transpose(0, 2, 1, 3).reshape(B * T, D)
    residual = x + merged @ w["wo"]
    logits = residual @ w["lm_head"]
    return logits.reshape(B, T, -1), dict(x=x, q=q, k=k, v=v, probs=probs, merged=merged, residual=residual)


def np_train_step(w: dict, s: dict):
    B, T, H, DH, D = s["B"], s["T"], s["H"], s["DH"], s["D"]
    heads = lambda a: a.reshape(B, T, H, DH).transpose(0, 2, 1, 3)  # noqa: E731
    unheads = lambda a: a.transpose(0, 2, 1, 3).reshape(B * T, D)  # noqa: E731
    ids, targets = w["window"][:, :T], w["window"][:, 1:].reshape(-1)
    logits, c = np_forward(w, s, ids)
    logits = logits.reshape(B * T, -1)
    inv_n = w["inv_n"][0, 0]
    p = _softmax(logits)
    rows = np.arange(B * T)
    loss = -np.log(p[rows, targets]).sum() * inv_n
    g_logits = p
    g_logits[rows, targets] -= 1.0
    g_logits *= inv_n
    g = {"lm_head": c["residual"].T @ g_logits}
    g_res = g_logits @ w["lm_head"].T
    g["wo"] = c["merged"].T @ g_res
    g_heads = heads(g_res @ w["wo"].T)
    g_probs = g_heads @ c["v"].swapaxes(-1, -2)
    g_v = c["probs"].swapaxes(-1, -2) @ g_heads
    g_s = c["probs"] * (g_probs - (g_probs * c["probs"]).sum(-1, keepdims=True)) * w["scale"]
    g_q, g_k = g_s @ c["k"], g_s.swapaxes(-1, -2) @ c["q"]
    g_x = g_res
    for name, gh in (("wq", g_q), ("wk", g_k), ("wv", g_v)):
        flat = unheads(gh)
        g[name] = c["x"].T @ flat
        g_x = g_x + flat @ w[name].T
    g["emb"] = np.zeros_like(w["emb"])
    np.add.at(g["emb"], ids.reshape(-1), g_x)
    lr = w["lr"][0, 0]
    return (np.float32(loss), *(w[n] - lr * g[n] for n in WEIGHTS))


# ---- PyTorch eager -------------------------------------------------------------------
def torch_or_none():
    try:
        import torch
    except ImportError:
        return None
    return torch


def torch_fns(torch, w: dict, s: dict):
    """(forward, train_step) closures over torch tensors of the same inputs."""
    B, T, H, DH, D = s["B"], s["T"], s["H"], s["DH"], s["D"]
    t = {k: torch.from_numpy(v.copy()) for k, v in w.items()}
    params = {n: t[n].clone().requires_grad_(True) for n in WEIGHTS}
    ids, targets = t["window"][:, :T], t["window"][:, 1:].reshape(-1)
    heads = lambda a: a.reshape(B, T, H, DH).permute(0, 2, 1, 3)  # noqa: E731

    def forward(p):
        x = p["emb"][ids].reshape(B * T, D)
        q, k, v = (heads(x @ p[n]) for n in ("wq", "wk", "wv"))
        probs = torch.softmax((q @ k.transpose(-1, -2)) * t["scale"] + t["mask"], dim=-1)
        merged = (probs @ v).permute(0, 2, 1, 3).reshape(B * T, D)
        return (x + merged @ p["wo"]) @ p["lm_head"]

    def fwd():
        with torch.no_grad():
            return forward(params)

    def step():
        logits = forward(params)
        loss = torch.nn.functional.cross_entropy(logits, targets, reduction="sum") * t["inv_n"][0, 0]
        grads = torch.autograd.grad(loss, [params[n] for n in WEIGHTS])
        with torch.no_grad():
            return (loss, *(params[n] - t["lr"][0, 0] * g for n, g in zip(WEIGHTS, grads)))

    return fwd, step


# ---- timing ------------------------------------------------------------------------
def median_time(fn, repeats: int, budget: float = 0.2) -> float:
    """Median seconds per call over `repeats` runs of n calls (n sized to ~budget/repeats s)."""
    fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    n = max(1, int(budget / repeats / once))
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t0) / n)
    return statistics.median(samples)


PEAK_C = r"""
typedef float v8 __attribute__((vector_size(32)));
/* 12 independent FMA chains on 8-float vectors: bound by FMA throughput, not latency. */
float kina_peak(long iters) {
  v8 a[12], b = {1.000001f, 1.000001f, 1.000001f, 1.000001f, 1.000001f, 1.000001f, 1.000001f, 1.000001f};
  v8 c = {1e-7f, 1e-7f, 1e-7f, 1e-7f, 1e-7f, 1e-7f, 1e-7f, 1e-7f};
  for (int i = 0; i < 12; i++) a[i] = c * (float)i;
  for (long n = 0; n < iters; n++)
    for (int i = 0; i < 12; i++) a[i] = a[i] * b + c;
  v8 s = a[0];
  for (int i = 1; i < 12; i++) s += a[i];
  float r = 0; for (int i = 0; i < 8; i++) r += s[i];
  return r;
}
"""


def peak_gflops(tmp: Path, repeats: int) -> float | None:
    """Single-core f32 peak of an FMA kernel built with cc -O3 -march=native (None without cc)."""
    src, so = tmp / "peak.c", tmp / "peak.so"
    src.write_text(PEAK_C)
    cc = os.environ.get("KINA_CC", "cc")
    if subprocess.run([cc, "-O3", "-march=native", "-shared", "-fPIC", str(src), "-o", str(so)]).returncode:
        return None
    fn = ctypes.CDLL(str(so)).kina_peak
    fn.argtypes, fn.restype = [ctypes.c_long], ctypes.c_float
    iters = 2_000_000
    sec = median_time(lambda: fn(iters), repeats, budget=0.5)
    return iters * 12 * 8 * 2 / sec / 1e9


# ---- the table ---------------------------------------------------------------------
def check(name: str, got, want, rtol: float = 2e-3) -> str:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    err = float(np.max(np.abs(got - want) / (np.abs(want) + 1.0)))
    if err > rtol:
        raise SystemExit(f"{name}: compiled result differs from NumPy (max relative error {err:.2e})")
    return f"{err:.1e}"


def model_rows(s: dict, args, tmp: Path) -> list[tuple]:
    w = make_inputs(s)
    source = render("scaled_lm.kina.in", s)
    torch = torch_or_none()
    rows = []
    t_fwd, t_step = (torch_fns(torch, w, s) if torch else (None, None))
    ref_fwd = np_forward(w, s, w["window"][:, :s["T"]])[0]
    ref_step = np_train_step(w, s)
    for level in (0, 2):
        lib, compile_s = build_lib(source, "scaled_lm", level, tmp)
        fwd_out = np.empty((s["B"], s["T"], s["V"]), np.float32)
        step_out = [np.empty((1, 1), np.float32)] + [np.empty_like(w[n]) for n in WEIGHTS]
        fargs, sargs = kina_args(w, s, False), kina_args(w, s, True)
        lib.forward(*fargs, out=fwd_out)
        lib.train_step(*sargs, out=step_out)
        err_f = check(f"forward -O{level}", fwd_out, ref_fwd)
        err_s = max(check(f"train_step -O{level} {n}", g, r) for n, g, r in zip(("loss",) + WEIGHTS, step_out, ref_step))
        rows.append((f"kina -O{level}", "forward", median_time(lambda lib=lib, fargs=fargs, fwd_out=fwd_out: lib.forward(*fargs, out=fwd_out),
                                                            args.repeats),
                     f"err {err_f}, build {compile_s:.2f} s"))
        rows.append((f"kina -O{level}", "train step",
                     median_time(lambda lib=lib, sargs=sargs, step_out=step_out: lib.train_step(*sargs, out=step_out),
                                 args.repeats), f"err {err_s}"))
    rows.append(("numpy", "forward", median_time(lambda: np_forward(w, s, w["window"][:, :s["T"]]), args.repeats), ""))
    rows.append(("numpy", "train step", median_time(lambda: np_train_step(w, s), args.repeats), ""))
    if torch:
        rows.append((f"torch eager ({torch.get_num_threads()} thr)", "forward", median_time(t_fwd, args.repeats),
                     f"torch {torch.__version__}"))
        rows.append((f"torch eager ({torch.get_num_threads()} thr)", "train step", median_time(t_step, args.repeats), ""))
    return rows


def matmul_rows(args, tmp: Path) -> list[tuple]:
    rows = []
    rng = np.random.default_rng(1)
    for n in (256, 512, 1024):
        lib, _ = build_lib(render("matmul.kina.in", {"N": n}), f"mm{n}", 2, tmp)
        a, b = rng.random((n, n), np.float32), rng.random((n, n), np.float32)
        out, ref = np.empty((n, n), np.float32), np.empty((n, n), np.float32)
        lib.mm(a, b, out=out)
        err = check(f"matmul {n}", out, a @ b, rtol=1e-4)
        flops = 2.0 * n ** 3
        kina = flops / median_time(lambda lib=lib, a=a, b=b, out=out: lib.mm(a, b, out=out), args.repeats, budget=1.0) / 1e9
        nump = flops / median_time(lambda a=a, b=b, ref=ref: np.matmul(a, b, out=ref), args.repeats, budget=1.0) / 1e9
        rows.append((n, kina, nump, err))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in (("B", 4), ("T", 64), ("D", 256), ("H", 8), ("V", 2048)):
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--skip-matmul", action="store_true")
    args = ap.parse_args(argv)
    s = sizes(args)
    cores = len(os.sched_getaffinity(0))
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="kina-bench-") as tmp:
        tmp = Path(tmp)
        rows = model_rows(s, args, tmp)
        mm = [] if args.skip_matmul else matmul_rows(args, tmp)
        peak = None if args.skip_matmul else peak_gflops(tmp, args.repeats)
    load1 = os.getloadavg()
    print(f"scaled StoryLM B={s['B']} T={s['T']} D={s['D']} H={s['H']} V={s['V']}; {cores} cores usable; "
          f"load average {load0[0]:.2f} before, {load1[0]:.2f} after; median of {args.repeats}")
    torch_time = {what: t for name, what, t, _ in rows if name.startswith("torch")}
    print(f"{'implementation':<24}{'workload':<12}{'ms':>10}{'x torch':>9}  notes")
    for name, what, t, note in rows:
        ratio = f"{t / torch_time[what]:.2f}" if what in torch_time else "-"
        print(f"{name:<24}{what:<12}{t * 1e3:>10.3f}{ratio:>9}  {note}")
    if mm:
        print(f"{'f32 matmul':<24}{'kina -O2':>12}{'numpy':>10}{'kina/numpy':>12}   GFLOP/s")
        for n, kina, nump, err in mm:
            print(f"{f'{n}x{n}x{n}':<24}{kina:>12.1f}{nump:>10.1f}{kina / nump:>11.0%}   err {err}")
    if peak:
        print(f"{'peak (FMA kernel)':<24}{peak:>12.1f} GFLOP/s on 1 core, {peak * cores:.1f} on {cores}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
