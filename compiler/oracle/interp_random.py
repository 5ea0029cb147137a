"""The NumPy reference of the random ops: counter-based Threefry-2x32 keys, derived exactly
as JAX derives them (jax._src.prng with jax_threefry_partitionable, the default since
JAX 0.5), so that every element is a pure function of (key, index).

A key is a Tensor[I64, [2]] holding two 32-bit words (values taken modulo 2^32, as JAX's
uint32 key data).  With y(key, i) = threefry2x32(key, (0, i)) (20 rounds):
  random_split(key, n)[i]   = y(key, i)                  (jax.random.split)
  random_fold_in(key, d)    = y(key, d mod 2^32)         (jax.random.fold_in)
  random_bits(key, shape)   = y0 ^ y1 at the flat index  (jax.random.bits, 32 bits)
  random_uniform            = bitcast((bits >> 9) | 0x3F800000) - 1.0, in [0, 1)
  random_normal             = sqrt(2) erfinv(u), u uniform in (-1, 1)  (jax.random.normal;
                              F64: erfinv in float64 of the float32 u)
  bernoulli(key, p, shape)  = random_uniform(key, shape) < p
  categorical(key, logits)  = argmax(logits + gumbel), gumbel = -log(-log(u)), u uniform in
                              [tiny, 1) of logits' shape (jax.random.categorical; keeps the axis)
The compiled lowering (compiler/backend/emit/ops_random.py) computes the same integer
steps, so bits, uniforms, Bernoulli draws and normals (whose log1p is computed from
adds, multiplies and a divide, not libm's) are identical everywhere; the Gumbel values
go through libm's log and may differ in the last bit (the argmax they feed rarely does).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from compiler.core.types import Attrs, DType, TensorType
from compiler.ir.random_rules import (
    ERFINV_LARGE,
    ERFINV_SMALL,
    LN2_HI,
    LN2_HI64,
    LN2_LO,
    LN2_LO64,
    LOG64_LG,
    LOG_POLY,
    LOG_SQRTHF,
    NORMAL_LO,
    PARITY,
    ROTATIONS,
    TINY,
    uniform_bits,
)
from compiler.runtime.arrays import Array

_MASK = np.uint64(0xFFFFFFFF)


def _rotl(x: Array, r: int) -> Array:
    out: Array = (x << np.uint32(r)) | (x >> np.uint32(32 - r))
    return out


def threefry2x32(k0: int, k1: int, x0: Array, x1: Array) -> tuple[Array, Array]:
    """Threefry-2x32 with 20 rounds on uint32 counter words (the Random123 / JAX cipher)."""
    ks = [np.uint32(k0), np.uint32(k1), np.uint32(k0 ^ k1 ^ PARITY)]
    x0, x1 = x0.astype(np.uint32) + ks[0], x1.astype(np.uint32) + ks[1]
    for block in range(5):
        for r in ROTATIONS[block % 2]:
            x0 = x0 + x1
            x1 = _rotl(x1, r) ^ x0
        x0 = x0 + ks[(block + 1) % 3]
        x1 = x1 + ks[(block + 2) % 3] + np.uint32(block + 1)
    return x0, x1


def key_words(key: Array) -> tuple[int, int]:
    words = np.asarray(key).astype(np.int64).astype(np.uint64) & _MASK
    return int(words[0]), int(words[1])


def _blocks(key: Array, n: int) -> tuple[Array, Array]:
    k0, k1 = key_words(key)
    with np.errstate(over="ignore"):
        return threefry2x32(k0, k1, np.zeros(n, np.uint32), np.arange(n, dtype=np.uint64).astype(np.uint32))


def bits(key: Array, shape: tuple[int, ...]) -> Array:
    """uint32 bits of this shape (jax.random.bits)."""
    y0, y1 = _blocks(key, math.prod(shape))
    out: Array = (y0 ^ y1).reshape(shape)
    return out


def uniform(key: Array, shape: tuple[int, ...], lo: float = 0.0, hi: float = 1.0) -> Array:
    """float32 in [lo, hi): the 23 high bits as a mantissa of [1, 2), minus 1, scaled."""
    f = ((bits(key, shape) >> np.uint32(9)) | np.uint32(0x3F800000)).view(np.float32) - np.float32(1.0)
    if lo == 0.0 and hi == 1.0:
        return f
    out: Array = np.maximum(np.float32(lo), f * (np.float32(hi) - np.float32(lo)) + np.float32(lo))
    return out


def uniform_in(key: Array, shape: tuple[int, ...], dtype: DType) -> Array:
    """A uniform in [0, 1) of dtype, as jax.random.uniform(key, shape, dtype): the mantissa
    bits of the draw's low bits, m * 2^-mantissa (exact in dtype; float32 values here)."""
    used, nmant = uniform_bits(dtype)
    low = bits(key, shape) & np.uint32((1 << used) - 1) if used < 32 else bits(key, shape)
    out: Array = (low >> np.uint32(used - nmant)).astype(np.float32) * np.float32(2.0 ** -nmant)
    return out


def log1p(y: Array) -> Array:
    """float32 log1p from adds, multiplies and one divide (random_rules.LOG_POLY), step for
    step as the lowering's, so normals have the same bits everywhere (libm's log1pf and
    NumPy's differ in the last bit).  For y > -1 (u = 1 + y a normal float)."""
    f = np.float32
    y = y.astype(f)
    u = y + f(1.0)
    bits = u.view(np.int32)
    m = ((bits & np.int32(0x007FFFFF)) | np.int32(0x3F000000)).view(f)    # u = m 2^e, m in [1/2, 1)
    low = m < f(LOG_SQRTHF)
    e = ((bits >> np.int32(23)) - np.int32(126) - low.astype(np.int32)).astype(f)
    t = np.where(low, m + m, m) - f(1.0)
    z = t * t
    p = np.full_like(t, f(LOG_POLY[0]))
    for c in LOG_POLY[1:]:
        p = p * t + f(c)
    r = p * t * z
    r = r + e * f(LN2_LO)
    r = r + z * f(-0.5)
    log_u = t + r + e * f(LN2_HI)
    with np.errstate(divide="ignore", invalid="ignore"):
        out: Array = np.where(u == f(1.0), y, log_u * (y / (u - f(1.0)))).astype(f)
    return out


def log1p_f64(y: Array) -> Array:
    """float64 log1p from adds, multiplies and divides (fdlibm's log, random_rules.LOG64_LG),
    step for step as the lowering's (libm's log1p, NumPy's and -O2's differ in the last bit)."""
    f = np.float64
    lg = [f(c) for c in LOG64_LG]
    y = y.astype(f)
    u = y + f(1.0)
    bits = u.view(np.int64)
    m = ((bits & np.int64(0x000FFFFFFFFFFFFF)) | np.int64(0x3FE0000000000000)).view(f)   # [1/2, 1)
    low = m < f(LOG_SQRTHF)
    e = ((bits >> np.int64(52)) - np.int64(1022) - low.astype(np.int64)).astype(f)
    t = np.where(low, m + m, m) - f(1.0)
    s = t / (f(2.0) + t)
    z = s * s
    w = z * z
    r = z * (lg[0] + w * (lg[2] + w * (lg[4] + w * lg[6]))) + w * (lg[1] + w * (lg[3] + w * lg[5]))
    hfsq = f(0.5) * t * t
    log_u = e * f(LN2_HI64) - ((hfsq - (s * (hfsq + r) + e * f(LN2_LO64))) - t)
    with np.errstate(divide="ignore", invalid="ignore"):
        out: Array = np.where(u == f(1.0), y, log_u * (y / (u - f(1.0)))).astype(f)
    return out


def erfinv(x: Array, ft: type[np.floating[Any]] = np.float32) -> Array:
    """XLA's float32 erf_inv (in float64 with unrounded coefficients when ft is float64)."""
    x = x.astype(ft)
    w = -(log1p(-x * x) if ft is np.float32 else log1p_f64(-x * x))
    small = w < ft(5.0)
    w = np.where(small, w - ft(2.5), np.sqrt(w) - ft(3.0)).astype(ft)
    p = np.where(small, ft(ERFINV_SMALL[0]), ft(ERFINV_LARGE[0])).astype(ft)
    for a, b in zip(ERFINV_SMALL[1:], ERFINV_LARGE[1:]):
        p = (np.where(small, ft(a), ft(b)) + p * w).astype(ft)
    out: Array = np.where(np.abs(x) == 1, x * ft(np.inf), p * x).astype(ft)
    return out


def normal(key: Array, shape: tuple[int, ...], dtype: DType = DType.F32) -> Array:
    """sqrt(2) erfinv(u) in float32; for F64, of the same float32 u in float64."""
    ft = np.float64 if dtype is DType.F64 else np.float32
    out: Array = ft(math.sqrt(2)) * erfinv(uniform(key, shape, NORMAL_LO, 1.0), ft)
    return out


def gumbel(key: Array, shape: tuple[int, ...]) -> Array:
    out: Array = -np.log(-np.log(uniform(key, shape, TINY, 1.0)))
    return out


def split(key: Array, n: int) -> Array:
    y0, y1 = _blocks(key, n)
    return np.stack([y0, y1], axis=1).astype(np.int64)


def fold_in(key: Array, data: Array) -> Array:
    k0, k1 = key_words(key)
    d = np.uint32(int(np.asarray(data).astype(np.int64)) & 0xFFFFFFFF)
    with np.errstate(over="ignore"):
        y0, y1 = threefry2x32(k0, k1, np.zeros(1, np.uint32), np.full(1, d, np.uint32))
    return np.array([y0[0], y1[0]], np.int64)


# ---- the interpreter's rows: (operand arrays, attributes, result type) -> result ------------------
def _categorical(a: list[Array], at: Attrs, t: TensorType) -> Array:
    key, logits = a
    noisy = logits.astype(np.float32) + gumbel(key, logits.shape)
    out: Array = np.argmax(noisy, axis=at["axis"], keepdims=True)
    return out


def _bernoulli(a: list[Array], at: Attrs, t: TensorType) -> Array:
    return uniform(a[0], t.shape) < np.float32(at["p"])


RANDOM_OPS = {
    "random_split": lambda a, at, t: split(a[0], at["n"]),
    "random_fold_in": lambda a, at, t: fold_in(a[0], a[1]),
    "random_bits": lambda a, at, t: bits(a[0], t.shape).astype(np.int64),
    "random_uniform": lambda a, at, t: uniform_in(a[0], t.shape, t.dtype),
    "random_normal": lambda a, at, t: normal(a[0], t.shape, t.dtype),
    "bernoulli": _bernoulli,
    "categorical": _categorical,
}
