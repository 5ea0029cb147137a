"""VJP exports (`kinac build --vjp f`, issue 28): for a function `f(a1, .., an) -> R`, an
exported function

    f_vjp(a1, .., an, g_y: R) -> (R, g1, .., gk)

returning f's result and the vector-Jacobian product g_y^T (dR / d a_i) for each floating
parameter a_i (I64 and Bool parameters get none, as under reverseMode).  It is the function
`transform_ad` builds for `handle f(..) with reverseMode`, with its backward sweep seeded by
the parameter g_y instead of ones of R: so `handle f` is `f_vjp(.., ones)`, and the
restrictions (a single floating tensor result, a let chain of single ops, VJP rows) are
reverseMode's, reported with the same diagnostics.

An autograd engine calls `f_vjp` with the cotangent its backward pass receives
(compiler/interop: torch.autograd.Function.backward, jax.custom_vjp's bwd).  A generic `f`
gives a generic `f_vjp` in the same sizes (dynamic when built without `--size`).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from compiler.ad.transform import _analyse, _backward, _unknown, with_cotangents
from compiler.core.diagnostics import Diagnostic
from compiler.ir import nodes as ir
from compiler.ir.nodes import Binding, Function, Param, Program, Var

VJP_SUFFIX = "_vjp"
COTANGENT = "g_y"


def vjp_name(fn_name: str) -> str:
    """The exported name of fn's VJP: `f_vjp`."""
    return fn_name + VJP_SUFFIX


def _fresh_cotangent_name(fn: Function, taken: Iterable[str]) -> str:
    """`g_y`, or `g_y_1`, ... when f already has a parameter or let of that name."""
    used = {p.name for p in fn.params} | set(taken)
    name, k = COTANGENT, 0
    while name in used:
        k += 1
        name = f"{COTANGENT}_{k}"
    return name


def transform_vjp(program: Program, fn_name: str) -> tuple[Function | None, list[Diagnostic]]:
    """`f_vjp(params.., g_y) -> (R, g..)` (R alone when f has no floating parameter), or None
    with the reverseMode restrictions f violates."""
    if fn_name not in program.functions:
        return None, [_unknown(fn_name, ir.NO_SPAN)]
    fn, lets, result, active, needed, diags = _analyse(program, fn_name)
    if diags:
        return None, diags
    assert isinstance(result, Var), result   # _analyse reports any other result
    names = {n for let in lets for n in let.binding.names}
    seed_type = result.tensor_type
    seed = Var(_fresh_cotangent_name(fn, names), seed_type, fn.span)
    b, grads = _backward(fn, lets, result, active, needed, seed)
    backward = [Binding([n], v, span=v.span) for n, v in b.lets]
    ret, out = with_cotangents(fn, result, grads)
    params = [dataclasses.replace(p) for p in fn.params] + [Param(seed.name, seed_type, fn.name_span)]
    return Function(vjp_name(fn.name), params, ret, [let.binding for let in lets] + backward, out, fn.span,
                    fn.name_span, fn.sizes), []


def add_vjp_exports(program: Program, names: Iterable[str]) -> tuple[Program, list[Diagnostic]]:
    """A copy of program with `f_vjp` added (exported) for each f in names; diagnostics for a
    name that is no exported function, whose `f_vjp` would shadow a user function, or that
    reverseMode cannot differentiate."""
    out = Program(dict(program.functions))
    diags: list[Diagnostic] = []
    for name in dict.fromkeys(names):
        fn = program.functions.get(name)
        if fn is None or not ir.is_export(name):
            have = ", ".join(n for n in program.functions if ir.is_export(n)) or "none"
            diags.append(Diagnostic("unknown-name", f"--vjp {name}: no exported function `{name}` "
                                    f"(the program exports: {have})", ir.NO_SPAN))
            continue
        if vjp_name(name) in program.functions:
            diags.append(Diagnostic("duplicate", f"--vjp {name}: the program already has a function "
                                    f"`{vjp_name(name)}`, the name of the VJP export; rename it",
                                    program.functions[vjp_name(name)].name_span))
            continue
        vjp, errors = transform_vjp(program, name)
        if vjp is None:
            diags += [dataclasses.replace(d, message=f"--vjp {name}: {d.message}") for d in errors]
            continue
        out.functions[vjp.name] = vjp
    return out, diags

