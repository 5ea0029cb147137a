"""Issue 24's acceptance: a GPT block written with ONE generic `linear` and ONE generic
`layer_norm` (tests/programs/gpt_block.kina), built from the same source at two size
sets (`sizes=`, what `kinac build --size` passes) and at -O0 and -O2, its mean
cross-entropy and the reverseMode gradient of every weight compared with the same
model in PyTorch (float64 autograd) and with the Kina interpreter.

The program has token + position embeddings (gather), pre-LayerNorm, causal multi-head
attention (heads by reshape/transpose, an iota mask applied with where, softmax), a
GELU MLP, a tied lm head and the mean NLL `total * (1.0 / (B * T))`.  Its sizes are B,
T, H (heads), E (head width: D = H * E) and V.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler import build
from compiler.analysis import analyze
from compiler.ir import nodes as ir
from compiler.oracle import interp
from compiler.runtime import library as runtime

SOURCE = Path(__file__).resolve().parent / "programs" / "gpt_block.kina"
WEIGHTS = ("wte", "wpe", "ln1_g", "ln1_b", "wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo",
           "ln2_g", "ln2_b", "w_up", "b_up", "w_down", "b_down", "lnf_g", "lnf_b")
SETS = {"small": dict(B=1, T=4, H=2, E=4, V=16),     # D = 8
        "wide": dict(B=2, T=5, H=3, E=4, V=11)}      # D = 12
INTERP_ONLY = dict(B=3, T=3, H=1, E=6, V=7)          # a third instantiation, never built
LEVELS = (0, 2)
# Compiled F32 against a float64 reference: |got - want| <= ATOL + RTOL * max |want|.
# (d loss / d bk is 0 in exact arithmetic: softmax ignores a shift of every key.)
RTOL, ATOL = 1e-5, 1e-6


def weight_shapes(s: dict[str, int]) -> dict[str, tuple[int, ...]]:
    d, v, t = s["H"] * s["E"], s["V"], s["T"]
    shapes = {"wte": (v, d), "wpe": (t, d), "w_up": (d, 4 * d), "b_up": (4 * d,), "w_down": (4 * d, d)}
    return {w: shapes.get(w, (d, d) if w[0] == "w" else (d,)) for w in WEIGHTS}


def inputs(s: dict[str, int], seed: int = 0) -> list[np.ndarray]:
    """ids, targets, then the weights: N(0, 0.3^2), LayerNorm scales N(1, 0.1^2)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, s["V"], (s["B"], s["T"]))
    targets = rng.integers(0, s["V"], (s["B"] * s["T"], 1))
    ws = [(1 + 0.1 * rng.standard_normal(shape) if w.endswith("_g") else 0.3 * rng.standard_normal(shape))
          .astype(np.float32) for w, shape in weight_shapes(s).items()]
    return [ids, targets, *ws]


def program_at(sizes: dict[str, int]) -> ir.Program:
    program, diags = analyze(SOURCE.read_text(), str(SOURCE)).program_for(sizes)
    assert not diags, diags
    return program


def torch_reference(s: dict[str, int], args: list[np.ndarray]) -> list[np.ndarray]:
    """The loss as [1, 1] and d loss / d every weight, in float64 with torch.autograd."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    B, T, H, E = s["B"], s["T"], s["H"], s["E"]
    D = H * E
    ids, targets = torch.tensor(args[0]), torch.tensor(args[1][:, 0])
    p = {w: torch.tensor(a, dtype=torch.float64, requires_grad=True) for w, a in zip(WEIGHTS, args[2:])}

    def heads(a):
        return a.reshape(B, T, H, E).transpose(1, 2)

    x = (p["wte"][ids] + p["wpe"][torch.arange(T)]).reshape(B * T, D)
    n1 = F.layer_norm(x, (D,), p["ln1_g"], p["ln1_b"], eps=1e-5)
    q, k, v = (heads(F.linear(n1, p[f"w{c}"].T, p[f"b{c}"])) for c in "qkv")
    scores = (q @ k.transpose(-1, -2) / E ** 0.5).masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), -1e9)
    ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B * T, D)
    h = x + F.linear(ctx, p["wo"].T, p["bo"])
    n2 = F.layer_norm(h, (D,), p["ln2_g"], p["ln2_b"], eps=1e-5)
    y = h + F.linear(F.gelu(F.linear(n2, p["w_up"].T, p["b_up"])), p["w_down"].T, p["b_down"])
    logits = F.layer_norm(y, (D,), p["lnf_g"], p["lnf_b"], eps=1e-5) @ p["wte"].T
    loss = F.cross_entropy(logits, targets)
    grads = torch.autograd.grad(loss, list(p.values()))
    return [loss.detach().numpy().reshape(1, 1)] + [g.numpy() for g in grads]


def assert_close(got, want, what: str, rtol: float = RTOL, atol: float = ATOL) -> None:
    names = ("loss", *WEIGHTS)
    assert len(got) == len(want) == len(names), what
    for name, g, w in zip(names, got, want):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        assert g.shape == w.shape, f"{what}: {name} {g.shape} vs {w.shape}"
        err, bound = np.abs(g - w).max(), atol + rtol * np.abs(w).max()
        assert err <= bound, f"{what}: d/d {name} off by {err:.3g} (allowed {bound:.3g})"


# ---- one generic source, several instantiations --------------------------------------------
@pytest.mark.parametrize("sizes", [*SETS.values(), INTERP_ONLY], ids=[*SETS, "interp_only"])
def test_one_linear_and_one_layer_norm_at_every_size(sizes):
    """linear is instantiated at three shapes (q/k/v/o, MLP up, MLP down), layer_norm at
    one (used three times), all from the one definition each."""
    program = program_at(sizes)
    m, d = sizes["B"] * sizes["T"], sizes["H"] * sizes["E"]
    linears = {n for n in program.functions if n.startswith("linear$")}
    assert linears == {f"linear${m}_{d}_{d}", f"linear${m}_{d}_{4 * d}", f"linear${m}_{4 * d}_{d}"}
    assert {n for n in program.functions if n.startswith("layer_norm$")} == {f"layer_norm${m}_{d}"}
    assert all(not ir.is_export(n) for n in linears)
    grads = program.functions["gpt_grads"]
    assert [tuple(p.type.shape) for p in grads.params[2:]] == list(weight_shapes(sizes).values())


@pytest.mark.parametrize("sizes", [*SETS.values(), INTERP_ONLY], ids=[*SETS, "interp_only"])
def test_interpreter_float64_matches_torch(sizes):
    args = inputs(sizes)
    got = interp.run_function(program_at(sizes), "gpt_grads", args, dtype=np.float64)
    assert_close(got, torch_reference(sizes, args), "interpreter (float64) vs torch", rtol=1e-10, atol=1e-12)


# ---- compiled, at -O0 and -O2 ----------------------------------------------------------------
_LIBS: dict[tuple[str, int], tuple[build.BuildResult, runtime.Library]] = {}


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    """(size set, level) -> (BuildResult, Library), each built once, from the one source."""
    def get(name: str, level: int):
        if (name, level) not in _LIBS:
            out = tmp_path_factory.mktemp(f"gpt_{name}_O{level}") / "gpt_block.so"
            res = build.build_source(SOURCE.read_text(), str(SOURCE), out, opt_level=level, sizes=SETS[name])
            assert res.ok, "\n".join(res.source.render(d) for d in res.diagnostics)
            _LIBS[name, level] = (res, runtime.load(res.so_path))
        return _LIBS[name, level]
    yield get
    _LIBS.clear()


@pytest.mark.parametrize("level", LEVELS, ids=lambda lv: f"O{lv}")
@pytest.mark.parametrize("name", SETS)
def test_compiled_loss_and_gradients_match_torch(libs, name, level):
    res, lib = libs(name, level)
    assert res.sizes == SETS[name]
    args = inputs(SETS[name])
    got = lib.gpt_grads(*args)
    assert_close(got, torch_reference(SETS[name], args), f"{name} -O{level} vs torch")
    np.testing.assert_array_equal(lib.gpt_loss(*args), got[0])   # the exported loss is the primal


@pytest.mark.parametrize("level", LEVELS, ids=lambda lv: f"O{lv}")
@pytest.mark.parametrize("name", SETS)
def test_compiled_matches_the_interpreter(libs, name, level):
    res, lib = libs(name, level)
    args = inputs(SETS[name], seed=1)
    got = lib.gpt_grads(*args)
    assert_close(got, interp.run_function(res.program, "gpt_grads", args, dtype=np.float64),
                 f"{name} -O{level} vs interpreter (float64)")
    assert_close(got, interp.run_function(res.program, "gpt_grads", args),
                 f"{name} -O{level} vs interpreter (F32)")


@pytest.mark.parametrize("name", SETS)
def test_O2_matches_O0(libs, name):
    args = inputs(SETS[name], seed=2)
    o0, o2 = libs(name, 0)[1].gpt_grads(*args), libs(name, 2)[1].gpt_grads(*args)
    assert_close(o2, o0, f"{name}: -O2 vs -O0", rtol=1e-6, atol=1e-7)
