"""Gradient checks of the *compiled* VJPs against finite differences.

tests/test_gradcheck.py checks every VJP row in the float64 interpreter; this file
builds the same cases (f(xs, c) = op(xs) * c and its generated reverseMode function)
into one library at the default -O level (`make test` runs the suite at -O0 and
again at -O2, so both levels are covered) and checks each compiled F32 cotangent g
JAX style: for random directions v, <g, v> equals the central difference
(sum f(x + h v) - sum f(x - h v)) / 2h of the float64 interpreter, up to the
F32 rounding of the products g_i v_i.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_gradcheck import BACKWARD_ONLY, CASES_BY_OP, Case, inputs

from compiler import build
from compiler.ad.transform import transform_ad
from compiler.backend import toolchain
from compiler.backend.emit import program as emit_mlir
from compiler.ir import nodes as ir
from compiler.ir.ops import OPS
from compiler.oracle import interp, validate
from compiler.runtime import library as runtime

CASES = [(op, n, case) for op in sorted(CASES_BY_OP) for n, case in enumerate(CASES_BY_OP[op])]


def case_program(case: Case, i: int) -> tuple[ir.Function, ir.Function]:
    """f_i(xs, ct) = op(xs) * ct and g_i = its reverseMode function (exportable names)."""
    from compiler.ad.vjp import Builder
    b = Builder("f")
    y = case.body(b, *case.params)
    c = ir.Var("ct", y.type)
    z = b.emit("mul", [y, c], name="z")
    fn = dataclasses.replace(b.function("f", [*case.params, c], z), name=f"f_{i}")
    rev, diags = transform_ad(ir.Program({fn.name: fn}), fn.name)
    assert not diags, [d.message for d in diags]
    return fn, dataclasses.replace(rev, name=f"g_{i}")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    program = ir.Program()
    for i, (_, _, case) in enumerate(CASES):
        fn, rev = case_program(case, i)
        program.functions[fn.name] = fn
        program.functions[rev.name] = rev
    emitted = emit_mlir.emit_program(program)
    assert not emitted.diagnostics, [d.message for d in emitted.diagnostics]
    so = tmp_path_factory.mktemp("gradcheck") / "cases.so"
    res = toolchain.compile_mlir(emitted.text, so, opt_level=build.default_opt_level())
    assert res.ok, [d.message for d in res.diagnostics]
    build.write_artifacts(program, so)
    return program, runtime.load(so)


# Relative tolerance of <g, v> by the narrowest float dtype the case computes in (a cast
# through F16 rounds the cotangent to F16 on the way back).
_RTOL = {"F32": 1e-4, "F16": 2e-3, "BF16": 2e-2}


def _rtol(program: ir.Program, i: int) -> float:
    types = {node.type.dtype.value for name in (f"f_{i}", f"g_{i}") for b in program.functions[name].lets
             for node in ir.walk(b.value) if hasattr(node.type, "dtype") and node.type.is_float}
    return max(_RTOL[d] for d in types | {"F32"})


def test_every_differentiable_op_has_a_case():
    missing = sorted(op for op in OPS if op not in BACKWARD_ONLY and op not in CASES_BY_OP)
    assert not missing, missing


@pytest.mark.parametrize("i", range(len(CASES)), ids=[f"{op}-{n}" for op, n, _ in CASES])
def test_compiled_cotangents_match_finite_differences(compiled, i):
    program, lib = compiled
    op, n, case = CASES[i]
    fn = program.functions[f"f_{i}"]
    args = [a.astype(np.float32) if a.dtype.kind == "f" else a for a in inputs(case, fn, 10 + n)]
    grads = validate._flat(lib[f"g_{i}"](*args))
    float_params = [j for j, p in enumerate(fn.params) if p.type.is_float]
    assert len(grads) == 1 + len(float_params)
    x64 = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in args]
    step = 1.0 if OPS[op].linear else 1e-6
    rng = np.random.default_rng(i)

    def total(xs) -> float:
        return float(np.sum(interp.run_function(program, fn.name, xs, dtype=np.float64)))

    for j, got in zip(float_params, grads[1:]):
        for _ in range(2):
            v = rng.standard_normal(args[j].shape)
            plus, minus = list(x64), list(x64)
            plus[j], minus[j] = x64[j] + step * v, x64[j] - step * v
            fd = (total(plus) - total(minus)) / (2 * step)
            products = np.asarray(got, np.float64) * v
            scale = float(np.abs(products).sum())
            assert abs(products.sum() - fd) <= _rtol(program, i) * scale + 1e-6, \
                f"{op} case {n}, d/d {fn.params[j].name}: <g, v> = {products.sum():.8g}, finite differences {fd:.8g}"
    primal = interp.run_function(program, fn.name, args)
    np.testing.assert_allclose(grads[0], primal, rtol=1e-4, atol=1e-5)
