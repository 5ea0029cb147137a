"""The runtime side of dynamic exports (issue 25; the ABI contract in docs/compiling.md and
compiler/runtime/binding.py): sizes bound from the arguments' shapes and size keywords at each
call, the two-source KinaArgumentError, results allocated at the bound shapes, out= checked,
index bounds that are size expressions, the sizes block after the descriptors (args[n]) on both
call paths, the cache of prepared calls, and static functions unchanged.

The library is hand-written C (no compiler involved) implementing the packed entry points of
the contract; `probe` writes what it received (the sizes block and every descriptor's sizes)
into its first result so the tests see exactly what the library was given:

    probe[B, T, H, DH, V](window: I64[B, T + 1] (ids < V), emb: F32[V, DH*H], mask: F32[T, T])
        -> (info: I64[15], first_row: F32[H, DH], shifted: I64[B, T])
    s(x: F32[2, 3]) -> F32[2, 3]   (static: 2 * x)
    wide[N](x0 .. x30: F32[N]) -> F32[N]   (the sum; 32 tensors and the sizes: more pointers
                                            than the C helper keeps on its stack)
    edge[T](x: F32[T + 1]) -> (F32[T - 1], F32[2*T - 3])   (x[:T - 1]; T everywhere)
"""
import hashlib
import json
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

from compiler.runtime import library as runtime
from compiler.runtime.loader import MANIFEST_FORMAT

PATHS = [pytest.param(True, id="C"), pytest.param(False, id="python")]
SIZES = ["B", "T", "H", "DH", "V"]
WIDE = 31   # 32 descriptors: the sizes pointer is the 33rd, one more than the stack array
ABI = ("kina_probe[B,T,H,DH,V](i64[B,T + 1], f32[V,DH*H], f32[T,T]) -> (i64[15], f32[H,DH], i64[B,T])\\n"
       "kina_s(f32[2,3]) -> (f32[2,3])\\n"
       f"kina_wide[N]({', '.join(['f32[N]'] * WIDE)}) -> (f32[N])\\n"
       "kina_edge[T](f32[T + 1]) -> (f32[T - 1], f32[2*T - 3])")

C_SOURCE = r"""
#include <stdint.h>
#include <string.h>

const char *_kina_abi(void) { return "%ABI%"; }
const char *_kina_last_error(void) { return 0; }
void _mlir_ciface_kina_probe(void) {}
void _mlir_ciface_kina_s(void) {}

#define DESC(i) ((int64_t *)args[i])
#define DATA(i, T) ((T *)(intptr_t)DESC(i)[1])

/* As the generated checked entry does: sizes >= 1 (2 + n + j), every descriptor at its
 * shape evaluated at the sizes (2 + i); then the body. */
int32_t _kina_packed_kina_probe(void **args)
{
    const int64_t *s = (const int64_t *)args[6];
    int64_t B = s[0], T = s[1], H = s[2], DH = s[3], V = s[4];
    for (int j = 0; j < 5; j++)
        if (s[j] < 1)
            return 2 + 6 + j;
    int64_t want[6][2] = {{B, T + 1}, {V, DH * H}, {T, T}, {15, 0}, {H, DH}, {B, T}};
    int rank[6] = {2, 2, 2, 1, 2, 2};
    for (int i = 0; i < 6; i++)
        for (int r = 0; r < rank[i]; r++)
            if (DESC(i)[3 + r] != want[i][r])
                return 2 + i;
    int64_t *info = DATA(3, int64_t);
    memcpy(info, s, 5 * sizeof(int64_t));
    int k = 5, shown[5] = {0, 1, 2, 4, 5};
    for (int i = 0; i < 5; i++) {
        info[k++] = DESC(shown[i])[3];
        info[k++] = DESC(shown[i])[4];
    }
    for (int64_t x = 0; x < H * DH; x++)
        DATA(4, float)[x] = DATA(1, float)[x];
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            DATA(5, int64_t)[b * T + t] = DATA(0, int64_t)[b * (T + 1) + t + 1];
    return 0;
}

void _mlir_ciface_kina_wide(void) {}

int32_t _kina_packed_kina_wide(void **args)
{
    int64_t N = ((const int64_t *)args[%WIDE% + 1])[0];
    for (int i = 0; i <= %WIDE%; i++)
        if (DESC(i)[3] != N)
            return 2 + i;
    for (int64_t x = 0; x < N; x++) {
        float sum = 0;
        for (int i = 0; i < %WIDE%; i++)
            sum += DATA(i, float)[x];
        DATA(%WIDE%, float)[x] = sum;
    }
    return 0;
}

void _mlir_ciface_kina_edge(void) {}

int32_t _kina_packed_kina_edge(void **args)
{
    int64_t T = ((const int64_t *)args[3])[0];
    if (DESC(0)[3] != T + 1 || DESC(1)[3] != T - 1 || DESC(2)[3] != 2 * T - 3)
        return 2;
    for (int64_t x = 0; x < T - 1; x++)
        DATA(1, float)[x] = DATA(0, float)[x];
    for (int64_t x = 0; x < 2 * T - 3; x++)
        DATA(2, float)[x] = (float)T;
    return 0;
}

int32_t _kina_packed_kina_s(void **args)
{
    if (DESC(0)[3] != 2 || DESC(0)[4] != 3)
        return 2;
    for (int i = 0; i < 6; i++)
        DATA(1, float)[i] = 2 * DATA(0, float)[i];
    return 0;
}
"""


def manifest(so: Path, **probe_changes) -> dict:
    probe = {"name": "probe", "symbol": "_mlir_ciface_kina_probe", "sizes": SIZES,
             "params": [{"name": "window", "dtype": "I64", "shape": ["B", "T + 1"], "index_bound": "V"},
                        {"name": "emb", "dtype": "F32", "shape": ["V", "H*DH"]},
                        {"name": "mask", "dtype": "F32", "shape": ["T", "T"]}],
             "results": [{"dtype": "I64", "shape": [15]}, {"dtype": "F32", "shape": ["H", "DH"]},
                         {"dtype": "I64", "shape": ["B", "T"]}]}
    probe.update(probe_changes)
    static = {"name": "s", "symbol": "_mlir_ciface_kina_s",
              "params": [{"name": "x", "dtype": "F32", "shape": [2, 3]}], "results": [{"dtype": "F32", "shape": [2, 3]}]}
    wide = {"name": "wide", "symbol": "_mlir_ciface_kina_wide", "sizes": ["N"],
            "params": [{"name": f"x{i}", "dtype": "F32", "shape": ["N"]} for i in range(WIDE)],
            "results": [{"dtype": "F32", "shape": ["N"]}]}
    edge = {"name": "edge", "symbol": "_mlir_ciface_kina_edge", "sizes": ["T"],
            "params": [{"name": "x", "dtype": "F32", "shape": ["T + 1"]}],
            "results": [{"dtype": "F32", "shape": ["T - 1"]}, {"dtype": "F32", "shape": ["2*T - 3"]}]}
    return {"format": MANIFEST_FORMAT, "library": so.name, "library_sha256": hashlib.sha256(so.read_bytes()).hexdigest(),
            "functions": [probe, static, wide, edge]}


@pytest.fixture(scope="module")
def so_path(tmp_path_factory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("dyn")
    (d / "probe.c").write_text(C_SOURCE.replace("%ABI%", ABI).replace("%WIDE%", str(WIDE)))
    so = d / "probe.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(so), str(d / "probe.c")], check=True)
    (d / "probe.json").write_text(json.dumps(manifest(so)))
    return so


@pytest.fixture(scope="module", params=PATHS)
def lib(so_path, request):
    return runtime.load(so_path, fastcall=request.param)


def inputs(B=2, T=3, H=2, DH=3, V=5, seed=0):
    rng = np.random.default_rng(seed)
    window = rng.integers(0, V, (B, T + 1)).astype(np.int64)
    emb = rng.standard_normal((V, DH * H)).astype(np.float32)
    mask = np.zeros((T, T), np.float32)
    return window, emb, mask


def check(results, window, emb, B, T, H, DH, V):
    info, first_row, shifted = results
    assert info.tolist() == [B, T, H, DH, V, B, T + 1, V, DH * H, T, T, H, DH, B, T]
    assert first_row.shape == (H, DH) and first_row.dtype == np.float32
    np.testing.assert_array_equal(first_row.ravel(), emb[0])
    assert shifted.shape == (B, T)
    np.testing.assert_array_equal(shifted, window[:, 1:])


# ---- binding ----------------------------------------------------------------------------------
@pytest.mark.parametrize("B, T, H, DH, V", [(2, 3, 2, 3, 5), (1, 1, 1, 1, 1), (4, 7, 3, 2, 9)])
def test_sizes_are_bound_from_the_shapes_and_a_keyword(lib, B, T, H, DH, V):
    """T from `T + 1`, DH from `DH*H` once H is given; the library receives the sizes block
    and descriptors at those sizes, the results have the bound shapes."""
    window, emb, mask = inputs(B, T, H, DH, V)
    check(lib.probe(window, emb, mask, H=H), window, emb, B, T, H, DH, V)


def test_one_library_many_sizes_and_out_buffers(lib):
    for B, T in [(1, 1), (3, 5), (1, 1), (2, 8)]:
        window, emb, mask = inputs(B, T)
        outs = (np.empty(15, np.int64), np.empty((2, 3), np.float32), np.empty((B, T), np.int64))
        got = lib.probe(window, emb, mask, H=2, out=outs)
        assert all(g is o for g, o in zip(got, outs))
        check(outs, window, emb, B, T, 2, 3, 5)


def test_a_list_argument_binds_from_its_shape(lib):
    window, emb, mask = inputs()
    check(lib.probe(window.tolist(), emb, mask.tolist(), H=2), window, emb, 2, 3, 2, 3, 5)


def test_two_sources_that_disagree_name_the_size_and_both(lib):
    window, emb, _ = inputs(T=64)
    mask = np.zeros((32, 32), np.float32)
    with pytest.raises(runtime.KinaArgumentError) as e:
        lib.probe(window, emb, mask, H=2)
    assert str(e.value) == "probe: size T is 64 from window (dimension 1, T + 1 = 65) but 32 from mask (dimension 0)"


def test_a_keyword_that_the_shapes_contradict(lib):
    window, emb, mask = inputs(H=2, DH=3)
    with pytest.raises(runtime.KinaArgumentError) as e:
        lib.probe(window, emb, mask, H=2, DH=2)
    assert str(e.value) == "probe: size H is 2 from the keyword H=2 but 3 from emb (dimension 1, DH*H = 6)"


def test_a_missing_size_says_which_keyword_to_pass(lib):
    window, emb, mask = inputs()
    with pytest.raises(runtime.KinaArgumentError) as e:
        lib.probe(window, emb, mask)
    assert str(e.value) == ("probe: size H is not determined by the arguments' shapes; "
                            "pass it: probe(..., H=<int>)")


@pytest.mark.parametrize("kw, message", [
    ({"H": 0}, "probe: size H=0 must be at least 1"),
    ({"H": -3}, "probe: size H=-3 must be at least 1"),
    ({"H": 2.0}, "probe: size H must be an int, got float"),
    ({"H": True}, "probe: size H must be an int, got bool"),
    ({"Q": 2}, "probe got the keyword `Q`, which is no size of it (its sizes: B, T, H, DH, V)"),
    ({"H": 4}, "probe: parameter `emb` has 6 at dimension 1, but its shape says DH*H there: "
               "no size DH >= 1 gives 6 (with H = 4 from the keyword H=4)"),
])
def test_bad_size_keywords(lib, kw, message):
    window, emb, mask = inputs()
    with pytest.raises(runtime.KinaArgumentError) as e:
        lib.probe(window, emb, mask, **kw)
    assert str(e.value) == message


def test_a_dimension_no_size_satisfies_names_parameter_dimension_and_pattern(lib):
    """window of width 1 would need T = 0."""
    _, emb, _ = inputs()
    window = np.zeros((2, 1), np.int64)
    with pytest.raises(runtime.KinaArgumentError) as e:
        lib.probe(window, emb, np.zeros((0, 0), np.float32), H=2)
    assert str(e.value) == ("probe: parameter `window` has 1 at dimension 1, but its shape says T + 1 there: "
                            "no size T >= 1 gives 1")


def test_rank_count_and_dtype_errors(lib):
    window, emb, mask = inputs()
    with pytest.raises(runtime.KinaArgumentError, match=r"probe: parameter `mask` expects Tensor\[F32, \[T, T\]\] "
                                                        r"\(rank 2\), got an array of shape \[3\]"):
        lib.probe(window, emb, mask[0], H=2)
    with pytest.raises(runtime.KinaArgumentError, match=r"probe takes 3 argument\(s\) \(window, emb, mask\), got 2"):
        lib.probe(window, emb, H=2)
    with pytest.raises(runtime.KinaArgumentError, match=r"probe: parameter `emb` expects Tensor\[F32, \[5, 6\]\] "
                                                        r"\(NumPy dtype float32, shape \[5, 6\]\), got an array of "
                                                        r"dtype float64"):
        lib.probe(window, emb.astype(np.float64), mask, H=2)
    with pytest.raises(runtime.KinaArgumentError, match="probe: parameter `window` expects"):
        lib.probe(None, emb, mask, H=2)


def test_out_arrays_are_checked_against_the_bound_shapes(lib):
    window, emb, mask = inputs(B=2, T=3)
    outs = (np.empty(15, np.int64), np.empty((2, 3), np.float32), np.empty((3, 2), np.int64))
    with pytest.raises(runtime.KinaArgumentError, match=r"probe: out= `result 2` expects Tensor\[I64, \[2, 3\]\]"):
        lib.probe(window, emb, mask, H=2, out=outs)
    with pytest.raises(runtime.KinaArgumentError, match=r"out= needs 3 array\(s\), got 2"):
        lib.probe(window, emb, mask, H=2, out=outs[:2])


@pytest.mark.parametrize("bad", [5, 7, -1])
def test_the_index_bound_is_the_expression_at_the_bound_sizes(lib, bad):
    """window's ids must lie in [0, V), V from emb's rows."""
    window, emb, mask = inputs(V=5)
    window[1, 2] = bad
    outs = (np.full(15, -7, np.int64), np.empty((2, 3), np.float32), np.empty((2, 3), np.int64))
    with pytest.raises(runtime.KinaIndexError, match=rf"probe: parameter `window` holds index {bad} at \[1, 2\], "
                                                     rf"outside \[0, 5\)"):
        lib.probe(window, emb, mask, H=2, out=outs)
    assert (outs[0] == -7).all(), "the library ran despite the bad index"
    # with more rows in emb (V = 8) the same ids are fine
    _, emb8, _ = inputs(V=8)
    if bad >= 0:
        check(lib.probe(window, emb8, mask, H=2), window, emb8, 2, 3, 2, 3, 8)


# ---- the fast path and its cache ----------------------------------------------------------------
def test_the_fast_path_is_used_with_a_cached_prepared_call(so_path, monkeypatch):
    if not runtime.FASTCALL_AVAILABLE:
        pytest.skip("compiler.runtime._fastcall is not built")
    f = runtime.load(so_path).probe
    assert f.uses_fastcall
    window, emb, mask = inputs()
    first = f.prepared(window, emb, mask, H=2)
    assert first.fast is not None and first.descriptors.extra == (first.descriptors.sizes_word,)
    f(window, emb, mask, H=2)
    # a second call at the same shapes binds nothing: the prepared call comes from the cache,
    # and the fast path calls the library (the Python checks would be a second way in)
    monkeypatch.setattr(f._binder, "bind", lambda *a: pytest.fail("sizes bound again"))
    monkeypatch.setattr(f, "_call_checked", lambda *a: pytest.fail("the Python path ran"))
    window2, emb2, mask2 = inputs(seed=1)
    assert f.prepared(window2, emb2, mask2, H=2) is first
    check(f(window2, emb2, mask2, H=2), window2, emb2, 2, 3, 2, 3, 5)


def test_other_shapes_with_the_same_sizes_share_a_prepared_call(so_path):
    f = runtime.load(so_path).probe
    window, emb, mask = inputs()
    a = f.prepared(window, emb, mask, H=2)
    assert f.prepared(window, emb, mask, DH=3) is a     # another key, the same sizes
    assert f.prepared(*inputs(T=4), H=2) is not a


def test_the_cache_is_bounded(so_path, monkeypatch):
    from compiler.runtime import dynamic
    monkeypatch.setattr(dynamic, "CACHE_ENTRIES", 4)
    f = runtime.load(so_path).probe
    for T in range(1, 12):
        window, emb, mask = inputs(T=T)
        check(f(window, emb, mask, H=2), window, emb, 2, T, 2, 3, 5)
    assert len(f._cache) <= 4


def test_both_paths_agree(so_path):
    fast, slow = runtime.load(so_path).probe, runtime.load(so_path, fastcall=False).probe
    assert not slow.uses_fastcall
    for B, T, H, DH, V in [(1, 2, 3, 4, 5), (3, 1, 1, 2, 2)]:
        window, emb, mask = inputs(B, T, H, DH, V)
        for a, b in zip(fast(window, emb, mask, H=H), slow(window, emb, mask, H=H)):
            np.testing.assert_array_equal(a, b)


def test_concurrent_calls_at_different_sizes(so_path):
    f = runtime.load(so_path).probe
    errors = []

    def worker(T):
        try:
            for _ in range(200):
                window, emb, mask = inputs(T=T, seed=T)
                check(f(window, emb, mask, H=2), window, emb, 2, T, 2, 3, 5)
        except Exception as e:   # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(T,)) for T in (1, 2, 3, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_signature_shows_the_sizes(so_path):
    lib = runtime.load(so_path)
    assert lib.probe.signature() == ("probe[B, T, H, DH, V](window: Tensor[I64, [B, T + 1]], emb: Tensor[F32, "
                                     "[V, DH*H]], mask: Tensor[F32, [T, T]]) -> (Tensor[I64, [15]], "
                                     "Tensor[F32, [H, DH]], Tensor[I64, [B, T]])")


# ---- the library's errors, the manifest and the static function ----------------------------------
def test_a_size_the_library_refuses_is_a_runtime_error(so_path):
    """Codes 2 + n + j (size j < 1) and 2 + i never happen when manifest and library agree; if they
    do, the call says so instead of misreporting."""
    f = runtime.load(so_path).probe
    p = f.prepared(*inputs(), H=2)
    assert "refused size T" in str(f._library_error(p, 2 + 6 + 1))
    assert "`emb` as Tensor[F32, [5, 6]]" in str(f._library_error(p, 2 + 1))


@pytest.mark.parametrize("change, message", [
    ({"sizes": ["B", "T", "DH", "H", "V"]}, r"gives `probe` the sizes \[B, T, DH, H, V\], but the library was "
                                             r"compiled with \[B, T, H, DH, V\]"),
    ({"results": [{"dtype": "I64", "shape": [15]}, {"dtype": "F32", "shape": ["H", "DH"]},
                  {"dtype": "I64", "shape": ["B", "T + 1"]}]},
     r"says result `2` of `probe` is Tensor\[I64, \[B, T \+ 1\]\], but the library was compiled for "
     r"Tensor\[I64, \[B, T\]\]"),
    ({"results": [{"dtype": "I64", "shape": [15]}, {"dtype": "F32", "shape": ["H", "Q"]},
                  {"dtype": "I64", "shape": ["B", "T"]}]}, r"uses Q, not a size of the function"),
    ({"results": [{"dtype": "I64", "shape": [15]}, {"dtype": "F32", "shape": ["H", "D +"]},
                  {"dtype": "I64", "shape": ["B", "T"]}]}, r"describes result `1` of `probe` wrongly"),
])
def test_a_manifest_that_differs_from_the_abi_is_refused(so_path, change, message):
    with pytest.raises(runtime.KinaRuntimeError, match=message):
        runtime.load(so_path, manifest(so_path, **change))


def test_a_format_2_manifest_is_refused(so_path):
    old = {**manifest(so_path), "format": 2}
    with pytest.raises(runtime.KinaRuntimeError, match="has format 2, not 3.*rebuild it with `kinac build`"):
        runtime.load(so_path, old)


def test_the_static_function_of_the_same_library_is_unchanged(lib):
    assert type(lib.s) is runtime.KinaFunction
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(lib.s(x), 2 * x)
    with pytest.raises(TypeError):
        lib.s(x, H=2)
    with pytest.raises(runtime.KinaArgumentError, match=r"s: parameter `x` expects Tensor\[F32, \[2, 3\]\]"):
        lib.s(np.zeros((3, 2), np.float32))


@pytest.mark.parametrize("fastcall", PATHS)
def test_the_same_shapes_with_other_keywords_bind_other_sizes(so_path, fastcall):
    """The previous call's prepared call is reused only with the same size keywords: H=2 and
    H=3 give emb [5, 6] the DH 3 and 2, and a call that then omits H is refused."""
    f = runtime.load(so_path, fastcall=fastcall).probe
    window, emb, mask = inputs(H=2, DH=3)
    for _ in range(2):
        check(f(window, emb, mask, H=2), window, emb, 2, 3, 2, 3, 5)
        check(f(window, emb, mask, H=3), window, emb, 2, 3, 3, 2, 5)
        check(f(window, emb, mask, DH=1), window, emb, 2, 3, 6, 1, 5)
    with pytest.raises(runtime.KinaArgumentError, match="size H is not determined"):
        f(window, emb, mask)
    with pytest.raises(runtime.KinaArgumentError, match="size H must be an int, got float"):
        f(window, emb, mask, H=2.0)


def test_errors_after_a_fast_call_at_the_same_shapes(so_path):
    """The shortcut through the previous call's shapes still reports each error exactly."""
    f = runtime.load(so_path).probe
    window, emb, mask = inputs()
    f(window, emb, mask, H=2)
    bad = window.copy()
    bad[0, 0] = 99
    with pytest.raises(runtime.KinaIndexError, match=r"holds index 99 at \[0, 0\], outside \[0, 5\)"):
        f(bad, emb, mask, H=2)
    with pytest.raises(runtime.KinaArgumentError, match="probe: parameter `emb` expects"):
        f(window, emb.astype(np.float16), mask, H=2)
    outs = (np.empty(15, np.int64), np.empty((2, 3), np.float32), np.empty((2, 3), np.int64))
    with pytest.raises(runtime.KinaArgumentError, match="share memory"):
        f(window, emb, mask, H=2, out=(outs[0], outs[1], outs[0][:6].reshape(2, 3)))
    check(f(window, emb, mask, H=2), window, emb, 2, 3, 2, 3, 5)


def test_more_tensors_than_the_c_stack_holds(lib):
    """wide: 32 descriptors and the sizes pointer, one more than the C helper keeps on its stack."""
    for n in (1, 7, 7, 3):
        xs = [np.full(n, i, np.float32) for i in range(WIDE)]
        np.testing.assert_array_equal(lib.wide(*xs), np.full(n, sum(range(WIDE)), np.float32))
    with pytest.raises(runtime.KinaArgumentError, match="size N is 3 from x0 \\(dimension 0\\) but 4 from x5"):
        lib.wide(*[np.zeros(4 if i == 5 else 3, np.float32) for i in range(WIDE)])


def test_the_entry_checks_its_extra_words():
    if not runtime.FASTCALL_AVAILABLE:
        pytest.skip("compiler.runtime._fastcall is not built")
    from compiler.runtime import _fastcall
    template = bytes(8 * 6)
    slot = ("f", 4, False, (1,), 0, -1)
    assert "1 extra" in repr(_fastcall.Entry(1, template, (slot,), np.ndarray, (5,)))
    for bad, error in [((6,), ValueError), ((-1,), ValueError), (("0",), TypeError), ([5], TypeError)]:
        with pytest.raises(error):
            _fastcall.Entry(1, template, (slot,), np.ndarray, bad)


def test_result_dimensions_of_zero_and_below(lib):
    """Result shapes evaluated at the bound sizes; 2*T - 3 at T = 1 is refused before the call."""
    r0, r1 = lib.edge(np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(r0, [0, 1])
    np.testing.assert_array_equal(r1, [3, 3, 3])
    with pytest.raises(runtime.KinaArgumentError) as e:
        lib.edge(np.arange(2, dtype=np.float32))
    assert str(e.value) == "edge: at T=1, dimension 0 of result 1 is 2*T - 3 = -1 < 0"
    r0, r1 = lib.edge(np.arange(3, dtype=np.float32))
    assert r0.tolist() == [0] and r1.tolist() == [2]
