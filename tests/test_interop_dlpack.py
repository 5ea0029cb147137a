"""The runtime's DLPack path (compiler/runtime/dlpack.py): torch, JAX and NumPy-2 DLPack
objects as arguments and out= buffers without copies (checked by data pointer), the same
KinaArgumentErrors as NumPy arrays, other devices and strided layouts refused, like=."""
import numpy as np
import pytest

from compiler import build, runtime
from compiler.runtime import KinaArgumentError, dlpack

torch = pytest.importorskip("torch")

SOURCE = """
fn scale(x: Tensor[F32, [2, 3]], w: Tensor[F32, [2, 3]]) -> Tensor[F32, [2, 3]] {
  let y = x * w in
  y
}
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    d = tmp_path_factory.mktemp("dlpack")
    (d / "s.kina").write_text(SOURCE)
    res = build.build_file(d / "s.kina", d / "s.so", vjp=["scale"])
    assert res.ok, res.diagnostics
    return runtime.load(res.so_path)


class _Capsule:
    """A DLPack producer that is no NumPy array (NumPy 2's own protocol, relayed)."""

    def __init__(self, a, device=(1, 0)):
        self.a, self.device = a, device

    def __dlpack__(self, **kwargs):
        return self.a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.device


def test_torch_in_and_out_share_memory(lib):
    x, w = torch.rand(2, 3), torch.rand(2, 3)
    assert dlpack.as_array("scale", "x", x).ctypes.data == x.data_ptr()   # the view the call passes
    out = torch.empty(2, 3)
    ptr = out.data_ptr()
    assert lib.scale(x, w, out=out) is out                 # the library wrote the caller's buffer
    assert out.data_ptr() == ptr
    torch.testing.assert_close(out, x * w)
    y = lib.scale(x, w, like=x)
    assert isinstance(y, torch.Tensor)
    torch.testing.assert_close(y, x * w)
    arr = lib.scale(x, w)                                   # default: NumPy, as for NumPy inputs
    assert isinstance(arr, np.ndarray)
    back = torch.from_numpy(arr)
    assert lib.scale(x, w, like="torch").dtype == back.dtype


def test_vjp_export_takes_torch(lib):
    x, w, g = torch.rand(2, 3), torch.rand(2, 3), torch.rand(2, 3)
    y, g_x, g_w = lib.scale_vjp(x, w, g, like="torch")
    torch.testing.assert_close(y, x * w)
    torch.testing.assert_close(g_x, g * w)
    torch.testing.assert_close(g_w, g * x)


def test_any_dlpack_producer(lib):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = np.empty((2, 3), np.float32)
    lib.scale(_Capsule(x), _Capsule(x), out=_Capsule(out))
    np.testing.assert_array_equal(out, x * x)


def test_other_devices_refused(lib):
    x = np.ones((2, 3), np.float32)
    with pytest.raises(KinaArgumentError, match=r"parameter `x` is .* on device cuda:1; .*`x.cpu\(\)`"):
        lib.scale(_Capsule(x, (2, 1)), x)
    with pytest.raises(KinaArgumentError, match="on device rocm:0"):
        lib.scale(x, _Capsule(x, (10, 0)))


def test_dtype_shape_and_layout_errors(lib):
    x = torch.rand(2, 3)
    with pytest.raises(KinaArgumentError, match=r"parameter `x` expects Tensor\[F32, \[2, 3\]\] .*float64"):
        lib.scale(x.double(), x)
    with pytest.raises(KinaArgumentError, match=r"parameter `w` expects .* shape \[3, 2\]"):
        lib.scale(x, torch.rand(3, 2))
    strided = torch.rand(3, 2).t()
    with pytest.raises(KinaArgumentError, match=r"`x` is a torch.Tensor .* not C-contiguous \(strides \[1, 2\]\)"):
        lib.scale(strided, x)
    lib.scale(strided.contiguous(), x)                      # the copy the caller chooses
    with pytest.raises(KinaArgumentError, match="requires grad; .*torch_function"):
        lib.scale(x.requires_grad_(), x.detach())
    with pytest.raises(KinaArgumentError, match="out= result 0"):
        lib.scale(x.detach(), x.detach(), out=torch.empty(2, 3).t())


def test_jax_arrays(lib):
    jnp = pytest.importorskip("jax.numpy")
    x = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
    y = lib.scale(x, x, like=x)
    assert type(y).__module__.startswith("jax")
    np.testing.assert_array_equal(np.asarray(y), np.asarray(x) ** 2)
