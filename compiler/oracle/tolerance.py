"""The comparison rule of compiled results against the reference interpreter, one for
`kinac validate` (oracle/validate.py) and the differential tests (oracle/differential.py).

Takes a result and its reference (and, per element, the magnitude of what it was computed
from); gives an OutputCheck: whether every element is within its bound, and the worst
element for the report.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from compiler.core.types import DType
from compiler.runtime.arrays import Array

TOLERANCES = {d.value: d.tolerance for d in DType}


@dataclass
class OutputCheck:
    name: str            # "result 0", "d/d emb", ...
    reference: str       # "interp" | "finite differences"
    max_abs: float       # |got - ref| at the worst element (the largest error for its own bound)
    ratio: float         # that error / that bound: the output passes when every ratio is <= 1
    ok: bool
    bound: float = 0.0   # the worst element's bound: atol + rtol * |ref there|
    skipped: int = 0     # finite differences: coordinates at a kink, not compared (kinks.py)
    want: float = 0.0    # the reference value at the worst element
    index: tuple[int, ...] = ()   # the worst element's position

    @property
    def max_rel(self) -> float:
        """The worst element's relative error |got - ref| / |ref|."""
        return self.max_abs / max(abs(self.want), 1e-30) if self.max_abs else 0.0


# ---- the comparison rule ---------------------------------------------------------------
# One rule for `kinac validate` and the differential tests (compiler/oracle/differential.py),
# element by element: every element must satisfy
#     |got - ref| <= atol + rtol * max(|ref|, magnitude)
# where ref is the interpreter in float64, (atol, rtol) come from the output's dtype, and
# an infinity must be the same infinity and a NaN a NaN.  Each element has its own
# bound, so a sentinel (-1e30 in masked logits) cannot hide an error elsewhere in its
# output.  Float rounding errs in proportion to the magnitudes a value was computed
# from, not to the value itself (a sum of +-1e3 terms that lands near 0 is off by ~1e-4
# in f32): `magnitude` estimates them element by element (`references`: the float64
# interpreter with every op's float operands jittered by their dtype's unit roundoff,
# twice; the largest change of an element, divided by the output dtype's unit roundoff,
# is the size of what it was computed from, a sum's sqrt(sum of its terms squared)).
# When the interpreter run in the declared dtype (which rounds after every op, as
# the library does) is itself further from the float64 value than the bound, the program
# is ill-conditioned at that dtype, and the library is held to that same-dtype reference
# instead (`reference` says which was used).
def within_tolerance(got: ArrayLike, ref: ArrayLike, atol: float, rtol: float,
                     magnitude: ArrayLike | None = None) -> tuple[Array, Array]:
    """(|got - ref|, atol + rtol * max(|ref|, magnitude)) per element, as float64 arrays:
    the rule holds where the first is <= the second.  The same infinity, or NaN against
    NaN, is an error of 0; an infinity or a NaN on one side only is an infinite error."""
    g = np.asarray(got).astype(np.float64)
    w = np.asarray(ref).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        matched = (np.isnan(g) & np.isnan(w)) | (np.isinf(w) & (g == w))
        err = np.where(matched, 0.0, np.abs(g - w))
        err = np.where(np.isnan(err), np.inf, err)      # a NaN against a number
        scale = np.where(np.isfinite(w), np.abs(w), 0.0)
        if magnitude is not None:
            m = np.asarray(magnitude, np.float64)
            scale = np.maximum(scale, np.where(np.isfinite(m), m, 0.0))
        bound = atol + rtol * scale
    return err, bound


def compare(name: str, got: ArrayLike, want: ArrayLike, dtype: str, reference: str,
            tol: Mapping[str, tuple[float, float]] = TOLERANCES, magnitude: ArrayLike | None = None) -> OutputCheck:
    """The rule for one output (every element within atol + rtol * max(|want|, magnitude)
    of want), with its worst element (the largest error for its own bound) for the report."""
    if np.shape(got) != np.shape(want):
        return OutputCheck(name, reference, float("inf"), float("inf"), False)
    atol, rtol = tol[dtype]
    err, bound = within_tolerance(got, want, atol, rtol, magnitude)
    if not err.size:
        return OutputCheck(name, reference, 0.0, 0.0, True, atol)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(err == 0, 0.0, err / bound)     # a zero bound (I64, Bool): any error is infinite
    at = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    w = np.asarray(want)[at]
    return OutputCheck(name, reference, float(err[at]), float(ratio[at]), bool(np.all(err <= bound)),
                       float(bound[at]), want=float(w), index=tuple(int(i) for i in at))


def check_output(name: str, got: ArrayLike, ref64: ArrayLike, dtype: str,
                 same_dtype: ArrayLike | None = None, magnitude: ArrayLike | None = None) -> OutputCheck:
    """`got` against the float64 reference; against the same-dtype reference when the
    program is ill-conditioned at its dtype (see the rule above).  A discrete output (I64,
    Bool) must equal one of the two exactly: an index or a mask computed from floats the
    program rounds to their declared dtypes (a categorical of F8 logits, an argmax of a
    BF16 product) may differ from the float64 one, as NumPy's would in those dtypes."""
    check = compare(name, got, ref64, dtype, "interp (f64)", magnitude=magnitude)
    if check.ok or same_dtype is None:
        return check
    if dtype in ("I64", "Bool"):
        rounded = compare(name, got, same_dtype, dtype, "interp (declared dtypes)")
        return rounded if rounded.ok else check
    if compare(name, same_dtype, ref64, dtype, "", magnitude=magnitude).ok:
        return check          # the dtype allows the bound: the library misses it
    return compare(name, got, same_dtype, dtype, f"interp ({dtype})", magnitude=magnitude)


def describe_worst(c: OutputCheck) -> str:
    """The worst element of a check: `worst [3, 1]: |got - ref| 1.2e-02 vs bound 1.0e-04 (ref 0.5)`."""
    at = f" [{', '.join(map(str, c.index))}]" if c.index else ""
    return f"worst{at}: |got - ref| {c.max_abs:.3e} vs bound {c.bound:.1e} (ref {c.want:.4g})"
