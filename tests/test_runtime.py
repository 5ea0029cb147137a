"""Runtime: argument checks, out= buffers, manifest/header content, flat memory over many calls."""
import json

import numpy as np
import pytest

from compiler import build, ir, runtime, toolchain
from compiler.types import TupleType, f32, i64

# row sums of a [2, 3] matrix plus a copy of an I64 vector: two inputs of different dtypes,
# two outputs.
MLIR = """
#in = affine_map<(d0, d1) -> (d0, d1)>
#out = affine_map<(d0, d1) -> (d0)>
#id = affine_map<(d0) -> (d0)>
func.func @kina_rows(%a: tensor<2x3xf32>, %n: tensor<2xi64>) -> (tensor<2xf32>, tensor<2xi64>) attributes {llvm.emit_c_interface} {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<2xf32>) -> tensor<2xf32>
  %r = linalg.generic {indexing_maps = [#in, #out], iterator_types = ["parallel", "reduction"]} ins(%a : tensor<2x3xf32>) outs(%f : tensor<2xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %s = arith.addf %x, %acc : f32
    linalg.yield %s : f32
  } -> tensor<2xf32>
  %ei = tensor.empty() : tensor<2xi64>
  %c = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%n : tensor<2xi64>) outs(%ei : tensor<2xi64>) {
  ^bb0(%x: i64, %o: i64):
    linalg.yield %x : i64
  } -> tensor<2xi64>
  return %r, %c : tensor<2xf32>, tensor<2xi64>
}
"""
PROGRAM = ir.Program({"rows": ir.Function("rows", [ir.Param("a", f32(2, 3)), ir.Param("n", i64(2))],
                                           TupleType((f32(2), i64(2))), [], None)})


@pytest.fixture(scope="module")
def lib_path(tmp_path_factory):
    so = tmp_path_factory.mktemp("rt") / "rows.so"
    assert toolchain.compile_mlir(MLIR, so).ok
    build.write_artifacts(PROGRAM, so, "rows.kina")
    return so


@pytest.fixture(scope="module")
def lib(lib_path):
    return runtime.load(lib_path)


A = np.arange(6, dtype=np.float32).reshape(2, 3)
N = np.array([7, -3], dtype=np.int64)


def test_manifest_content(lib_path):
    m = json.loads(lib_path.with_suffix(".json").read_text())
    assert m["library"] == "rows.so" and m["source"] == "rows.kina"
    assert m["functions"] == [{
        "name": "rows", "symbol": "_mlir_ciface_kina_rows",
        "params": [{"name": "a", "dtype": "F32", "shape": [2, 3]}, {"name": "n", "dtype": "I64", "shape": [2]}],
        "results": [{"dtype": "F32", "shape": [2]}, {"dtype": "I64", "shape": [2]}]}]


def test_header_content(lib_path):
    h = lib_path.with_suffix(".h").read_text()
    assert "typedef struct { float *allocated; float *aligned; int64_t offset; int64_t sizes[2]; " \
           "int64_t strides[2]; } kina_memref_f32_2d;" in h
    assert ("void _mlir_ciface_kina_rows(kina_memref_f32_2d *a, kina_memref_i64_1d *n, "
            "kina_memref_f32_1d *out0, kina_memref_i64_1d *out1);") in h
    assert h.count("#ifndef KINA_ROWS_H") == 1


def test_call_returns_fresh_arrays(lib):
    s1, c1 = lib.rows(A, N)
    s2, _ = lib["rows"](A, N)
    np.testing.assert_allclose(s1, A.sum(axis=1))
    np.testing.assert_array_equal(c1, N)
    assert s1 is not s2 and not np.shares_memory(s1, s2)


def test_out_buffers_are_reused(lib):
    out = (np.zeros(2, np.float32), np.zeros(2, np.int64))
    res = lib.rows(A, N, out=out)
    assert res[0] is out[0] and res[1] is out[1]
    np.testing.assert_allclose(out[0], [3.0, 12.0])


def test_non_contiguous_and_list_inputs_are_accepted(lib):
    at = np.asfortranarray(A)
    s, _ = lib.rows(at, [1, 2])
    np.testing.assert_allclose(s, A.sum(axis=1))


@pytest.mark.parametrize("args,pattern", [
    ((A.astype(np.float64), N), r"rows: parameter `a` expects Tensor\[F32, \[2, 3\]\].*got an array of dtype float64"),
    ((A.reshape(3, 2), N), r"parameter `a`.*shape \[2, 3\].*got an array of dtype float32 and shape \[3, 2\]"),
    ((A, N.astype(np.int32)), r"parameter `n` expects Tensor\[I64, \[2\]\]"),
    ((A,), r"rows takes 2 argument\(s\) \(a, n\), got 1"),
])
def test_argument_errors_name_the_parameter(lib, args, pattern):
    with pytest.raises(runtime.KinaArgumentError, match=pattern):
        lib.rows(*args)


def test_bad_out_and_unknown_function(lib):
    with pytest.raises(runtime.KinaArgumentError, match="out= needs 2 array"):
        lib.rows(A, N, out=np.zeros(2, np.float32))
    with pytest.raises(runtime.KinaArgumentError, match="result 1"):
        lib.rows(A, N, out=(np.zeros(2, np.float32), np.zeros(3, np.int64)))
    with pytest.raises(AttributeError, match="has no function `nope`.*rows"):
        lib.nope


def test_missing_manifest_is_clear(tmp_path, lib_path):
    so = tmp_path / "lonely.so"
    so.write_bytes(lib_path.read_bytes())
    with pytest.raises(runtime.KinaRuntimeError, match="no manifest"):
        runtime.load(so)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_100k_calls_keep_memory_flat(lib):
    fn = lib.rows
    for _ in range(1000):   # warm up allocator pools
        fn(A, N)
    before = _rss_bytes()
    for _ in range(100_000):
        fn(A, N)
    growth = _rss_bytes() - before
    assert growth < 4 * 2**20, f"RSS grew by {growth / 2**20:.1f} MB over 100,000 calls"
