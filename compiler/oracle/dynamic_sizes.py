"""Validating dynamic exports: one library, checked at several size assignments.

A dynamic export `f[B, T]` (compiler/check/instances.dynamic_exports) is one compiled
function for every size.  `kinac validate` builds the file once and checks each dynamic
export at `size_runs` assignments: every size 1 (always allowed: the symbolic check holds
for every size >= 1) and random small sizes.  The reference of one run is the program a
static build at those sizes would compile (`reference_program`: the generic functions
exported at the run's sizes, and each gradient wrapper over its handled function there),
so the interpreter, the finite differences and the tolerances are those of a static build.
"""
from __future__ import annotations

import random
from collections.abc import Iterable, Mapping

from compiler.core.types import TupleType, Type
from compiler.ir import nodes as ir

# Sizes of the random runs: small, so the interpreter and finite differences stay quick.
RANDOM_SIZES = (1, 6)
RUNS = 3   # the all-ones run and two random ones


def size_runs(fns: Iterable[ir.Function], seed: int, count: int = RUNS) -> list[dict[str, int]]:
    """The assignments of every size the dynamic functions `fns` take: all ones first."""
    names = sorted({n for fn in fns for n in fn.sizes})
    if not names:
        return []
    rng = random.Random(seed)
    runs = [{n: 1 for n in names}]
    runs += [{n: rng.randint(*RANDOM_SIZES) for n in names} for _ in range(count - 1)]
    return runs


def sizes_of(fn: ir.Function, run: Mapping[str, int]) -> dict[str, int]:
    return {n: run[n] for n in fn.sizes}


def label(fn: ir.Function, run: Mapping[str, int]) -> str:
    """`train_step[B=1, T=4]`, how a report names one run of a dynamic function."""
    return f"{fn.name}[{', '.join(f'{n}={run[n]}' for n in fn.sizes)}]"


def reference_program(static: ir.Program, dynamic: ir.Program, names: Iterable[str]) -> ir.Program:
    """The static program of one run with a reference for each of `names` (functions of
    the dynamic build): a function is there under its own name (the generic exports at
    the run's sizes); a gradient wrapper (a handle of a dynamic function) gets the same
    wrapper over the static function it handles."""
    out = ir.Program(dict(static.functions))
    for name in names:
        fn = dynamic.functions[name]
        if name in static.functions or not isinstance(fn.result, ir.Handle) or fn.lets:
            continue
        target = static.functions.get(fn.result.fn)
        if target is None:
            continue
        params = [ir.Param(p.name, p.type) for p in target.params]
        floats = tuple(p.type for p in params if p.type.is_float)
        ret: Type = TupleType((target.ret_type, *floats)) if floats else target.ret_type
        call = ir.Handle(target.name, [ir.Var(p.name, p.type) for p in params], fn.result.handler, ret, fn.span)
        out.functions[name] = ir.Function(name, params, ret, [], call, fn.span, fn.name_span)
    return out
