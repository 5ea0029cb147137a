"""examples/layers.kina, a model made of the standard library's layers (import nn, losses,
optim): every layer is generic and instantiated at two or more sizes; `kinac validate` of the file passes
(every entry against the interpreter, every instantiation's gradient against finite
differences) at the suite's -O level (CI: -O0 and -O2); and each layer computes what
PyTorch's own layer computes (float64, through the interpreter's instances)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from compiler.analysis import analyze
from compiler.ir import nodes as ir
from compiler.oracle import interp, validate

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "layers.kina"
# each layer's qualified name in the program (module.function)
LAYERS = ("nn.linear", "nn.layer_norm", "nn.rms_norm", "nn.gelu_mlp", "nn.causal_attention",
          "losses.cross_entropy", "optim.adamw")


@pytest.fixture(scope="module")
def snap():
    s = analyze(EXAMPLE.read_text(), str(EXAMPLE))
    assert not s.diagnostics, s.diagnostics
    return s


def instances(program: ir.Program, layer: str) -> dict[str, ir.Function]:
    return {n: f for n, f in program.functions.items() if re.fullmatch(rf"{re.escape(layer)}\$[0-9_]+", n)}


def test_every_layer_is_generic_and_used_at_two_sizes_or_more(snap):
    for layer in LAYERS:
        module, name = layer.split(".")
        link = snap.link(module)
        assert link is not None and link.snapshot is not None, f"import {module} did not resolve"
        fn = link.snapshot.function_named(name)
        assert fn is not None and fn.sizes, f"{layer} is not size-generic"
        assert layer not in snap.program.functions          # only its instantiations are compiled
        assert len(instances(snap.program, layer)) >= 2, f"{layer} is instantiated once"


def test_validate_passes_every_entry_and_every_instantiations_gradient():
    report = validate.validate_file(EXAMPLE)
    assert report.build.ok, [report.build.source.render(d) for d in report.build.diagnostics]
    assert report.ok, validate.format_report(report)
    names = {f.name for f in report.functions}
    for layer in LAYERS[:-1]:
        short = layer.split(".")[1]
        graded = {n for n in names
                  if re.fullmatch(rf"({re.escape(layer)}|weighted_{short})\$[0-9_]+ \(reverseMode\)", n)}
        assert len(graded) >= 2, f"{layer}: gradients checked at {graded}"
    for f in report.functions:
        if f.name.endswith("(reverseMode)"):
            assert any(c.name.startswith("d/d ") for c in f.checks), f.name     # a gradient check ran
    assert {"check_adamw", "tiny_lm_small"} <= names


# ---- each layer against PyTorch -------------------------------------------------------------
def _run(program: ir.Program, name: str, args: list[np.ndarray]):
    return interp.run_function(program, name, args, dtype=np.float64)


def _args(fn: ir.Function, seed: int = 0) -> list[np.ndarray]:
    return [np.asarray(a, np.float64) if p.type.is_float else a
            for a, p in zip(interp.random_inputs(fn, seed), fn.params)]


@pytest.mark.parametrize("layer", LAYERS[:-1])
def test_layer_matches_pytorch(snap, layer):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    program = snap.program
    for fn in instances(program, layer).values():
        args = _args(fn)
        t = [torch.tensor(a) for a in args]
        d = fn.params[0].type.shape[-1]
        if layer == "nn.linear":
            want = F.linear(t[0], t[1].T, t[2])
        elif layer == "nn.layer_norm":
            want = F.layer_norm(t[0], (d,), t[1], t[2], eps=1e-5)
        elif layer == "nn.rms_norm":
            want = F.rms_norm(t[0], (d,), t[1], eps=1e-6)
        elif layer == "nn.gelu_mlp":
            want = F.linear(F.gelu(F.linear(t[0], t[1].T, t[2])), t[3].T, t[4])
        elif layer == "losses.cross_entropy":
            want = F.cross_entropy(t[0], t[1][:, 0]).reshape(1, 1)
        else:
            want = _torch_attention(torch, fn.name, t)
        np.testing.assert_allclose(_run(program, fn.name, args), want.numpy(), rtol=1e-10, atol=1e-12,
                                   err_msg=fn.name)


def _torch_attention(torch, name: str, t: list):
    B, T, H, E = (int(s) for s in name.split("$")[1].split("_"))
    F = torch.nn.functional
    x, (wq, bq, wk, bk, wv, bv, wo, bo) = t[0], t[1:]
    q, k, v = (F.linear(x, w.T, b).reshape(B, T, H, E).transpose(1, 2) for w, b in ((wq, bq), (wk, bk), (wv, bv)))
    ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return F.linear(ctx.transpose(1, 2).reshape(B * T, H * E), wo.T, bo)


def test_adamw_is_torch_optim_adamw(snap):
    """Step 3 of torch.optim.AdamW (lr 1e-2, betas 0.9 / 0.999, eps 1e-8, weight decay 1e-2)
    from the moments m, v, at every instantiation of std's optim.adamw."""
    torch = pytest.importorskip("torch")
    for fn in instances(snap.program, "optim.adamw").values():
        w, g, m, v, *_ = _args(fn)
        v = np.abs(v)
        hyper = [np.array(x) for x in (3.0, 1e-2, 0.9, 0.999, 1e-8, 1e-2)]    # t, lr, betas, eps, decay
        got = _run(snap.program, fn.name, [w, g, m, v, *hyper])
        p = torch.nn.Parameter(torch.tensor(w))
        opt = torch.optim.AdamW([p], lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)
        p.grad = torch.tensor(g)
        opt.state[p] = {"step": torch.tensor(2.0), "exp_avg": torch.tensor(m), "exp_avg_sq": torch.tensor(v)}
        opt.step()
        state = opt.state[p]
        for got_i, want_i in zip(got, (p.detach(), state["exp_avg"], state["exp_avg_sq"])):
            np.testing.assert_allclose(got_i, want_i.numpy(), rtol=1e-10, atol=1e-12, err_msg=fn.name)
