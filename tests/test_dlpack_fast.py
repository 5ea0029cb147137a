"""The C fast path's DLPack half (compiler/runtime/_dlpack.h): torch tensors (its C exchange
API), JAX arrays and any `__dlpack__` producer (a consumed capsule) go through
compiler.runtime._fastcall without a copy; every odd input is declined to the Python path,
which names the parameter in a KinaArgumentError, and nothing crashes or leaks.

`_fastcall.call(entry, arrays)` returns -1 when it called the function and the index of the
first array it declined otherwise, so the tests see which path took each call."""
import ctypes
import gc
import sys
import threading
import weakref

import numpy as np
import pytest

from compiler import build, runtime
from compiler.runtime import KinaArgumentError, KinaIndexError, dlpack
from compiler.runtime.prepared import Prepared

torch = pytest.importorskip("torch")
if not runtime.FASTCALL_AVAILABLE:
    pytest.skip("compiler.runtime._fastcall is not built", allow_module_level=True)
from compiler.runtime import _fastcall  # noqa: E402

SOURCE = """
fn scale(x: Tensor[F32, [2, 3]], w: Tensor[F32, [2, 3]]) -> Tensor[F32, [2, 3]] {
  x * w
}

fn pick(v: Tensor[F32, [5, 3]], i: Tensor[I64, [2]]) -> Tensor[F32, [2, 3]] {
  gather(v, i)
}

fn grow[N](a: Tensor[F32, [N]], b: Tensor[F32, [N]]) -> Tensor[F32, [N]] {
  a + b
}

fn two(x: Tensor[F32, [2, 3]]) -> (Tensor[F32, [2, 3]], Tensor[I64, [2, 1]], Tensor[Bool, [2, 3]]) {
  (x * x, x.argmax(axis=1), gt(x, x * x))
}

fn computed(t: Tensor[F32, [2, 4]], x: Tensor[F32, [3, 5]]) -> Tensor[F32, [3, 1, 4]] {
  gather(t, x.argmax(axis=1))
}
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    d = tmp_path_factory.mktemp("dlpack_fast")
    (d / "s.kina").write_text(SOURCE)
    res = build.build_file(d / "s.kina", d / "s.so")
    assert res.ok, res.diagnostics
    return runtime.load(res.so_path)


def fast(f, *arrays):
    """What the C path does with these arrays: -1 (called), else the declined index
    (f: a static function, or a dynamic function's call prepared at some shapes)."""
    return _fastcall.call(f.fast if isinstance(f, Prepared) else f._fast, arrays)


class Producer:
    """A DLPack producer that is no array: relays a NumPy array's protocol (or returns `capsule`)."""

    def __init__(self, a, capsule=None, legacy=False, raises=None):
        self.a, self.capsule, self.legacy, self.raises = a, capsule, legacy, raises

    def __dlpack__(self, **kwargs):
        if self.raises is not None:
            raise self.raises
        if self.capsule is not None:
            return self.capsule
        if self.legacy:
            if kwargs:
                raise TypeError("__dlpack__() takes no keyword arguments")   # a pre-1.0 producer
            return self.a.__dlpack__()
        return self.a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return (1, 0)


class Keeping(Producer):
    """A producer that keeps the capsules it hands out (to see what the consumer did)."""

    def __dlpack__(self, **kwargs):
        self.given = super().__dlpack__(**kwargs)
        return self.given


def capsule_name(capsule) -> bytes:
    get = ctypes.pythonapi.PyCapsule_GetName
    get.restype, get.argtypes = ctypes.c_char_p, [ctypes.py_object]
    return get(capsule)


def capsule_named(name: bytes):
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(ctypes.c_void_p(8), name, None)


def test_torch_takes_the_c_path_without_copies(lib):
    x, w = torch.rand(2, 3), torch.rand(2, 3)
    out = torch.empty(2, 3)
    ptr = out.data_ptr()
    assert fast(lib.scale, x, w, out) == -1                 # checked and called in C
    assert out.data_ptr() == ptr
    torch.testing.assert_close(out, x * w)
    out.zero_()
    assert lib.scale(x, w, out=out) is out and out.data_ptr() == ptr
    torch.testing.assert_close(out, x * w)
    # the C path read x's own memory: the same tensor as out= overlaps it (declined: index 2)
    assert fast(lib.scale, x, w, x) == 2
    y = lib.scale(x, w, like=x)
    assert isinstance(y, torch.Tensor)
    torch.testing.assert_close(y, x * w)
    # a view at an offset into a larger tensor (DLPack byte_offset or data pointer)
    big = torch.rand(4, 3)
    torch.testing.assert_close(lib.scale(big[2:], w, like="torch"), big[2:] * w)
    # size-1 dims may have any stride (C-contiguous as NumPy sees it)
    col = torch.rand(3, 1).t().expand(2, 3).contiguous()
    assert fast(lib.scale, col, w, out) == -1


def test_nn_parameter_and_inference_tensors(lib):
    w = torch.rand(2, 3)
    p = torch.nn.Parameter(torch.rand(2, 3), requires_grad=False)
    assert fast(lib.scale, p, w, torch.empty(2, 3)) == -1
    with torch.inference_mode():
        x = torch.rand(2, 3)
    torch.testing.assert_close(lib.scale(x, w, like="torch"), x * w)


def test_torch_index_inputs_are_bounds_checked(lib):
    v = torch.arange(15, dtype=torch.float32).reshape(5, 3)
    i = torch.tensor([4, 0])
    assert fast(lib.pick, v, i, torch.empty(2, 3)) == -1
    torch.testing.assert_close(lib.pick(v, i, like="torch"), v[i])
    assert fast(lib.pick, v, torch.tensor([1, 5]), torch.empty(2, 3)) == 1
    with pytest.raises(KinaIndexError, match=r"parameter `i` holds index 5 at \[1\], outside \[0, 5\)"):
        lib.pick(v, torch.tensor([1, 5]))
    with pytest.raises(KinaIndexError, match="holds index -1"):
        lib.pick(v, torch.tensor([-1, 0]))


@pytest.mark.parametrize("bad, message", [
    (lambda: torch.tensor(1.0), r"`x` expects Tensor\[F32, \[2, 3\]\] .*shape \[\]"),
    (lambda: torch.empty(0, 3), r"`x` expects .*shape \[0, 3\]"),
    (lambda: torch.empty(3, 0).t(), r"`x` expects .*shape \[0, 3\]"),
    (lambda: torch.rand(3, 2).t(), r"`x` is a torch.Tensor .*not C-contiguous"),
    (lambda: torch.rand(2, 6)[:, ::2], r"`x` is a torch.Tensor .*not C-contiguous"),
    (lambda: torch.rand(2, 3, dtype=torch.bfloat16), r"`x` is a torch.Tensor of dtype torch.bfloat16"),
    (lambda: torch.rand(2, 3).to(torch.float8_e4m3fn), r"`x` is a torch.Tensor of dtype torch.float8_e4m3fn"),
    (lambda: torch.rand(2, 3, dtype=torch.float64), r"`x` expects .*float64"),
    (lambda: torch.ones(2, 3, dtype=torch.int32), r"`x` expects .*int32"),
    (lambda: torch.rand(2, 3, requires_grad=True), r"`x` .*requires grad"),
    (lambda: torch._neg_view(torch.rand(2, 3)), r"`x` is a torch.Tensor .*negative bit"),
    (lambda: torch.rand(2, 3, dtype=torch.complex64).conj().imag, r"`x` is a torch.Tensor .*negative bit"),
    (lambda: torch.rand(6)[1:].reshape(1, 5)[:, :5], r"`x` expects .*shape \[1, 5\]"),
    (lambda: torch.empty(2, 3, device="meta"), r"`x` is a torch.Tensor .*on device meta"),
])
def test_odd_torch_inputs_are_clean_errors(lib, bad, message):
    x, w = bad(), torch.rand(2, 3)
    assert fast(lib.scale, x, w, torch.empty(2, 3)) == 0    # declined in C, nothing called
    with pytest.raises(KinaArgumentError, match=message):
        lib.scale(x, w)


def test_odd_torch_outputs_are_clean_errors(lib):
    x = torch.rand(2, 3)
    for out, message in ((torch.empty(3, 2).t(), "out= result 0"),
                         (torch.empty(2, 3, requires_grad=True), "out= result 0 .*requires grad"),
                         (torch.empty(2, 3, dtype=torch.float16), r"out= `result 0` expects .*float16")):
        assert fast(lib.scale, x, x, out) == 2
        with pytest.raises(KinaArgumentError, match=message):
            lib.scale(x, x, out=out)


def test_a_misaligned_input_is_declined_then_copied(lib):
    x = np.frombuffer(bytearray(25), np.uint8)[1:].view(np.float32).reshape(2, 3)   # 1 byte off
    x[...] = 2.0
    assert not x.flags.aligned
    w = np.ones((2, 3), np.float32)
    assert fast(lib.scale, Producer(x), w, np.empty((2, 3), np.float32)) == 0
    np.testing.assert_array_equal(lib.scale(Producer(x), w), x)   # the Python path's aligned copy


def test_numpy_producers_and_negative_strides(lib):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = np.zeros((2, 3), np.float32)
    assert fast(lib.scale, Producer(x), Producer(x), Producer(out)) == -1    # versioned capsules
    np.testing.assert_array_equal(out, x * x)
    flipped = np.arange(6, dtype=np.float32).reshape(2, 3)[::-1]
    assert fast(lib.scale, Producer(flipped), x, out) == 0
    with pytest.raises(KinaArgumentError, match="`x` is a .*Producer .*not C-contiguous"):
        lib.scale(Producer(flipped), x)
    legacy = Producer(x, legacy=True)                        # a pre-1.0 producer: an input only
    assert fast(lib.scale, legacy, x, out) == -1
    assert fast(lib.scale, x, x, Producer(out, legacy=True)) == 2
    with pytest.raises(KinaArgumentError, match="out= result 0 must be a writeable"):
        lib.scale(x, x, out=Producer(out, legacy=True))


def test_capsules_are_consumed_and_released(lib):
    x = np.ones((2, 3), np.float32)
    out = np.empty((2, 3), np.float32)
    px, pout = Producer(x), Producer(out)
    before = sys.getrefcount(x), sys.getrefcount(out)
    for _ in range(50):
        assert fast(lib.scale, px, px, pout) == -1
        assert fast(lib.scale, px, np.ones((3, 2), np.float32), pout) == 1   # declined after x was taken
    assert (sys.getrefcount(x), sys.getrefcount(out)) == before           # every deleter called once
    kept, kept_legacy = Keeping(x), Keeping(x, legacy=True)
    assert fast(lib.scale, kept, kept_legacy, out) == -1
    assert capsule_name(kept.given) == b"used_dltensor_versioned"          # consumed as the protocol says
    assert capsule_name(kept_legacy.given) == b"used_dltensor"
    del kept, kept_legacy
    for _ in range(50):                                                    # a legacy capsule too
        assert fast(lib.scale, Producer(x, legacy=True), x, out) == -1
    assert sys.getrefcount(x) == before[0]


@pytest.mark.parametrize("producer, message", [
    (Producer(None, raises=RuntimeError("no export today")), "no export today"),
    (Producer(None, raises=BufferError("strided")), "strided"),
    (Producer(None, raises=ZeroDivisionError("odd producer")), "odd producer"),
    (Producer(None, capsule=42), "cannot view"),
    (Producer(None, capsule=capsule_named(b"wrong")), "cannot view"),
    (Producer(None, capsule=capsule_named(b"used_dltensor")), "cannot view"),
])
def test_broken_producers_are_clean_errors(lib, producer, message):
    x = np.ones((2, 3), np.float32)
    assert fast(lib.scale, producer, x, np.empty((2, 3), np.float32)) == 0
    with pytest.raises(KinaArgumentError, match=f"parameter `x` is .*{message}"):
        lib.scale(producer, x)


def test_jax_inputs(lib):
    jnp = pytest.importorskip("jax.numpy")
    x = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
    out = np.empty((2, 3), np.float32)
    assert fast(lib.scale, x, x, out) == -1                  # a legacy capsule: read in C
    np.testing.assert_array_equal(out, np.asarray(x) ** 2)
    assert fast(lib.scale, x, x, jnp.zeros((2, 3), jnp.float32)) == 2   # immutable: never an out=
    with pytest.raises(KinaArgumentError, match="out= result 0"):
        lib.scale(x, x, out=jnp.zeros((2, 3), jnp.float32))


def test_dynamic_functions_take_torch_tensors(lib):
    assert isinstance(lib.grow, runtime.DynamicKinaFunction) and lib.grow.uses_fastcall
    for n in (3, 5, 3):
        a, b, out = torch.rand(n), torch.rand(n), torch.empty(n)
        ptr = out.data_ptr()
        assert lib.grow(a, b, out=out) is out and out.data_ptr() == ptr
        torch.testing.assert_close(out, a + b)
        torch.testing.assert_close(lib.grow(a, b, like="torch"), a + b)
        assert fast(lib.grow.prepared(a, b), a, b, out) == -1
    with pytest.raises(KinaArgumentError, match="`b` .*requires grad"):
        lib.grow(a, torch.rand(3, requires_grad=True))


# ---- fresh results as torch tensors, allocated in C (compiler/runtime/_results.h) ---------------
def made_in_c(f, *inputs):
    """What _fastcall.fresh does with these inputs: the results (made in C) or the int it declined with."""
    return _fastcall.fresh(f._fast, inputs, torch.Tensor)


def test_fresh_results_are_torch_tensors_made_in_c(lib):
    assert _fastcall.allocates(torch.Tensor) and not _fastcall.allocates(np.ndarray)
    assert dlpack.FRESH_KINDS["torch"] is torch.Tensor and dlpack.FRESH_KINDS["numpy"] is None
    x, w = torch.rand(2, 3), torch.rand(2, 3)
    assert isinstance(made_in_c(lib.scale, x, w), torch.Tensor)
    p = torch.nn.Parameter(torch.rand(2, 3), requires_grad=False)
    for like in ("torch", x, p):
        y = lib.scale(x, w, like=like)
        assert type(y) is torch.Tensor and y.dtype == torch.float32 and y.shape == (2, 3)   # a Parameter's too
        assert y.is_contiguous() and not y.requires_grad and y.data_ptr() % 64 == 0
        torch.testing.assert_close(y, x * w, rtol=0, atol=0)
        y += 1                                                   # its own, writable memory
        torch.testing.assert_close(y, x * w + 1, rtol=0, atol=0)
    a, ids, mask = lib.two(x, like="torch")                      # several results, I64 and Bool
    assert type(ids) is torch.Tensor and ids.dtype == torch.int64 and ids.shape == (2, 1)
    assert type(mask) is torch.Tensor and mask.dtype == torch.bool and mask.shape == (2, 3)
    torch.testing.assert_close(a, x * x, rtol=0, atol=0)
    torch.testing.assert_close(ids, x.argmax(dim=1, keepdim=True))
    torch.testing.assert_close(mask, x > x * x)
    # NumPy inputs, torch results
    y = lib.scale(x.numpy(), w.numpy(), like="torch")
    assert type(y) is torch.Tensor
    torch.testing.assert_close(y, x * w, rtol=0, atol=0)


def test_fresh_results_alias_nothing(lib):
    x, w = torch.rand(2, 3), torch.rand(2, 3)
    first, second = lib.scale(x, w, like="torch"), lib.scale(x, w, like="torch")
    a, b, c = lib.two(x, like="torch")
    pointers = {t.data_ptr() for t in (x, w, first, second, a, b, c)}
    assert len(pointers) == 7
    first.zero_()
    torch.testing.assert_close(second, x * w, rtol=0, atol=0)


def test_fresh_results_are_freed(lib):
    x, w = torch.rand(2, 3), torch.rand(2, 3)
    gc.collect()
    base = _fastcall.live_results()
    y = lib.scale(x, w, like="torch")
    a, b, c = lib.two(x, like="torch")
    assert _fastcall.live_results() == base + 4
    gone = weakref.ref(y)
    del y
    assert gone() is None and _fastcall.live_results() == base + 3    # freed with its tensor
    view = a[1]                                  # a view keeps its result's memory alive
    del a
    assert _fastcall.live_results() == base + 3
    torch.testing.assert_close(view, x[1] * x[1], rtol=0, atol=0)
    del view
    assert _fastcall.live_results() == base + 2  # each result its own block
    del b, c
    assert _fastcall.live_results() == base
    before = sys.getrefcount(x), sys.getrefcount(w)
    for _ in range(200):
        lib.scale(x, w, like="torch")
        lib.two(x, like="torch")
    assert _fastcall.live_results() == base and (sys.getrefcount(x), sys.getrefcount(w)) == before


def test_fresh_declines_free_the_results_and_fall_back(lib):
    gc.collect()
    base = _fastcall.live_results()
    x, w = torch.rand(2, 3), torch.rand(2, 3)
    assert made_in_c(lib.scale, x, torch.rand(2, 3, requires_grad=True)) == 1
    assert made_in_c(lib.scale, x) == 1 and made_in_c(lib.scale, x, w, w) == 2        # arity
    assert made_in_c(lib.scale, x, torch.rand(3, 2).t()) == 1
    with pytest.raises(KinaArgumentError, match="`w` .*requires grad"):
        lib.scale(x, torch.rand(2, 3, requires_grad=True), like="torch")
    with pytest.raises(KinaIndexError, match="holds index 5"):
        lib.pick(torch.rand(5, 3), torch.tensor([1, 5]), like="torch")
    # the index the library computes itself is out of range: its error code, no results
    t, good = torch.rand(2, 4), torch.zeros(3, 5)
    good[:, 1] = 1
    bad = good.clone()
    bad[1, 4] = 2
    assert made_in_c(lib.computed, t, bad) == -1 - runtime.function.BOUNDS_FAILED
    with pytest.raises(KinaIndexError, match="computed: "):
        lib.computed(t, bad, like="torch")
    torch.testing.assert_close(lib.computed(t, good, like="torch"), t[1].expand(3, 1, 4), rtol=0, atol=0)
    # what the Python path converts (a strided NumPy view is copied) still comes back as torch
    strided = np.repeat(x.numpy(), 2, axis=1)[:, ::2]
    assert made_in_c(lib.scale, strided, w) == 0
    y = lib.scale(strided, w, like="torch")
    assert type(y) is torch.Tensor
    torch.testing.assert_close(y, x * w, rtol=0, atol=0)
    del y
    assert _fastcall.live_results() == base
    with pytest.raises(TypeError, match="no DLPack C exchange API"):
        _fastcall.fresh(lib.scale._fast, (x, w), np.ndarray)


def test_fresh_results_from_threads(lib):
    """Concurrent calls share nothing; torch may free a result in any thread."""
    gc.collect()
    base = _fastcall.live_results()
    x, w = torch.rand(2, 3), torch.rand(2, 3)
    failures = []

    def worker():
        kept = [lib.scale(x, w, like="torch") for _ in range(100)]
        if len({t.data_ptr() for t in kept}) != 100 or not all(torch.equal(t, x * w) for t in kept):
            failures.append(kept)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not failures and _fastcall.live_results() == base


def test_fresh_results_of_dynamic_functions(lib):
    gc.collect()
    base = _fastcall.live_results()
    for n in (3, 5, 3, 5):
        a, b = torch.rand(n), torch.rand(n)
        y = lib.grow(a, b, like="torch")
        assert type(y) is torch.Tensor and y.shape == (n,) and _fastcall.live_results() == base + 1
        torch.testing.assert_close(y, a + b, rtol=0, atol=0)
        del y
    with pytest.raises(KinaArgumentError, match="`b` .*requires grad"):
        lib.grow(a, torch.rand(5, requires_grad=True), like="torch")
    assert _fastcall.live_results() == base


def test_negative_bit_copies_that_are_no_views_are_refused(lib):
    """detach() and inference mode drop `_base` but keep the negative bit: every tensor is asked."""
    neg = torch._neg_view(torch.rand(2, 3))
    with torch.inference_mode():
        inference = torch._neg_view(torch.rand(2, 3))
    w = torch.rand(2, 3)
    for x in (neg.detach(), inference, torch.rand(2, 3, dtype=torch.complex64).conj().imag.detach()):
        assert x.is_neg() and x._base is None
        assert fast(lib.scale, x, w, torch.empty(2, 3)) == 0 and made_in_c(lib.scale, x, w) == 0
        with pytest.raises(KinaArgumentError, match="negative bit"):
            lib.scale(x, w, like="torch")
    out = neg.detach()
    assert fast(lib.scale, w, w, out) == 2
