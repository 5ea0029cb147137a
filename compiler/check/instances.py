"""Instantiation: the monomorphic program of a module with size-generic functions.

A generic function is checked once with symbolic sizes (its diagnostics are at the
definition); each call at known sizes records an instance request (`linear`, (8, 4, 16)).
`instantiate` checks every requested instance with its sizes as ints, which records
the requests of its own calls, until none is new.  Each instance is an ordinary
monomorphic IR function named `linear$8_4_16`, so the later stages (reverseMode,
lowering, the interpreter, the PyTorch reference) never see a size parameter.

Exports: a generic function whose sizes are all bound by the build's `--size` values
is instantiated under its own name and exported; the others are exported dynamic
(`dynamic_exports`: their symbolic IR, with the bound sizes substituted, which the back
end compiles for every size; docs/compiling.md, "Dynamic sizes").

The symbolic check is sound for every instantiation (core/sizes.py), so an instance
that reports an error is a checker bug; it is still reported, at the call, with the
instantiation it came from, never dropped.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from compiler.check.function import FunctionResult, Signature, check_function
from compiler.check.sizes import display
from compiler.core.diagnostics import Diagnostic, Note, Span
from compiler.core.sizes import instance_name
from compiler.ir import nodes as ir
from compiler.ir.sizes import map_calls, subst_function
from compiler.syntax import nodes as syntax

MAX_INSTANCES = 10_000   # a program that needs more is refused (each is a function to compile)


@dataclass
class Instances:
    functions: dict[str, ir.Function] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    made: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)   # in the order checked


def instantiate(fns: Mapping[str, syntax.FnDef], signatures: dict[str, Signature],
                requests: Iterable[tuple[str, tuple[int, ...]]],
                exports: Mapping[str, tuple[int, ...]] = {}) -> Instances:
    """Check every requested instance (and those their calls request).  `exports`:
    generic functions to instantiate under their own name (bound by --size)."""
    out = Instances()
    todo = [(name, sizes, True) for name, sizes in exports.items()]
    todo += [(name, sizes, False) for name, sizes in sorted(requests)]
    seen: set[tuple[str, tuple[int, ...], bool]] = set()
    while todo:
        name, sizes, export = todo.pop()
        if (name, sizes, export) in seen or name not in fns:
            continue
        seen.add((name, sizes, export))
        if len(seen) > MAX_INSTANCES:
            fn = fns[name]
            out.diagnostics.append(Diagnostic("size", f"more than {MAX_INSTANCES} instantiations of generic "
                                              "functions; call them at fewer sizes", fn.name_span))
            break
        res = _check_instance(fns[name], signatures, sizes)
        out.made.append((name, sizes))
        if res.function is None:
            out.diagnostics += _instance_errors(fns[name], sizes, res)
            continue
        function = res.function
        if export:
            function = ir.Function(name, function.params, function.ret_type, function.lets, function.result,
                                   function.span, function.name_span)
        out.functions[function.name] = function
        todo += [(n, s, False) for n, s in sorted(res.instances)]
    _forward_to_exports(out.functions, exports)
    return out


def _forward_to_exports(functions: dict[str, ir.Function], exports: Mapping[str, tuple[int, ...]]) -> None:
    """An instantiation at the sizes of an export (`main` calls `train_step` at the --size
    values) becomes a call of the export, so its body is compiled once."""
    for name, sizes in exports.items():
        inst = functions.get(instance_name(name, sizes))
        if inst is None or name not in functions:
            continue
        args: list[ir.Expr] = [ir.Var(p.name, p.type, p.span) for p in inst.params]
        call = ir.CallFn(name, args, inst.ret_type, inst.span)
        out = "out$"    # no Kina name has a `$`; a let chain ending in a variable, as reverseMode needs
        functions[inst.name] = ir.Function(inst.name, inst.params, inst.ret_type,
                                           [ir.Binding([out], call, span=inst.span)],
                                           ir.Var(out, inst.ret_type, inst.span), inst.span, inst.name_span)


def _check_instance(fn: syntax.FnDef, signatures: dict[str, Signature], sizes: tuple[int, ...]) -> FunctionResult:
    return check_function(fn, signatures, dict(zip((s.name for s in fn.sizes), sizes)))


def _instance_errors(fn: syntax.FnDef, sizes: tuple[int, ...], res: FunctionResult) -> list[Diagnostic]:
    shown = display(fn.name, [s.name for s in fn.sizes], sizes)
    # the generic check holds for every size, except the values of bare-number expressions
    # over sizes (`1.0 / (N - 1)` is not finite at N = 1), which only an instantiation knows
    note = Note(f"in the instantiation {shown}" + ("" if all(d.code == "literal" for d in res.diagnostics) else
                "; its generic check passed, so this is a Kina bug: please report it with this program"))
    return [Diagnostic(d.code, f"{d.message} (in {shown})", d.span, d.notes + (note,), d.severity, d.fix)
            for d in res.diagnostics if d.severity == "error"]


def unbound_exports(fns: Mapping[str, syntax.FnDef],
                    sizes: Mapping[str, int]) -> tuple[dict[str, tuple[int, ...]], list[Diagnostic]]:
    """(generic functions every size of which `sizes` binds -> their sizes, the errors of
    --size values below 1).  The others are exported dynamic (dynamic_exports)."""
    exports = {name: tuple(sizes[s.name] for s in fn.sizes) for name, fn in fns.items()
               if fn.sizes and all(s.name in sizes for s in fn.sizes)}
    diags = [Diagnostic("size", f"--size {k}={v}: sizes are at least 1", Span(0, 0)) for k, v in sizes.items() if v < 1]
    return exports, diags


# ---- dynamic exports -------------------------------------------------------------------------
DYNAMIC_COPY = "$dyn"   # the private, fully dynamic copy of a generic function (`linear$dyn`)


@dataclass
class Dynamic:
    functions: dict[str, ir.Function] = field(default_factory=dict)
    requests: set[tuple[str, tuple[int, ...]]] = field(default_factory=set)


def dynamic_exports(exports: Mapping[str, ir.Function], sizes: Mapping[str, int],
                    generic: Mapping[str, ir.Function]) -> Dynamic:
    """The dynamic functions of a build: each of `exports` (symbolic IR) whose sizes
    `sizes` does not all bind is exported under its own name with the bound ones
    substituted and the others taken at each call (ir.Function.sizes).  A call at
    symbolic sizes passes all of its callee's sizes, so it calls the callee's export when
    that one is fully dynamic, else a private fully dynamic copy `f$dyn` of the callee's
    symbolic IR (`generic`: every generic function's).  `requests`: the monomorphic
    instances that the substituted calls now need."""
    out = Dynamic()
    for name, fn in exports.items():
        bound = {n: sizes[n] for n in fn.sizes if n in sizes}
        if len(bound) < len(fn.sizes):
            out.functions[name], reqs = subst_function(fn, bound)
            out.requests |= reqs
    todo = list(out.functions)
    while todo:
        name = todo.pop()
        fn = out.functions[name]
        out.functions[name] = map_calls(fn, lambda call: _dynamic_target(call, generic, out, todo))
    return out


def _dynamic_target(call: ir.CallFn | ir.Handle, generic: Mapping[str, ir.Function], out: Dynamic,
                    todo: list[str]) -> str:
    if not call.sizes or call.fn not in generic:
        return call.fn
    export = out.functions.get(call.fn)
    if export is not None and export.sizes == generic[call.fn].sizes:
        return call.fn
    copy = call.fn + DYNAMIC_COPY
    if copy not in out.functions:
        out.functions[copy] = dataclasses.replace(generic[call.fn], name=copy)
        todo.append(copy)
    return copy
