"""The differential oracle's extra runs of a generated program (compiler/oracle/differential.py):
its VJP exports (issue 28) and its random-value probe (issue 26), built in the batch's
library with the rest of the program.

- VJP exports: a program under reverseMode (f differentiable) is built with `--vjp f` for
  one program in VJP_EVERY (by the number in its name, so a shrinking replay decides the
  same), and a program whose wrapper f_gh differentiates a size-generic helper f_s<k>
  with `--vjp f_s<k>` too, which a build without `--size` exports dynamic: f_s<k>_vjp is
  then called with f_gh's sizes as keywords.  `f_vjp(x.., g_y)` runs on random inputs (g_y,
  the cotangent, a random tensor like any float parameter), and y and every cotangent are
  held to the interpreter's `f_vjp` (the same add_vjp_exports / transform_vjp function,
  run in float64: validate.references) by the rule of every other output
  (tolerance.check_output): failure kind "vjp".
- Random probe (compiler/oracle/progen/probe.py): a program that draws random numbers gets
  an exported `f_bits` returning every random value (keys included); its results must be
  the interpreter's in the declared dtype (which rounds as the library does) bit for bit,
  viewed as unsigned integers of the dtype's width: failure kind "bits".  `--replay`
  checks every exported `*_bits` function of a file this way.  Every difference fails:
  the random ops compute the same bits in the interpreter and at every level by
  construction (no libm call on the way: interp_random, backend/emit/ops_random).
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from compiler import ad as autodiff
from compiler.core.types import DType
from compiler.ir import nodes as ir
from compiler.ir.nodes import Program
from compiler.oracle.progen.case import Case
from compiler.oracle.progen.probe import random_probe
from compiler.runtime.arrays import Array

VJP_EVERY = 4            # one program in VJP_EVERY (by name) gets `--vjp f`: build time (CI runs 300)
PROBE_SUFFIX = "_bits"

# (op, dtype) -> why its values may differ in the last bit today.  Remove a row when its bug
# is fixed: the run then fails on any difference of those values again.
@dataclass(frozen=True)
class ExtraRun:
    """One call of the library beyond the program's own functions: `export` (the library's
    function and the run's key) on inputs for `ref` (the reference program's function: for
    a dynamic VJP export the VJP of the instance at `sizes`), checked by `check`."""
    export: str
    ref: str
    check: str                                    # "vjp" | "bits"
    sizes: tuple[tuple[str, int], ...] = ()       # a dynamic export's keyword sizes

    @property
    def dynamic(self) -> bool:
        return bool(self.sizes)


@dataclass
class Extras:
    """A unit's extra runs, the `--vjp` names its build needs and the source they add."""
    runs: list[ExtraRun] = field(default_factory=list)
    vjp: list[str] = field(default_factory=list)
    source: str = ""


def takes_vjp(name: str) -> bool:
    """Whether the program `name` (`c17`) is built with `--vjp`: one in VJP_EVERY."""
    digits = re.sub(r"\D", "", name)
    return not digits or int(digits) % VJP_EVERY == 0


def extras_of(name: str, case: Case, vjp: bool = True, bits: bool = True) -> Extras:
    """The extra runs of case under function names `name`."""
    out = Extras()
    if vjp and case.ad and takes_vjp(name):
        out.vjp.append(name)
        out.runs.append(ExtraRun(autodiff.vjp_name(name), autodiff.vjp_name(name), "vjp"))
    if vjp and case.gh is not None and takes_vjp(name):
        helper = f"{name}_s{case.gh.fn}"
        instance = case.handled(name)[-1]
        out.vjp.append(helper)
        out.runs.append(ExtraRun(autodiff.vjp_name(helper), autodiff.vjp_name(instance), "vjp",
                                 tuple(zip(case.generics[case.gh.fn].sizes, case.gh.sizes))))
    probe = random_probe(case) if bits else None
    if probe is not None:
        out.source = "\n" + probe.source(name + PROBE_SUFFIX)
        out.runs.append(ExtraRun(name + PROBE_SUFFIX, name + PROBE_SUFFIX, "bits"))
    return out


def probes_in(program: Program) -> list[ExtraRun]:
    """`--replay`: the exported `*_bits` functions of a file, checked bit for bit."""
    return [ExtraRun(n, n, "bits") for n, fn in program.functions.items()
            if n.endswith(PROBE_SUFFIX) and ir.is_export(n) and fn.params and not fn.sizes]


def with_vjps(program: Program, runs: Iterable[ExtraRun]) -> Program:
    """program with the reference function of every VJP run: `f_vjp` (add_vjp_exports), or
    for a dynamic export the VJP of its instance (`f_s1$2_3_vjp`, transform_vjp)."""
    runs = [r for r in runs if r.check == "vjp"]
    out, _ = autodiff.add_vjp_exports(program, [r.export[: -len("_vjp")] for r in runs if not r.dynamic])
    for r in runs:
        if r.dynamic:
            fn, _ = autodiff.transform_vjp(program, r.ref[: -len("_vjp")])
            if fn is not None:
                out.functions[r.ref] = fn
    return out


def bit_view(x: Array, dtype: DType) -> Array:
    """x in dtype's NumPy dtype, viewed as unsigned integers of its width (Bool as bytes)."""
    a = np.ascontiguousarray(np.asarray(x).astype(dtype.np_dtype))
    out: Array = a.view(f"u{a.dtype.itemsize}")
    return out


def result_ops(fn: ir.Function) -> list[str | None]:
    """The op that computes each result of fn (None: not an op's value)."""
    ops = {b.names[0]: b.value.op for b in fn.lets if isinstance(b.value, ir.OpApp) and len(b.names) == 1}
    items = fn.result.items if isinstance(fn.result, ir.MakeTuple) else [fn.result]
    return [ops.get(x.name) if isinstance(x, ir.Var) else None for x in items]


def bit_differences(got: list[Array], want: list[Array], dtypes: list[str],
                    ops: list[str | None] | None = None) -> list[str]:
    """One line per result whose bits differ from the reference's, with its first differing
    element (and the op that computed it, given `ops`)."""
    bad: list[str] = []
    for i, (g, w, dt) in enumerate(zip(got, want, dtypes)):
        if np.shape(g) != np.shape(w):
            bad.append(f"result {i}: shape {np.shape(g)}, the interpreter's {np.shape(w)}")
            continue
        gb, wb = bit_view(g, DType.named(dt)), bit_view(w, DType.named(dt))
        diff = np.argwhere(gb != wb)
        if diff.size:
            at = tuple(int(k) for k in diff[0])
            op = ops[i] if ops is not None and i < len(ops) else None
            bad.append(
                f"result {i} ({op or 'value'}, {dt}): {len(diff)} of {gb.size} elements differ, first at "
                f"{list(at)}: bits {int(gb[at]):#x} (value {np.asarray(g)[at]!r}), the interpreter's "
                f"{int(wb[at]):#x} ({np.asarray(w)[at]!r})")
    if len(got) != len(want):
        bad.append(f"{len(got)} results, the interpreter's {len(want)}")
    return bad
