"""-O2's own lowering of f32 `math.exp`: a polynomial in arith and math ops that the loop
vectoriser turns into AVX-512 code with no call, where exp was a call of glibc's libmvec.

Why: libmvec's vector expf (compiler/backend/llvm_stage.py) handles a vector with any lane outside
its fast range (a result below FLT_MIN, or near overflow) by calling the scalar expf once
per such lane.  A causal attention mask makes half the scores of a softmax -1e4: the
[4, 8, 64, 64] exp of the scaled StoryLM took 0.92 ms with the mask and 0.054 ms without
it.  Guarding the inputs with selects does not survive LLVM (instcombine folds the select
back through the call), so exp is computed here:

    exp(x) = e^r * 2^k,  k = roundeven(x * log2(e)),  r = x - k * ln 2  (two-part ln 2, FMAs)

with e^r on |r| <= ln(2)/2 by the degree-7 polynomial of Cephes' expf (1 + r + r^2 P(r)),
and 2^k applied as two exact power-of-two factors 2^(k >> 1) * 2^(k - (k >> 1)), so
subnormal results are rounded once and overflow gives +inf.  x above 89 is clamped to 89
(exp overflows to +inf there) and x below -104 computes exp(0) and is replaced by +0.0
(exp rounds to +0.0 there; a clamped -104 would still be a slow subnormal product).  NaN returns NaN.
Accuracy: within 2 ulp of the correctly rounded exp on normal results (tests/test_math_lowering.py
sweeps every 97th f32 in the range), and the same bits in a vector lane and a scalar loop
(explicit FMAs: no contraction left to LLVM), so threaded and serial builds agree.

It runs on the emitted tensor IR before the -O2 tagging (compiler/backend/engine.py); -O0 keeps
`math.exp` (libm's expf); the differential tests compare the two within float tolerance.
"""
from __future__ import annotations

from types import ModuleType
from typing import Any

from compiler.backend.bindings import walk_ops

EXP_LOW, EXP_HIGH = -104.0, 89.0          # exp(x) is +0.0 below, +inf above (f32)
LOG2E = 1.44269504088896341
LN2_HI, LN2_LO = 0.693359375, -2.12194440e-4   # ln 2 = LN2_HI + LN2_LO; k * LN2_HI is exact
# Cephes expf: e^r ~ 1 + r + r^2 * (((((P0 r + P1) r + P2) r + P3) r + P4) r + P5)
EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
            1.6666665459e-1, 5.0000001201e-1)
_OLT, _UNO = 4, 14                         # arith.cmpf predicates "olt" and "uno" (either is NaN)


class _Builder:
    """Scalar f32 / i32 arith ops at the current insertion point."""

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

    def fma(self, a: Any, b: Any, c: Any) -> Any:
        return self.op("math.fma", a, b, c)

    def pow2(self, k: Any) -> Any:
        """2^k as f32 for k in [-126, 127]: the biased exponent in the exponent bits."""
        biased = self.op("arith.addi", k, self.i(127), result=self.i32)
        return self.op("arith.bitcast", self.op("arith.shli", biased, self.i(23), result=self.i32))


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


def lower_exp(mlir_ir: ModuleType, module: Any) -> int:
    """Every scalar f32 math.exp of the module -> the polynomial above; returns the count."""
    exps = walk_ops(mlir_ir, module, lambda op: op.name == "math.exp" and str(op.results[0].type) == "f32")
    b = _Builder(mlir_ir)
    for op in exps:
        with mlir_ir.InsertionPoint(op), op.location:
            y = _exp(b, op.operands[0])
        op.results[0].replace_all_uses_with(y)
        op.erase()
    return len(exps)
