"""The standard library (compiler/std/*.kina, docs/stdlib.md): every public function is
size-generic and documented, `kinac validate` passes each file (every export against the
interpreter at three size assignments), and each function computes what the PyTorch
function its doc comment names computes (float64), at two size assignments, with its
gradients (d sum(f(..) * c) / d every input, through the gradient entries of
tests/fixtures/stdlib/).  One dynamic build per module (module-scoped) at the suite's -O
level (KINA_OPT_LEVEL: -O0, then -O2 in `make test`'s second pass): the module's text
followed by its gradient entries, until `import` lets a test file import it."""
from __future__ import annotations

import functools
import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
import stdlib_cases
from stdlib_cases import CASES, f32

from compiler import build
from compiler.analysis import analyze
from compiler.oracle import interp, validate
from compiler.runtime import library as runtime

ROOT = Path(__file__).resolve().parent.parent
STD = ROOT / "compiler" / "std"
FIXTURES = ROOT / "tests" / "fixtures" / "stdlib"
MODULES = ("nn", "losses", "optim", "random")
# compiled F32 against PyTorch in float64: |got - want| <= ATOL + RTOL * max |want|, per array
RTOL, ATOL = 1e-5, 1e-6
# the functions with a test of their own below (the others: tests/stdlib_cases.py), and the
# PyTorch function each is compared with
OWN_TESTS = {
    "optim": {"sgd": "torch.optim.SGD(momentum, weight_decay)", "sgd_nesterov": "torch.optim.SGD(nesterov=True)",
              "adamw": "torch.optim.AdamW", "sq_norm": "torch.linalg.vector_norm ** 2",
              "clip_by_norm": "torch.nn.utils.clip_grad_norm_ (two tensors)",
              "clip_grad_norm": "torch.nn.utils.clip_grad_norm_"},
    "random": {"split_key": "jax.random.split (if jax is installed); otherwise properties",
               "dropout": "F.dropout (distribution and formula)", "normal_init": "nn.init.normal_ (distribution)",
               "uniform_init": "nn.init.uniform_ (distribution)",
               "xavier_uniform": "nn.init.xavier_uniform_ (distribution)",
               "xavier_normal": "nn.init.xavier_normal_ (distribution)",
               "linear_init": "nn.Linear.reset_parameters (distribution)"},
}


@functools.cache
def _gen_docs():
    """scripts/gen_stdlib_docs.py as a module (registered: its dataclass needs that)."""
    spec = importlib.util.spec_from_file_location("gen_stdlib_docs", ROOT / "scripts" / "gen_stdlib_docs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    """lib(module): the module and its gradient entries built once, dynamic, at the suite's
    level (KINA_OPT_LEVEL: -O0 in the first pass of `make test`, -O2 in the second)."""
    libs: dict[str, runtime.Library] = {}

    def get(module: str) -> runtime.Library:
        if module not in libs:
            grads = FIXTURES / f"{module}_grads.kina"
            text = (STD / f"{module}.kina").read_text() + ("\n" + grads.read_text() if grads.exists() else "")
            out = tmp_path_factory.mktemp(f"std_{module}")
            (out / f"{module}.kina").write_text(text)
            res = build.build_file(out / f"{module}.kina", out / f"{module}.so")     # KINA_OPT_LEVEL
            assert res.ok, "\n".join(res.source.render(d) for d in res.diagnostics)
            libs[module] = runtime.load(res.so_path)
        return libs[module]
    return get


def close(got, want, what: str, rtol: float = RTOL, atol: float = ATOL) -> None:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} vs {want.shape}"
    err, bound = np.abs(got - want).max(initial=0.0), atol + rtol * np.abs(want).max(initial=0.0)
    assert err <= bound, f"{what}: off by {err:.3g} (allowed {bound:.3g})"


# ---- the files ------------------------------------------------------------------------------
@pytest.mark.parametrize("module", MODULES)
def test_every_public_function_is_generic_documented_and_tested(module):
    text = (STD / f"{module}.kina").read_text()
    snap = analyze(text, str(STD / f"{module}.kina"))
    assert not snap.diagnostics, snap.diagnostics
    fns = _gen_docs().functions(text)
    tested = {n for n, c in CASES.items() if c.module == module} | set(OWN_TESTS.get(module, {}))
    assert {f.name for f in fns} == tested
    for f in fns:
        assert f.doc and any(line.startswith("PyTorch:") for line in f.doc), f"{module}.{f.name}: no PyTorch line"
        assert any(line.startswith("Shapes:") for line in f.doc), f"{module}.{f.name}: no Shapes line"
        assert snap.function_named(f.name).sizes or f.name == "split_key", f"{module}.{f.name} is not size-generic"


@pytest.mark.parametrize("module", MODULES)
def test_validate_passes(module):
    report = validate.validate_file(STD / f"{module}.kina")     # at KINA_OPT_LEVEL, like the build
    assert report.build.ok, [report.build.source.render(d) for d in report.build.diagnostics]
    assert report.ok, validate.format_report(report)
    assert len(report.functions) >= 3 * (len(_gen_docs().functions((STD / f"{module}.kina").read_text())) - 1)


def test_files_are_formatted():
    r = subprocess.run([sys.executable, "-m", "compiler.cli", "fmt", "--check", str(STD), str(FIXTURES)],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_files_ship_in_the_package():
    """pyproject.toml's package data names every std file (a wheel built from the tree holds
    compiler/std/*.kina: `pip wheel .` checked by hand, too slow for the suite)."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = {p for pattern in data.get("compiler", []) for p in (ROOT / "compiler").glob(pattern)}
    assert shipped == set(STD.glob("*.kina")) and len(shipped) == len(MODULES)


def test_docs_are_up_to_date():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_stdlib_docs.py"), "--check"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "up to date" in r.stdout, r.stdout + r.stderr
    doc = (ROOT / "docs" / "stdlib.md").read_text()
    for module in MODULES:
        for f in _gen_docs().functions((STD / f"{module}.kina").read_text()):
            assert f"### {module}.{f.name}" in doc and f.signature in doc
    assert "docs/stdlib.md" in (ROOT / "docs" / "language.md").read_text()


# ---- nn and losses against PyTorch, forward and gradients -----------------------------------
def compare_case(torch, name: str, call, rtol: float, atol: float) -> None:
    """CASES[name] at both its size assignments: call(function, sizes, args) -> its results
    (compiled or interpreted) against PyTorch in float64, then the grad_ entry's cotangents
    against torch.autograd's."""
    case = CASES[name]
    for k, sizes in enumerate(case.sizes):
        what = f"{case.module}.{name}{sizes}"
        rng = np.random.default_rng(k)
        args = case.args(sizes, rng)
        t = [torch.tensor(a, dtype=torch.float64, requires_grad=True) if a.dtype == np.float32 else torch.tensor(a)
             for a in args]
        want = case.ref(torch, sizes, *t)
        close(call(name, sizes, args), want.detach().numpy(), f"{what} vs {case.torch_name}", rtol, atol)
        if not case.grad:
            continue
        c = f32(rng, *want.shape)
        tc = torch.tensor(c, dtype=torch.float64, requires_grad=True)
        loss = (want * tc).sum() if case.probe else want.sum()
        floats = [i for i, a in enumerate(args) if a.dtype == np.float32]
        wrt = [t[i] for i in floats if i not in case.no_grad] + ([tc] if case.probe else [])
        grads = torch.autograd.grad(loss, wrt)
        got = call(f"grad_{name}", sizes, args + ([c] if case.probe else []))
        close(got[0], (want * tc if case.probe else want).detach().numpy(), f"{what}: grad_{name}'s primal", rtol, atol)
        got_grads = [g for i, g in zip(floats, got[1:]) if i not in case.no_grad] + ([got[-1]] if case.probe else [])
        for j, (g, w) in enumerate(zip(got_grads, grads)):
            close(g, w.numpy(), f"{what}: cotangent {j}", rtol, atol)


@pytest.mark.parametrize("name", CASES)
def test_compiled_matches_pytorch_with_gradients(lib, name):
    """The dynamic library, every function called at both size assignments."""
    torch = pytest.importorskip("torch")
    case = CASES[name]
    fns = lib(case.module)
    compare_case(torch, name, lambda fn, sizes, args: fns[fn](*args, **{s: sizes[s] for s in case.keywords}),
                 RTOL, ATOL)


@functools.cache
def _analysis(module: str):
    grads = FIXTURES / f"{module}_grads.kina"
    return analyze((STD / f"{module}.kina").read_text() + "\n" + grads.read_text(), f"{module}.kina")


@pytest.mark.parametrize("name", CASES)
def test_interpreter_in_float64_matches_pytorch_to_rounding(name):
    """The same in float64 through the interpreter, to 1e-10: a constant that differs from
    PyTorch's (an eps of 1e-6 for 1e-5) shows here, below F32's tolerance."""
    torch = pytest.importorskip("torch")

    def run(fn: str, sizes, args):
        program, diags = _analysis(CASES[name].module).program_for(sizes, want_dynamic=False)
        assert not diags, diags
        args = [a.astype(np.float64) if a.dtype == np.float32 else a for a in args]
        return interp.run_function(program, fn, args, dtype=np.float64)
    compare_case(torch, name, run, 1e-10, 1e-12)


# ---- optim against torch.optim, three steps ---------------------------------------------------
def scalar(v: float) -> np.ndarray:
    return np.array(v, np.float32)


SGD_SETTINGS = [dict(n=5, lr=0.1, momentum=0.9, weight_decay=0.01), dict(n=12, lr=0.03, momentum=0.5, weight_decay=0.0)]


@pytest.mark.parametrize("nesterov", [False, True], ids=["sgd", "sgd_nesterov"])
def test_sgd_is_torch_optim_sgd(lib, nesterov):
    torch = pytest.importorskip("torch")
    step = lib("optim")["sgd_nesterov" if nesterov else "sgd"]
    for k, s in enumerate(SGD_SETTINGS):
        rng = np.random.default_rng(k)
        w, buf = f32(rng, s["n"]), np.zeros(s["n"], np.float32)
        p = torch.nn.Parameter(torch.tensor(w, dtype=torch.float64))
        opt = torch.optim.SGD([p], lr=s["lr"], momentum=s["momentum"], weight_decay=s["weight_decay"], nesterov=nesterov)
        for i in range(3):
            g = f32(rng, s["n"])
            p.grad = torch.tensor(g, dtype=torch.float64)
            opt.step()
            w, buf = step(w, g, buf, scalar(s["lr"]), scalar(s["momentum"]), scalar(s["weight_decay"]))
            close(w, p.detach().numpy(), f"{s} step {i + 1}: w")
            close(buf, opt.state[p]["momentum_buffer"].numpy(), f"{s} step {i + 1}: momentum buffer")


ADAMW_SETTINGS = [dict(n=6, lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2),
                  dict(n=15, lr=3e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)]


@pytest.mark.parametrize("torch_dtype", ["float64", "float32"])
def test_adamw_is_torch_optim_adamw(lib, torch_dtype):
    """Against float64 AdamW (the mathematics), and float32 AdamW on the same float32 state
    (what a user's PyTorch run computes) to a few units in the last place: the F64
    hyperparameters give PyTorch's 1 - beta2, not F32's (1.3e-5 off for 0.999)."""
    torch = pytest.importorskip("torch")
    adamw = lib("optim")["adamw"]
    dtype = getattr(torch, torch_dtype)
    for k, s in enumerate(ADAMW_SETTINGS):
        rng = np.random.default_rng(k)
        w, m, v = f32(rng, s["n"]), np.zeros(s["n"], np.float32), np.zeros(s["n"], np.float32)
        p = torch.nn.Parameter(torch.tensor(w, dtype=dtype))
        opt = torch.optim.AdamW([p], lr=s["lr"], betas=s["betas"], eps=s["eps"], weight_decay=s["weight_decay"],
                                foreach=False)
        hyper = [np.float64(x) for x in (s["lr"], *s["betas"], s["eps"], s["weight_decay"])]
        for t in (1, 2, 3):
            g = f32(rng, s["n"])
            p.grad = torch.tensor(g, dtype=dtype)
            opt.step()
            w, m, v = adamw(w, g, m, v, scalar(t), *hyper)
            state = opt.state[p]
            for got, want, what in ((w, p.detach(), "w"), (m, state["exp_avg"], "m"), (v, state["exp_avg_sq"], "v")):
                if torch_dtype == "float64":
                    close(got, want.numpy(), f"{s} step {t}: {what}")
                else:
                    np.testing.assert_allclose(got, want.numpy(), rtol=4e-7, atol=0, err_msg=f"{s} step {t}: {what}")


@pytest.mark.parametrize("n, max_norm", [(7, 0.5), (4, 100.0)], ids=["clipped", "unclipped"])
def test_clip_grad_norm_is_torch_clip_grad_norm_(lib, n, max_norm):
    torch = pytest.importorskip("torch")
    fns = lib("optim")
    g = f32(np.random.default_rng(n), n)
    p = torch.nn.Parameter(torch.zeros(n, dtype=torch.float64))
    p.grad = torch.tensor(g, dtype=torch.float64)
    norm = torch.nn.utils.clip_grad_norm_([p], max_norm)
    clipped, got_norm = fns.clip_grad_norm(g, scalar(max_norm))
    close(got_norm, norm.numpy(), "norm")
    close(clipped, p.grad.numpy(), "clipped gradient")
    close(fns.sq_norm(g), (torch.linalg.vector_norm(torch.tensor(g, dtype=torch.float64)) ** 2).numpy(), "sq_norm")


@pytest.mark.parametrize("sizes", [(5, 9), (12, 3)])
def test_clip_by_norm_clips_two_tensors_by_their_global_norm(lib, sizes):
    torch = pytest.importorskip("torch")
    fns = lib("optim")
    rng = np.random.default_rng(sum(sizes))
    grads = [f32(rng, n) for n in sizes]
    params = [torch.nn.Parameter(torch.zeros(n, dtype=torch.float64)) for n in sizes]
    for p, g in zip(params, grads):
        p.grad = torch.tensor(g, dtype=torch.float64)
    norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
    total = np.sqrt(sum(fns.sq_norm(g) for g in grads)).astype(np.float32)
    close(total, norm.numpy(), "global norm")
    for p, g in zip(params, grads):
        close(fns.clip_by_norm(g, total, scalar(1.0)), p.grad.numpy(), f"[{g.size}] clipped")


# ---- random: the distributions PyTorch draws from (the bits differ: another generator) -------
KEY = np.array([7, 2026], np.int64)


def ks_distance(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sample Kolmogorov-Smirnov statistic: the largest gap between the two
    empirical distribution functions."""
    a, b = np.sort(a.ravel()), np.sort(b.ravel())
    grid = np.concatenate([a, b])
    return float(np.abs(np.searchsorted(a, grid, "right") / a.size - np.searchsorted(b, grid, "right") / b.size).max())


def ks_bound(n: int, m: int) -> float:
    """The KS distance two samples of one distribution stay under with probability 0.999."""
    return 1.95 * np.sqrt((n + m) / (n * m))


def test_split_key_gives_two_new_keys(lib):
    fns = lib("random")
    k1, k2 = fns.split_key(KEY)
    assert k1.shape == k2.shape == (2,) and len({tuple(KEY), tuple(k1), tuple(k2)}) == 3
    assert all(0 <= int(w) < 2 ** 32 for w in (*k1, *k2))
    np.testing.assert_array_equal(fns.split_key(KEY)[0], k1)                 # a pure function of the key


def test_split_key_is_jax_random_split(lib):
    """PyTorch has no counterpart (its generator is stateful); JAX's split is the reference."""
    jax = pytest.importorskip("jax")
    k1, k2 = lib("random").split_key(KEY)
    want = np.asarray(jax.random.split(np.asarray(KEY, np.uint32), 2), np.int64)
    np.testing.assert_array_equal(np.stack([k1, k2]), want)


@pytest.mark.parametrize("m, n, p", [(64, 48, 0.25), (30, 100, 0.5)])
def test_dropout_is_f_dropout(lib, m, n, p):
    torch = pytest.importorskip("torch")
    fns = lib("random")
    rng = np.random.default_rng(m)
    x, c, pp = f32(rng, m, n), f32(rng, m, n), np.array([[p]], np.float32)
    out = fns.dropout(KEY, x, pp)
    keep = out != 0
    src = f"fn mask(key: Tensor[I64, [2]]) -> Tensor[Bool, [{m}, {n}]] {{ bernoulli(key, {1 - p}, shape=[{m}, {n}]) }}"
    np.testing.assert_array_equal(keep, interp.run_function(analyze(src, "mask.kina").program, "mask", [KEY]))
    torch.manual_seed(m)
    torch_keep = torch.nn.functional.dropout(torch.ones(m, n, dtype=torch.float64), p) != 0
    sigma = np.sqrt(p * (1 - p) / x.size)
    for frac in (keep.mean(), torch_keep.double().mean().item()):          # the same Bernoulli(1 - p)
        assert abs(frac - (1 - p)) < 4 * sigma, frac
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    want = torch.where(torch.tensor(keep), xt / (1 - p), 0.0)                 # F.dropout given its mask
    close(out, want.detach().numpy(), "dropout")
    assert not np.array_equal(keep, fns.dropout(fns.split_key(KEY)[0], x, pp) != 0)   # a new key, a new mask
    (g_x,) = torch.autograd.grad((want * torch.tensor(c, dtype=torch.float64)).sum(), [xt])
    _, got_x, _, got_c = fns.grad_dropout(KEY, x, pp, c)
    close(got_x, g_x.numpy(), "d/dx")
    close(got_c, want.detach().numpy(), "d/dc")


INIT_SIZES = [(48, 64), (96, 40)]


@pytest.mark.parametrize("m, n", INIT_SIZES)
def test_inits_draw_from_torch_nn_init_distributions(lib, m, n):
    torch = pytest.importorskip("torch")
    init, fns = torch.nn.init, lib("random")
    torch.manual_seed(m)
    cases = {
        "normal_init": (fns.normal_init(KEY, scalar(0.02), M=m, N=n), init.normal_(torch.empty(m, n), 0.0, 0.02)),
        "uniform_init": (fns.uniform_init(KEY, scalar(-0.3), scalar(0.7), M=m, N=n),
                         init.uniform_(torch.empty(m, n), -0.3, 0.7)),
        "xavier_uniform": (fns.xavier_uniform(KEY, M=m, N=n), init.xavier_uniform_(torch.empty(n, m))),
        "xavier_normal": (fns.xavier_normal(KEY, M=m, N=n), init.xavier_normal_(torch.empty(n, m))),
    }
    for name, (got, want) in cases.items():
        assert got.shape == (m, n), name
        d = ks_distance(got, want.numpy())
        assert d < ks_bound(got.size, want.numel()), f"{name}: KS distance {d:.3f} from torch's"
    assert cases["uniform_init"][0].min() >= -0.3 and cases["uniform_init"][0].max() < 0.7
    assert np.abs(cases["xavier_uniform"][0]).max() <= np.sqrt(6 / (m + n))
    w, b = fns.linear_init(KEY, K=m, N=n)
    layer = torch.nn.Linear(m, n)
    assert w.shape == (m, n) and b.shape == (n,) and np.abs(np.concatenate([w.ravel(), b])).max() <= 1 / np.sqrt(m)
    assert ks_distance(w, layer.weight.detach().numpy()) < ks_bound(w.size, w.size)
    assert ks_distance(b, layer.bias.detach().numpy()) < ks_bound(n, n)


# ---- the modules together: a model made of them trains -----------------------------------------
GPT = {"B": 2, "T": 3, "H": 2, "E": 2, "V": 7}


def test_std_functions_compose_into_a_model_that_trains():
    """tests/fixtures/stdlib/tiny_gpt.kina: a GPT block of nn functions scored by
    losses.cross_entropy, differentiated in one handle, its embedding updated by
    optim.clip_grad_norm and optim.sgd: the interpreter's step (float64) is PyTorch's
    (autograd, clip_grad_norm_, SGD), and five steps lower the loss."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    text = "\n".join((STD / f"{m}.kina").read_text() for m in ("nn", "losses", "optim"))
    program, diags = analyze(text + (FIXTURES / "tiny_gpt.kina").read_text(), "tiny_gpt.kina").program_for(
        GPT, want_dynamic=False)
    assert not diags, diags
    s, d, rng = GPT, GPT["H"] * GPT["E"], np.random.default_rng(5)
    ids, targets = rng.integers(0, s["V"], (s["B"], s["T"])), rng.integers(0, s["V"], (s["B"] * s["T"], 1))
    shapes = [(s["V"], d), (s["T"], d), (d,), (d,), *[(d, d)] * 4, (d,), (d, 2 * d), (d, 2 * d), (2 * d, d), (d,)]
    weights = [1 + 0.1 * rng.standard_normal(sh) if i in (2, 12) else 0.5 * rng.standard_normal(sh)
               for i, sh in enumerate(shapes)]
    p = [torch.tensor(w, requires_grad=True) for w in weights]
    wte, wpe, ln_g, ln_b, wq, wk, wv, wo, b, wg, wu, wd, rms_g = p
    x = (wte[torch.tensor(ids)] + wpe).reshape(-1, d)
    h = x + stdlib_cases._mha(torch, s, F.layer_norm(x, (d,), ln_g, ln_b, eps=1e-5), wq, b, wk, b, wv, b, wo, b)
    n2 = F.rms_norm(h, (d,), rms_g, eps=1e-6)
    loss = F.cross_entropy((h + (F.silu(n2 @ wg) * (n2 @ wu)) @ wd) @ wte.T, torch.tensor(targets[:, 0]))
    loss.backward()
    torch.nn.utils.clip_grad_norm_([wte], 1.0)
    torch.optim.SGD([wte], lr=0.5, momentum=0.9).step()
    buf = np.zeros(s["V"] * d)
    got_loss, got_wte, buf = interp.run_function(program, "tiny_gpt_step", [ids, targets, *weights, buf],
                                                 dtype=np.float64)
    close(got_loss, loss.detach().numpy().reshape(1, 1), "loss", 1e-10, 1e-12)
    close(got_wte, wte.detach().numpy(), "the embedding after one step", 1e-10, 1e-12)
    losses = [got_loss.item()]
    for _ in range(4):
        weights[0] = got_wte
        got_loss, got_wte, buf = interp.run_function(program, "tiny_gpt_step", [ids, targets, *weights, buf],
                                                     dtype=np.float64)
        losses.append(got_loss.item())
    assert losses[-1] < losses[0] - 0.1, losses
