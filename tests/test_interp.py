"""The NumPy reference interpreter (compiler/oracle/interp.py): op rows, evaluation, dtypes, inputs."""
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from compiler.ad.vjp import Builder
from compiler.analysis import analyze
from compiler.core.types import DType, TensorType, f32
from compiler.ir import nodes as ir
from compiler.ir.ops import OPS
from compiler.oracle.interp import NUMPY_OPS, random_inputs, run_function
from compiler.runtime.library import KinaRuntimeError

CASES = Path(__file__).parent / "ad_cases"


def program_of(text: str) -> ir.Program:
    snap = analyze(text)
    assert not snap.diagnostics, [d.message for d in snap.diagnostics]
    return snap.program


def run_op(op_name: str, args: list, /, **attrs):
    """Evaluate one op through run_function (so typing and dtype handling are exercised too)."""
    b = Builder("f")
    kinds = {"i": DType.I64, "b": DType.Bool}
    params = [ir.Var(f"a{i}", TensorType(kinds.get(np.asarray(a).dtype.kind, DType.F32), np.shape(a)))
              for i, a in enumerate(args)]
    y = b.emit(op_name, params, **attrs)
    return run_function(ir.Program({"f": b.function("f", params, y)}), "f", args, dtype=np.float64)


KEY42 = np.array([0, 42], np.int64)     # jax.random.PRNGKey(42)
JAX42 = {   # jax.random.split(k, 4), fold_in(k, 7), bits(k, (2, 3)), uniform(k, (5,)) as uint32, normal(k, (6,))
    "split": [[1832780943, 270669613], [64467757, 2916123636], [2465931498, 255383827], [3134548294, 894150801]],
    "fold_in": [2547012911, 1371500959],
    "bits": [[2098992034, 2919706841, 2646866425], [2409546199, 1935504149, 2516274904]],
    "uniform": [1056585764, 1059981104, 1058915320, 1057988288, 1055308516],
    "normal": [-0.02830461598932743, 0.4671318531036377, 0.2957029640674591, 0.15354591608047485,
               -0.12403281778097153, 0.21692314743995667],
}

rng = np.random.default_rng(0)
X = rng.standard_normal((2, 3, 4))
A4, B4 = rng.standard_normal((1, 2, 4, 3)), rng.standard_normal((1, 2, 3, 5))

Y = rng.standard_normal((2, 3, 4))
Y[0, 0, :2] = X[0, 0, :2]          # ties for maximum / minimum / maximum_grad


def erf_series(x):
    """erf by its Maclaurin series (independent of math.erf), exact to ~1e-15 for |x| < 3."""
    term, total = x.copy(), x.copy()
    for n in range(1, 80):
        term = term * -x * x / n
        total = total + term / (2 * n + 1)
    return 2 / np.sqrt(np.pi) * total


def _lower(shape, k):
    rows, cols = shape[-2], shape[-1]
    return (np.arange(cols)[None, :] - np.arange(rows)[:, None]) <= k


# op -> (args, attrs, an independent formulation of the expected result)
REFERENCE = {
    **{op: ([X, Y], {}, lambda f=f: np.array([[[f(a, b) for a, b in zip(ra, rb)] for ra, rb in zip(pa, pb)]
                                               for pa, pb in zip(X, Y)]))
       for op, f in {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
                     "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}.items()},
    "where": ([X > Y, X, Y], {}, lambda: np.maximum(X, Y)),
    "maximum": ([X, Y], {}, lambda: np.where(X > Y, X, Y)),
    "minimum": ([X, Y], {}, lambda: np.where(X < Y, X, Y)),
    "abs": ([X], {}, lambda: np.sqrt(X * X)),
    "sign": ([X], {}, lambda: X / np.sqrt(X * X)),
    "square": ([X], {}, lambda: X * X),
    "erf": ([X], {}, lambda: erf_series(X)),
    "pow": ([X], {"p": 3.0}, lambda: X * X * X),
    "pow_tensor": ([np.abs(X) + 1, X], {}, lambda: np.exp(X * np.log(np.abs(X) + 1))),
    "cumsum": ([X], {"axis": 2}, lambda: np.stack([X[..., :k + 1].sum(-1) for k in range(X.shape[2])], -1)),
    "cumprod": ([X], {"axis": 1}, lambda: np.stack([X[:, :k + 1].prod(1) for k in range(X.shape[1])], 1)),
    "logsumexp": ([X], {"axis": 0}, lambda: np.log(np.exp(X).sum(0, keepdims=True))),
    "sort": ([X], {"axis": 2, "descending": "true"}, lambda: -np.sort(-X, axis=2)),
    "argsort": ([X], {"axis": 1, "descending": "false"}, lambda: np.argsort(X, axis=1, kind="mergesort")),
    "topk": ([X], {"k": 2, "axis": 2}, lambda: -np.sort(-X, axis=2)[..., :2]),
    "argtopk": ([X], {"k": 1, "axis": 2}, lambda: np.argmax(X, axis=2)[..., None]),
    # the random ops against values jax.random (0.10.2, CPU) draws from jax.random.PRNGKey(42)
    "random_split": ([KEY42], {"n": 4}, lambda: np.array(JAX42["split"])),
    "random_fold_in": ([KEY42, np.array(7)], {}, lambda: np.array(JAX42["fold_in"])),
    "random_bits": ([KEY42], {"shape": (2, 3)}, lambda: np.array(JAX42["bits"])),
    "random_uniform": ([KEY42], {"shape": (5,)}, lambda: np.array(JAX42["uniform"], np.uint32).view(np.float32)),
    "random_normal": ([KEY42], {"shape": (6,)}, lambda: np.array(JAX42["normal"], np.float32)),
    "bernoulli": ([KEY42], {"p": 0.3, "shape": (10,)}, lambda: np.arange(10) == 6),
    "categorical": ([KEY42, np.arange(20.0).reshape(4, 5) / 3], {"axis": 1}, lambda: np.array([[4], [4], [2], [4]])),
    "clamp": ([X], {"min": -0.5, "max": 0.75}, lambda: np.where(X < -0.5, -0.5, np.where(X > 0.75, 0.75, X))),
    "gelu": ([X], {"approximate": "none"}, lambda: X * 0.5 * (1 + erf_series(X / np.sqrt(2)))),
    "cast": ([X], {"dtype": "F32"}, lambda: X),
    "iota": ([], {"shape": (2, 3, 4), "axis": 1}, lambda: np.indices((2, 3, 4))[1]),
    "tril": ([X], {"k": 0}, lambda: X * _lower(X.shape, 0)),
    "argmax": ([X], {"axis": 2}, lambda: np.argsort(-X, axis=2, kind="stable")[..., :1]),
    "maximum_grad": ([X * 3, X, Y], {}, lambda: np.where(X > Y, X * 3, np.where(X == Y, X * 1.5, 0))),
    "clamp_grad": ([X * 3, X], {"min": -0.5, "max": None}, lambda: X * 3 * (X >= -0.5)),
    "gelu_grad": ([X * 3, X], {"approximate": "none"},
                  lambda: X * 3 * (0.5 * (1 + erf_series(X / np.sqrt(2))) + X * np.exp(-X * X / 2) / np.sqrt(2 * np.pi))),
    "add": ([X, X * 2], {}, lambda: X * 3),
    "sub": ([X, X * 2], {}, lambda: -X),
    "mul": ([X, X], {}, lambda: X ** 2),
    "div": ([X, np.abs(X) + 1], {}, lambda: X * (np.abs(X) + 1) ** -1),
    "neg": ([X], {}, lambda: 0 - X),
    "exp": ([X], {}, lambda: np.e ** X),
    "log": ([np.abs(X) + 1], {}, lambda: np.log1p(np.abs(X))),
    "tanh": ([X], {}, lambda: (np.exp(2 * X) - 1) / (np.exp(2 * X) + 1)),
    "sqrt": ([np.abs(X)], {}, lambda: np.abs(X) ** 0.5),
    "rsqrt": ([np.abs(X) + 1], {}, lambda: (np.abs(X) + 1) ** -0.5),
    "sigmoid": ([X], {}, lambda: np.exp(X) / (1 + np.exp(X))),
    "relu": ([X], {}, lambda: X * (X > 0)),
    "relu_grad": ([X * 3, X], {}, lambda: X * 3 * (X > 0)),
    "matmul": ([A4, B4], {}, lambda: np.einsum("bhmk,bhkn->bhmn", A4, B4)),
    "transpose": ([X], {"perm": (2, 0, 1)}, lambda: np.einsum("abc->cab", X)),
    "reshape": ([X], {"shape": (4, 6)}, lambda: X.ravel().reshape(4, 6)),
    "broadcast": ([X[:, :1]], {"shape": (2, 3, 4)}, lambda: np.repeat(X[:, :1], 3, axis=1)),
    "slice": ([X], {"axis": 2, "start": 1, "stop": 3}, lambda: X[:, :, 1:3]),
    "concat": ([X, X[:, :1]], {"axis": 1}, lambda: np.stack([X[:, 0], X[:, 1], X[:, 2], X[:, 0]], axis=1)),
    "gather": ([X[0], np.array([[2, 0]])], {}, lambda: np.stack([X[0][2], X[0][0]])[None]),
    "reduce_keep": ([X], {"op": "max", "axis": 1}, lambda: np.maximum.reduce(X, axis=1)[:, None]),
    "softmax": ([X], {"axis": 2}, lambda: np.exp(X) / np.exp(X).sum(2, keepdims=True)),
    "log_softmax": ([X], {"axis": 0}, lambda: np.log(np.exp(X) / np.exp(X).sum(0, keepdims=True))),
    "take_along_axis": ([X, np.array([[[3], [0], [3]], [[1], [1], [2]]])], {"axis": 2},
                        lambda: np.array([[[X[0, 0, 3]], [X[0, 1, 0]], [X[0, 2, 3]]],
                                          [[X[1, 0, 1]], [X[1, 1, 1]], [X[1, 2, 2]]]])),
    "scatter_add": ([np.arange(8.0).reshape(1, 4, 2), np.array([[3, 1, 3, 3]])], {"dest_ty": f32(5, 2)},
                    lambda: np.array([[0, 0], [2, 3], [0, 0], [0 + 4 + 6, 1 + 5 + 7], [0, 0]], float)),
    "scatter_along_axis": ([np.array([[1.0, 2.0, 4.0]]), np.array([[2, 0, 2]])], {"axis": 1, "dest_ty": f32(1, 3)},
                           lambda: np.array([[2.0, 0.0, 5.0]])),
}


@pytest.mark.parametrize("op", sorted(OPS))
def test_every_op_row_matches_an_independent_formula(op):
    assert op in NUMPY_OPS, f"interp.NUMPY_OPS has no row for {op!r}"
    assert op in REFERENCE, f"add a reference case for {op!r} to tests/test_interp.py"
    args, attrs, expected = REFERENCE[op]
    np.testing.assert_allclose(run_op(op, args, **attrs), expected(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode,expected", [("sum", X.sum(1, keepdims=True)), ("mean", X.mean(1, keepdims=True))])
def test_reduce_keep_modes(mode, expected):
    np.testing.assert_allclose(run_op("reduce_keep", [X], op=mode, axis=1), expected)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_is_max_subtracted(op):
    big = np.array([[1000.0, 1001.0, 999.0]])
    out = run_op(op, [big], axis=1)
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out, run_op(op, [big - 1000.0], axis=1))


@pytest.mark.parametrize("op,args,attrs,message", [
    ("gather", [np.zeros((3, 2)), np.array([0, 3])], {}, "gather index out of bounds"),
    ("gather", [np.zeros((3, 2)), np.array([-1, 0])], {}, "gather index out of bounds"),
    ("take_along_axis", [np.zeros((2, 3)), np.array([[0], [5]])], {"axis": 1}, "take_along_axis index out of bounds"),
    ("scatter_add", [np.zeros((2, 2)), np.array([0, 4])], {"dest_ty": f32(4, 2)}, "scatter_add index out of bounds"),
    ("scatter_along_axis", [np.zeros((1, 2)), np.array([[0, -2]])], {"axis": 1, "dest_ty": f32(1, 3)},
     "scatter_along_axis index out of bounds"),
])
def test_out_of_range_indices_raise_a_kina_error(op, args, attrs, message):
    with pytest.raises(KinaRuntimeError, match=message):
        run_op(op, args, **attrs)


def test_scatter_along_axis_is_the_adjoint_of_take_along_axis():
    x, u = rng.standard_normal((3, 5)), rng.standard_normal((3, 4))
    idx = rng.integers(0, 5, (3, 4))
    lhs = np.vdot(run_op("take_along_axis", [x, idx], axis=1), u)
    rhs = np.vdot(x, run_op("scatter_along_axis", [u, idx], axis=1, dest_ty=f32(3, 5)))
    assert lhs == pytest.approx(rhs)


# ---- programs ------------------------------------------------------------------------------------
PROGRAM = """
fn pair(a: Tensor[F32, [2, 2]]) -> (Tensor[F32, [2, 2]], Tensor[F32, [2, 2]]) {
  let e = a.exp() in
  (a, e)
}

fn main() -> (Tensor[F32, [2, 2]], Tensor[F32, [2, 2]], Tensor[I64, [2]]) {
  let z = Tensor[F32, [2, 2]] {} in
  let s = Tensor[F32, [2, 2]] { 0.5 } in
  let p = Tensor[F32, [2, 2]] { 1.0, 2.0, 3.0, 4.0 } in
  let ids = Tensor[I64, [2]] { 1, 0 } in
  let (a, e) = pair(p) in
  let sum = z + s in
  (sum, e, ids)
}
"""


def test_literals_calls_destructuring_and_tuples():
    total, e, ids = run_function(program_of(PROGRAM), "main", [])
    np.testing.assert_array_equal(total, np.full((2, 2), 0.5, np.float32))
    np.testing.assert_allclose(e, np.exp(np.array([[1, 2], [3, 4]], np.float32)), rtol=1e-6)
    assert e.dtype == np.float32 and ids.dtype == np.int64 and list(ids) == [1, 0]


# F8E4M3 is OCP E4M3FN (max 448, no inf), as in the compiled library; not IEEE float8_e4m3.
@pytest.mark.parametrize("dtype,np_dtype", [("F16", np.float16), ("BF16", ml_dtypes.bfloat16),
                                            ("F8E4M3", ml_dtypes.float8_e4m3fn),
                                            ("F8E5M2", ml_dtypes.float8_e5m2), ("F32", np.float32)])
def test_declared_dtype_storage_and_float64_override(dtype, np_dtype):
    text = f"fn f(a: Tensor[{dtype}, [3]]) -> Tensor[{dtype}, [3]] {{ let y = a * a in y }}"
    program = program_of(text)
    x = np.array([0.5, 1.5, 3.0])
    out = run_function(program, "f", [x])
    assert out.dtype == np.dtype(np_dtype)
    stored = x.astype(np_dtype).astype(np.float32)        # computed in f32, rounded once per op
    np.testing.assert_array_equal(out.astype(np.float64), (stored * stored).astype(np_dtype).astype(np.float64))
    wide = run_function(program, "f", [x], dtype=np.float64)
    assert wide.dtype == np.float64 and np.array_equal(wide, x * x)


def test_bad_arguments_raise_kina_errors():
    program = program_of("fn f(a: Tensor[F32, [3]], i: Tensor[I64, [2]]) -> Tensor[F32, [3]] { a }")
    with pytest.raises(KinaRuntimeError, match="expected Tensor"):
        run_function(program, "f", [np.zeros(4), np.zeros(2, np.int64)])
    with pytest.raises(KinaRuntimeError, match="integer indices"):
        run_function(program, "f", [np.zeros(3), np.zeros(2)])
    with pytest.raises(KinaRuntimeError, match="takes 2 arguments"):
        run_function(program, "f", [np.zeros(3)])
    with pytest.raises(KinaRuntimeError, match="no function"):
        run_function(program, "g", [])


def test_handles_with_ad_errors_are_reported_not_raised_as_tracebacks():
    program = analyze((CASES / "reduce_mean.kina").read_text()).program   # checked, but not differentiable
    with pytest.raises(KinaRuntimeError, match=r"\[ad-unsupported\] reduce_keep\(op=mean\)"):
        run_function(program, "step", [np.zeros((2, 3))])


# ---- random_inputs ----------------------------------------------------------------------------------
INDEXED = """
fn pick(x: Tensor[F32, [2, 6]], j: Tensor[I64, [2, 1]]) -> Tensor[F32, [2, 1]] {
  let y = x.take_along_axis(j, axis=1) in
  y
}

fn f(emb: Tensor[F32, [3, 2]], ids: Tensor[I64, [1, 4]], k: Tensor[I64, [2, 1]], x: Tensor[F32, [2, 6]],
     t: Tensor[I64, [8]], pos: Tensor[F32, [5]]) -> Tensor[F32, [2, 1]] {
  let e = gather(emb, ids.reshape([4])) in
  let flat = t.reshape([2, 4]) in
  let e2 = gather(emb, flat) in
  let l = pos.log() in
  let p = pick(x, k) in
  p
}
"""


def test_random_inputs_respect_index_bounds_and_domains():
    program = program_of(INDEXED)
    fn = program.functions["f"]
    for seed in range(5):
        emb, ids, k, x, t, pos = random_inputs(fn, seed, program)
        assert ids.dtype == np.int64 and ids.min() >= 0 and ids.max() < 3      # through a nested reshape
        assert t.max() < 3                                                      # through a let-bound reshape
        assert k.max() < 6                                                      # take_along_axis in a callee
        assert pos.min() > 0 and emb.dtype == np.float32
    again = random_inputs(fn, 4, program)
    assert all(np.array_equal(a, b) for a, b in zip(again, random_inputs(fn, 4, program)))
    assert not np.array_equal(random_inputs(fn, 1, program)[0], random_inputs(fn, 2, program)[0])
    run_function(program, "f", random_inputs(fn, 0, program))


def test_storylm0_forward_matches_a_direct_numpy_model():
    program = program_of((CASES / "ok_storylm0_step.kina").read_text())
    args = random_inputs(program.functions["storylm0_fwd"], 11, program)
    ids, emb, mask, scale, wq, wk, wv, wo, lm = args
    x = emb[ids[0]]                                                   # [4, 4]
    q, k, v = (np.split(x @ w, 2, axis=1) for w in (wq, wk, wv))     # per head [4, 2]
    heads = []
    for h in range(2):
        s = q[h] @ k[h].T * scale[0, 0, 0, 0] + mask[0, 0]
        p = np.exp(s - s.max(1, keepdims=True))
        heads.append(p / p.sum(1, keepdims=True) @ v[h])
    expected = ((x + np.concatenate(heads, axis=1) @ wo) @ lm)[None]
    np.testing.assert_allclose(run_function(program, "storylm0_fwd", args), expected, rtol=1e-4, atol=1e-5)


def test_generated_functions_are_lowered_too():
    """f's skipped let holds a handle: f.rev keeps it, and lowering reaches it."""
    program = program_of((CASES / "skipped_lets.kina").read_text())
    a = np.arange(6, dtype=np.float32).reshape(2, 3) / 6
    g = run_function(program, "step", [a, np.array([[0, 1]])])
    np.testing.assert_allclose(g, np.exp(a), rtol=1e-6)


@pytest.mark.parametrize("op,attrs", [("erf", {}), ("gelu", {"approximate": "none"}),
                                      ("gelu", {"approximate": "tanh"})])
def test_erf_and_gelu_of_a_rank0_tensor(op, attrs):
    """Regression: NumPy's frompyfunc returns a Python float for a rank-0 input, and the erf
    row called .astype on it (`x.gelu()` of a Tensor[F32, []] failed in the interpreter)."""
    import math
    out = run_op(op, [np.array(0.7)], **attrs)
    assert out.shape == ()
    want = {"erf": math.erf(0.7), "gelu": 0.35 * (1 + math.erf(0.7 / math.sqrt(2)))}[op]
    np.testing.assert_allclose(out, want, rtol=1e-3 if attrs.get("approximate") == "tanh" else 1e-12)


def test_a_failing_numpy_row_is_a_kina_error_naming_the_op():
    """reduce_keep meeting a choice its NumPy row lacks (as `min` once was)
    is a KinaRuntimeError that `kinac run` prints, not a KeyError traceback."""
    import pytest

    from compiler.core.types import f32
    from compiler.ir import nodes as ir
    from compiler.oracle import interp
    t = f32(2, 3)
    node = ir.OpApp("reduce_keep", [ir.Var("x", t)], {"op": "prod", "axis": 1}, f32(2, 1))
    fn = ir.Function("g", [ir.Param("x", t)], node.type, [], node)
    with pytest.raises(KinaRuntimeError, match=r"reduce_keep: internal error in its NumPy reference \(KeyError"):
        interp.run_function(ir.Program({"g": fn}), "g", [np.zeros((2, 3), np.float32)])


def test_sigmoid_of_a_large_negative_value_is_zero_without_a_warning():
    """exp(-x) overflows below x = -709 in f64 and 1 / inf is the right answer: the
    interpreter (every `kinac run` and validation) printed a RuntimeWarning for it."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = NUMPY_OPS["sigmoid"]([np.array([-1000.0, 0.0, 1000.0])], {}, None)
    np.testing.assert_array_equal(out, [0.0, 0.5, 1.0])
