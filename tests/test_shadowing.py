"""A user function may have the name of a built-in op and then shadows it (docs/language.md
§4): a program written before an op existed keeps compiling, and keeps its meaning, when
the op is added.  Free calls `name(x)` and `handle name(x)` mean the user's function; the
method form `x.name()` always means the op.  The class test runs over every surface op of
the op table, so a new op is covered the day it is added."""
from __future__ import annotations

import numpy as np
import pytest

from compiler import build
from compiler.analysis import analyze
from compiler.ir.ops import SURFACE_OPS
from compiler.oracle import interp
from compiler.runtime import library as runtime


def program_with(name: str) -> str:
    """`name` as a user function (x * x) that no op of that name could stand in for: it is
    called in free form and differentiated by reverseMode (so the result is x^2 + 2x)."""
    return f"""\
fn {name}(x: Tensor[F32, [4]]) -> Tensor[F32, [4]] {{
  let y = x * x in
  y
}}

fn main() -> Tensor[F32, [4]] {{
  let x = Tensor[F32, [4]] {{ 1.0, 2.0, -3.0, 0.5 }} in
  let y = {name}(x) in
  let (r, g) = handle {name}(x) with reverseMode in
  y + g
}}
"""


X = np.array([1.0, 2.0, -3.0, 0.5], np.float32)
WANT = X * X + 2 * X


@pytest.mark.parametrize("name", sorted(SURFACE_OPS))
def test_a_function_named_after_any_op_shadows_it(name):
    snap = analyze(program_with(name))
    errors = [d for d in snap.diagnostics if d.severity == "error"]
    assert not errors, [snap.source.render(d) for d in errors]
    (warning,) = snap.diagnostics
    assert warning.severity == "warning" and warning.code == "shadow"
    assert f"function `{name}` shadows the built-in op `{name}`" in warning.message
    assert snap.source.line_col(warning.span.start) == (1, 4)
    np.testing.assert_array_equal(interp.run_function(snap.program, "main", []), WANT)


def test_the_warning_says_how_to_reach_the_op():
    notes = {name: analyze(program_with(name)).diagnostics[0].notes[0].message for name in ("gelu", "add", "neg", "iota")}
    assert notes["gelu"] == "the op stays reachable as `x.gelu(...)`"
    assert notes["add"] == "the op stays reachable as `a + b` or `x.add(...)`"
    assert notes["neg"] == "the op stays reachable as `-x` or `x.neg(...)`"
    assert "no method form" in notes["iota"]


METHOD_FORM = """\
fn gelu(x: Tensor[F32, [4]]) -> Tensor[F32, [4]] {
  x * 3.0
}

fn exp(x: Tensor[F32, [4]]) -> Tensor[F32, [4]] {
  x + 1.0
}

fn f(x: Tensor[F32, [4]]) -> (Tensor[F32, [4]], Tensor[F32, [4]], Tensor[F32, [4]], Tensor[F32, [4]]) {
  (gelu(x), x.gelu(), exp(x), x.exp())
}
"""


def _gelu(x):
    from math import erf
    return np.array([v * 0.5 * (1 + erf(v / 2 ** 0.5)) for v in x.astype(np.float64)], np.float32)


def test_the_method_form_always_means_the_op():
    snap = analyze(METHOD_FORM)
    assert [d.code for d in snap.diagnostics] == ["shadow", "shadow"]
    mine, op, mine_exp, op_exp = interp.run_function(snap.program, "f", [X])
    np.testing.assert_array_equal(mine, 3 * X)
    np.testing.assert_allclose(op, _gelu(X), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(mine_exp, X + 1)
    np.testing.assert_allclose(op_exp, np.exp(X), rtol=1e-6)


@pytest.mark.parametrize("name", ["gelu", "exp", "add", "concat", "where", "iota", "softmax", "cast", "main_"])
def test_shadowing_functions_build_and_run_compiled(tmp_path, name):
    """A representative subset, built at -O0: unary, infix, variadic, three-operand and
    builder ops (plus a plain name as the control)."""
    path = tmp_path / "prog.kina"
    path.write_text(program_with(name))
    res = build.build_file(path, tmp_path / "prog.so", 0)
    assert res.ok, "\n".join(res.source.render(d) for d in res.diagnostics)
    lib = runtime.load(res.so_path)
    np.testing.assert_array_equal(lib.main(), WANT)


def test_method_form_compiled_means_the_op(tmp_path):
    path = tmp_path / "m.kina"
    path.write_text(METHOD_FORM)
    res = build.build_file(path, tmp_path / "m.so", 0)
    assert res.ok, "\n".join(res.source.render(d) for d in res.diagnostics)
    mine, op, mine_exp, op_exp = runtime.load(res.so_path).f(X)
    np.testing.assert_array_equal(mine, 3 * X)
    np.testing.assert_allclose(op, _gelu(X), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(mine_exp, X + 1)
    np.testing.assert_allclose(op_exp, np.exp(X), rtol=1e-6)
