"""Numerical gradient checks of every VJP row, JAX style, in float64.

For a case y = op(x0, x1, ...) the checked function is f(xs, c) = op(xs) * c
with a random cotangent direction c: its reverseMode seed is ones, so the
generated function returns g_xi = J_i^T c.  For a random direction v_i the
identity <g_xi, v_i> = d/dt sum(op(.., xi + t v_i, ..) * c) is compared with a
central difference, with step 1 for ops marked linear in ops.OPS (exact) and
1e-6 otherwise.  Every op of ops.OPS needs a case here or is a backward-only op
whose rejection is tested (the parametrization over OPS enforces it).
"""
from pathlib import Path

import numpy as np
import pytest

from compiler.ad.transform import transform_ad
from compiler.ad.vjp import VJPS, Builder
from compiler.core.types import DType, TensorType, f32, i64
from compiler.ir import nodes as ir
from compiler.ir.ops import OPS
from compiler.oracle.interp import random_inputs, run_function

CASES = Path(__file__).parent / "ad_cases"


# ---- cases: one or more per op; each builds y from its params (Vars) ----------------------------
class Case:
    def __init__(self, op, params, body, index_values=None, domain=None):
        self.op, self.params, self.body = op, params, body
        self.index_values = index_values or {}   # fixed I64 inputs (e.g. repeated indices)
        self.domain = domain                     # "positive" | "away_from_zero" | None


def _vars(**types):
    return [ir.Var(n, t) for n, t in types.items()]


def unary(op, domain=None, shape=(2, 3)):
    return Case(op, _vars(x=f32(*shape)), lambda b, x: b.emit(op, [x]), domain=domain)


def binary(op, shape, domain=None):
    return Case(op, _vars(a=f32(*shape), b=f32(*shape)), lambda b, x, y: b.emit(op, [x, y]), domain=domain)


def _rng_shape(rng, rank, lo=1, hi=4):
    return tuple(int(d) for d in rng.integers(lo, hi + 1, rank))


def build_cases(seed=7):
    rng = np.random.default_rng(seed)
    cases = []
    for op in ("add", "sub", "mul"):
        cases.append(binary(op, _rng_shape(rng, int(rng.integers(1, 4)))))
    cases.append(binary("div", _rng_shape(rng, 2), domain="positive"))
    cases.append(Case("mul", _vars(a=f32(3, 2)), lambda b, x: b.emit("mul", [x, x])))   # x * x: summed contributions
    for op in ("neg", "exp", "tanh", "sigmoid"):
        cases.append(unary(op, shape=_rng_shape(rng, 3)))
    for op in ("log", "sqrt", "rsqrt"):
        cases.append(unary(op, domain="positive"))
    cases.append(unary("relu", domain="away_from_zero", shape=(4, 5)))
    for batch in ((), (3,), (2, 3)):                       # rank 2, 3 and the rank-4 attention case
        m, k, n = _rng_shape(rng, 3, 2, 5)
        cases.append(Case("matmul", _vars(a=f32(*batch, m, k), b=f32(*batch, k, n)),
                          lambda b, x, y: b.emit("matmul", [x, y])))
    for rank in (3, 4):
        perm = tuple(int(p) for p in rng.permutation(rank))
        cases.append(Case("transpose", _vars(x=f32(*_rng_shape(rng, rank))),
                          lambda b, x, perm=perm: b.emit("transpose", [x], perm=perm)))
    cases.append(Case("reshape", _vars(x=f32(2, 3, 4)), lambda b, x: b.emit("reshape", [x], shape=(4, 1, 6))))
    cases.append(Case("broadcast", _vars(x=f32(1, 3, 1)), lambda b, x: b.emit("broadcast", [x], shape=(2, 3, 4))))
    cases.append(Case("broadcast", _vars(x=f32(2, 3)), lambda b, x: b.emit("broadcast", [x], shape=(2, 3))))
    cases.append(Case("slice", _vars(x=f32(3, 5)), lambda b, x: b.emit("slice", [x], axis=1, start=1, stop=3)))
    cases.append(Case("slice", _vars(x=f32(4, 2)), lambda b, x: b.emit("slice", [x], axis=0, start=0, stop=4)))
    cases.append(Case("concat", _vars(a=f32(2, 1), b=f32(2, 3)),
                      lambda b, x, y: b.emit("concat", [x, y], axis=1)))
    cases.append(Case("concat", _vars(a=f32(1, 2), b=f32(2, 2), c=f32(1, 2)),
                      lambda b, x, y, z: b.emit("concat", [x, y, z], axis=0)))
    # gather with repeated indices: rows 3 collects three contributions
    cases.append(Case("gather", _vars(values=f32(5, 3), ids=i64(4)),
                      lambda b, v, ids: b.emit("gather", [v, ids]), {"ids": [3, 1, 3, 3]}))
    cases.append(Case("gather", _vars(values=f32(6, 2), ids=i64(2, 2)),
                      lambda b, v, ids: b.emit("gather", [v, ids]), {"ids": [[0, 5], [5, 2]]}))
    for axis in (0, 1, 2):
        cases.append(Case("reduce_keep", _vars(x=f32(2, 3, 4)),
                          lambda b, x, axis=axis: b.emit("reduce_keep", [x], op="sum", axis=axis)))
    for op in ("softmax", "log_softmax"):
        for shape, axis in (((3, 4), 1), ((2, 3, 4), 0), ((1, 2, 4, 4), 3)):
            cases.append(Case(op, _vars(x=f32(*shape)), lambda b, x, op=op, axis=axis: b.emit(op, [x], axis=axis)))
    cases.append(Case("take_along_axis", _vars(x=f32(2, 5), idx=i64(2, 3)),
                      lambda b, x, idx: b.emit("take_along_axis", [x, idx], axis=1),
                      {"idx": [[4, 4, 0], [1, 2, 1]]}))
    cases.append(Case("take_along_axis", _vars(x=f32(1, 4, 8), idx=i64(1, 4, 1)),
                      lambda b, x, idx: b.emit("take_along_axis", [x, idx], axis=2)))
    for op in ("maximum", "minimum"):
        cases.append(binary(op, (3, 4)))
        # one operand a constant let: only the other gets a cotangent
        cases.append(Case(op, _vars(x=f32(2, 3)), lambda b, x, op=op: b.emit(op, [x, b.literal(x.type, (0.25,))]),
                          domain="away_from_quarter"))
    cases.append(unary("abs", domain="away_from_zero", shape=(3, 4)))
    cases.append(unary("sign", domain="away_from_zero"))
    cases.append(unary("square", shape=_rng_shape(rng, 3)))
    cases.append(unary("erf", shape=(4, 5)))
    for p, domain in ((3.0, None), (2.0, None), (-2.0, "away_from_zero"), (1.5, "positive"), (0.5, "positive"),
                      (1.0, None), (0.0, None)):
        cases.append(Case("pow", _vars(x=f32(2, 3)), lambda b, x, p=p: b.emit("pow", [x], p=p), domain=domain))
    for lo, hi in ((-0.5, 0.75), (None, 0.25), (-0.1, None)):
        cases.append(Case("clamp", _vars(x=f32(3, 4)), lambda b, x, lo=lo, hi=hi: b.emit("clamp", [x], min=lo, max=hi),
                          domain="away_from_bounds"))
    for approximate in ("none", "tanh"):
        cases.append(Case("gelu", _vars(x=f32(3, 5)),
                          lambda b, x, a=approximate: b.emit("gelu", [x], approximate=a)))
    # cast there and back: the product with the cotangent direction happens in F16
    cases.append(Case("cast", _vars(x=f32(2, 3)),
                      lambda b, x: b.emit("cast", [b.emit("cast", [x], dtype="F16")], dtype="F32")))
    cond = TensorType(DType.Bool, (3, 4))
    cases.append(Case("where", [ir.Var("c", cond), *_vars(a=f32(3, 4), b=f32(3, 4))],
                      lambda b, c, x, y: b.emit("where", [c, x, y]),
                      {"c": [[1, 0, 0, 1], [0, 0, 1, 1], [1, 1, 1, 0]]}))
    # a mask from a comparison of the input itself (ReLU written with where)
    cases.append(Case("where", _vars(x=f32(2, 5)), lambda b, x: b.emit("where", [
        b.emit("gt", [x, b.literal(x.type, (0.0,))]), x, b.literal(x.type)]), domain="away_from_zero"))
    for shape, k in (((3, 4), 0), ((2, 3, 3), -1), ((4, 3), 1)):
        cases.append(Case("tril", _vars(x=f32(*shape)), lambda b, x, k=k: b.emit("tril", [x], k=k)))
    # max and min reductions (random inputs have no ties; tests/test_scan_ops.py checks ties)
    for op, axis in (("max", 1), ("min", 0), ("max", 2)):
        cases.append(Case("reduce_keep", _vars(x=f32(2, 3, 4)),
                          lambda b, x, op=op, axis=axis: b.emit("reduce_keep", [x], op=op, axis=axis)))
    cases.append(binary("pow_tensor", (3, 4), domain="positive"))
    for op, shape, axis in (("cumsum", (3, 5), 1), ("cumsum", (4, 2, 3), 0), ("cumprod", (3, 4), 1),
                            ("cumprod", (2, 3, 2), 1), ("logsumexp", (3, 5), 1), ("logsumexp", (2, 3, 4), 0)):
        cases.append(Case(op, _vars(x=f32(*shape)), lambda b, x, op=op, axis=axis: b.emit(op, [x], axis=axis),
                          domain="away_from_zero" if op == "cumprod" else None))
    for descending, axis in (("false", 1), ("true", 0)):
        cases.append(Case("sort", _vars(x=f32(3, 4)),
                          lambda b, x, d=descending, axis=axis: b.emit("sort", [x], axis=axis, descending=d)))
    cases.append(Case("topk", _vars(x=f32(2, 5)), lambda b, x: b.emit("topk", [x], k=3, axis=1)))
    # draws are constants of their key: x * uniform and x + normal (the key is a fixed I64 parameter)
    for op, combine in (("random_uniform", "mul"), ("random_normal", "add")):
        cases.append(Case(op, [ir.Var("k", i64(2)), *_vars(x=f32(3, 4))],
                          lambda b, k, x, op=op, combine=combine: b.emit(combine, [x, b.emit(op, [k], shape=(3, 4))]),
                          {"k": [3, 1234]}))
    return cases


CASES_BY_OP: dict[str, list[Case]] = {}
for _case in build_cases():
    CASES_BY_OP.setdefault(_case.op, []).append(_case)

# Ops with no VJP rule: backward-only ops (IR-internal) and ops with a discrete result
# (iota, argmax), whose lets never receive a cotangent.  Their rows say why
# (tests/test_autodiff.py checks the rejection), so there is nothing to check numerically.
BACKWARD_ONLY = {op for op, row in VJPS.items() if row.rule is None}


# ---- the check ------------------------------------------------------------------------------------
def checked_program(case: Case) -> ir.Program:
    b = Builder("f")
    y = case.body(b, *case.params)
    c = ir.Var("ct", y.type)
    z = b.emit("mul", [y, c], name="z")
    fn = b.function("f", [*case.params, c], z)
    rev, diags = transform_ad(ir.Program({"f": fn}), "f")
    assert not diags, [d.message for d in diags]
    return ir.Program({"f": fn, "f.rev": rev})


def inputs(case: Case, fn: ir.Function, seed: int) -> list[np.ndarray]:
    args = random_inputs(fn, seed)
    rng = np.random.default_rng(seed + 1)
    out = []
    for p, a in zip(fn.params, args):
        if p.name in case.index_values:
            a = np.asarray(case.index_values[p.name], np.bool_ if p.type.dtype is DType.Bool else np.int64)
        elif p.type.is_float:
            a = rng.standard_normal(p.type.shape)
            if case.domain == "positive" and p.name != "ct":
                a = rng.uniform(0.5, 2.0, p.type.shape)
            elif case.domain == "away_from_zero" and p.name != "ct":
                a = np.sign(a) * (0.1 + np.abs(a))
            elif case.domain == "away_from_quarter" and p.name != "ct":
                a = 0.25 + np.sign(a) * (0.1 + np.abs(a))
            elif case.domain == "away_from_bounds" and p.name != "ct":
                a = a + 0.05 * np.sign(a)    # no input within 1e-6 of the bounds -0.5, 0.25, -0.1, 0.75
                a[np.abs(a - np.round(a * 20) / 20) < 1e-3] += 0.01
        out.append(a)
    return out


def assert_vjp_matches_finite_differences(program: ir.Program, args: list[np.ndarray], linear: bool, seed=0):
    fn = program.functions["f"]
    rng = np.random.default_rng(seed)
    grads = run_function(program, "f.rev", args, dtype=np.float64)
    float_params = [i for i, p in enumerate(fn.params) if p.type.is_float]
    assert len(grads) == 1 + len(float_params)
    step = 1.0 if linear else 1e-6
    for i, g in zip(float_params, grads[1:]):
        if fn.params[i].name == "ct":
            continue                      # g_c = op(x): exercised by the mul row itself
        v = rng.standard_normal(args[i].shape)
        plus, minus = list(args), list(args)
        plus[i], minus[i] = args[i] + step * v, args[i] - step * v
        fd = (run_function(program, "f", plus, dtype=np.float64).sum()
              - run_function(program, "f", minus, dtype=np.float64).sum()) / (2 * step)
        assert np.vdot(g, v) == pytest.approx(fd, rel=1e-6, abs=1e-8), f"operand {fn.params[i].name}"


@pytest.mark.parametrize("op", sorted(OPS))
def test_every_vjp_row_is_gradient_checked(op):
    if op in BACKWARD_ONLY:
        assert VJPS[op].unsupported
        return
    assert CASES_BY_OP.get(op), f"no gradient-check case for op {op!r}: add one to build_cases()"
    for n, case in enumerate(CASES_BY_OP[op]):
        program = checked_program(case)
        for seed in (n, n + 100):
            args = inputs(case, program.functions["f"], seed)
            assert_vjp_matches_finite_differences(program, args, OPS[op].linear, seed)


def test_gather_repeated_indices_accumulate():
    """The [3, 1, 3, 3] case: row 3 of g_values is the sum of three cotangent rows."""
    (case,) = [c for c in CASES_BY_OP["gather"] if c.params[1].type.shape == (4,)]
    program = checked_program(case)
    args = inputs(case, program.functions["f"], 0)
    _, g_values, _ = run_function(program, "f.rev", args, dtype=np.float64)
    c = args[2]
    np.testing.assert_allclose(g_values[3], c[0] + c[2] + c[3])
    np.testing.assert_allclose(g_values[1], c[1])
    np.testing.assert_array_equal(g_values[[0, 2, 4]], 0)


# ---- whole programs ---------------------------------------------------------------------------------
def load(path):
    from compiler.analysis import analyze
    snap = analyze(path.read_text())
    assert not snap.diagnostics, snap.diagnostics
    return snap.program


def storylm0_inputs(program, fn_name, seed=0):
    fn = program.functions[fn_name]
    args = random_inputs(fn, seed, program)
    for i, p in enumerate(fn.params):
        if p.name == "mask":       # additive causal mask, as in the real model
            args[i] = np.triu(np.full((4, 4), -1e9), 1).reshape(1, 1, 4, 4).astype(np.float32)
        if p.name == "scale":
            args[i] = np.full((1, 1, 1, 1), 1 / np.sqrt(2), np.float32)
        if p.name == "token_ids":
            args[i] = np.array([[1, 4, 1, 6]])      # a repeated id
    return args


@pytest.mark.parametrize("path,fn_name", [("ok_storylm0_step.kina", "storylm0_fwd"),
                                          ("ok_storylm0_mean_nll.kina", "storylm0_nll")])
def test_storylm0_cotangents_match_finite_differences(path, fn_name):
    program = load(CASES / path)
    rev, diags = transform_ad(program, fn_name)
    assert not diags
    program.functions[rev.name] = rev
    args = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in storylm0_inputs(program, fn_name)]
    outs = run_function(program, rev.name, args, dtype=np.float64)
    float_params = [i for i, p in enumerate(program.functions[fn_name].params) if p.type.is_float]
    rng = np.random.default_rng(1)
    for i, g in zip(float_params, outs[1:]):
        if program.functions[fn_name].params[i].name == "mask":
            continue                       # -1e9 entries: finite differences are meaningless there
        v = rng.standard_normal(args[i].shape)
        plus, minus = list(args), list(args)
        plus[i], minus[i] = args[i] + 1e-6 * v, args[i] - 1e-6 * v
        fd = (run_function(program, fn_name, plus, dtype=np.float64).sum()
              - run_function(program, fn_name, minus, dtype=np.float64).sum()) / 2e-6
        assert np.vdot(g, v) == pytest.approx(fd, rel=1e-5, abs=1e-7), program.functions[fn_name].params[i].name


def test_storylm0_cotangents_match_torch():
    torch = pytest.importorskip("torch")
    program = load(CASES / "ok_storylm0_step.kina")
    rev, _ = transform_ad(program, "storylm0_fwd")
    program.functions[rev.name] = rev
    args = storylm0_inputs(program, "storylm0_fwd", seed=5)
    outs = run_function(program, rev.name, args, dtype=np.float64)
    ids = torch.tensor(args[0])
    t = [torch.tensor(a.astype(np.float64), requires_grad=True) for a in args[1:]]
    emb, mask, scale, wq, wk, wv, wo, lm = t
    x = emb[ids]

    def heads(w, perm):
        return (x @ w.reshape(1, 4, 4)).reshape(1, 4, 2, 2).permute(*perm)
    q, k_t, v = heads(wq, (0, 2, 1, 3)), heads(wk, (0, 2, 3, 1)), heads(wv, (0, 2, 1, 3))
    probs = torch.softmax((q @ k_t) * scale.expand(1, 2, 4, 4) + mask.expand(1, 2, 4, 4), dim=3)
    merged = (probs @ v).permute(0, 2, 1, 3).reshape(1, 4, 4)
    logits = (x + merged @ wo.reshape(1, 4, 4)) @ lm.reshape(1, 4, 8)
    logits.sum().backward()
    np.testing.assert_allclose(outs[0], logits.detach().numpy(), rtol=1e-10)
    for g, leaf in zip(outs[1:], t):
        np.testing.assert_allclose(g, leaf.grad.numpy(), rtol=1e-8, atol=1e-10)
