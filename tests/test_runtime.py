"""Runtime: argument checks, out= buffers, manifest/header content, flat memory over many calls,
no retention of passed arrays, in-place changes caught, concurrent calls; every call test runs
through both paths (the C helper compiler.runtime._fastcall, and the pure-Python checks + ctypes), which
must agree; plus the C helper's own contract (mismatch index, nothing called on a mismatch)."""
import ctypes
import json
import sys
import warnings
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from compiler import build
from compiler.backend import toolchain
from compiler.core.types import TupleType, f32, i64
from compiler.ir import nodes as ir
from compiler.runtime import arrays
from compiler.runtime import library as runtime

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

# Both call paths: the C helper, and the Python checks + ctypes (as without the extension).
PATHS = [pytest.param(True, id="C"), pytest.param(False, id="python")]


@pytest.fixture(scope="module")
def lib_path(tmp_path_factory):
    so = tmp_path_factory.mktemp("rt") / "rows.so"
    assert toolchain.compile_mlir(MLIR, so).ok
    build.write_artifacts(PROGRAM, so, "rows.kina")
    return so


@pytest.fixture(scope="module", params=PATHS)
def lib(lib_path, request):
    return runtime.load(lib_path, fastcall=request.param)


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
    assert ("int32_t _kina_checked_kina_rows(kina_memref_f32_2d *a, kina_memref_i64_1d *n, "
            "kina_memref_f32_1d *out0, kina_memref_i64_1d *out1);") in h
    assert "#define KINA_INDEX_ERROR 1" in h and "const char *_kina_last_error(void);" in h
    assert h.count("#ifndef KINA_ROWS_H") == 1


def test_the_c_helper_is_built_and_current(lib_path):
    """`pip install -e .` builds compiler/runtime/_fastcall.c; a stale build would run old checks."""
    assert runtime.FASTCALL_AVAILABLE, "compiler.runtime._fastcall is not built: run `pip install -e .`"
    from compiler.runtime import _fastcall
    here = Path(runtime.__file__).parent
    sources = [here / "_fastcall.c", *here.glob("_*.h")]     # (setup.py: the source and its depends)
    assert len(sources) >= 4
    for source in sources:
        name = source.name
        assert Path(_fastcall.__file__).stat().st_mtime >= source.stat().st_mtime, \
            f"compiler/runtime/{name} is newer than its build: run `pip install -e .`"
    assert runtime.load(lib_path).rows.uses_fastcall
    assert not runtime.load(lib_path, fastcall=False).rows.uses_fastcall


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
    res = lib.rows(A, N, out=list(out))                       # any sequence of arrays
    assert res[0] is out[0] and res[1] is out[1]


def test_new_contents_of_the_same_arrays_are_seen(lib):
    a, out = A.copy(), (np.empty(2, np.float32), np.empty(2, np.int64))
    lib.rows(a, N, out=out)
    a[:] = 5.0
    lib.rows(a, N, out=out)
    np.testing.assert_allclose(out[0], [15.0, 15.0])


def test_non_contiguous_unaligned_and_list_inputs_are_copied(lib):
    at = np.asfortranarray(A)
    s, _ = lib.rows(at, [1, 2])
    np.testing.assert_allclose(s, A.sum(axis=1))
    raw = np.zeros(4 * 6 + 1, np.uint8)
    unaligned = raw[1:].view(np.float32).reshape(2, 3)        # float32 data at an odd address
    unaligned[:] = A
    assert not unaligned.flags.aligned
    s, _ = lib.rows(unaligned, N)
    np.testing.assert_allclose(s, A.sum(axis=1))


@pytest.mark.parametrize("args,pattern", [
    ((A.astype(np.float64), N), r"rows: parameter `a` expects Tensor\[F32, \[2, 3\]\].*got an array of dtype float64"),
    ((A.reshape(3, 2), N), r"parameter `a`.*shape \[2, 3\].*got an array of dtype float32 and shape \[3, 2\]"),
    ((A, N.astype(np.int32)), r"parameter `n` expects Tensor\[I64, \[2\]\]"),
    ((A, N.astype(">i8")), r"parameter `n` expects Tensor\[I64, \[2\]\].*dtype >i8"),
    ((A,), r"rows takes 2 argument\(s\) \(a, n\), got 1"),
    ((A, N, N), r"rows takes 2 argument\(s\) \(a, n\), got 3"),
    ((A, "seven"), r"parameter `n` expects Tensor\[I64, \[2\]\], got str 'seven'"),
    ((A, [1.0, 2.0]), r"parameter `n` expects Tensor\[I64, \[2\]\], got list holding float values "
                      r"\(no conversion of floats to I64"),
    ((A, [1.7, 2]), r"parameter `n`.*got list holding float values"),
    ((A, np.float64(2.0)), r"parameter `n`.*got float64 holding float values"),
    ((A, np.ones(2, np.float32).tolist()), r"parameter `n`.*got list holding float values"),
    ((A, memoryview(np.ones(2))), r"parameter `n`.*got memoryview \(NumPy dtype float64\)"),
    ((A, [True, False]), r"parameter `n`.*got list holding bool values"),
    (([[0, 1, None], [3, 4, 5]], N), r"parameter `a` expects Tensor\[F32, \[2, 3\]\], got list holding "
                                    r"Python object values"),
    ((None, N), r"parameter `a` expects Tensor\[F32, \[2, 3\]\], got None"),
    (([["0", "1", "2"], ["3", "4", "5"]], N), r"parameter `a`.*got list holding str values"),
    ((A, ["2", "3"]), r"parameter `n`.*got list holding str values"),
    ((A, [2**63, 2**63]), r"parameter `n`.*beyond the I64 range"),
    ((A, [[1, 2], [3]]), r"parameter `n`.*got list that does not convert"),
])
def test_argument_errors_name_the_parameter(lib, args, pattern):
    """Strict conversions: no float -> I64 truncation, no None -> NaN, no str -> number."""
    outs = (np.full(2, -1.0, np.float32), np.full(2, -1, np.int64))
    with pytest.raises(runtime.KinaArgumentError, match=pattern):
        lib.rows(*args)
    with pytest.raises(runtime.KinaArgumentError, match=pattern):
        lib.rows(*args, out=outs)
    assert np.all(outs[0] == -1.0) and np.all(outs[1] == -1), "called despite a bad argument"


def test_numbers_and_lists_of_numbers_convert_without_loss_of_kind(lib):
    s, c = lib.rows([[0, 1, 2], [3, 4, 5]], [7, -3])          # ints for F32 and I64
    np.testing.assert_allclose(s, [3.0, 12.0])
    np.testing.assert_array_equal(c, N)
    s, _ = lib.rows([[0.5, 1, 2], [3, 4, 5]], (np.int64(7), 1))  # floats for F32, a tuple
    np.testing.assert_allclose(s, [3.5, 12.0])


def test_bad_out_and_unknown_function(lib):
    with pytest.raises(runtime.KinaArgumentError, match="out= needs 2 array"):
        lib.rows(A, N, out=np.zeros(2, np.float32))
    with pytest.raises(runtime.KinaArgumentError, match="result 1"):
        lib.rows(A, N, out=(np.zeros(2, np.float32), np.zeros(3, np.int64)))
    with pytest.raises(runtime.KinaArgumentError, match="result 0 must be a writeable, aligned, C-contiguous"):
        lib.rows(A, N, out=(np.zeros(4, np.float32)[::2], np.zeros(2, np.int64)))
    with pytest.raises(KeyError, match="has no function `nope`.*rows"):
        _ = lib["nope"]
    with pytest.raises(AttributeError, match="has no function `nope`.*rows"):
        _ = lib.nope


def test_out_must_be_arrays(lib):
    with pytest.raises(runtime.KinaArgumentError, match="out= takes an array or a sequence"):
        lib.rows(A, N, out=3)
    with pytest.raises(runtime.KinaArgumentError, match="result 0 must be a NumPy array"):
        lib.rows(A, N, out=([0.0, 0.0], np.empty(2, np.int64)))
    with pytest.raises(runtime.KinaArgumentError, match="result 0 must be a NumPy array"):
        lib.rows(A, N, out=(memoryview(np.zeros(2, np.float32)), np.empty(2, np.int64)))


def test_missing_manifest_is_clear(tmp_path, lib_path):
    so = tmp_path / "lonely.so"
    so.write_bytes(lib_path.read_bytes())
    with pytest.raises(runtime.KinaRuntimeError, match="no manifest"):
        runtime.load(so)


def test_a_library_without_its_packed_entry_point_is_refused(lib_path):
    manifest = json.loads(lib_path.with_suffix(".json").read_text())
    manifest["functions"][0]["symbol"] = "_mlir_ciface_kina_absent"
    with pytest.raises(runtime.KinaRuntimeError, match="does not export.*_kina_packed_kina_absent.*rebuild"):
        runtime.load(lib_path, manifest)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@pytest.mark.parametrize("fastcall,calls", [pytest.param(True, 100_000, id="C"),
                                            pytest.param(False, 20_000, id="python")])
def test_many_calls_keep_memory_flat(lib_path, fastcall, calls):
    fn = runtime.load(lib_path, fastcall=fastcall).rows
    out = (np.empty(2, np.float32), np.empty(2, np.int64))
    for _ in range(1000):   # warm up allocator pools
        fn(A, N), fn(A, N, out=out)
    before = _rss_bytes()
    for _ in range(calls // 2):
        fn(A, N)
        fn(A, N, out=out)
    growth = _rss_bytes() - before
    assert growth < 4 * 2**20, f"RSS grew by {growth / 2**20:.1f} MB over {calls:,} calls"


def test_a_call_keeps_no_reference_to_its_arrays(lib):
    a, n = A.copy(), N.copy()
    out = (np.empty(2, np.float32), np.empty(2, np.int64))
    counts = [sys.getrefcount(x) for x in (a, n, *out)]
    lib.rows(a, n, out=out)
    fresh = lib.rows(a, n)
    assert [sys.getrefcount(x) for x in (a, n, *out)] == counts
    refs = [weakref.ref(x) for x in (a, n, *out, *fresh)]
    del a, n, out, fresh
    assert [r() for r in refs] == [None] * 6


# ---- a bigger function (GIL released in C), F16 and BF16 functions -----------------------
BIG = (512, 256)   # 512 KB of float32
MIXED_SOURCE = f"""
fn twice(x: Tensor[F32, [{BIG[0]}, {BIG[1]}]]) -> Tensor[F32, [{BIG[0]}, {BIG[1]}]] {{
  x + x
}}
fn half(x: Tensor[F16, [4]]) -> Tensor[F16, [4]] {{
  x + x
}}
fn brain(x: Tensor[BF16, [4]]) -> Tensor[BF16, [4]] {{
  x + x
}}
"""


@pytest.fixture(scope="module")
def mixed_path(tmp_path_factory):
    d = tmp_path_factory.mktemp("mixed")
    (d / "mixed.kina").write_text(MIXED_SOURCE)
    res = build.build_file(d / "mixed.kina", d / "mixed.so")
    assert res.ok, "\n".join(res.source.render(g) for g in res.diagnostics)
    return res.so_path


@pytest.fixture(scope="module", params=PATHS)
def mixed(mixed_path, request):
    return runtime.load(mixed_path, fastcall=request.param)


def test_rebinding_loop_keeps_rss_flat_and_holds_no_array(mixed):
    """A training loop that rebinds its weights to a new array every step (w = w - lr * g)."""
    big = mixed.twice
    w, out = np.ones(BIG, np.float32), np.empty(BIG, np.float32)
    for _ in range(20):   # warm up allocator pools
        w = w * np.float32(1.0)
        big(w, out=out), big(w)
    first = weakref.ref(w)
    before = _rss_bytes()
    for _step in range(1000):
        w = w - np.float32(1e-3) * out     # a new array every step; the old one is dropped
        big(w, out=out)
        fresh = big(w)
    growth = _rss_bytes() - before
    assert first() is None, "the runtime kept an array it was passed"
    np.testing.assert_array_equal(fresh, out)
    np.testing.assert_array_equal(out, 2 * w)
    assert growth < 8 * 2**20, f"RSS grew by {growth / 2**20:.1f} MB over 1,000 rebinding calls"


def test_f16_takes_the_fast_path_and_bf16_the_python_path(mixed_path, mixed):
    x16 = np.array([1.5, -2.0, 0.25, 3.0], np.float16)
    np.testing.assert_array_equal(mixed.half(x16), 2 * x16)
    bf16 = runtime.numpy_dtype("BF16")
    xb = np.array([1.5, -2.0, 0.25, 3.0], bf16)
    np.testing.assert_array_equal(mixed.brain(xb).astype(np.float32), 2 * xb.astype(np.float32))
    with pytest.raises(runtime.KinaArgumentError, match=r"parameter `x` expects Tensor\[BF16, \[4\]\]"):
        mixed.brain(x16)
    fast = runtime.load(mixed_path)
    assert fast.half.uses_fastcall and fast.twice.uses_fastcall and not fast.brain.uses_fastcall


def test_shape_dtype_and_flags_reassigned_in_place_are_caught(lib):
    a, n = A.copy(), N.copy()
    out = (np.empty(2, np.float32), np.empty(2, np.int64))
    lib.rows(a, n, out=out), lib.rows(a, n)
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


def test_concurrent_calls_get_their_own_results(lib, mixed):
    def worker(k: int) -> bool:
        a = np.full((2, 3), float(k), np.float32)
        n = np.array([k, -k], np.int64)
        out = (np.empty(2, np.float32), np.empty(2, np.int64))
        x = np.full(BIG, float(k), np.float32)
        ok = True
        for _ in range(100):
            s, c = lib.rows(a, n)
            lib.rows(a, n, out=out)
            shared, _ = lib.rows(A, N)                          # same inputs in every thread
            ok &= bool(np.all(s == 3 * k) and np.all(c == n) and np.all(out[0] == 3 * k)
                       and np.all(shared == A.sum(axis=1)))
        for _ in range(5):                                      # called without the GIL in C
            ok &= bool(np.all(mixed.twice(x) == 2 * k))
        return ok
    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(worker, range(1, 9)))


def test_both_paths_give_identical_results(lib_path, mixed_path):
    rng = np.random.default_rng(7)
    a, n = rng.standard_normal((2, 3)).astype(np.float32), rng.integers(-9, 9, 2)
    x = rng.standard_normal(BIG).astype(np.float32)
    c_lib, py_lib = runtime.load(lib_path), runtime.load(lib_path, fastcall=False)
    for got, want in zip(c_lib.rows(a, n), py_lib.rows(a, n)):
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    c_mixed, py_mixed = runtime.load(mixed_path), runtime.load(mixed_path, fastcall=False)
    assert c_mixed.twice(x).tobytes() == py_mixed.twice(x).tobytes()


# ---- the C helper's contract -----------------------------------------------------------
@pytest.fixture(scope="module")
def entry(lib_path):
    if not runtime.FASTCALL_AVAILABLE:
        pytest.skip("compiler.runtime._fastcall is not built")
    return runtime.load(lib_path).rows._fast


def _sentinel_outs():
    return (np.full(2, -1.0, np.float32), np.full(2, -1, np.int64))


def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("bad_index,make", [
    (0, lambda outs: (A.astype(np.float64), N, *outs)),                 # format 'd'
    (1, lambda outs: (A, N.astype(np.int32), *outs)),                   # item size 4
    (0, lambda outs: (np.asfortranarray(A), N, *outs)),                 # not C-contiguous
    (0, lambda outs: (A.reshape(3, 2), N, *outs)),                      # dims
    (0, lambda outs: (A.reshape(6), N, *outs)),                         # rank
    (1, lambda outs: (A, N.tolist(), *outs)),                           # not an ndarray
    (1, lambda outs: (A, memoryview(N), *outs)),                        # a buffer, not an ndarray
    (2, lambda outs: (A, N, np.zeros(4, np.float32)[::2], outs[1])),    # strided output
    (2, lambda outs: (A, N, _read_only(outs[0].copy()), outs[1])),      # read-only output
    (2, lambda outs: (A, N)),                                           # arity: min(len, slots)
])
def test_fastcall_returns_the_first_mismatch_without_calling(entry, bad_index, make):
    from compiler.runtime import _fastcall
    outs = _sentinel_outs()
    assert _fastcall.call(entry, make(outs)) == bad_index
    assert np.all(outs[0] == -1.0) and np.all(outs[1] == -1), "called despite a mismatch"


def test_fastcall_calls_when_everything_matches(entry):
    from compiler.runtime import _fastcall
    outs = _sentinel_outs()
    assert _fastcall.call(entry, (A, N, *outs)) == -1
    np.testing.assert_allclose(outs[0], A.sum(axis=1))
    np.testing.assert_array_equal(outs[1], N)


def test_fastcall_entry_rejects_bad_specs():
    if not runtime.FASTCALL_AVAILABLE:
        pytest.skip("compiler.runtime._fastcall is not built")
    from compiler.runtime import _fastcall
    fn = ctypes.cast(ctypes.CDLL(None).labs, ctypes.c_void_p).value
    template = bytes(8 * 5)   # one rank-1 descriptor
    assert "1 tensors" in repr(_fastcall.Entry(fn, template, (("f", 4, False, (4,), 0, -1),), np.ndarray))
    with pytest.raises(ValueError, match="no buffer format letters"):    # BF16: DType.buffer_formats ""
        _fastcall.Entry(fn, template, (("", 2, False, (4,), 0, -1),), np.ndarray)
    with pytest.raises(ValueError, match="item size 3"):
        _fastcall.Entry(fn, template, (("f", 3, False, (4,), 0, -1),), np.ndarray)
    with pytest.raises(ValueError, match="only an 8-byte input may have an index bound"):
        _fastcall.Entry(fn, template, (("f", 4, False, (4,), 0, 8),), np.ndarray)
    with pytest.raises(ValueError, match="overruns the template"):
        _fastcall.Entry(fn, template, (("f", 4, False, (4, 4), 0, -1),), np.ndarray)
    with pytest.raises(ValueError, match="slot 1: an input after an output"):
        _fastcall.Entry(fn, bytes(8 * 10), (("f", 4, True, (4,), 0, -1), ("f", 4, False, (4,), 5, -1)),
                        np.ndarray)
    with pytest.raises(TypeError, match=r"slot 0 is not \(formats, itemsize, writable, shape, word, bound\[, dlpack\]\)"):
        _fastcall.Entry(fn, template, (("f", False),), np.ndarray)
    with pytest.raises(ValueError, match="DLPack dtype 528 is not code << 8 \\| bits of a 4-byte item"):
        _fastcall.Entry(fn, template, (("f", 4, False, (4,), 0, -1, 2 << 8 | 16),), np.ndarray)
    with pytest.raises(TypeError, match=r"call\(entry: Entry, arrays: tuple\)"):
        _fastcall.call(None, ())


def test_fresh_results_start_on_a_cache_line(tmp_path):
    """Fresh results of 4 KiB and up are 64-byte aligned (compiler/runtime/arrays.py), as
    torch's and JAX's buffers are: NumPy's 16 cost a kernel writing them 4-9%.  Both call
    paths, static and dynamic sizes."""
    src = tmp_path / "twice.kina"
    src.write_text("fn twice[N](x: Tensor[F32, [N, 64]]) -> Tensor[F32, [N, 64]] {\n  x + x\n}\n"
                   "fn small(x: Tensor[F32, [4]]) -> Tensor[F32, [4]] {\n  x + x\n}\n")
    res = build.build_file(src, tmp_path / "twice.so", 0, cache=False)
    assert res.ok, res.diagnostics
    x = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    for fastcall in (True, False):
        lib = runtime.load(res.so_path, fastcall=fastcall)
        ys = [lib.twice(x) for _ in range(4)]    # kept alive: four blocks, not one lucky one
        for y in ys:
            assert y.ctypes.data % 64 == 0 and y.flags.c_contiguous and y.flags.writeable
            np.testing.assert_array_equal(y, x + x)
        np.testing.assert_array_equal(lib.small(x[0, :4]), 2 * x[0, :4])


def test_empty_is_aligned_for_every_dtype_and_shape():
    import ml_dtypes
    for dtype in (np.float32, np.int64, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn):
        for shape in ((4096,), (64, 65), (3, 0, 5), ()):
            a = arrays.empty(shape, dtype)
            assert a.shape == shape and a.dtype == np.dtype(dtype) and a.flags.c_contiguous
            if a.nbytes >= 4096:
                assert a.ctypes.data % 64 == 0
    a, b = arrays.empty((64, 64), np.float32), arrays.empty((64, 64), np.float32)
    assert not np.shares_memory(a, b)
