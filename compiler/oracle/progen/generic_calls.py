"""The monomorphic side of a case's generic helpers (generic.py builds their bodies): the
calls of the entry function f at two different sizes, and the `f_gh` wrapper that
differentiates a generic helper with `handle`.

The entry functions stay monomorphic (they are what the oracle exports and compares);
every call is a Let of f (pseudo-op CALL) with concrete sizes, so the shrinker's edits of
f's lets apply to calls as to any op (a removed call becomes a parameter of its type).
Called after the rest of the case is drawn, so the other cases' programs are those of a
generator without generics, choice for choice.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from compiler.core.sizes import Dim
from compiler.oracle.progen.base import CALL
from compiler.oracle.progen.case import Case, GenericFn, GenericHandle, Let, Value
from compiler.oracle.progen.generic import SIZE_VALUES, build_fn, concrete, first_shape, largest, shape_of

if TYPE_CHECKING:
    from compiler.oracle.progen.generate import Gen


def add_generics(g: Gen, case: Case) -> None:
    """One or two generic helpers (the second calls the first), called by f at two sizes."""
    ch = g.ch
    n_params = len(g.params)
    kept = {p.name for p in case.params}     # parameters dropped as unused are no operands now
    g.pool[:] = [v for v in g.pool if v.name in kept or all(v is not p for p in g.params)]
    fns: list[GenericFn] = []
    if ch.coin(0.35):
        sizes, first = first_shape(ch, ch.between(1, 3))
        fns.append(build_fn(ch, case.dtype, 0, sizes, first, []))
    last = next(v for v in g.pool if v.name == case.results[0])
    bound: tuple[int, ...] | None = None
    if 1 <= last.type.rank <= 5 and ch.coin(0.8):
        sizes, first, bound = shape_of(ch, last.type.shape)
    if bound is None or not sizes:
        sizes, first = first_shape(ch, ch.between(1, 3))
        bound = None
    root = build_fn(ch, case.dtype, len(fns), sizes, first, fns)
    fns.append(root)
    case.generics = fns
    if bound is not None and largest(root, _env(root, bound), fns) > g.max_elements:
        bound = None
    at = [bound or _sizes(g, root, fns, ())]
    at.append(_sizes(g, root, fns, at[0]))
    y1 = _call(g, root, at[0], last if bound is not None else None)
    y2 = _call(g, root, at[1], None)
    if case.ad:        # one result: the second call and f's own chain folded into the first call
        out = _fold(g, y1, y2)
        case.results[0] = (out if bound is not None else _fold(g, out, last)).name
    else:              # results of their own (fewer lets to build)
        case.results[0] = y1.name
        case.results += [y2.name] + ([last.name] if bound is None else [])
    if ch.coin(0.4):
        hs = at[ch.below(2)] if ch.coin(0.3) else _sizes(g, root, fns, at[0])
        env = _env(root, hs)
        case.gh = GenericHandle(root.index, hs, [Value(f"h{i}", concrete(p.type, env)) for i, p in
                                                 enumerate(root.params)], ch.coin(0.3))
    case.params += g.params[n_params:]


def _env(fn: GenericFn, sizes: tuple[int, ...]) -> dict[str, Dim]:
    return dict(zip(fn.sizes, sizes))


def _sizes(g: Gen, fn: GenericFn, fns: list[GenericFn], other: tuple[int, ...]) -> tuple[int, ...]:
    """Sizes whose instance fits g.max_elements, and differ from `other`."""
    for _ in range(4):
        sizes = tuple(g.ch.pick(SIZE_VALUES) for _ in fn.sizes)
        if largest(fn, _env(fn, sizes), fns) <= g.max_elements and sizes != other:
            return sizes
    sizes = (2,) + (1,) * (len(fn.sizes) - 1) if other[:1] != (2,) else (1,) * len(fn.sizes)
    return sizes


def _call(g: Gen, fn: GenericFn, sizes: tuple[int, ...], first: Value | None) -> Value:
    """`let y = f_s<k>(args) in` (or f_s<k>[sizes](args)): args of the instance's types,
    `first` (a value of f) as the first when given."""
    env = _env(fn, sizes)
    args = [first if i == 0 and first is not None else g.like(concrete(p.type, env))
            for i, p in enumerate(fn.params)]
    t = concrete(fn.types()[fn.result], env)
    v = Value(g.fresh("y"), t, 1.0 + max(a.mag for a in args))
    g.lets.append(Let(v.name, CALL, [a.name for a in args], {"fn": fn.index, "sizes": sizes,
                                                             "explicit": g.ch.coin(0.25)}, t))
    g.pool.append(v)
    return g.rescale(v)


def _fold(g: Gen, y: Value, v: Value) -> Value:
    """y + broadcast(sum of v over every axis): v folded into y's type (reverseMode-safe:
    sums, a reshape of ones, a broadcast that keeps the rank)."""
    s = v
    if v.type != y.type:
        if v.type.rank > 1:
            s = g.emit("reshape", [s], s.mag, shape=(math.prod(v.type.shape),))
        if s.type.rank == 1:
            s = g.rescale(g.emit("reduce_keep", [s], s.mag * math.sqrt(s.type.shape[0]), op="sum", axis=0))
        if s.type.rank != y.type.rank:
            s = g.emit("reshape", [s], s.mag, shape=(1,) * y.type.rank)
        if s.type.shape != y.type.shape:
            s = g.emit("broadcast", [s], s.mag, shape=y.type.shape)
    return g.rescale(g.emit("add", [y, s], y.mag + s.mag))
