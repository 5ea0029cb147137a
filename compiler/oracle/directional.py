"""Directional gradient checks: `kinac validate`'s default check of reverseMode.

For a function F = sum of target's result, DIRECTIONS random directions u are drawn, one
Gaussian unit vector u_j per float parameter x_j at once, and the directional derivative
sum_j <g_j, u_j> of the reverse-mode cotangents g_j is compared with the central difference
(F(x + h u) - F(x - h u)) / 2h, both in float64 -- JAX's check_grads.  Two evaluations of F
per direction instead of two per element: the GPT block of issue 27 (20 weights) is
checked in well under a second instead of 14 s.  When a direction fails, every parameter
is checked alone along DIRECTIONS directions of its own, so the report names the wrong
cotangent(s) (`d/d x`); a passing check names the parameters it covered.

What is checked along u is the interpreter's float64 run of the backward graph the library
compiles (the gradient wrapper's float64 reference, compiler/oracle/validate.py
`references`); the library's cotangents are compared with that same run element by element
(the wrapper's `result k` checks, at the results' tolerances).  Together: the library's
cotangents against finite differences.  Both sides of the directional comparison are
float64, so its bound is tight (RTOL of sum |g_i u_i|, plus float64 cancellation over the
step) and a VJP that is wrong in ONE element by 1e-3 fails (tests/test_validate_directional.py).
When the first difference misses the bound, a second at half the step tells truncation
error from a wrong cotangent (Richardson: fd(h) - fd(h/2) is three times fd(h/2)'s
truncation error), so a curved F costs two more evaluations, never a false failure.

Kinks (compiler/oracle/kinks.py): a step that reaches a relu / maximum / clamp ... kink
measures a mix of both sides.  Such a direction is re-drawn with the smaller steps of STEPS,
then split into two random halves of its coordinates, each checked the same way (an input
ON a kink ends up alone and is skipped, and counted; every other coordinate is checked).  Rounding of the declared dtypes
(kinks.ROUNDING) does not matter here: both sides are float64, on the same side of every
kink; the element checks of the library's cotangents handle it (tolerance.check_output).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from compiler.ir import nodes as ir
from compiler.oracle.tolerance import OutputCheck
from compiler.runtime.arrays import Array

DIRECTIONS = 2        # per parameter
STEP = 1e-4           # along a unit direction, in float64
STEPS = (STEP, STEP / 10, STEP / 100)
RTOL = 1e-6           # of sum |g_i u_i|: float64 reverse mode is exact far below this
ROUNDOFF = 1e-13      # of F's magnitude / h: float64 cancellation in the difference
REFERENCE = "directional fd"
MAX_PIECES = 64       # differences per direction when kinks split it


@dataclass
class Primal:
    """What every difference of one target needs: the program (only what the target
    reaches), its float64 inputs, the kink distances at them and F's magnitude."""
    program: ir.Program
    target: str
    x64: list[Array]
    base_sites: list[Array]
    magnitude: float

    @classmethod
    def at(cls, program: ir.Program, target: str, args: Sequence[Array], magnitude: float) -> Primal:
        from compiler.oracle import kinks  # lazy: the child process needs neither kinks nor interp
        program = ir.reachable(program, [target])   # each run lowers only the target's callees
        fn = program.functions[target]
        x64 = [np.asarray(a, np.float64) if p.type.is_float else a for a, p in zip(args, fn.params)]
        value, sites = kinks.trace(program, target, x64, np.float64)
        size = float(np.sum(np.abs(np.asarray(value, np.float64))))
        return cls(program, target, x64, sites, max(magnitude, size, 1.0))   # 1: F near 0 by cancellation

    def total(self, u: Direction, h: float, trace: bool) -> tuple[float, list[Array] | None]:
        """F at the inputs moved by h * u (and its kink distances when `trace`)."""
        from compiler.oracle import interp, kinks
        xs = list(self.x64)
        for j, d in u.items():
            xs[j] = self.x64[j] + h * d
        if trace:
            value, sites = kinks.trace(self.program, self.target, xs, np.float64)
        else:
            value, sites = interp.run_function(self.program, self.target, xs, dtype=np.float64), None
        return float(np.sum(np.asarray(value, np.float64))), sites

    def difference(self, u: Direction) -> tuple[float, float] | None:
        """(central difference along u, its step) with the first step of STEPS that reaches
        no kink; None when every step reaches one."""
        from compiler.oracle import kinks
        for h in STEPS:
            (fp, sp), (fm, sm) = self.total(u, h, True), self.total(u, -h, True)
            assert sp is not None and sm is not None    # traced
            if kinks.classify(self.base_sites, sp, sm) == kinks.SMOOTH:
                return (fp - fm) / (2 * h), h
        return None

    def half_step(self, u: Direction, h: float) -> float:
        """The central difference at h / 2 (no kink check: a step within a smooth one)."""
        return (self.total(u, h / 2, False)[0] - self.total(u, -h / 2, False)[0]) / h

    def agree(self, u: Direction, ad: float, scale: float, fd: float, h: float) -> tuple[float, float, float]:
        """(|ad - fd|, bound, fd) for the directional derivative ad (scale: sum |g_i u_i|);
        refined by Richardson when the first difference misses the bound."""
        bound = RTOL * scale + ROUNDOFF * self.magnitude / h
        if not (np.isfinite(ad) and np.isfinite(fd)):    # the same infinity, or NaN and NaN, agree
            same = ad == fd or (np.isnan(ad) and np.isnan(fd))
            return (0.0 if same else float("inf")), bound, fd
        if abs(ad - fd) <= bound:
            return abs(ad - fd), bound, fd
        fd2 = self.half_step(u, h)
        return abs(ad - fd2), bound + abs(fd - fd2), fd2


# A direction: a unit array per float parameter it moves (by the parameter's position).
Direction = dict[int, Array]


def check(primal: Primal, grads: Mapping[int, Array], name: str, rng: np.random.Generator,
          directions: int = DIRECTIONS) -> OutputCheck:
    """`name`: sum_j <grads[j], u_j> against the central difference along `directions`
    random directions u (each maybe split at kinks: _pieces); `skipped` counts the
    coordinates given up on a kink."""
    g = {j: np.asarray(a, np.float64) for j, a in grads.items()}
    worst: tuple[float, float, float, float, tuple[int, ...]] = (0.0, 1.0, 0.0, 0.0, ())  # ratio, bound, error, fd, (k,)
    skipped, ok = 0, True
    for k in range(directions):
        results, n_skipped = _pieces(primal, g, {j: np.ones(a.shape, bool) for j, a in g.items()}, rng, [MAX_PIECES])
        skipped += n_skipped
        for err, bound, fd in results:
            ok = ok and err <= bound
            ratio = err / bound if bound else (0.0 if err == 0 else np.inf)
            if ratio >= worst[0]:
                worst = (ratio, bound, err, fd, (k,))
    ratio, bound, err, fd, index = worst
    return OutputCheck(name, REFERENCE, err, ratio, ok, bound, skipped, fd, index)


def _pieces(primal: Primal, g: Mapping[int, Array], masks: dict[int, Array], rng: np.random.Generator,
            budget: list[int]) -> tuple[list[tuple[float, float, float]], int]:
    """(error, bound, fd) of a random direction over the coordinates in masks, and how
    many coordinates were skipped.  A direction whose every step reaches a kink is split
    into two random halves, each checked the same way: what ends up alone on a kink is
    skipped, every other coordinate is still checked.  `budget` ([differences left])
    bounds the splitting: beyond it the rest is skipped."""
    n = sum(int(m.sum()) for m in masks.values())
    if n == 0:
        return [], 0
    if budget[0] <= 0:
        return [], n
    budget[0] -= 1
    u = {j: _unit(np.where(m, rng.standard_normal(m.shape), 0.0)) for j, m in masks.items()}
    got = primal.difference(u)
    if got is not None:
        with np.errstate(invalid="ignore"):    # a NaN cotangent off the direction (0 * NaN) counts for nothing
            terms = [np.where(d != 0, g[j] * d, 0.0) for j, d in u.items()]
        ad, scale = sum(float(np.sum(t)) for t in terms), sum(float(np.sum(np.abs(t))) for t in terms)
        return [primal.agree(u, ad, scale, *got)], 0
    if n == 1:
        return [], 1
    results, skipped = [], 0
    for half in _halves(masks, rng):
        r, s = _pieces(primal, g, half, rng, budget)
        results += r
        skipped += s
    return results, skipped


def _unit(v: Array) -> Array:
    norm = float(np.linalg.norm(v))
    return v / norm if norm else v


def _halves(masks: dict[int, Array], rng: np.random.Generator) -> list[dict[int, Array]]:
    """The coordinates in masks split into two random halves."""
    on = [(j, i) for j, m in masks.items() for i in np.flatnonzero(m)]
    order = rng.permutation(len(on))
    out = []
    for part in (order[: len(on) // 2], order[len(on) // 2:]):
        half = {j: np.zeros(m.shape, bool) for j, m in masks.items()}
        for n in part:
            j, i = on[n]
            half[j].flat[i] = True
        out.append(half)
    return out


def check_gradients(program: ir.Program, target: str, args: Sequence[Array], grads64: Sequence[Array],
                    magnitude: float, seed: int = 0, directions: int = DIRECTIONS) -> list[OutputCheck]:
    """The float64 reverse-mode cotangents of target (grads64, in parameter order, floats
    only) along random directions of all float parameters at once; on a failure, one check
    per parameter along directions of its own.  magnitude: of what F was computed from."""
    primal = Primal.at(program, target, args, magnitude)
    params = [(j, p.name) for j, p in enumerate(primal.program.functions[target].params) if p.type.is_float]
    grads = {j: g for (j, _), g in zip(params, grads64)}
    if not grads:
        return []
    joint = check(primal, grads, "d/d " + _names([n for _, n in params]), np.random.default_rng((seed, 0)),
                  directions)
    if joint.ok or len(grads) == 1:
        return [joint]
    alone = [check(primal, {j: grads[j]}, f"d/d {name}", np.random.default_rng((seed, j + 1)), directions)
             for j, name in params]
    return alone if not all(c.ok for c in alone) else [joint, *alone]


def _names(names: list[str]) -> str:
    """`x, y, u`; `wte, wpe, ... (20)` for many."""
    return ", ".join(names) if len(names) <= 3 else f"{', '.join(names[:2])}, ... ({len(names)})"
