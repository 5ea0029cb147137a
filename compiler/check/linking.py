"""Linking: the functions of one or more files -> the parts of one program, and the
program a build compiles from them (instantiations, dynamic exports).

A file's checked functions name their callees as the file writes them: `helper` for its
own, `layers.linear` (an import's name, then the function) for another file's.  A program
of several files needs one name per function: the entry file keeps its names (they are
what a library exports), and every function of an imported module is named after the
module, `layers.linear` (`layers~2.linear` when two imported files share a name).  Names
with a `.` or a `$` are never exported (ir.is_export), and an instantiation is
`layers.linear$8_4_16`.  `rename_parts` renames one file's parts so; `merge` puts the
files together; `assemble` makes the program (check/instances.py: instantiate,
dynamic_exports), exporting only the entry file's generic functions.
"""
from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from compiler.check import instances
from compiler.check.function import Signature
from compiler.core.diagnostics import Diagnostic
from compiler.ir import nodes as ir
from compiler.ir.sizes import map_calls
from compiler.syntax import nodes as syntax
from compiler.syntax import walk

Requests = set[tuple[str, tuple[int, ...]]]


@dataclass
class Parts:
    """The good functions of one file (or of several, merged), by name.  `mono`: the typed IR
    of the monomorphic ones; `generic`: the ASTs of the size-generic ones (instantiated at
    build time) and `symbolic` their symbolic IR; `signatures`: every function's; `calls`:
    what each generic function calls; `instances`: the instantiations each function's calls
    need; `exportable`: the generic functions a build may export (None: every one)."""
    mono: dict[str, ir.Function] = field(default_factory=dict)
    generic: dict[str, syntax.FnDef] = field(default_factory=dict)
    symbolic: dict[str, ir.Function] = field(default_factory=dict)
    signatures: dict[str, Signature] = field(default_factory=dict)
    calls: dict[str, set[str]] = field(default_factory=dict)
    instances: dict[str, Requests] = field(default_factory=dict)
    exportable: set[str] | None = None


def assemble(parts: Parts, sizes: Mapping[str, int], want_dynamic: bool = True) -> tuple[ir.Program, list[Diagnostic]]:
    """The program a build compiles: the monomorphic functions, every exportable generic
    function that `sizes` (`kinac build --size B=4`) binds fully exported at those sizes,
    every other one exported dynamic (its unbound sizes taken at each call; with `sizes`,
    only those no generic function calls; none with `want_dynamic` False), and the
    instantiations all of them call."""
    if not parts.generic:
        return ir.Program(dict(parts.mono)), []
    exportable = {n: fn for n, fn in parts.generic.items() if parts.exportable is None or n in parts.exportable}
    exports, diags = instances.unbound_exports(exportable, sizes)
    # Without --size values every generic function is exported dynamic; with them, only
    # those no generic function calls (a helper of others is instantiated where called).
    called = {c for n in parts.generic for c in parts.calls.get(n, ()) if c != n}
    roots = {n: f for n, f in parts.symbolic.items() if n in exportable and (not sizes or n not in called)}
    dynamic = instances.dynamic_exports(roots if want_dynamic else {}, sizes, parts.symbolic)
    requests = {r for n in parts.mono for r in parts.instances.get(n, ())}
    requests |= {r for n in parts.generic if n in dynamic.functions for r in parts.instances.get(n, ())}
    made = instances.instantiate(parts.generic, parts.signatures, requests | dynamic.requests, exports)
    return ir.Program({**parts.mono, **made.functions, **dynamic.functions}), diags + made.diagnostics


def namer(prefix: str, own: frozenset[str], imports: Mapping[str, str]) -> Callable[[str], str]:
    """The program-wide name of a function as one file writes it: `prefix`: the file's
    module name ("" for the entry file); `own`: the functions it defines; `imports`: its
    import names -> their modules' names.  Instantiation suffixes (`$8_4`) are kept."""
    def name(written: str) -> str:
        base, dollar, suffix = written.partition("$")
        module, dot, fn = base.partition(".")
        if dot and module in imports:
            base = qualified(imports[module], fn)
        elif not dot and base in own:
            base = qualified(prefix, base)
        return base + dollar + suffix
    return name


def module_prefixes(paths: list[str]) -> dict[str, str]:
    """The program-wide name of each imported module: its file's stem, `stem~2` for a
    second file of the same stem (`a/layers.kina`, `b/layers.kina`)."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for path in paths:
        # a plain identifier, whatever the file is called (the name reaches MLIR symbols)
        stem = re.sub(r"[^A-Za-z0-9_]", "_", os.path.splitext(os.path.basename(path))[0]) or "module"
        name, n = stem, 1
        while name in taken:
            n += 1
            name = f"{stem}~{n}"
        taken.add(name)
        out[path] = name
    return out


def qualified(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def rename_parts(parts: Parts, name: Callable[[str], str], user: Callable[[str], bool]) -> Parts:
    """`parts` with every function and every call of a user function renamed by `name`;
    `user(written)`: whether a free call `f(..)` in an AST is a user function (else an op)."""
    return Parts(
        mono={name(n): _rename_ir(f, name) for n, f in parts.mono.items()},
        generic={name(n): _rename_ast(f, name, user) for n, f in parts.generic.items()},
        symbolic={name(n): _rename_ir(f, name) for n, f in parts.symbolic.items()},
        signatures={name(n): dataclasses.replace(s, name=name(n)) for n, s in parts.signatures.items()},
        calls={name(n): {name(c) for c in cs} for n, cs in parts.calls.items()},
        instances={name(n): {(name(g), s) for g, s in rs} for n, rs in parts.instances.items()},
        exportable=None if parts.exportable is None else {name(n) for n in parts.exportable})


def merge(entry: Parts, others: list[Parts]) -> Parts:
    """One program's parts: the entry file's, then the imported modules' (renamed: no name
    is in two of them); only the entry file's generic functions are exportable."""
    out = Parts(exportable=set(entry.generic))
    for p in [entry, *others]:
        out.mono.update(p.mono)
        out.generic.update(p.generic)
        out.symbolic.update(p.symbolic)
        out.signatures.update(p.signatures)
        out.calls.update(p.calls)
        out.instances.update(p.instances)
    return out


def _rename_ir(fn: ir.Function, name: Callable[[str], str]) -> ir.Function:
    return dataclasses.replace(map_calls(fn, lambda call: name(call.fn)), name=name(fn.name))


def _rename_ast(fn: syntax.FnDef, name: Callable[[str], str], user: Callable[[str], bool]) -> syntax.FnDef:
    def go(e: syntax.Expr) -> syntax.Expr:
        if isinstance(e, syntax.Call) and user(e.func):
            return dataclasses.replace(e, func=name(e.func))   # a handle's call included
        return e
    return dataclasses.replace(walk.rebuild(fn, go), name=name(fn.name))
