"""Language conveniences, compiled: scalar constants, negative axes and `_`, built at the
default -O level (the suite runs at -O0 and again at -O2) and compared with NumPy
written independently of the interpreter; plus regressions found on the way."""
from __future__ import annotations

import numpy as np
import pytest

from compiler import build
from compiler.backend import rewrites
from compiler.ir.ops import SURFACE_OPS
from compiler.oracle import interp
from compiler.oracle.interp_random import gumbel
from compiler.runtime import library as runtime


def _build(tmp_path, text: str, name: str = "prog", level: int | None = None):
    path = tmp_path / f"{name}.kina"
    path.write_text(text)
    res = build.build_file(path, tmp_path / f"{name}.so", level)
    assert res.ok, "\n".join(res.source.render(d) for d in res.diagnostics)
    return res, runtime.load(res.so_path)


SCALARS = """\
fn f(x: Tensor[F32, [2, 3]], v: Tensor[F16, [4]]) -> (Tensor[F32, [2, 3]], Tensor[F16, [4]]) {
  let y = (x * 0.5 - 1) / (2.0 + x * x) + 1e-5 in
  let w = 1e-5 + v * -3 in
  (y, w)
}
"""


def test_scalar_constants_type_check_and_run(tmp_path):
    """The issue's acceptance: `x * 0.5` outside a differentiated function checks and runs."""
    res, lib = _build(tmp_path, SCALARS)
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    v = np.array([0.5, -1, 2, 0], np.float16)
    y, w = lib.f(x, v)
    np.testing.assert_allclose(y, (x * 0.5 - 1) / (2 + x * x) + 1e-5, rtol=1e-6)
    np.testing.assert_array_equal(w, (np.float16(1e-5) + v * np.float16(-3)).astype(np.float16))
    want = interp.run_function(res.program, "f", [x, v])
    np.testing.assert_array_equal(y, want[0])


# One use of every op that takes an axis, written with negative axes; the NumPy twin uses
# the same negative axes (NumPy's own normalisation is the reference).
X = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7 - 1
IDX = (np.arange(6).reshape(2, 3, 1) % 4).astype(np.int64)
NEGATIVE_AXES = {
    "slice": ("x.slice(axis=-1, start=1, stop=3)", "[2, 3, 2]", lambda: X[..., 1:3]),
    "concat": ("concat(x, x, axis=-2)", "[2, 6, 4]", lambda: np.concatenate([X, X], axis=-2)),
    "reduce_keep": ("x.reduce_keep(op=max, axis=-2)", "[2, 1, 4]", lambda: X.max(axis=-2, keepdims=True)),
    "softmax": ("x.softmax(axis=-1)", "[2, 3, 4]",
                lambda: np.exp(X) / np.exp(X).sum(axis=-1, keepdims=True)),
    "log_softmax": ("x.log_softmax(axis=-3)", "[2, 3, 4]",
                    lambda: X - np.log(np.exp(X).sum(axis=-3, keepdims=True))),
    "take_along_axis": ("x.take_along_axis(idx, axis=-1)", "[2, 3, 1]",
                        lambda: np.take_along_axis(X, IDX, axis=-1)),
    "transpose": ("x.transpose([-1, 0, -2])", "[4, 2, 3]", lambda: X.transpose(2, 0, 1)),
    "argmax": ("x.argmax(axis=-2)", "[2, 1, 4]", lambda: np.argmax(X, axis=-2)[:, None, :]),
    "iota": ("iota(shape=[2, 3, 4], axis=-1)", "[2, 3, 4]",
             lambda: np.broadcast_to(np.arange(4), (2, 3, 4))),
    "cumsum": ("x.cumsum(axis=-2)", "[2, 3, 4]", lambda: np.cumsum(X, axis=-2)),
    "cumprod": ("x.cumprod(axis=-3)", "[2, 3, 4]", lambda: np.cumprod(X, axis=-3)),
    "logsumexp": ("x.logsumexp(axis=-1)", "[2, 3, 1]", lambda: np.log(np.exp(X).sum(axis=-1, keepdims=True))),
    "sort": ("x.sort(axis=-2, descending=true)", "[2, 3, 4]", lambda: -np.sort(-X, axis=-2)),
    "argsort": ("x.argsort()", "[2, 3, 4]", lambda: np.argsort(X, axis=-1, kind="stable")),
    "topk": ("x.topk(2, axis=-3)", "[2, 3, 4]", lambda: -np.sort(-X, axis=-3)[:2]),
    "argtopk": ("x.argtopk(1)", "[2, 3, 1]", lambda: np.argmax(X, axis=-1)[..., None]),
    # the key [0, 1] from idx; the Gumbel noise of interp_random (JAX's draws, tests/test_random_ops.py)
    "categorical": ("categorical(idx.reshape([6]).slice(axis=0, start=0, stop=2), x, axis=-2)", "[2, 1, 4]",
                    lambda: np.argmax(X + gumbel(np.array([0, 1]), X.shape), axis=-2)[:, None, :]),
}
I64_RESULTS = ("argmax", "iota", "argsort", "argtopk", "categorical")


def test_every_op_that_takes_an_axis_is_covered():
    takes_axis = {n for n, op in SURFACE_OPS.items() if any(a.kind in ("axis", "axes") for a in op.attrs)}
    assert takes_axis == set(NEGATIVE_AXES)


@pytest.fixture(scope="module")
def negative_axes_lib(tmp_path_factory):
    fns = []
    for op, (body, shape, _) in NEGATIVE_AXES.items():
        dtype = "I64" if op in I64_RESULTS else "F32"
        fns.append(f"fn {op}_neg(x: Tensor[F32, [2, 3, 4]], idx: Tensor[I64, [2, 3, 1]]) "
                   f"-> Tensor[{dtype}, {shape}] {{\n  let r = {body} in\n  r\n}}\n")
    return _build(tmp_path_factory.mktemp("axes"), "\n".join(fns), "axes")


@pytest.mark.parametrize("op", sorted(NEGATIVE_AXES))
def test_negative_axes_compile_and_match_numpy(negative_axes_lib, op):
    res, lib = negative_axes_lib
    got = lib[f"{op}_neg"](X, IDX)
    want = NEGATIVE_AXES[op][2]()
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=1e-5, atol=1e-6)
    # the IR holds the normalised axis: later stages never see a negative one
    (node,) = [b.value for b in res.program.functions[f"{op}_neg"].lets]
    for value in node.attrs.values():
        assert not (isinstance(value, int) and value < 0)
        assert not (isinstance(value, tuple) and any(v < 0 for v in value))


WILDCARDS = """\
fn loss(x: Tensor[F32, [3]], w: Tensor[F32, [3]], b: Tensor[F32, [3]]) -> Tensor[F32, [3]] {
  let y = x * w in
  let z = y + b in
  z
}

fn grads(x: Tensor[F32, [3]], w: Tensor[F32, [3]], b: Tensor[F32, [3]]) -> Tensor[F32, [3]] {
  let (_, _, g_w, _) = handle loss(x, w, b) with reverseMode in
  g_w
}
"""


def test_wildcards_bind_nothing_and_compile(tmp_path):
    _, lib = _build(tmp_path, WILDCARDS)
    x = np.array([1, 2, 3], np.float32)
    np.testing.assert_array_equal(lib.grads(x, x, x), x)


# Regression: returning one computed tensor in two result slots crashed mlir-opt at -O0
# and the compiler process itself at -O2 (buffer-results-to-out-params); reverseMode
# returns (R, g, g) for `a + b`, so every differentiated sum of two parameters hit it.
DUPLICATE_RESULTS = """\
fn twice(a: Tensor[F32, [2, 3]]) -> (Tensor[F32, [2, 3]], Tensor[F32, [2, 3]]) {
  let y = a.exp() in
  (y, y)
}

fn f(a: Tensor[F32, [2, 3]], b: Tensor[F32, [2, 3]], c: Tensor[F32, [2, 3]]) -> Tensor[F32, [2, 3]] {
  let y = a + b in
  let z = y * c in
  z
}

fn g(a: Tensor[F32, [2, 3]], b: Tensor[F32, [2, 3]], c: Tensor[F32, [2, 3]])
    -> (Tensor[F32, [2, 3]], Tensor[F32, [2, 3]], Tensor[F32, [2, 3]], Tensor[F32, [2, 3]]) {
  handle f(a, b, c) with reverseMode
}
"""


@pytest.mark.parametrize("level", [0, 2])
def test_a_value_returned_twice_builds_and_runs(tmp_path, level):
    _, lib = _build(tmp_path, DUPLICATE_RESULTS, level=level)
    a = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    y1, y2 = lib.twice(a)
    np.testing.assert_allclose(y1, np.exp(a), rtol=1e-6)
    np.testing.assert_array_equal(y1, y2)
    y1[0, 0] = 99.0                       # two distinct buffers, owned by the caller
    assert y2[0, 0] != 99.0
    z, ga, gb, gc = lib.g(a, a * 2, a * 3)
    np.testing.assert_allclose(ga, a * 3, rtol=1e-6)
    np.testing.assert_array_equal(ga, gb)
    np.testing.assert_allclose(gc, a * 3, rtol=1e-6)



# Regression (generated program c200174, `(v12, v12, v11)` with v12 = v11.reshape([1, 1])):
# values the emitter returns as distinct tensors that folding makes one buffer.  The
# inliner's canonicalisation folds an identity reshape, broadcast or full slice into its
# operand, and -O2's CSE merges two equal lets; buffer-results-to-out-params then saw one
# allocation returned twice: mlir-opt segfaulted (or ran for minutes in a larger module).
FOLDED_TWINS = {
    "same_shape_reshape": ("let z = y.reshape([2, 3]) in", "(z, y)"),
    "same_shape_broadcast": ("let z = y.broadcast([2, 3]) in", "(z, y)"),
    "full_slice": ("let z = y.slice(axis=0, start=0, stop=2) in", "(z, y)"),
    "reshape_round_trip": ("let w = y.reshape([6]) in\n  let z = w.reshape([2, 3]) in", "(z, y)"),
    "equal_lets": ("let z = x.tanh() in", "(z, y)"),
    "three_slots": ("let z = y.reshape([2, 3]) in", "(z, z, y)"),
}


def _twins_source() -> str:
    out = []
    for name, (lets, results) in FOLDED_TWINS.items():
        n = results.count(",") + 1
        ty = ", ".join(["Tensor[F32, [2, 3]]"] * n)
        out.append(f"fn {name}(x: Tensor[F32, [2, 3]]) -> ({ty}) {{\n  let y = x.tanh() in\n  {lets}\n  {results}\n}}\n")
    return "\n".join(out)


@pytest.mark.parametrize("level", [0, 2])
def test_values_that_fold_into_one_buffer_are_still_distinct_results(tmp_path, level):
    _, lib = _build(tmp_path, _twins_source(), level=level)
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    for name in FOLDED_TWINS:
        results = lib[name](x)
        for r in results:
            np.testing.assert_allclose(r, np.tanh(x), rtol=1e-6, err_msg=name)
        results[0][0, 0] = 99.0           # each result is a buffer of its own
        assert all(r[0, 0] != 99.0 for r in results[1:]), name


def test_the_results_slot_copies_only_a_buffer_returned_twice():
    assert rewrites.returns_a_value_twice("  return %alloc, %alloc : memref<2xf32>, memref<2xf32> loc(#l)")
    assert rewrites.returns_a_value_twice("func.return %a, %b, %a : t, t, t")
    assert not rewrites.returns_a_value_twice("    return %alloc_0, %alloc : memref<2xf32>, memref<2xf32>\n"
                                              "    return %x : memref<2xf32>")

# cast between every pair of dtypes it allows: every float target from every dtype, and
# Bool -> I64; compiled against the interpreter (which rounds with NumPy / ml_dtypes).
CAST_SOURCES = {"F32": "x", "F16": "x.cast(dtype=F16)", "BF16": "x.cast(dtype=BF16)",
                "F8E4M3": "x.cast(dtype=F8E4M3)", "F8E5M2": "x.cast(dtype=F8E5M2)",
                "I64": "ids", "Bool": "gt(x, 0.0)",
                "F64": "(x.cast(dtype=F64) / 3.0)"}   # F64 values that F32 does not hold


def test_cast_between_every_pair_of_dtypes(tmp_path):
    from compiler.core.types import FLOAT_DTYPES, DType
    from compiler.ir.shape_rules import castable
    pairs = [(s, d.value) for s in CAST_SOURCES for d in FLOAT_DTYPES] + [("Bool", "I64"), ("I64", "I64"),
                                                                          ("Bool", "Bool")]
    # every cast the checker allows (a same-dtype cast is the identity) is built and run here
    assert set(pairs) == {(s.value, d.value) for s in DType for d in DType if castable(s, d)}
    fns = [f"fn c_{s}_{d}(x: Tensor[F32, [2, 5]], ids: Tensor[I64, [2, 5]]) -> Tensor[{d}, [2, 5]] {{\n"
           f"  {CAST_SOURCES[s]}.cast(dtype={d})\n}}\n" for s, d in pairs]
    res, lib = _build(tmp_path, "\n".join(fns), "casts")
    x = np.array([[-3.7, -1.0, -0.26, 0.0, 0.1], [0.49, 1.5, 2.6, 100.3, 448.0]], np.float32)
    ids = np.array([[-5, 0, 1, 2, 3], [7, 100, 1000, 2049, -77]], np.int64)
    for s, d in pairs:
        got = lib[f"c_{s}_{d}"](x, ids)
        want = interp.run_function(res.program, f"c_{s}_{d}", [x, ids])
        assert got.dtype == want.dtype, (s, d)
        np.testing.assert_array_equal(np.asarray(got, np.float64), np.asarray(want, np.float64), err_msg=f"{s} -> {d}")


SAME_DTYPE_CAST = """\
fn loss(x: Tensor[F32, [2, 3]], h: Tensor[F16, [2, 3]], ids: Tensor[I64, [2, 1]]) -> Tensor[F32, [2, 1]] {
  let y = x.cast(dtype=F32) in
  let hh = h.cast(dtype=F16) in
  let hf = hh.cast(dtype=F32) in
  let z = y * hf in
  let picked = z.take_along_axis(ids.cast(dtype=I64), axis=1) in
  let out = picked.cast(dtype=F32) in
  out
}

fn grads(x: Tensor[F32, [2, 3]], h: Tensor[F16, [2, 3]], ids: Tensor[I64, [2, 1]]) -> (Tensor[F32, [2, 1]], Tensor[F32, [2, 3]], Tensor[F16, [2, 3]]) {
  handle loss(x, h, ids) with reverseMode
}

fn top(x: Tensor[F32, [2, 3]]) -> (Tensor[I64, [2, 1]], Tensor[Bool, [2, 3]]) {
  (x.argmax(axis=1).cast(dtype=I64), gt(x, 0.0).cast(dtype=Bool))
}
"""


def test_a_cast_to_the_same_dtype_is_the_identity_in_every_stage(tmp_path):
    """`ids.cast(dtype=I64)` of an I64 value (argmax's result) and `x.cast(dtype=F32)` of an
    F32 one: checked, differentiated (the cotangent passes unchanged), lowered, and run by
    the interpreter and PyTorch; `kinac validate` passes the cotangents too."""
    from compiler.oracle import torch_ref, validate
    res, lib = _build(tmp_path, SAME_DTYPE_CAST, "same")
    x = np.array([[0.5, -1.0, 2.0], [3.0, -2.0, 1.5]], np.float32)
    h = np.array([[1, 2, 3], [4, 5, 6]], np.float16)
    ids = np.array([[2], [0]], np.int64)
    y, gx, gh = lib.grads(x, h, ids)
    np.testing.assert_array_equal(y, [[6.0], [12.0]])
    np.testing.assert_array_equal(gx, [[0, 0, 3], [4, 0, 0]])
    np.testing.assert_array_equal(gh, np.array([[0, 0, 2], [3, 0, 0]], np.float16))
    amax, pos = lib.top(x)
    np.testing.assert_array_equal(amax, [[2], [0]])
    np.testing.assert_array_equal(pos, x > 0)
    for name, args in (("grads", [x, h, ids]), ("top", [x])):
        for g, w in zip(lib[name](*args), interp.run_function(res.program, name, args)):
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)
        if torch_ref.available():
            for g, w in zip(lib[name](*args), torch_ref.run_function(res.program, name, args)):
                np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=1e-6)
    report = validate.validate_file(tmp_path / "same.kina")
    assert report.ok, validate.format_report(report)
    assert any(c.name.startswith("d/d ") for f in report.functions for c in f.checks)   # a gradient check ran


def test_the_new_ops_together_pass_kinac_validate():
    """tests/ad_cases/ok_new_ops.kina chains every new differentiable op (and skips the
    discrete ones) under reverseMode: compiled results vs the interpreter, compiled
    cotangents vs finite differences, both non-trivial."""
    from pathlib import Path

    from compiler.oracle import validate
    path = Path(__file__).parent / "ad_cases" / "ok_new_ops.kina"
    report = validate.validate_file(path, exhaustive=True)
    assert report.ok, validate.format_report(report)
    grads = [c for f in report.functions for c in f.checks if c.reference == "finite differences"]
    assert {c.name for c in grads} == {"d/d x", "d/d w"}


# Expressions of bare numbers fold to one bare number: computed in float64 (the literals'
# precision), rounded once to the operand's type.  In F16, 1.0 - 1e-3 * 0.01 is 1.0, while
# rounding each literal to F16 and computing there would give 0.9990234.
FOLDED = """\
fn folded(x: Tensor[F16, [4]], y: Tensor[F32, [4]], ids: Tensor[I64, [4]]) -> (Tensor[F16, [4]], Tensor[F32, [4]]) {
  let a = x * (1.0 - 1e-3 * 0.01) in
  let b = y * 0.9.log() + -(2 * 3) / 4 in
  let c = b.maximum(0.5.exp().minimum(sqrt(2.0))) in
  let d = where(ids.eq(2 * 3 - 5), c, 1.0 / 3.0) in
  (a, d.pow(1 + 1))
}
"""


def test_constant_expressions_of_bare_numbers_fold_once_and_agree_everywhere(tmp_path):
    import math

    from compiler.oracle import torch_ref
    res, lib = _build(tmp_path, FOLDED)
    x = np.array([1, -2, 0.5, 1000], np.float16)
    y = np.array([0.25, -3, 4, 10], np.float32)
    ids = np.array([1, 0, 1, 7], np.int64)
    got = lib.folded(x, y, ids)
    c = np.maximum(y * np.float32(math.log(0.9)) + np.float32(-1.5),
                   np.float32(min(math.exp(0.5), math.sqrt(2.0))))
    want = (x * np.float16(1.0 - 1e-3 * 0.01), np.where(ids == 1, c, np.float32(1 / 3)) ** 2)
    assert np.float16(1.0 - 1e-3 * 0.01) == 1.0
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-6)
    for g, r in zip(got, interp.run_function(res.program, "folded", [x, y, ids])):
        np.testing.assert_array_equal(g, r)
    if torch_ref.available():   # a float64 reference: it agrees to the precision of each result
        for g, r, rtol in zip(got, torch_ref.run_function(res.program, "folded", [x, y, ids]), (1e-3, 1e-6)):
            np.testing.assert_allclose(g, r, rtol=rtol)
