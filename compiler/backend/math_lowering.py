"""Kina's own f32 exp (at every level) and log (where a row's log is taken): polynomials in
arith and math ops, with the same bits at -O0 and -O2, in a vector lane and in a scalar loop.

exp.  At -O2 it was a call of glibc's libmvec, whose vector expf (compiler/backend/llvm_stage.py)
handles a vector with any lane outside its fast range (a result below FLT_MIN, or near
overflow) by calling the scalar expf once per such lane.  A causal attention mask makes
half the scores of a softmax -1e4: the [4, 8, 64, 64] exp of the scaled StoryLM took 0.92 ms
with the mask and 0.054 ms without it.  Guarding the inputs with selects does not survive
LLVM (instcombine folds the select back through the call), so exp is computed here:

    exp(x) = e^r * 2^k,  k = roundeven(x * log2(e)),  r = x - k * ln 2  (two-part ln 2, FMAs)

with e^r on |r| <= ln(2)/2 by the degree-7 polynomial of Cephes' expf (1 + r + r^2 P(r)),
and 2^k applied as two exact power-of-two factors 2^(k >> 1) * 2^(k - (k >> 1)), so
subnormal results are rounded once and overflow gives +inf.  x above 89 is clamped to 89
(exp overflows to +inf there) and x below -104 computes exp(0) and is replaced by +0.0
(exp rounds to +0.0 there; a clamped -104 would still be a slow subnormal product).  NaN returns NaN.
-O2 rewrites the tensor IR's math.exp before its tagging (`lower_math`, compiler/backend/engine.py);
-O0 rewrites the emitted text's exp lines the same way (`lower_math_text`, before its
mlir-opt processes), so a loss with a softmax is the same bits at both levels.

log.  Cephes' logf (`_log`, x = m 2^e, a degree-8 polynomial in m - 1, subnormals scaled
first, explicit FMAs).  The emitter writes it where log_softmax takes the log of a row's
sum (FnEmitter.own_log; LLVM hoists it out of the row's loop).  An elementwise `log` keeps
libm's logf at -O0 and libmvec's vector logf at -O2 (3x as fast as this polynomial
vectorised on AVX2): those differ in the last bit.

Accuracy (every 97th f32; tests/test_math_lowering.py sweeps coarser at both levels and
checks the special values exactly): exp within 1.003 ulp of the correctly rounded result on
normal results (libm's expf: 0.502), differing from libm's expf in 0.77% of the inputs,
by 1 ulp; log within 0.783 ulp on every positive finite input, subnormals included
(libm's logf: 0.814), differing from it in 0.64%, by 1 ulp.  The interpreter (float64)
stays the oracle: the differential tests compare within float tolerance.
"""
from __future__ import annotations

import math
import re
import struct
from types import ModuleType
from typing import Any

from compiler.backend.bindings import walk_ops
from compiler.ir.random_rules import LOG_POLY, LOG_SQRTHF

EXP_LOW, EXP_HIGH = -104.0, 89.0          # exp(x) is +0.0 below, +inf above (f32)
LOG2E = 1.44269504088896341
LN2_HI, LN2_LO = 0.693359375, -2.12194440e-4   # ln 2 = LN2_HI + LN2_LO; k * LN2_HI is exact
# Cephes expf: e^r ~ 1 + r + r^2 * (((((P0 r + P1) r + P2) r + P3) r + P4) r + P5)
EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
            1.6666665459e-1, 5.0000001201e-1)
_OEQ, _OLT, _UNO = 1, 4, 14               # arith.cmpf predicates "oeq", "olt" and "uno" (either is NaN)
FLT_MIN = 2.0 ** -126                     # the smallest normal f32


class _Builder:
    """Scalar f32 / i32 arith ops at the current insertion point; `op`, `f`, `i` and `cmp`
    are the two renderings' own (MLIR bindings objects, or lines of MLIR text)."""

    f32: Any
    i32: Any

    def op(self, name: str, *operands: Any, result: Any = None, **attributes: Any) -> Any:
        raise NotImplementedError

    def f(self, value: float) -> Any:
        raise NotImplementedError

    def i(self, value: int) -> Any:
        raise NotImplementedError

    def cmp(self, predicate: int, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def fma(self, a: Any, b: Any, c: Any) -> Any:
        return self.op("math.fma", a, b, c)

    def pow2(self, k: Any) -> Any:
        """2^k as f32 for k in [-126, 127]: the biased exponent in the exponent bits."""
        biased = self.op("arith.addi", k, self.i(127), result=self.i32)
        return self.op("arith.bitcast", self.op("arith.shli", biased, self.i(23), result=self.i32))


class _IRBuilder(_Builder):
    """The ops as MLIR bindings operations at the current insertion point (-O2)."""

    def __init__(self, mlir_ir: ModuleType) -> None:
        self.ir = mlir_ir
        self.f32, self.i32 = mlir_ir.F32Type.get(), mlir_ir.IntegerType.get_signless(32)

    def op(self, name: str, *operands: Any, result: Any = None, **attributes: Any) -> Any:
        return self.ir.Operation.create(name, results=[result or self.f32], operands=list(operands),
                                        attributes=attributes).result

    def f(self, value: float) -> Any:
        return self.op("arith.constant", value=self.ir.FloatAttr.get(self.f32, value))

    def i(self, value: int) -> Any:
        return self.op("arith.constant", result=self.i32, value=self.ir.IntegerAttr.get(self.i32, value))

    def cmp(self, predicate: int, a: Any, b: Any) -> Any:
        i1, i64 = self.ir.IntegerType.get_signless(1), self.ir.IntegerType.get_signless(64)
        return self.op("arith.cmpf", a, b, result=i1, predicate=self.ir.IntegerAttr.get(i64, predicate))


class _TextBuilder(_Builder):
    """The ops as lines of MLIR text in the generic form (-O0's rewrite of the emitted text,
    which its mlir-opt processes read, and the emitter's own log): SSA names derived from
    `prefix`; `finish` renames the last op's result."""

    f32, i32 = "f32", "i32"

    def __init__(self, prefix: str, operand: str) -> None:
        self.prefix, self.types = prefix, {operand: "f32"}
        self.ops: list[str] = []

    def op(self, name: str, *operands: Any, result: Any = None, **attributes: Any) -> Any:
        out, ty = f"{self.prefix}_{len(self.ops)}", result or self.f32
        props = ", ".join(f"{k} = {v}" for k, v in attributes.items())
        args = ", ".join(self.types[o] for o in operands)
        self.ops.append(f'{out} = "{name}"({", ".join(operands)})' + (f" <{{{props}}}>" if props else "")
                        + f" : ({args}) -> {ty}")
        self.types[out] = ty
        return out

    def f(self, value: float) -> Any:
        # the f32 the bindings' FloatAttr rounds `value` to, by its bits (exact in text)
        bits = struct.unpack("<I", struct.pack("<f", value))[0]
        return self.op("arith.constant", value=f"0x{bits:08X} : f32")

    def i(self, value: int) -> Any:
        return self.op("arith.constant", result=self.i32, value=f"{value} : i32")

    def cmp(self, predicate: int, a: Any, b: Any) -> Any:
        return self.op("arith.cmpf", a, b, result="i1", predicate=f"{predicate} : i64")

    def finish(self, value: str, result: str, loc: str) -> str:
        """The ops on one line (the emitted text keeps its line numbers: tool errors map
        back through them), `value` (the last op's) renamed `result`."""
        name, last = self.ops[-1].split(" = ", 1)
        assert name == value, (name, value)
        return " ".join(op + loc for op in [*self.ops[:-1], f"{result} = {last}"])


def _exp(b: _Builder, x: Any) -> Any:
    low = b.cmp(_OLT, x, b.f(EXP_LOW))
    xc = b.op("arith.select", low, b.f(0.0), b.op("arith.minimumf", x, b.f(EXP_HIGH)))
    k = b.op("math.roundeven", b.op("arith.mulf", xc, b.f(LOG2E)))
    r = b.fma(k, b.f(-LN2_LO), b.fma(k, b.f(-LN2_HI), xc))
    p = b.f(EXP_POLY[0])
    for c in EXP_POLY[1:]:
        p = b.fma(p, r, b.f(c))
    y = b.op("arith.addf", b.fma(p, b.op("arith.mulf", r, r), r), b.f(1.0))
    ki = b.op("arith.fptosi", k, result=b.i32)
    k1 = b.op("arith.shrsi", ki, b.i(1), result=b.i32)
    k2 = b.op("arith.subi", ki, k1, result=b.i32)
    scaled = b.op("arith.mulf", b.op("arith.mulf", y, b.pow2(k1)), b.pow2(k2))
    nan = b.cmp(_UNO, x, x)
    return b.op("arith.select", nan, x, b.op("arith.select", low, b.f(0.0), scaled))


def _log(b: _Builder, x: Any) -> Any:
    """Cephes' logf (the polynomial of random_rules.LOG_POLY) with explicit FMAs:
    x = m 2^e, m in [sqrt(1/2), sqrt(2)), log x = f + f^3 P(f) - f^2 / 2 + e ln 2, f = m - 1."""
    tiny = b.cmp(_OLT, x, b.f(FLT_MIN))     # subnormal (or <= 0: replaced at the end)
    bits = b.op("arith.bitcast", b.op("arith.select", tiny, b.op("arith.mulf", x, b.f(2.0 ** 23)), x),
                result=b.i32)
    mant = b.op("arith.ori", b.op("arith.andi", bits, b.i(0x007FFFFF), result=b.i32), b.i(0x3F000000),
                result=b.i32)
    m = b.op("arith.bitcast", mant)                                         # in [1/2, 1)
    low = b.cmp(_OLT, m, b.f(LOG_SQRTHF))
    bias = b.op("arith.select", tiny, b.i(126 + 23), b.i(126), result=b.i32)
    e = b.op("arith.subi", b.op("arith.shrui", bits, b.i(23), result=b.i32), bias, result=b.i32)
    e = b.op("arith.subi", e, b.op("arith.extui", low, result=b.i32), result=b.i32)
    f = b.op("arith.subf", b.op("arith.select", low, b.op("arith.addf", m, m), m), b.f(1.0))   # exact
    z = b.op("arith.mulf", f, f)
    p = b.f(LOG_POLY[0])
    for c in LOG_POLY[1:]:
        p = b.fma(p, f, b.f(c))
    fe = b.op("arith.sitofp", e)
    y = b.fma(z, b.f(-0.5), b.fma(fe, b.f(LN2_LO), b.op("arith.mulf", b.op("arith.mulf", p, f), z)))
    r = b.fma(fe, b.f(LN2_HI), b.op("arith.addf", f, y))
    r = b.op("arith.select", b.cmp(_OEQ, x, b.f(math.inf)), x, r)
    r = b.op("arith.select", b.cmp(_OEQ, x, b.f(0.0)), b.f(-math.inf), r)
    r = b.op("arith.select", b.cmp(_OLT, x, b.f(0.0)), b.f(math.nan), r)
    return b.op("arith.select", b.cmp(_UNO, x, x), x, r)


def log_lines(x: str, prefix: str) -> tuple[list[str], str]:
    """`_log` of the f32 SSA value `x` as lines of MLIR text (generic form, SSA names from
    `prefix`): (lines, the result's name).  The emitter writes it where a log is computed
    once per row (log_softmax's log of the row sum, compiler/backend/emit/ops.py), at every level."""
    b = _TextBuilder(prefix, x)
    y = _log(b, x)
    return b.ops, y


# The scalar f32 math ops rewritten at every level: op name -> expansion.  Not math.log:
# an elementwise log of a large tensor keeps libmvec's vector logf at -O2 (on AVX2, 3x as
# fast as `_log` vectorised), and so differs from -O0's libm logf in the last bit.
EXPANSIONS = {"math.exp": _exp}


def lower_math(mlir_ir: ModuleType, module: Any) -> dict[str, int]:
    """Every scalar f32 op of EXPANSIONS in the module -> its expansion; returns the count of each."""
    ops = walk_ops(mlir_ir, module, lambda op: op.name in EXPANSIONS and str(op.results[0].type) == "f32")
    b, counts = _IRBuilder(mlir_ir), dict.fromkeys(EXPANSIONS, 0)
    for op in ops:
        name = op.name
        with mlir_ir.InsertionPoint(op), op.location:
            y = EXPANSIONS[name](b, op.operands[0])
        op.results[0].replace_all_uses_with(y)
        op.erase()
        counts[name] += 1
    return counts


# An emitted scalar f32 exp: `%r = math.exp %x : f32 loc(..)` (compiler/backend/emit/builder.py).
_LINE = re.compile(r"^(?P<indent>\s*)(?P<result>%[\w$.-]+) = (?P<op>math\.exp) (?P<x>%[\w$.#-]+) : f32"
                   r"(?P<loc> loc\(.*\))?\s*$")


def lower_math_text(mlir_text: str) -> tuple[str, dict[str, int]]:
    """The same rewrite on emitted MLIR text, for -O0 (compiler/backend/toolchain.py): each
    scalar f32 math.exp line becomes the expansion's ops on that one line, so the compiled
    exp has the same bits at every level.  Returns (text, counts)."""
    lines, counts = mlir_text.split("\n"), dict.fromkeys(EXPANSIONS, 0)
    for n, line in enumerate(lines):
        m = _LINE.match(line)
        if m is None:
            continue
        b = _TextBuilder("%kina_" + m["op"][5:] + "_" + re.sub(r"\W", "_", m["result"][1:]), m["x"])
        lines[n] = m["indent"] + b.finish(EXPANSIONS[m["op"]](b, m["x"]), m["result"], m["loc"] or "")
        counts[m["op"]] += 1
    return "\n".join(lines), counts
