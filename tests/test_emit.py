"""MLIR emission: every op lowers to MLIR that mlir-opt verifies and that the host
pipeline (compiler.backend.pipelines.passes_for) takes to LLVM IR; symbols, calls, tuple
results, locations, literals, dtypes and the `emit` diagnostics.

Programs are built by hand as typed IR (tests/emit_support.py), so each test
exercises emission alone; the .kina -> MLIR path is covered by the FileCheck
files in tests/filecheck/ (run below) and by tests/test_goldens.py.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from emit_support import FILECHECK, MLIR_OPT, emit_kina, function, lower_to_llvm, program, run, verify

from compiler.backend.emit.builder import float_literal
from compiler.backend.emit.ops import LOWERINGS
from compiler.backend.emit.program import emit_program
from compiler.core.diagnostics import SourceText, Span
from compiler.core.types import FLOAT_DTYPES, DType, TensorType, TupleType, f32, i64
from compiler.ir import nodes as ir
from compiler.ir import ops

# One tiny instance per op: operand types, attributes, and a construct its lowering must use.
CASES: dict[str, tuple[list[TensorType], dict, str]] = {
    "add": ([f32(2, 3), f32(2, 3)], {}, "arith.addf"),
    "sub": ([f32(2, 3), f32(2, 3)], {}, "arith.subf"),
    "mul": ([f32(2, 3), f32(2, 3)], {}, "arith.mulf"),
    "div": ([f32(2, 3), f32(2, 3)], {}, "arith.divf"),
    "neg": ([f32(2, 3)], {}, "arith.negf"),
    "exp": ([f32(4)], {}, "math.exp"),
    "log": ([f32(4)], {}, "math.log"),
    "tanh": ([f32(4)], {}, "math.tanh"),
    "sqrt": ([f32(4)], {}, "math.sqrt"),
    "rsqrt": ([f32(4)], {}, "math.rsqrt"),
    "sigmoid": ([f32(4)], {}, "math.exp"),
    "relu": ([f32(4)], {}, "arith.maximumf"),
    "relu_grad": ([f32(4), f32(4)], {}, "arith.cmpf ogt"),
    "matmul": ([f32(1, 2, 4, 2), f32(1, 2, 2, 4)], {}, "linalg.batch_matmul"),
    "transpose": ([f32(2, 3, 4)], {"perm": (2, 0, 1)}, "linalg.transpose"),
    "reshape": ([f32(2, 3, 4)], {"shape": (6, 4)}, "tensor.expand_shape"),
    "broadcast": ([f32(1, 3)], {"shape": (2, 4, 3)}, "affine_map<(d0, d1, d2) -> (0, d2)>"),
    "slice": ([f32(2, 8)], {"axis": 1, "start": 2, "stop": 5}, "tensor.extract_slice %a0[0, 2] [2, 3] [1, 1]"),
    "concat": ([f32(1, 4, 2), f32(1, 4, 3)], {"axis": 2}, "tensor.insert_slice"),
    "gather": ([f32(8, 4), i64(1, 4)], {}, '"gather index out of bounds"'),
    "reduce_keep": ([f32(2, 3)], {"op": "mean", "axis": 1}, '"reduction"'),
    "softmax": ([f32(2, 3)], {"axis": 1}, "arith.maximumf"),
    "log_softmax": ([f32(2, 3)], {"axis": 0}, "%kina_log_"),   # FnEmitter.own_log
    "take_along_axis": ([f32(2, 5), i64(2, 1)], {"axis": 1}, '"take_along_axis index out of bounds"'),
    "scatter_add": ([f32(1, 4, 4), i64(1, 4)], {"dest_ty": f32(8, 4)}, '"scatter_add index out of bounds"'),
    "scatter_along_axis": ([f32(2, 1), i64(2, 1)], {"axis": 1, "dest_ty": f32(2, 5)},
                           '"scatter_along_axis index out of bounds"'),
    "maximum": ([f32(2, 3), f32(2, 3)], {}, "arith.maximumf"),
    "minimum": ([f32(2, 3), f32(2, 3)], {}, "arith.minimumf"),
    "abs": ([f32(4)], {}, "math.absf"),
    "sign": ([f32(4)], {}, "arith.cmpf olt"),
    "square": ([f32(4)], {}, "arith.mulf"),
    "erf": ([f32(4)], {}, "arith.divf"),                 # the rational approximation
    "pow": ([f32(4)], {"p": 3.0}, "math.copysign"),      # odd integer exponent: sign of x
    "clamp": ([f32(4)], {"min": 0.0, "max": 6.0}, "arith.minimumf"),
    "gelu": ([f32(4)], {"approximate": "tanh"}, "math.tanh"),
    "cast": ([f32(4)], {"dtype": "BF16"}, "arith.truncf"),
    "iota": ([], {"shape": (2, 3), "axis": 1}, "linalg.index 1"),
    "tril": ([f32(3, 3)], {"k": 0}, "arith.cmpi sle"),
    "argmax": ([f32(2, 5)], {"axis": 1}, "arith.cmpf uno"),
    **{op: ([f32(4), f32(4)], {}, f"arith.cmpf {pred}") for op, pred in
       (("lt", "olt"), ("le", "ole"), ("gt", "ogt"), ("ge", "oge"), ("eq", "oeq"), ("ne", "une"))},
    "where": ([TensorType(DType.Bool, (4,)), f32(4), f32(4)], {}, "arith.select"),
    "maximum_grad": ([f32(4), f32(4), f32(4)], {}, "arith.cmpf oeq"),
    "clamp_grad": ([f32(4), f32(4)], {"min": 0.0, "max": None}, "arith.cmpf oge"),
    "gelu_grad": ([f32(4), f32(4)], {"approximate": "none"}, "math.exp"),
    "pow_tensor": ([f32(4), f32(4)], {}, "math.powf"),
    "cumsum": ([f32(3, 5)], {"axis": 1}, "scf.for"),
    "cumprod": ([f32(3, 5)], {"axis": 0}, "arith.mulf"),
    "logsumexp": ([f32(3, 5)], {"axis": 1}, "math.log"),
    "sort": ([f32(3, 5)], {"axis": 1, "descending": "false"}, "arith.cmpf olt"),
    "argsort": ([f32(3, 5)], {"axis": 1, "descending": "true"}, "arith.cmpf ogt"),
    "topk": ([f32(3, 5)], {"k": 2, "axis": 1}, "arith.cmpi ult"),
    "argtopk": ([f32(3, 5)], {"k": 2, "axis": 0}, "tensor<2x5xi64>"),
    "random_split": ([i64(2)], {"n": 3}, "arith.shrui"),                  # Threefry's rotations
    "random_fold_in": ([i64(2), i64()], {}, "arith.trunci"),
    "random_bits": ([i64(2)], {"shape": (4,)}, "arith.xori"),
    "random_uniform": ([i64(2)], {"shape": (2, 2), "dtype": "F32"}, "arith.uitofp"),
    "random_normal": ([i64(2)], {"shape": (3,), "dtype": "F32"}, "arith.sitofp"),   # log1p: no libm
    "bernoulli": ([i64(2)], {"p": 0.5, "shape": (3,)}, "arith.cmpf olt"),
    "categorical": ([i64(2), f32(2, 4)], {"axis": 1}, "arith.cmpf uno"),
}


def op_program(op: str, types: list[TensorType], attrs: dict, name: str = "f",
               span: Span = ir.NO_SPAN) -> ir.Program:
    """fn f(a0, a1, ..) { let y = op(a0, a1, ..) in y }"""
    result = ops.OPS[op].infer(types, attrs)
    node = ir.OpApp(op, [ir.Var(f"a{i}", t) for i, t in enumerate(types)], attrs, result, span)
    return program(function(name, [(f"a{i}", t) for i, t in enumerate(types)], ir.Var("y", result),
                            [("y", node)]))


def emit_ok(prog: ir.Program, source: SourceText | None = None) -> str:
    res = emit_program(prog, source)
    assert not res.diagnostics, res.diagnostics
    return res.text


# ---- (a) every op: mlir-opt verifies it and the pipeline lowers it to LLVM --------------
def test_lowering_table_matches_op_table():
    assert set(LOWERINGS) == set(ops.OPS)


@pytest.mark.parametrize("op", sorted(ops.OPS))
def test_op_lowers_to_llvm(op):
    assert op in CASES, f"add a CASES row for {op!r} (operand types, attrs, expected construct)"
    types, attrs, construct = CASES[op]
    text = emit_ok(op_program(op, types, attrs))
    assert construct in text
    verify(text)
    lower_to_llvm(text)


@pytest.mark.parametrize("op,types,attrs", [
    ("matmul", [f32(3, 5), f32(5, 2)], {}),                 # rank 2: linalg.matmul
    ("matmul", [f32(2, 3, 5), f32(2, 5, 2)], {}),           # rank 3: linalg.batch_matmul
    ("matmul", [f32(2, 1, 3, 4, 5), f32(2, 1, 3, 5, 2)], {}),  # rank 5: collapse 3 batch dims
    ("reshape", [f32(1, 1)], {"shape": ()}),
    ("reshape", [f32()], {"shape": (1, 1, 1)}),
    ("reshape", [f32(6)], {"shape": (2, 3)}),
    ("reshape", [f32(2, 3)], {"shape": (6,)}),
    ("reshape", [f32(2, 3)], {"shape": (2, 3)}),
    ("broadcast", [f32(2, 1)], {"shape": (2, 5)}),
    ("broadcast", [f32()], {"shape": (3, 2)}),
    ("reduce_keep", [f32(2, 3, 4)], {"op": "max", "axis": 0}),
    ("reduce_keep", [f32(2, 3, 4)], {"op": "sum", "axis": 2}),
    ("reduce_keep", [f32(5)], {"op": "sum", "axis": 0}),
    ("softmax", [f32(4)], {"axis": 0}),
    ("log_softmax", [f32(2, 3, 4)], {"axis": 1}),
    ("scatter_add", [f32(5, 3), i64(5)], {"dest_ty": f32(4, 3)}),        # rank-1 σ: no collapse
    ("scatter_add", [f32(2, 2, 2, 3), i64(2, 2, 2)], {"dest_ty": f32(4, 3)}),
    ("gather", [f32(8, 4), i64()], {}),
    ("take_along_axis", [f32(3, 4, 5), i64(3, 1, 5)], {"axis": 1}),
    ("scatter_along_axis", [f32(3, 1, 5), i64(3, 1, 5)], {"axis": 1, "dest_ty": f32(3, 4, 5)}),
    ("concat", [f32(2, 3), f32(1, 3), f32(4, 3)], {"axis": 0}),
])
def test_shape_variants_lower(op, types, attrs):
    text = emit_ok(op_program(op, types, attrs))
    verify(text)
    lower_to_llvm(text)


def test_matmul_rank_selects_named_op():
    def emitted(a, b):
        return emit_ok(op_program("matmul", [a, b], {}))
    rank2 = emitted(f32(3, 5), f32(5, 2))
    assert "linalg.matmul" in rank2 and "batch_matmul" not in rank2
    rank3 = emitted(f32(2, 3, 5), f32(2, 5, 2))
    assert "linalg.batch_matmul" in rank3 and "collapse_shape" not in rank3
    rank5 = emitted(f32(2, 1, 3, 4, 5), f32(2, 1, 3, 5, 2))
    assert "[[0, 1, 2], [3], [4]] : tensor<2x1x3x4x5xf32> into tensor<6x4x5xf32>" in rank5
    assert "output_shape [2, 1, 3, 4, 2] : tensor<6x4x2xf32> into tensor<2x1x3x4x2xf32>" in rank5


# ---- dtypes --------------------------------------------------------------------------
LOW_PRECISION_OPS = [("mul", 2, {}), ("exp", 1, {}), ("softmax", 1, {"axis": 1}),
                     ("reduce_keep", 1, {"op": "mean", "axis": 0}), ("transpose", 1, {"perm": (1, 0)})]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_every_float_dtype_lowers(dtype):
    """F16/BF16/F8 are stored narrow and computed in f32, F64 in f64 (no f32 anywhere);
    one module per dtype."""
    t = TensorType(dtype, (2, 3))
    fns = []
    for op, arity, attrs in LOW_PRECISION_OPS:
        fns += op_program(op, [t] * arity, attrs, name=op).functions.values()
    mm = op_program("matmul", [TensorType(dtype, (2, 2, 3)), TensorType(dtype, (2, 3, 4))], {}, name="mm")
    sa = op_program("scatter_add", [TensorType(dtype, (2, 3)), i64(2)], {"dest_ty": TensorType(dtype, (4, 3))},
                    name="sa")
    text = emit_ok(program(*fns, *mm.functions.values(), *sa.functions.values()))
    if dtype is DType.F64:
        assert "f32" not in text and "arith.extf" not in text and "arith.truncf" not in text
    elif dtype is not DType.F32:
        assert "arith.extf" in text and "arith.truncf" in text
        assert re.search(r"arith\.(add|mul)f [^:]*: (f16|bf16|f8)", text) is None  # no narrow arithmetic
    verify(text)
    lower_to_llvm(text)


def test_i64_data_movement():
    t = i64(2, 3)
    fns = [*op_program("reshape", [t], {"shape": (3, 2)}, name="r").functions.values(),
           *op_program("broadcast", [i64(1, 3)], {"shape": (4, 3)}, name="b").functions.values(),
           *op_program("slice", [t], {"axis": 1, "start": 1, "stop": 3}, name="s").functions.values(),
           *op_program("concat", [t, t], {"axis": 0}, name="c").functions.values()]
    text = emit_ok(program(*fns))
    assert "xi64>" in text
    lower_to_llvm(text)


# ---- symbols, calls, tuples -------------------------------------------------------------
def two_function_program() -> ir.Program:
    """A public caller of a generated `g.rev` that returns a tuple, destructured."""
    t = f32(2, 2)
    pair = TupleType((t, t))
    rev = ir.Function("g.rev", [ir.Param("x", t)], pair, [],
                      ir.MakeTuple([ir.Var("x", t), ir.OpApp("neg", [ir.Var("x", t)], {}, t)], pair))
    call = ir.CallFn("g.rev", [ir.Var("x", t)], pair)
    step = ir.Function("step", [ir.Param("x", t)], pair,
                       [ir.Binding(["y", "gx"], call, destructure=True)],
                       ir.MakeTuple([ir.Var("gx", t), ir.Var("y", t)], pair))
    return program(rev, step)


def test_symbols_calls_and_tuple_results():
    text = emit_ok(two_function_program())
    assert re.search(r'func\.func private @"kina_g\.rev"\(%x: tensor<2x2xf32>\) -> '
                     r'\(tensor<2x2xf32>, tensor<2x2xf32>\) \{', text)
    assert ('func.func @kina_step(%x: tensor<2x2xf32>) -> (tensor<2x2xf32>, tensor<2x2xf32>) '
            'attributes {llvm.emit_c_interface}') in text
    assert re.search(r'(%\d+):2 = func\.call @"kina_g\.rev"\(%x\)', text)
    assert re.search(r"return %\d+#1, %\d+#0 : tensor<2x2xf32>, tensor<2x2xf32>", text)
    verify(text)
    llvm_ir = lower_to_llvm(text)
    assert "_mlir_ciface_kina_step" in llvm_ir and "_mlir_ciface_kina_g" not in llvm_ir


def test_nested_tuple_results_flatten_in_order():
    t, u = f32(2), f32(3)
    inner = TupleType((u, t))
    outer = TupleType((t, inner))
    res = ir.MakeTuple([ir.Var("a", t), ir.MakeTuple([ir.Var("b", u), ir.Var("a", t)], inner)], outer)
    text = emit_ok(program(function("f", [("a", t), ("b", u)], res)))
    # `a` is returned twice: its second result is a copy, so every result is its own buffer.
    assert ("-> (tensor<2xf32>, tensor<3xf32>, tensor<2xf32>)" in text
            and "%0 = bufferization.alloc_tensor() copy(%a) : tensor<2xf32>" in text
            and "return %a, %b, %0 : tensor<2xf32>, tensor<3xf32>, tensor<2xf32>" in text)
    lower_to_llvm(text)


def test_c_library_names_cannot_clash():
    """A Kina `step` is `kina_step` in MLIR and `_mlir_ciface_kina_step` in C (glibc has `step`)."""
    text = emit_ok(op_program("neg", [f32(2)], {}, name="step"))
    assert "@kina_step(" in text and "@step(" not in text


def test_let_names_become_ssa_names():
    text = emit_ok(op_program("exp", [f32(3)], {}))
    assert re.search(r"%y = linalg\.generic", text) and "return %y" in text


# ---- locations ------------------------------------------------------------------------
def test_ops_carry_kina_locations():
    src = SourceText('fn f(a0: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  let y = a0.exp() in\n  y\n}\n',
                     'dir/we"ird.kina')
    start = src.text.index("a0.exp()")
    text = emit_ok(op_program("exp", [f32(2)], {}, span=Span(start, start + 8)), src)
    # The name in its plain form (a quote is %22: compiler.core.diagnostics.plain_name), so no
    # file name can end the string or the MLIR line; tool errors map it back to the source.
    assert 'math.exp %' in text and 'loc("dir/we%22ird.kina":2:11)' in text
    # mlir-opt reads them as file locations (printed back with debug info).
    r = run([MLIR_OPT, "--mlir-print-debuginfo", "-"], text)
    assert r.returncode == 0, r.stderr
    assert 'loc("dir/we%22ird.kina":2:11)' in r.stdout, r.stdout


# ---- literals -------------------------------------------------------------------------
@pytest.mark.parametrize("value,elem,spelled", [
    (1e-05, "f32", "1.0e-05"), (-1e9, "f32", "-1000000000.0"), (2.0, "f32", "2.0"),
    (float("inf"), "f32", "0x7f800000"), (float("-inf"), "f16", "0xfc00"), (float("nan"), "bf16", "0x7fc0"),
    (float("inf"), "f8E4M3FN", "0x7f"),
])
def test_float_literal_spelling(value, elem, spelled):
    assert float_literal(value, elem) == spelled


def test_literals_verify_and_lower():
    lits = {
        "zeros": ir.Literal((), f32(2, 3)),
        "splat": ir.Literal((0.25,), f32(1, 1)),
        "payload": ir.Literal((1.0, -2.5, 1e-30, -1e9, 3.0, float("-inf")), f32(2, 3)),
        "scalar": ir.Literal((7.0,), f32()),
        "ids": ir.Literal((1, 4, 2, 6), i64(1, 4)),
        "halves": ir.Literal((0.5, 1.5), TensorType(DType.F16, (2,))),
        "f8": ir.Literal((0.5, -1.0), TensorType(DType.F8E4M3, (2,))),
    }
    fns = [function(name, [], lit) for name, lit in lits.items()]
    text = emit_ok(program(*fns))
    assert "dense<[[1.0, -2.5, 1.0e-30], [-1000000000.0, 3.0, 0xff800000]]> : tensor<2x3xf32>" in text
    assert "dense<[[1, 4, 2, 6]]> : tensor<1x4xi64>" in text
    assert "dense<0.0> : tensor<2x3xf32>" in text and "dense<7.0> : tensor<f32>" in text
    lower_to_llvm(text)


# ---- diagnostics ------------------------------------------------------------------------
def test_device_scatter_add_is_an_emit_diagnostic():
    dev = lambda *s, d=DType.F32: TensorType(d, s, "device")  # noqa: E731
    span = Span(10, 20)
    prog = op_program("scatter_add", [dev(1, 4, 4), dev(1, 4, d=DType.I64)], {"dest_ty": dev(8, 4)}, span=span)
    res = emit_program(prog)
    assert res.text == ""
    assert [(d.code, d.message, d.span) for d in res.diagnostics] == [
        ("emit", "scatter_add: checked device lowering is not available", span)]


@pytest.mark.parametrize("op", ["gather", "matmul", "exp"])
def test_device_operands_name_the_op(op):
    types, attrs, _ = CASES[op]
    types = [TensorType(t.dtype, t.shape, "device") for t in types]
    res = emit_program(op_program(op, types, attrs))
    assert [d.message for d in res.diagnostics] == [f"{op}: checked device lowering is not available"]


def test_device_parameter_without_ops():
    t = TensorType(DType.F32, (2,), "device")
    fn = ir.Function("ident", [ir.Param("x", t, Span(9, 10))], t, [], ir.Var("x", t))
    res = emit_program(program(fn))
    assert len(res.diagnostics) == 1
    d = res.diagnostics[0]
    assert d.code == "emit" and d.span == Span(9, 10) and "parameter `x`" in d.message
    assert "checked device lowering is not available" in d.message


def test_unlowered_handle_is_a_diagnostic_not_a_traceback():
    t = f32(2)
    h = ir.Handle("f", [ir.Var("x", t)], "reverseMode", t, Span(3, 8))
    res = emit_program(program(function("g", [("x", t)], h)))
    assert res.text == "" and res.diagnostics[0].code == "emit"
    assert "lower_handles" in res.diagnostics[0].message and res.diagnostics[0].span == Span(3, 8)


def test_one_bad_function_reports_and_others_still_checked():
    dev = TensorType(DType.F32, (2,), "device")
    bad = op_program("exp", [dev], {}, name="bad").functions["bad"]
    also_bad = op_program("neg", [dev], {}, name="worse").functions["worse"]
    res = emit_program(program(bad, also_bad))
    assert [d.message.split(":")[0] for d in res.diagnostics] == ["exp", "neg"]


def test_a_failing_lowering_is_a_located_diagnostic(monkeypatch):
    """A bug in a lowering row (here: reduce_keep meeting a choice REDUCERS has no row for,
    as `min` once was) is an `emit` diagnostic at the op, not a traceback."""
    t = f32(2, 3)
    node = ir.OpApp("reduce_keep", [ir.Var("x", t)], {"op": "prod", "axis": 1}, f32(2, 1), Span(4, 9))
    res = emit_program(program(function("g", [("x", t)], node)))
    [d] = res.diagnostics
    assert res.text == "" and d.code == "emit" and d.span == Span(4, 9)
    assert d.message.startswith("reduce_keep: internal error in its lowering (KeyError: 'prod')")

    def broken(*_args):
        raise RuntimeError("boom")
    monkeypatch.setattr("compiler.backend.emit.program._flat_types", broken)   # outside any op's lowering
    [d] = emit_program(program(function("h", [("x", t)], ir.Var("x", t)))).diagnostics
    assert d.code == "emit" and "internal error while lowering `h` (RuntimeError: boom)" in d.message


# ---- (b) FileCheck: .kina sources with CHECK lines in comments --------------------------
FILECHECK_DIR = Path(__file__).parent / "filecheck"


@pytest.mark.parametrize("path", sorted(FILECHECK_DIR.glob("*.kina")), ids=lambda p: p.stem)
def test_filecheck(path):
    text, diags = emit_kina(path)
    assert text, diags
    r = subprocess.run([FILECHECK, str(path), "--dump-input=fail"], input=text, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-6000:]
    verify(text)


# ---- the bounds check really traps (in a child process: cf.assert aborts its loader) -----
# The runtime checks ids against the manifest's index_bound before calling (tests/
# test_runtime_safety.py); the child drops that bound, as a C caller would, to reach the
# library's own cf.assert, the last line of defence.
OOB_CHILD = '''
import json, sys, numpy as np
from compiler import build, runtime
src = """fn f(emb: Tensor[F32, [8, 4]], ids: Tensor[I64, [3]]) -> Tensor[F32, [3, 4]] {
  let x = gather(emb, ids) in
  x
}
"""
r = build.build_source(src, "oob.kina", sys.argv[1])
assert r.ok, r.diagnostics
manifest = json.loads(runtime.manifest_path(sys.argv[1]).read_text())
assert manifest["functions"][0]["params"][1].pop("index_bound") == 8
lib = runtime.load(sys.argv[1], manifest)
emb = np.arange(32, dtype=np.float32).reshape(8, 4)
print(lib.f(emb, np.array([7, 0, 7], np.int64)).tolist(), flush=True)
lib.f(emb, np.array([1, int(sys.argv[2]), 2], np.int64))
print("not reached", flush=True)
'''


@pytest.mark.parametrize("bad", [8, -1])
def test_gather_out_of_range_aborts_with_message(tmp_path, bad):
    r = subprocess.run([sys.executable, "-c", OOB_CHILD, str(tmp_path / "oob.so"), str(bad)],
                       capture_output=True, text=True, timeout=120)
    assert r.stdout.splitlines()[0] == str([[28.0, 29.0, 30.0, 31.0], [0.0, 1.0, 2.0, 3.0],
                                            [28.0, 29.0, 30.0, 31.0]]), r.stderr
    assert "not reached" not in r.stdout
    # MLIR lowers cf.assert to a puts of the message (on stdout) and abort().
    assert r.returncode != 0 and "gather index out of bounds" in r.stdout + r.stderr
