"""One definition per dtype (types.DType): its rows agree with NumPy / ml_dtypes, MLIR and C;
every stage's table derives from it; and the interpreter, the emitted code (at -O0 and -O2),
the runtime's C fast path and its Python path compute the same bits for every dtype,
including values at and beyond each format's limits."""
import ctypes
import math

import ml_dtypes
import numpy as np
import pytest

from compiler import build, outputs
from compiler.backend.emit import builder as emit_builder
from compiler.core.types import BY_MLIR, FLOAT_DTYPES, DType
from compiler.oracle import interp, tolerance, validate
from compiler.runtime import library as runtime

C_SIZES = {"float": ctypes.c_float, "double": ctypes.c_double, "uint16_t": ctypes.c_uint16, "uint8_t": ctypes.c_uint8,
           "int64_t": ctypes.c_int64}


# ---- the table against NumPy, MLIR and C ---------------------------------------------
@pytest.mark.parametrize("d", list(DType), ids=str)
def test_row_agrees_with_numpy_mlir_and_c(d):
    assert DType(d.value) is d and BY_MLIR[d.mlir] is d
    assert d.np_dtype.itemsize == d.itemsize
    assert ctypes.sizeof(C_SIZES[d.c_type]) == d.itemsize
    a = np.zeros(2, d.np_dtype)
    if d.buffer_formats:
        assert memoryview(a).format in d.buffer_formats
    else:
        with pytest.raises((ValueError, TypeError)):
            memoryview(a)
    if d.is_float:
        with np.errstate(over="ignore"):
            stored = np.array([np.inf, 1e30 if d.finite_max < 1e30 else np.inf]).astype(d.np_dtype)
        assert bool(np.isinf(stored.astype(np.float64)).all()) == d.has_inf
        assert d.finite_max == float(ml_dtypes.finfo(d.np_dtype).max)
        assert len(d.tolerance) == 2 and len(d.fd_tolerance) == 2
    else:
        assert d.fd_tolerance is None and d.finite_max == (1 if d is DType.Bool else 2**63 - 1)


@pytest.mark.parametrize("d", FLOAT_DTYPES, ids=str)
def test_overflows_and_bits_are_numpys_cast(d):
    """overflows() and bits_of() answer F32 and F64 without NumPy: they agree with NumPy's
    cast at each format's edge (its largest finite value, the midpoint above it, the next
    doubles), at infinities, NaNs, signed zeros and subnormals."""
    top = d.finite_max
    half_ulp = float(ml_dtypes.finfo(d.np_dtype).eps) * 2.0 ** (math.frexp(top)[1] - 2)   # half the gap below 2**(emax+1)
    edges = [0.0, 1.0, top, top + half_ulp, 1e300, 1.7976931348623157e308]
    for e in list(edges):
        edges += [math.nextafter(e, math.inf), math.nextafter(e, -math.inf)]
    for x in [e for e in edges if math.isfinite(e)] + [-e for e in edges if math.isfinite(e)]:
        with np.errstate(all="ignore"):
            rounded = np.array(x, np.float64).astype(d.np_dtype).astype(np.float64)
        assert d.overflows(x) == (not bool(np.isfinite(rounded))), (d, x)
    assert not d.overflows(math.inf) and not d.overflows(math.nan)
    specials = [math.inf, -math.inf, math.nan, -math.nan, 0.0, -0.0, 1.0 / 3.0, 5e-324, 1e-40]
    for x in specials + [e for e in edges if math.isfinite(e)]:
        with np.errstate(all="ignore"):
            bits = int(np.array(x, np.float64).astype(d.np_dtype).view(f"u{d.itemsize}"))
        assert d.bits_of(x) == bits, (d, x)


def test_mlir_element_types_have_the_item_sizes():
    from mlir import ir
    with ir.Context():
        for d in DType:
            t = ir.Type.parse(d.mlir)
            width = ir.IntegerType(t).width if not d.is_float else ir.FloatType(t).width
            assert width == 8 * d.itemsize, d


def test_f8e4m3_is_ocp_e4m3fn():
    """MLIR f8E4M3FN, PyTorch float8_e4m3fn, JAX and ml_dtypes float8_e4m3fn: max 448, no inf."""
    d = DType.F8E4M3
    assert d.mlir == "f8E4M3FN" and d.np_dtype == np.dtype(ml_dtypes.float8_e4m3fn)
    assert d.finite_max == 448.0 and not d.has_inf
    assert d.bits_of(float("inf")) == 0x7F and d.bits_of(float("-inf")) == 0xFF   # NaN, like ml_dtypes


def test_every_stage_derives_its_table_from_dtype():
    for d in DType:
        assert interp.NP_DTYPES[d] == d.np_dtype
        assert emit_builder.ELEM[d] == d.mlir
        assert runtime.numpy_dtype(d.value) == d.np_dtype
        assert outputs.C_TYPES[d.value] == d.c_type
        assert tolerance.TOLERANCES[d.value] == d.tolerance
        assert (d.value in runtime.FASTCALL_DTYPES) == bool(d.buffer_formats)
    assert validate.FD_TOLERANCES == {d.value: d.fd_tolerance for d in FLOAT_DTYPES}
    for d in FLOAT_DTYPES:
        for x in (math.inf, -math.inf, math.nan):
            assert emit_builder.float_literal(x, d.mlir) == hex(d.bits_of(x))


# ---- interpreter, emitted code and both runtime paths compute the same bits -----------
OPS = {"add": "x + y", "sub": "x - y", "mul": "x * y", "div": "x / y"}
N = 12


def _limits_source() -> str:
    fns = []
    for d in FLOAT_DTYPES:
        t = f"Tensor[{d}, [{N}]]"
        for name, expr in OPS.items():
            fns.append(f"fn {name}_{d}(x: {t}, y: {t}) -> {t} {{ {expr} }}")
        fns.append(f"fn neg_{d}(x: {t}) -> {t} {{ -x }}")
        fns.append(f"fn twice_{d}(x: Tensor[{d}, [3]]) -> Tensor[{d}, [3]] {{ x + x }}")
        # infinities and NaN as written (an overflowing literal like 1e30 is an error: issue 26)
        edges = "inf, -inf" if d.has_inf else "nan, -448.0"
        fns.append(f"fn lits_{d}() -> Tensor[{d}, [4]] {{ Tensor[{d}, [4]] {{ {edges}, 0.0, 448.0 }} }}")
    # I64 at its limits through layout ops (I64 has no arithmetic).
    fns.append("fn ids(i: Tensor[I64, [2, 3]]) -> Tensor[I64, [3, 2]] { i.reshape([3, 2]) }")
    # Bool through a layout op and a cast (one byte each way, 0 / 1).
    fns.append("fn bools(b: Tensor[Bool, [2, 3]]) -> (Tensor[Bool, [3, 2]], Tensor[I64, [2, 3]]) "
               "{ (b.reshape([3, 2]), b.cast(dtype=I64)) }")
    return "\n".join(fns) + "\n"


LIMITS_SOURCE = _limits_source()


def _limit_values(d: DType) -> tuple[np.ndarray, np.ndarray]:
    """Pairs at the format's edges: max, max/2 (whose sum is max), the largest power of two,
    the smallest normal and subnormal, -0.0, values that overflow when added or multiplied,
    ties of round-to-nearest-even, NaN and (where the format has it) inf."""
    fi = ml_dtypes.finfo(d.np_dtype)
    big, tiny, sub = float(fi.max), float(fi.smallest_normal), float(fi.smallest_subnormal)
    inf = math.inf if d.has_inf else big
    x = [big, big, -big, big / 2, tiny, sub, -0.0, 1.0, 150.0, 200.0, math.nan, inf]
    y = [big, -big, big, big / 2, tiny, sub, 0.0, float(fi.eps) / 2, 150.0, 2.0, 1.0, 1.0]
    return np.array(x).astype(d.np_dtype), np.array(y).astype(d.np_dtype)


@pytest.fixture(scope="module", params=[0, 2], ids=["O0", "O2"])
def limits_lib(tmp_path_factory, request):
    d = tmp_path_factory.mktemp(f"limits{request.param}")
    (d / "limits.kina").write_text(LIMITS_SOURCE)
    res = build.build_file(d / "limits.kina", d / "limits.so", request.param)
    assert res.ok, "\n".join(res.source.render(g) for g in res.diagnostics)
    return res.program, {fc: runtime.load(res.so_path, fastcall=fc) for fc in (True, False)}


def _same_bits(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Bit-identical, except that any NaN matches any NaN (payloads are not part of the contract)."""
    assert got.dtype == want.dtype and got.shape == want.shape, what
    g, w = got.astype(np.float64), want.astype(np.float64)
    nan = np.isnan(w)
    assert np.array_equal(np.isnan(g), nan), f"{what}: NaN where {g} vs {w}"
    gb, wb = got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}")
    bad = ~nan & (gb != wb)
    assert not bad.any(), f"{what}: got {g[bad]} want {w[bad]} at {np.flatnonzero(bad)}"


@pytest.mark.parametrize("d", FLOAT_DTYPES, ids=str)
def test_interpreter_library_and_both_runtime_paths_agree_at_the_limits(limits_lib, d):
    program, libs = limits_lib
    x, y = _limit_values(d)
    x_before, y_before = x.copy(), y.copy()
    with np.errstate(all="ignore"):
        cases = [(f"{op}_{d}", [x, y]) for op in OPS] + [(f"neg_{d}", [x]), (f"lits_{d}", [])]
        for name, args in cases:
            want = interp.run_function(program, name, args)
            for fastcall, lib in libs.items():
                assert lib[name].uses_fastcall == (fastcall and bool(d.buffer_formats))
                _same_bits(lib[name](*args), want, f"{name} fastcall={fastcall}")
                out = np.empty_like(want)
                lib[name](*args, out=out)
                _same_bits(out, want, f"{name} out= fastcall={fastcall}")
    assert x.tobytes() == x_before.tobytes() and y.tobytes() == y_before.tobytes(), "inputs were written"


def test_kinac_run_and_the_library_agree_on_f8e4m3_x_plus_x(limits_lib):
    """Issue 11: x + x at [150, 200, 448] was [inf, inf, inf] in `kinac run` (IEEE E4M3, max
    240) and [288, 384, nan] in the library (E4M3FN).  150 and 200 are stored as 144 and 192."""
    program, libs = limits_lib
    x = np.array([150.0, 200.0, 448.0]).astype(DType.F8E4M3.np_dtype)
    want = interp.run_function(program, "twice_F8E4M3", [x])
    got = want.astype(np.float64)
    np.testing.assert_array_equal(got[:2], [288.0, 384.0])          # round to nearest even
    assert np.isnan(got[2])                                         # 896 overflows: NaN, no inf
    for lib in libs.values():
        _same_bits(lib.twice_F8E4M3(x), want, "twice_F8E4M3")


def test_i64_limits_pass_through_every_path(limits_lib):
    program, libs = limits_lib
    i = np.array([[2**63 - 1, -2**63, 0], [-1, 1, 2**62]], np.int64)
    want = interp.run_function(program, "ids", [i])
    for lib in libs.values():
        np.testing.assert_array_equal(lib.ids(i), want)
        np.testing.assert_array_equal(lib.ids(i.tolist()), want)


def test_bool_passes_through_every_path(limits_lib):
    program, libs = limits_lib
    b = np.array([[True, False, True], [False, False, True]])
    want = interp.run_function(program, "bools", [b])
    for fastcall, lib in libs.items():
        assert lib.bools.uses_fastcall == fastcall
        for got, w in zip(lib.bools(b), want):
            assert got.dtype == w.dtype
            np.testing.assert_array_equal(got, w)
        np.testing.assert_array_equal(lib.bools(b.tolist())[0], want[0])
