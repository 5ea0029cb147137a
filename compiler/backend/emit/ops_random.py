"""MLIR lowerings of the random ops: Threefry-2x32 (20 rounds) in i32 arithmetic inside
linalg.generic bodies, each element computed from (key, its flat index) alone, so the
loops need no state and any tiling or threading of them draws the same bits.  The steps
are compiler/oracle/interp_random.py's (JAX's derivation), integer for integer; the
uniform's and the normal's float steps are the same f32 operations (log1p included: no
libm), so bits, uniforms, Bernoulli draws and normals equal the interpreter's bit for bit.  emit_ops.LOWERINGS takes these rows from
RANDOM_LOWERINGS.
"""
from __future__ import annotations

import math

from compiler.backend.emit.builder import COMPUTE, Emitter, FnEmitter, identity, ty
from compiler.backend.emit.ops_ext import EXT_LOWERINGS
from compiler.core.types import DType, TensorType
from compiler.ir import nodes as ir
from compiler.ir.nodes import as_tensor
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

_F = COMPUTE


def _c(em: FnEmitter, v: int) -> str:
    return em.scalar(v, "i32")


def _i(em: FnEmitter, op: str, a: str, b: str) -> str:
    return em.op(f"arith.{op} {a}, {b} : i32")


def threefry(em: FnEmitter, k0: str, k1: str, x0: str, x1: str) -> tuple[str, str]:
    """Threefry-2x32 of the counter words (x0, x1) under key (k0, k1), all i32."""
    ks = [k0, k1, _i(em, "xori", _i(em, "xori", k0, k1), _c(em, PARITY))]
    x0, x1 = _i(em, "addi", x0, ks[0]), _i(em, "addi", x1, ks[1])
    for block in range(5):
        for r in ROTATIONS[block % 2]:
            x0 = _i(em, "addi", x0, x1)
            rot = _i(em, "ori", _i(em, "shli", x1, _c(em, r)), _i(em, "shrui", x1, _c(em, 32 - r)))
            x1 = _i(em, "xori", rot, x0)
        x0 = _i(em, "addi", x0, ks[(block + 1) % 3])
        x1 = _i(em, "addi", _i(em, "addi", x1, ks[(block + 2) % 3]), _c(em, block + 1))
    return x0, x1


def _key(em: FnEmitter, key: str) -> tuple[str, str]:
    """The key's two words as i32 (each I64 element modulo 2^32)."""
    words = []
    for k in range(2):
        w = em.op(f"tensor.extract {key}[{em.scalar(k, 'index')}] : tensor<2xi64>")
        words.append(em.op(f"arith.trunci {w} : i64 to i32"))
    return words[0], words[1]


def _flat_index(em: FnEmitter, shape: tuple[int, ...]) -> str:
    """The row-major flat index of the current element, as i32 (shapes hold < 2^32 draws)."""
    flat = em.scalar(0, "index")
    for d, n in enumerate(shape):
        flat = em.op(f"arith.muli {flat}, {em.dim(n)} : index")   # a size: its prologue value
        flat = em.op(f"arith.addi {flat}, {em.op(f'linalg.index {d} : index')} : index")
    return em.op(f"arith.index_cast {flat} : index to i32")


def _bits(em: FnEmitter, k: tuple[str, str], shape: tuple[int, ...]) -> str:
    y0, y1 = threefry(em, k[0], k[1], _c(em, 0), _flat_index(em, shape))
    return _i(em, "xori", y0, y1)


def _const(em: FnEmitter, v: float, t: str = _F) -> str:
    """A constant of float type t (rounded to float32 for f32, as the interpreter's are)."""
    # imported here: only a random op needs numpy, and importing it costs every kinac start ~60 ms
    import numpy as np
    return em.scalar(float(np.float32(v)) if t == _F else float(v), t)


def _f(em: FnEmitter, v: float) -> str:
    return _const(em, v, _F)


def _uniform(em: FnEmitter, k: tuple[str, str], shape: tuple[int, ...], lo: float = 0.0) -> str:
    """f32 in [lo, 1): the 23 high bits as the mantissa of [1, 2), minus 1 (then scaled)."""
    bits = _i(em, "ori", _i(em, "shrui", _bits(em, k, shape), _c(em, 9)), _c(em, 0x3F800000))
    f = em.op(f"arith.subf {em.op(f'arith.bitcast {bits} : i32 to {_F}')}, {_f(em, 1.0)} : {_F}")
    if lo == 0.0:
        return f
    import numpy as np
    scale = float(np.float32(1.0) - np.float32(lo))
    scaled = em.op(f"arith.addf {em.op(f'arith.mulf {f}, {_f(em, scale)} : {_F}')}, {_f(em, lo)} : {_F}")
    return em.op(f"arith.maximumf {_f(em, lo)}, {scaled} : {_F}")


def _uniform_in(em: FnEmitter, k: tuple[str, str], shape: tuple[int, ...], dtype: DType) -> str:
    """f32 m * 2^-mantissa, m the mantissa bits of dtype from the draw's low bits (exact in dtype)."""
    used, nmant = uniform_bits(dtype)
    b = _bits(em, k, shape)
    if used < 32:
        b = _i(em, "andi", b, _c(em, (1 << used) - 1))
    m = em.op(f"arith.uitofp {_i(em, 'shrui', b, _c(em, used - nmant))} : i32 to {_F}")
    return em.op(f"arith.mulf {m}, {_f(em, 2.0 ** -nmant)} : {_F}")


def _fop(em: FnEmitter, op: str, a: str, b: str) -> str:
    return em.op(f"arith.{op} {a}, {b} : {_F}")


def _log1p(em: FnEmitter, y: str) -> str:
    """f32 log1p from adds, multiplies and one divide, operation for operation as
    interp_random.log1p (not math.log1p: libm's and NumPy's differ in the last bit)."""
    u = _fop(em, "addf", y, _f(em, 1.0))
    bits = em.op(f"arith.bitcast {u} : {_F} to i32")
    m = em.op(f"arith.bitcast {_i(em, 'ori', _i(em, 'andi', bits, _c(em, 0x007FFFFF)), _c(em, 0x3F000000))}"
              f" : i32 to {_F}")
    low = em.op(f"arith.cmpf olt, {m}, {_f(em, LOG_SQRTHF)} : {_F}")
    e_int = _i(em, "subi", _i(em, "subi", _i(em, "shrsi", bits, _c(em, 23)), _c(em, 126)),
               em.op(f"arith.extui {low} : i1 to i32"))
    e = em.op(f"arith.sitofp {e_int} : i32 to {_F}")
    t = _fop(em, "subf", em.op(f"arith.select {low}, {_fop(em, 'addf', m, m)}, {m} : {_F}"), _f(em, 1.0))
    z = _fop(em, "mulf", t, t)
    p = _f(em, LOG_POLY[0])
    for c in LOG_POLY[1:]:
        p = _fop(em, "addf", _fop(em, "mulf", p, t), _f(em, c))
    r = _fop(em, "mulf", _fop(em, "mulf", p, t), z)
    r = _fop(em, "addf", r, _fop(em, "mulf", e, _f(em, LN2_LO)))
    r = _fop(em, "addf", r, _fop(em, "mulf", z, _f(em, -0.5)))
    log_u = _fop(em, "addf", _fop(em, "addf", t, r), _fop(em, "mulf", e, _f(em, LN2_HI)))
    corrected = _fop(em, "mulf", log_u, _fop(em, "divf", y, _fop(em, "subf", u, _f(em, 1.0))))
    one = em.op(f"arith.cmpf oeq, {u}, {_f(em, 1.0)} : {_F}")
    return em.op(f"arith.select {one}, {y}, {corrected} : {_F}")


def _log1p_f64(em: FnEmitter, y: str) -> str:
    """f64 log1p (fdlibm's log, then the correction), operation for operation as
    interp_random.log1p_f64 (math.log1p is libm's at -O0 and other bits at -O2)."""
    def op(name: str, a: str, b: str) -> str:
        return em.op(f"arith.{name} {a}, {b} : f64")

    def c(v: float) -> str:
        return _const(em, v, "f64")

    def i(name: str, a: str, v: int) -> str:
        return em.op(f"arith.{name} {a}, {em.scalar(v, 'i64')} : i64")

    u = op("addf", y, c(1.0))
    bits = em.op(f"arith.bitcast {u} : f64 to i64")
    m = em.op(f"arith.bitcast {i('ori', i('andi', bits, 0x000FFFFFFFFFFFFF), 0x3FE0000000000000)} : i64 to f64")
    low = em.op(f"arith.cmpf olt, {m}, {c(LOG_SQRTHF)} : f64")
    e_int = em.op(f"arith.subi {i('subi', i('shrsi', bits, 52), 1022)}, {em.op(f'arith.extui {low} : i1 to i64')} : i64")
    e = em.op(f"arith.sitofp {e_int} : i64 to f64")
    t = op("subf", em.op(f"arith.select {low}, {op('addf', m, m)}, {m} : f64"), c(1.0))
    s = op("divf", t, op("addf", c(2.0), t))
    z = op("mulf", s, s)
    w = op("mulf", z, z)
    lg = LOG64_LG
    odd = op("addf", c(lg[4]), op("mulf", w, c(lg[6])))
    odd = op("mulf", z, op("addf", c(lg[0]), op("mulf", w, op("addf", c(lg[2]), op("mulf", w, odd)))))
    even = op("mulf", w, op("addf", c(lg[1]), op("mulf", w, op("addf", c(lg[3]), op("mulf", w, c(lg[5]))))))
    r = op("addf", odd, even)
    hfsq = op("mulf", op("mulf", c(0.5), t), t)
    inner = op("addf", op("mulf", s, op("addf", hfsq, r)), op("mulf", e, c(LN2_LO64)))
    log_u = op("subf", op("mulf", e, c(LN2_HI64)), op("subf", op("subf", hfsq, inner), t))
    corrected = op("mulf", log_u, op("divf", y, op("subf", u, c(1.0))))
    one = em.op(f"arith.cmpf oeq, {u}, {c(1.0)} : f64")
    return em.op(f"arith.select {one}, {y}, {corrected} : f64")


def _erfinv(em: FnEmitter, x: str, t: str = _F) -> str:
    """XLA's float erf_inv, operation for operation as interp_random.erfinv (in f32, or in
    f64 for an F64 normal: the same polynomial with unrounded coefficients)."""
    sq = em.op(f"arith.mulf {x}, {x} : {t}")
    neg_sq = em.op(f"arith.negf {sq} : {t}")
    # the log1p above, of the dtype (bit-equal to the interpreter's at every level)
    log1p = _log1p(em, neg_sq) if t == _F else _log1p_f64(em, neg_sq)
    w = em.op(f"arith.negf {log1p} : {t}")
    small = em.op(f"arith.cmpf olt, {w}, {_const(em, 5.0, t)} : {t}")
    w_small = em.op(f"arith.subf {w}, {_const(em, 2.5, t)} : {t}")
    w_large = em.op(f"arith.subf {em.op(f'math.sqrt {w} : {t}')}, {_const(em, 3.0, t)} : {t}")
    w = em.op(f"arith.select {small}, {w_small}, {w_large} : {t}")

    def coef(i: int) -> str:
        return em.op(f"arith.select {small}, {_const(em, ERFINV_SMALL[i], t)}, {_const(em, ERFINV_LARGE[i], t)} : {t}")

    p = coef(0)
    for i in range(1, len(ERFINV_SMALL)):
        p = em.op(f"arith.addf {coef(i)}, {em.op(f'arith.mulf {p}, {w} : {t}')} : {t}")
    edge = em.op(f"arith.cmpf oeq, {em.op(f'math.absf {x} : {t}')}, {_const(em, 1.0, t)} : {t}")
    inf = em.op(f"arith.mulf {x}, {_const(em, math.inf, t)} : {t}")
    return em.op(f"arith.select {edge}, {inf}, {em.op(f'arith.mulf {p}, {x} : {t}')} : {t}")


def _draw(kind: str) -> Emitter:
    """random_bits / random_uniform / random_normal / bernoulli: a generic with no inputs."""
    def lower_draw(em: FnEmitter, node: ir.OpApp, args: list[str], out: str) -> str:
        """`linalg.generic` with no inputs: Threefry-2x32 of (key, flat index) in i32, then
        the op's steps (xor of the words; mantissa bits; erfinv; a compare with p)."""
        t = ty(node.type)
        k = _key(em, args[0])
        em.F = _F   # the draws are f32 steps whatever the dtype (an F64 uniform is the F32 one)

        def body(_o: str) -> str:
            if kind == "random_bits":
                return em.op(f"arith.extui {_bits(em, k, t.shape)} : i32 to i64")
            if kind == "random_uniform":
                return em.store(_uniform_in(em, k, t.shape, as_tensor(node.type).dtype), t.elem)
            if kind == "random_normal":
                u = _uniform(em, k, t.shape, NORMAL_LO)
                c = "f64" if t.elem == "f64" else _F    # F64: erfinv in f64 of the f32 uniform
                u = em.fconv(u, _F, c)
                normal = em.op(f"arith.mulf {_const(em, math.sqrt(2), c)}, {_erfinv(em, u, c)} : {c}")
                return em.fconv(normal, c, t.elem)
            hit = em.op(f"arith.cmpf olt, {_uniform(em, k, t.shape)}, {_f(em, node.attrs['p'])} : {_F}")
            return em.op(f"arith.extui {hit} : i1 to {t.elem}")

        return em.generic([], (em.empty(t), t, identity(t.rank)), ["parallel"] * t.rank, body, out)
    return lower_draw


def _keys(em: FnEmitter, node: ir.OpApp, args: list[str], out: str) -> str:
    """random_split ([n, 2]: row i = Threefry of (0, i)) and random_fold_in ([2]: of (0, d))."""
    t = ty(node.type)
    k = _key(em, args[0])
    data = None
    if node.op == "random_fold_in":
        d = em.op(f"tensor.extract {args[1]}[] : tensor<i64>")
        data = em.op(f"arith.trunci {d} : i64 to i32")

    def body(_o: str) -> str:
        counter = data if data is not None else em.op(
            f"arith.index_cast {em.op('linalg.index 0 : index')} : index to i32")
        y0, y1 = threefry(em, k[0], k[1], _c(em, 0), counter)
        first = em.op(f"arith.cmpi eq, {em.op(f'linalg.index {t.rank - 1} : index')}, "
                      f"{em.scalar(0, 'index')} : index")
        return em.op(f"arith.extui {em.op(f'arith.select {first}, {y0}, {y1} : i32')} : i32 to i64")

    return em.generic([], (em.empty(t), t, identity(t.rank)), ["parallel"] * t.rank, body, out)


def lower_categorical(em: FnEmitter, node: ir.OpApp, args: list[str], out: str) -> str:
    """logits + gumbel (-log(-log(u)), u uniform in [tiny, 1) of logits' shape) in f32, then
    argmax's lowering along the axis."""
    src = ty(node.args[1].type)
    noisy_t = src.with_elem(_F)
    k = _key(em, args[0])
    em.F = _F   # Gumbel noise in f32, as the interpreter adds it (F64 logits are rounded)

    def body(v: str, _o: str) -> str:
        u = _uniform(em, k, src.shape, TINY)
        inner = em.op(f"arith.negf {em.op(f'math.log {u} : {_F}')} : {_F}")
        g = em.op(f"arith.negf {em.op(f'math.log {inner} : {_F}')} : {_F}")
        return em.op(f"arith.addf {em.load(v, src.elem)}, {g} : {_F}")

    noisy = em.generic([(args[1], src, identity(src.rank))], (em.empty(noisy_t), noisy_t, identity(src.rank)),
                       ["parallel"] * src.rank, body)
    var = ir.Var("noisy", TensorType(DType.F32, src.shape))
    argmax = ir.OpApp("argmax", [var], {"axis": node.attrs["axis"]}, node.type, node.span)
    return EXT_LOWERINGS["argmax"](em, argmax, [noisy], out)


RANDOM_LOWERINGS: dict[str, Emitter] = {
    **{op: _draw(op) for op in ("random_bits", "random_uniform", "random_normal", "bernoulli")},
    "random_split": _keys,
    "random_fold_in": _keys,
    "categorical": lower_categorical,
}
