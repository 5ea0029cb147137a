"""Typing rules of the random ops (rows in ir/ops.py): a key is a Tensor[I64, [2]]
(two 32-bit words of Threefry-2x32 key data, as JAX's keys), and every op's result is a
pure function of its key and the element's index (compiler/oracle/interp_random.py)."""
from __future__ import annotations

import math

from compiler.core.types import Attrs, DType, TensorType
from compiler.ir.shape_rules import OpError, _axis, _nonempty_axis, require_float

# The counter of one draw is its flat index, one 32-bit word (JAX's limit is 2^64).
MAX_DRAWS = 2 ** 32
# The generator's constants, shared by the interpreter (oracle/interp_random.py) and the
# lowering (backend/emit/ops_random.py): Threefry-2x32's rotations and key-schedule parity.
ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
PARITY = 0x1BD11BDA
# XLA's float ErfInv (M. Giles' single-precision approximation), as jax.lax.erf_inv computes it
ERFINV_SMALL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
ERFINV_LARGE = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)
# log1p of the normal's erfinv, in f32 adds, multiplies and a divide only (no libm: the
# interpreter and every opt level compute the same bits): Cephes' logf on u = 1 + y,
# u = m 2^e with m in [sqrt(1/2), sqrt(2)), log(1 + t) ~ t - t^2/2 + t^3 P(t), e ln 2 in
# two parts; then Kahan's correction log1p(y) = log(u) * y / (u - 1) (y itself where u == 1).
LOG_POLY = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
            -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1)
LOG_SQRTHF = 0.707106781186547524
LN2_HI, LN2_LO = 0.693359375, -2.12194440e-4
# The F64 normal's log1p, in f64 adds, multiplies and divides (same reason): fdlibm's log on
# u = m 2^e (e_log.c: log(1 + t) from s = t / (2 + t) and Lg1..Lg7 in s^2), then the same
# correction.  Within 2 ulp of np.log1p on the normal's arguments (tests/test_random.py).
LOG64_LG = (6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01,
            2.222219843214978396e-01, 1.818357216161805012e-01, 1.531383769920937332e-01,
            1.479819860511658591e-01)
LN2_HI64, LN2_LO64 = 6.93147180369123816490e-01, 1.90821492927058770002e-10
# uniform's lower bounds for normal (the float after -1) and for gumbel (the smallest normal f32)
NORMAL_LO = -0.9999999403953552
TINY = 1.1754943508222875e-38


def uniform_bits(dtype: DType) -> tuple[int, int]:
    """(random bits used, mantissa bits) of a uniform in dtype, as jax.random.uniform draws it:
    the low `used` bits of the 32-bit draw, shifted right to the `mantissa` high ones, give
    the value m * 2^-mantissa (exact in the dtype).  F64 draws as F32 does (one 32-bit word
    per element, 23 mantissa bits, exact in F64; JAX's float64 uniform takes 64-bit draws)."""
    nmant = {DType.F32: 23, DType.F64: 23, DType.F16: 10, DType.BF16: 7, DType.F8E4M3: 3, DType.F8E5M2: 2}[dtype]
    nbits = {DType.F32: 32, DType.F64: 32, DType.F16: 16, DType.BF16: 16}.get(dtype, 8)
    return (8 if nmant < 8 else nbits), nmant


def _key(t: TensorType, i: int, op: str) -> None:
    if t.dtype != DType.I64 or t.shape != (2,):
        raise OpError("dtype", f"{op}: operand {i} must be a key, Tensor[I64, [2]] (from random_split or "
                      f"random_fold_in, or two 32-bit words from the host), not {t}", i)


def _shaped(t: TensorType, attrs: Attrs, dtype: DType, op: str) -> TensorType:
    shape = tuple(attrs["shape"])
    if all(isinstance(d, int) for d in shape):
        if any(d < 0 for d in shape):
            raise OpError("attr", f"{op}: shape {list(shape)} has a negative dimension", "shape")
        if math.prod(shape) > MAX_DRAWS:
            raise OpError("attr", f"{op}: shape {list(shape)} has more than 2^32 elements (one 32-bit "
                          "counter per element); split the key and draw in parts", "shape")
    return TensorType(dtype, shape, t.placement)


def infer_random(args: list[TensorType], attrs: Attrs, op: str = "random_uniform") -> TensorType:
    """random_bits (I64 words), random_uniform and random_normal (F32), bernoulli (Bool)."""
    (key,) = args
    _key(key, 0, op)
    if op == "bernoulli" and not 0.0 <= attrs["p"] <= 1.0:
        raise OpError("attr", f"bernoulli: p={attrs['p']} is not a probability (0 <= p <= 1)", "p")
    dtype = {"random_bits": DType.I64, "bernoulli": DType.Bool}.get(op) or DType[attrs.get("dtype", "F32")]
    return _shaped(key, attrs, dtype, op)


def infer_split(args: list[TensorType], attrs: Attrs) -> TensorType:
    (key,) = args
    _key(key, 0, "random_split")
    n = attrs["n"]
    if isinstance(n, int) and not 1 <= n <= MAX_DRAWS:
        raise OpError("attr", f"random_split: n={n} must be between 1 and 2^32", "n")
    return TensorType(DType.I64, (n, 2), key.placement)


def infer_fold_in(args: list[TensorType], attrs: Attrs) -> TensorType:
    key, data = args
    _key(key, 0, "random_fold_in")
    if data.dtype != DType.I64 or data.shape != ():
        raise OpError("dtype", f"random_fold_in: operand 1 must be a Tensor[I64, []] (a step number, "
                      f"taken modulo 2^32), not {data}", 1)
    return key


def infer_categorical(args: list[TensorType], attrs: Attrs) -> TensorType:
    key, logits = args
    _key(key, 0, "categorical")
    require_float(logits, 1, "categorical")
    axis = _axis(attrs["axis"], logits.rank, logits, "categorical")
    _nonempty_axis(logits, axis, "categorical")
    return TensorType(DType.I64, logits.shape[:axis] + (1,) + logits.shape[axis + 1:], logits.placement)
