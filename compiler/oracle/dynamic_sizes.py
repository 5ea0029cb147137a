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
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from compiler.ad import add_vjp_exports
from compiler.core.diagnostics import read_source
from compiler.core.types import TupleType, Type
from compiler.ir import nodes as ir
from compiler.oracle.child import RUN_MARK
from compiler.oracle.gradients import GRAD_PREFIX, add_gradient_wrappers

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


@dataclass
class Task:
    """One function for `kinac validate` to run: `key` names its files and child run, `fn`
    and `program` are the reference's (a dynamic function's run: the static program at
    `sizes`), `label` what the report calls it."""
    key: str
    fn: ir.Function
    program: ir.Program
    sizes: dict[str, int]
    label: str = ""

    def __post_init__(self) -> None:
        self.label = self.label or display_name(self.fn)


def display_name(fn: ir.Function) -> str:
    """A gradient wrapper shows as the function it differentiates (`linear$4_3_5` for an
    instantiation of a generic one)."""
    if fn.name.startswith(GRAD_PREFIX) and isinstance(fn.result, ir.Handle):
        return f"{fn.result.fn} (reverseMode)"
    return fn.name


def tasks(path: str | Path, program: ir.Program, fns: list[ir.Function], seed: int,
          vjp: Collection[str] = ()) -> list[Task]:
    """The runs of the dynamic exports `fns` of `program` (built from the file at `path`
    with `--vjp` names `vjp`): each at every assignment of size_runs, against the static
    program at those sizes (its `f_vjp` exports made by the same add_vjp_exports)."""
    from compiler import analysis
    if not fns:
        return []
    snap = analysis.analyze(read_source(Path(path)), str(path))
    out = []
    for k, run in enumerate(size_runs(fns, seed)):
        static, _ = snap.program_for(run, want_dynamic=False)
        if vjp:
            static, _ = add_vjp_exports(static, vjp)
        ref = reference_program(add_gradient_wrappers(static), program, [f.name for f in fns])
        for fn in fns:
            if fn.name in ref.functions:
                name = label(fn, run)
                if fn.name.startswith(GRAD_PREFIX) and isinstance(fn.result, ir.Handle):
                    name = f"{fn.result.fn}{name[len(fn.name):]} (reverseMode)"
                out.append(Task(f"{fn.name}{RUN_MARK}{k}", ref.functions[fn.name], ref, sizes_of(fn, run), name))
    return out
