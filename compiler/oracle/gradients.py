"""Gradients in `kinac validate`: the wrappers that export each reverseMode handle, and
the per-element finite-difference check (`--exhaustive`).

`add_gradient_wrappers` adds, for every `handle g(..) with reverseMode` in a program, an
exported `__validate_grad_g` whose body is just that handle, so the compiled cotangents
can be called directly.  The default check of those cotangents is directional
(compiler/oracle/directional.py); `--exhaustive` compares every cotangent element (up to
FD_MAX_ELEMENTS per parameter, on a deterministic sample beyond) with a central difference
of the primal in float64 (`finite_differences`, `compare_gradients`), skipping the
coordinates at a kink (compiler/oracle/kinks.py: where the step reaches a relu / maximum /
clamp / comparison ... kink, or the declared dtypes' rounding may put the library on its
other side; the report counts them), and checks the interpreter's float64 run of the
backward graph on the same coordinates with directional.py's tight bound.
"""
from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

from compiler.core.sizes import Size
from compiler.core.types import FLOAT_DTYPES, TupleType
from compiler.ir import nodes as ir
from compiler.oracle import directional
from compiler.oracle.tolerance import OutputCheck, compare
from compiler.runtime.arrays import Array

GRAD_PREFIX = "__validate_grad_"

# Kina dtype -> (atol, rtol) for compiled cotangents vs finite differences: types.DType.fd_tolerance.
FD_TOLERANCES = {d.value: t for d in FLOAT_DTYPES if (t := d.fd_tolerance) is not None}   # every float dtype
FD_STEP = 1e-4            # central differences in float64
# A step that reaches a kink (compiler/oracle/kinks.py) is re-drawn smaller before the
# coordinate is skipped; 1e-6 still leaves float64 cancellation far below every bound.
FD_STEPS = (FD_STEP, FD_STEP / 10, FD_STEP / 100)
FD_MAX_ELEMENTS = 128     # per parameter: larger tensors are checked on a deterministic sample
FD64_REFERENCE = "fd (f64 reverse)"


def handles_in(fn: ir.Function) -> list[ir.Handle]:
    exprs = [b.value for b in fn.lets] + [fn.result]
    return [e for root in exprs for e in ir.walk(root) if isinstance(e, ir.Handle)]


def add_gradient_wrappers(program: ir.Program) -> ir.Program:
    """A copy of the program with `__validate_grad_g(params of g) = handle g(..) with reverseMode`
    for each differentiated function g.  The wrapper is exported, so its name must be one:
    for an instantiation of a generic function (`linear$4_3_5`, private) it is
    `__validate_grad_linear__4_3_5` (for an imported `nn.linear$4_3_5`,
    `__validate_grad_nn__linear__4_3_5`), numbered on in the unlikely case a user function's
    wrapper already has that name."""
    out = ir.Program(dict(program.functions))
    wrapped: set[str] = set()
    for fn in list(program.functions.values()):
        for h in handles_in(fn):
            target = program.functions.get(h.fn)
            if target is None or h.fn in wrapped:
                continue
            wrapped.add(h.fn)
            name = _wrapper_name(h.fn, out.functions)
            if name is None:
                continue
            params = [ir.Param(p.name, p.type) for p in target.params]
            t, sizes = h.type, tuple(Size.var(n) for n in target.sizes)
            if sizes:   # a dynamic target: the wrapper is dynamic too, in the target's sizes
                floats = tuple(p.type for p in params if p.type.is_float)
                t = TupleType((target.ret_type, *floats)) if floats else target.ret_type
            call = ir.Handle(h.fn, [ir.Var(p.name, p.type) for p in params], h.handler, t, h.span, sizes)
            out.functions[name] = ir.Function(name, params, t, [], call, h.span, target.name_span, target.sizes)
    return out


def _wrapper_name(target: str, taken: Mapping[str, ir.Function]) -> str | None:
    # an instance (`linear$4_3_5`) or an imported function (`nn.linear`, `layers~2.f`):
    # every character a C name cannot hold becomes `__`
    name = GRAD_PREFIX + re.sub(r"[^A-Za-z0-9_]", "__", target)
    if ir.is_export(target):
        return None if name in taken else name
    candidates = (name if i == 0 else f"{name}__{i}" for i in range(len(taken) + 1))
    return next(c for c in candidates if c not in taken)


def finite_differences(program: ir.Program, target: str, args: list[Array]) -> tuple[list[Array | None], list[int]]:
    """d(sum of target's result)/d(each float parameter) by central differences in float64
    (None for I64 and Bool parameters), and per parameter how many coordinates were skipped
    at a kink (compiler/oracle/kinks.py).  Unsampled and skipped elements are NaN (not
    compared).  A coordinate whose step reaches a kink is re-drawn with the smaller steps
    of FD_STEPS; it is skipped when every step reaches one (an input on the kink) or when
    the declared dtypes' rounding may put the library on the kink's other side."""
    grads, skipped, _ = _differences(program, target, args)
    return grads, skipped


def _differences(program: ir.Program, target: str, args: list[Array]
                 ) -> tuple[list[Array | None], list[int], list[Array | None]]:
    """finite_differences, and per element the step its difference took (NaN: none)."""
    # lazy, like interp: the child process needs neither
    from compiler.oracle import kinks
    # every interpreter run lowers the handles of the program it is given: only target's callees
    program = ir.reachable(program, [target])
    fn = program.functions[target]
    x64 = [a.astype(np.float64) if p.type.is_float else a for a, p in zip(args, fn.params)]   # I64, Bool kept
    _, base = kinks.trace(program, target, x64, np.float64)
    margins = kinks.rounding_margins(program, target, args, base)
    grads: list[Array | None] = []
    steps: list[Array | None] = []
    skipped: list[int] = []
    rng = np.random.default_rng(0)
    for j, p in enumerate(fn.params):
        if not p.type.is_float:
            grads.append(None)
            steps.append(None)
            skipped.append(0)
            continue
        g, h = np.full(p.type.shape, np.nan), np.full(p.type.shape, np.nan)
        flat_idx = np.arange(g.size)
        if g.size > FD_MAX_ELEMENTS:
            flat_idx = np.sort(rng.choice(g.size, FD_MAX_ELEMENTS, replace=False))
        n_skipped = 0
        for k in flat_idx:
            idx = tuple(int(i) for i in np.unravel_index(k, g.shape))
            value = _coordinate_difference(program, target, x64, j, idx, base, margins)
            if value is None:
                n_skipped += 1
            else:
                g[idx], h[idx] = value
        grads.append(g)
        steps.append(h)
        skipped.append(n_skipped)
    return grads, skipped, steps


def _coordinate_difference(program: ir.Program, target: str, x64: list[Array], j: int, idx: tuple[int, ...],
                           base: list[Array], margins: list[Array]) -> tuple[float, float] | None:
    """(the central difference along one coordinate, its step) with the first step of
    FD_STEPS that reaches no kink; None when the coordinate is at one."""
    from compiler.oracle import kinks
    for step in FD_STEPS:
        totals, sites = [], []
        for sign in (1.0, -1.0):
            xs = list(x64)
            xs[j] = x64[j].copy()
            xs[j][idx] += sign * step
            value, seen = kinks.trace(program, target, xs, np.float64)
            totals.append(float(np.sum(np.asarray(value, dtype=np.float64))))
            sites.append(seen)
        verdict = kinks.classify(base, sites[0], sites[1], margins)
        if verdict == kinks.SMOOTH:
            return (totals[0] - totals[1]) / (2 * step), step
        if verdict == kinks.ROUNDING:
            return None
    return None


def exhaustive_checks(program: ir.Program, target: str, args: list[Array], cotangents: list[Array],
                      grads64: list[Array] | None = None, magnitude: float = 0.0) -> list[OutputCheck]:
    """`--exhaustive`: per float parameter of target, the compiled cotangents element by
    element against central differences (FD_TOLERANCES), and -- given grads64, the float64
    reverse-mode cotangents -- those on the same coordinates with directional.py's tight bound."""
    fd, skipped, steps = _differences(program, target, args)
    params = program.functions[target].params
    floats = [(j, p, g, n, h) for j, (p, g, n, h) in enumerate(zip(params, fd, skipped, steps))
              if g is not None and h is not None]
    primal = None if grads64 is None else directional.Primal.at(program, target, args, magnitude)
    checks = []
    for k, ((j, p, g_fd, n_skipped, h), g_comp) in enumerate(zip(floats, cotangents)):
        mask = ~np.isnan(g_fd)
        check = compare(f"d/d {p.name}", np.asarray(g_comp, np.float64)[mask], g_fd[mask],
                        p.type.dtype.value, "finite differences", FD_TOLERANCES)
        check.skipped = n_skipped
        checks.append(check)
        if grads64 is not None and primal is not None:
            checks.append(_reverse_mode_check(primal, j, p.name, np.asarray(grads64[k], np.float64), g_fd, h))
    return checks


def _reverse_mode_check(primal: directional.Primal, j: int, name: str, g64: Array, fd: Array,
                        steps: Array) -> OutputCheck:
    """The float64 reverse-mode cotangent against the coordinates' differences, each a
    directional check along a unit vector (directional.Primal.agree: the tight bound,
    Richardson where it is missed)."""
    worst = OutputCheck(f"d/d {name}", FD64_REFERENCE, 0.0, 0.0, True)
    for idx in zip(*np.nonzero(~np.isnan(fd))):
        u = np.zeros(g64.shape)
        u[idx] = 1.0
        err, bound, ref = primal.agree({j: u}, float(g64[idx]), abs(float(g64[idx])), float(fd[idx]), float(steps[idx]))
        ratio = err / bound if bound else (0.0 if err == 0 else np.inf)
        if ratio >= worst.ratio:
            worst = OutputCheck(worst.name, FD64_REFERENCE, err, ratio, worst.ok and err <= bound, bound,
                                want=ref, index=tuple(int(i) for i in idx))
        worst.ok = worst.ok and err <= bound
    return worst
