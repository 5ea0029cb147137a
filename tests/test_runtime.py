"""Runtime: argument checks, out= buffers, manifest/header content, flat memory over many calls,
no retention of passed arrays, in-place changes caught, concurrent calls."""
import json
import warnings
import weakref
from concurrent.futures import ThreadPoolExecutor

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


# ---- remembered argument sets: no retention, every call checked, thread-safe ----------
BIG = (512, 256)   # 512 KB of float32
BIG_SOURCE = f"fn twice(x: Tensor[F32, [{BIG[0]}, {BIG[1]}]]) -> Tensor[F32, [{BIG[0]}, {BIG[1]}]] {{\n  x + x\n}}\n"


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    d = tmp_path_factory.mktemp("big")
    (d / "big.kina").write_text(BIG_SOURCE)
    res = build.build_file(d / "big.kina", d / "big.so")
    assert res.ok
    return runtime.load(res.so_path).twice


def test_rebinding_loop_keeps_rss_flat_and_holds_no_array(big):
    """A training loop that rebinds its weights to a new array every step (w = w - lr * g)."""
    w, out = np.ones(BIG, np.float32), np.empty(BIG, np.float32)
    for _ in range(20):   # warm up allocator pools
        w = w * np.float32(1.0)
        big(w, out=out), big(w)
    first = weakref.ref(w)
    before = _rss_bytes()
    for step in range(1000):
        w = w - np.float32(1e-3) * out     # a new array every step; the old one is dropped
        big(w, out=out)
        fresh = big(w)
    growth = _rss_bytes() - before
    assert first() is None, "the runtime kept an array it was passed"
    np.testing.assert_array_equal(fresh, out)
    assert growth < 8 * 2**20, f"RSS grew by {growth / 2**20:.1f} MB over 1,000 rebinding calls"
    assert len(big._memo) <= 1 and len(big._input_sets) <= 1   # only the sets of live arrays


def test_dropped_arrays_are_dead_right_after_the_call(lib):
    a, n = A.copy(), N.copy()
    out = (np.empty(2, np.float32), np.empty(2, np.int64))
    refs = [weakref.ref(x) for x in (a, n, *out)]
    lib.rows(a, n, out=out)
    lib.rows(a, n)
    del a, n, out
    assert [r() for r in refs] == [None] * 4


def test_shape_dtype_and_flags_reassigned_in_place_are_caught(lib):
    a, n = A.copy(), N.copy()
    out = (np.empty(2, np.float32), np.empty(2, np.int64))
    lib.rows(a, n, out=out), lib.rows(a, n)          # both argument sets remembered
    a.shape = (3, 2)
    with pytest.raises(runtime.KinaArgumentError, match=r"parameter `a`.*shape \[3, 2\]"):
        lib.rows(a, n, out=out)
    with pytest.raises(runtime.KinaArgumentError, match=r"parameter `a`.*shape \[3, 2\]"):
        lib.rows(a, n)
    a.shape = (2, 3)
    lib.rows(a, n, out=out)
    n.dtype = np.float64                              # same itemsize, same shape
    with pytest.raises(runtime.KinaArgumentError, match="parameter `n`.*dtype float64"):
        lib.rows(a, n, out=out)
    n.dtype = np.int64
    out[1].flags.writeable = False
    with pytest.raises(runtime.KinaArgumentError, match="result 1 must be a writeable"):
        lib.rows(a, n, out=out)


def test_strides_reassigned_in_place_are_honoured(lib):
    a = np.zeros(6, np.float32)
    a[:] = np.arange(6)
    a = a.reshape(2, 3)
    sums = np.empty(2, np.float32)
    lib.rows(a, N, out=(sums, np.empty(2, np.int64)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)   # NumPy 2.4 deprecates setting strides
        a.strides = (4, 8)                                      # now [[0, 2, 4], [1, 3, 5]]
    lib.rows(a, N, out=(sums, np.empty(2, np.int64)))
    np.testing.assert_allclose(sums, [6.0, 9.0])               # read through a C-contiguous copy


def test_concurrent_calls_get_their_own_results(lib):
    def worker(k: int) -> bool:
        a = np.full((2, 3), float(k), np.float32)
        n = np.array([k, -k], np.int64)
        out = (np.empty(2, np.float32), np.empty(2, np.int64))
        ok = True
        for _ in range(300):
            s, c = lib.rows(a, n)
            lib.rows(a, n, out=out)
            shared, _ = lib.rows(A, N)                          # same inputs in every thread
            ok &= bool(np.all(s == 3 * k) and np.all(c == n) and np.all(out[0] == 3 * k)
                       and np.all(shared == A.sum(axis=1)))
        return ok
    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(worker, range(1, 9)))


def test_out_must_be_arrays(lib):
    with pytest.raises(runtime.KinaArgumentError, match="out= takes an array or a sequence"):
        lib.rows(A, N, out=3)
    with pytest.raises(runtime.KinaArgumentError, match="result 0 must be a NumPy array"):
        lib.rows(A, N, out=([0.0, 0.0], np.empty(2, np.int64)))


def test_fresh_call_while_its_input_set_is_busy(lib):
    """Another thread holding the shared set: the call binds a private copy instead of waiting."""
    lib.rows(A, N)
    argset = lib.rows._input_sets[tuple(map(id, (A, N)))]
    with argset.lock:
        s, c = lib.rows(A, N)
    np.testing.assert_allclose(s, A.sum(axis=1))
    np.testing.assert_array_equal(c, N)
