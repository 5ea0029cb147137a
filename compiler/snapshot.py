"""One analysed version of a document: its items' results and the queries on them.

An Analysis (analysis.py) produces a Snapshot per version of the text.  The results
of each item are kept in item-local spans (ItemResult, shared between snapshots
while the item's text does not change); an Item says where the item sits in this
version.  The queries (the whole-document views module, program, types; and
function_at, type_at, definition, references, rename_conflict at an offset) shift
results to document offsets only when asked, one item at a time, and an item that
neither changed nor moved hands out the copy the previous snapshot made.
"""
from __future__ import annotations

import bisect
import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple, TypeVar

from compiler import check
from compiler.check import linking, names
from compiler.core.diagnostics import Diagnostic, SourceText, Span
from compiler.ir import nodes as ir
from compiler.syntax import nodes as ast
from compiler.syntax.imports import ImportDecl
from compiler.syntax.walk import shift

# A hashable stand-in for a Signature: ((parameter, type), ...), result type.
SigKey = tuple[tuple[tuple[str, str], ...], str]
# What an item's check result was computed against: (mentioned name, its SigKey) pairs,
# and the set of function names when it has an unknown name.
CheckKey = tuple[object, ...]
_T = TypeVar("_T")


def _moved(local: _T | None, offset: int, hit: tuple[int, _T | None] | None) -> tuple[int, _T | None]:
    """(offset, `local` with its spans at offset): `hit` when it is that copy already."""
    if hit is not None and hit[0] == offset:
        return hit
    return offset, (shift(local, offset) if local is not None else None)


@dataclass
class ItemResult:
    """Everything about one item that depends only on its text (and its callees)."""
    text: str
    name: str
    fn: ast.FnDef | None
    parse_diags: tuple[Diagnostic, ...]
    signature: check.Signature | None = None
    sig_key: SigKey | None = None        # hashable form of `signature`
    symbols: names.Symbols | None = None
    mentions: frozenset[str] = frozenset()
    result: check.FunctionResult | None = None
    check_key: CheckKey | None = None    # what `result` was computed against
    # document-offset copies of the AST and the IR: (offset, copy).  An item that did not
    # change and did not move hands out the copy the previous snapshot made.
    fn_copy: tuple[int, ast.FnDef | None] | None = field(default=None, repr=False, compare=False)
    ir_copy: tuple[int, ir.Function | None] | None = field(default=None, repr=False, compare=False)

    @property
    def syms(self) -> names.Symbols:
        """The name resolution of an item that parsed (set with `fn`)."""
        assert self.symbols is not None, self.name
        return self.symbols

    @property
    def checked(self) -> check.FunctionResult:
        """The check result of an item whose function was checked."""
        assert self.result is not None, self.name
        return self.result

    def fn_at(self, offset: int) -> ast.FnDef | None:
        """This item's AST with spans at `offset`."""
        self.fn_copy = _moved(self.fn, offset, self.fn_copy)
        return self.fn_copy[1]

    def ir_at(self, offset: int) -> ir.Function | None:
        """This item's IR function (if it checked) with spans at `offset`."""
        self.ir_copy = _moved(self.result.function if self.result else None, offset, self.ir_copy)
        return self.ir_copy[1]


@dataclass
class Item:
    """An item of the current document: its results and where it sits."""
    offset: int
    end: int
    res: ItemResult

    @property
    def name(self) -> str:
        return self.res.name

    @property
    def fn(self) -> ast.FnDef | None:
        """The item's AST in document spans (cached across snapshots while it stays put)."""
        return self.res.fn_at(self.offset)

    @property
    def ir(self) -> ir.Function | None:
        """The item's typed IR in document spans, if it checked (cached likewise)."""
        return self.res.ir_at(self.offset)


@dataclass(frozen=True)
class ModuleLink:
    """One import of a document, as the module loader (compiler/modules) resolved it:
    `path` the file found (None when none was, or the import closes a cycle), `snapshot`
    that file's analysis, `problem` why the import is broken (at the import's span)."""
    decl: ImportDecl
    path: str | None
    snapshot: Snapshot | None
    problem: Diagnostic | None = None


# What a document's imports resolve to: (the importing file's path, its import lines) ->
# one ModuleLink per line.  compiler/modules gives one (modules.Workspace.loader), reading
# files from disk or, in the language server, from the open editors' buffers.
Loader = Callable[[str, Sequence[ImportDecl]], list[ModuleLink]]


@dataclass
class LastGood:
    """The last IR and types of a function that checked cleanly (for hover while it is broken)."""
    text: str
    result: check.FunctionResult


class Snapshot:
    """The analysis of one version of the text.  Cheap things are computed eagerly
    (diagnostics); document-offset copies of ASTs and IR lazily, per item, and reused
    by the next snapshot for every item that neither changed nor moved.  Queries about
    one place (function_at, ir_function_at, type_at, definition) touch only the item
    there; the whole-document views (module, program, types) copy every item."""

    def __init__(self, text: str, path: str, items: list[Item], diagnostics: list[Diagnostic],
                 good: set[str], last_good: dict[str, LastGood], imports: Sequence[ModuleLink] = ()) -> None:
        self.text, self.path = text, path
        self.imports = list(imports)     # the document's import lines, resolved
        self.items = items
        self.diagnostics = diagnostics
        self._good = good                # names of the functions in .program
        self._last_good = last_good
        self._starts = [it.offset for it in items]

    # ---- whole-document views
    @cached_property
    def source(self) -> SourceText:
        return SourceText(self.text, self.path)

    @cached_property
    def module(self) -> ast.Module:
        return ast.Module(tuple(fn for it in self.items if it.res.fn is not None and (fn := it.fn) is not None),
                          Span(0, len(self.text)))

    @cached_property
    def program(self) -> ir.Program:
        """The functions that checked cleanly (not recursive, first definitions), document
        spans: the monomorphic ones and the instantiations of generic ones that they call
        (check/instances.py)."""
        return self.program_for({}, want_dynamic=False)[0]

    def program_for(self, sizes: Mapping[str, int], want_dynamic: bool = True) -> tuple[ir.Program, list[Diagnostic]]:
        """The program a build compiles (check/linking.assemble): the monomorphic functions,
        every generic function that `sizes` (`kinac build --size B=4`) binds fully exported at
        those sizes, every other generic function exported dynamic (its unbound sizes taken at
        each call: check/instances.dynamic_exports; with `sizes`, only those no generic function
        calls; none with `want_dynamic` False), and the instantiations all of them call.  With
        imports, the functions of every imported module too, named after it (`layers.linear`,
        check/linking.py), of which only those the entry file's functions use are kept."""
        if not self.imports:
            return linking.assemble(self.parts(), sizes, want_dynamic)
        modules = self.closure()
        prefixes = linking.module_prefixes([m.path for m in modules[1:]])
        prefixes[self.path] = ""
        parts = [linking.rename_parts(m.parts(), m.namer(prefixes), m.is_user_function) for m in modules]
        program, diags = linking.assemble(linking.merge(parts[0], parts[1:]), sizes, want_dynamic)
        return ir.reachable(program, [n for n in program.functions if ir.is_export(n)]), diags

    def namer(self, prefixes: Mapping[str, str], own: frozenset[str] | None = None) -> Callable[[str], str]:
        """The program-wide name (check/linking.namer) of a function as this file writes it;
        `prefixes`: the module name of each file by path ("" for the entry file)."""
        imports = {m.decl.name: prefixes[m.snapshot.path] for m in self.imports
                   if m.snapshot is not None and m.problem is None and m.snapshot.path in prefixes}
        return linking.namer(prefixes[self.path], self.defined_names if own is None else own, imports)

    def is_user_function(self, written: str) -> bool:
        """Whether a free call `f(..)` in this file's ASTs calls a user function (else an op)."""
        return "." in written or written in self.defined_names

    def parts(self) -> linking.Parts:
        """This file's good functions (check/linking.Parts), named as the file writes them."""
        out = linking.Parts()
        for it in self._first_defs().values():
            if (sig := it.res.signature) is not None:
                out.signatures[it.name] = sig
            if it.name not in self._good:
                continue
            res = it.res.checked
            out.instances[it.name] = set(res.instances)
            if not res.generic:
                if (f := it.ir) is not None:
                    out.mono[it.name] = f
                continue
            out.calls[it.name] = set(res.calls)
            if (fn := it.fn) is not None:
                out.generic[it.name] = fn
            if (f := it.ir) is not None:
                out.symbolic[it.name] = f
        return out

    def imported_errors(self) -> list[tuple[SourceText, list[Diagnostic]]]:
        """The diagnostics of every imported module (directly or not) that has errors, each
        with its source (its path relative to the current folder when under it): what the
        CLI prints after the importer's own `module layers has 2 errors`."""
        out = []
        for m in self.closure()[1:]:
            if m.error_count:
                rel = os.path.relpath(m.path) if not m.path.startswith("<") else m.path
                shown = rel if not rel.startswith("..") else m.path
                out.append((SourceText(m.text, shown), list(m.diagnostics)))
        return out

    def closure(self) -> list[Snapshot]:
        """This snapshot and every module it imports, directly or not (each once, this one
        first), through the imports that resolved."""
        out: list[Snapshot] = []
        seen: set[str] = set()
        todo: list[Snapshot] = [self]
        while todo:
            snap = todo.pop(0)
            if snap.path in seen:
                continue
            seen.add(snap.path)
            out.append(snap)
            todo += [m.snapshot for m in snap.imports if m.snapshot is not None and m.problem is None]
        return out

    # ---- what importers see
    @cached_property
    def public_signatures(self) -> dict[str, check.Signature]:
        """The signatures of the functions importers may call: every first definition that
        parsed whose name does not start with `_`."""
        return {name: sig for name, it in self._first_defs().items()
                if not name.startswith("_") and (sig := it.res.signature) is not None}

    @cached_property
    def defined_names(self) -> frozenset[str]:
        """Every function name the document defines (private ones included)."""
        return frozenset(it.name for it in self.items if it.name)

    @property
    def error_count(self) -> int:
        return sum(1 for d in self.diagnostics if d.severity == "error")

    def link(self, name: str) -> ModuleLink | None:
        """The import called `name` (the first one, when two share it)."""
        return next((m for m in self.imports if m.decl.name == name), None)

    @cached_property
    def functions(self) -> dict[str, FunctionInfo]:
        return {name: FunctionInfo(fn, it.res.signature) for name, it in self._first_defs().items()
                if (fn := it.fn) is not None}

    # ---- one function (document spans), without copying the others
    def function_at(self, offset: int) -> ast.FnDef | None:
        """The parsed function whose item contains offset."""
        it = self.item_at(offset)
        return it.fn if it is not None and it.res.fn is not None else None

    def function_named(self, name: str) -> ast.FnDef | None:
        """The first definition of a function that parsed."""
        it = self._first_defs().get(name)
        return it.fn if it is not None else None

    def ir_function_at(self, offset: int) -> ir.Function | None:
        """The typed IR of the function at offset, when it is part of the program."""
        it = self.item_at(offset)
        if it is None or it.name not in self._good or self._first_defs().get(it.name) is not it:
            return None
        return it.ir

    def local_functions(self) -> list[tuple[int, ast.FnDef]]:
        """(item offset, FnDef in item-local spans) of every parsed function, in text order:
        names, parameters and types without copying any AST."""
        return [(it.offset, fn) for it in self.items if (fn := it.res.fn) is not None]

    @cached_property
    def types(self) -> list[check.TypeFact]:
        """Every TypeFact of the document, document spans, in text order."""
        facts = [_shift_fact(f, it.offset) for it in self.items if it.res.result for f in it.res.result.types]
        return sorted(facts, key=lambda f: (f.span.start, f.span.end))

    @property
    def last_good(self) -> dict[str, LastGood]:
        return dict(self._last_good)

    def _first_defs(self) -> dict[str, Item]:
        return self._first

    @cached_property
    def _first(self) -> dict[str, Item]:
        out: dict[str, Item] = {}
        for it in self.items:
            if it.res.fn is not None:
                out.setdefault(it.name, it)
        return out

    # ---- queries at an offset
    def item_at(self, offset: int) -> Item | None:
        i = bisect.bisect_right(self._starts, offset) - 1
        if i >= 0 and self.items[i].offset <= offset <= self.items[i].end:
            return self.items[i]
        return None

    def type_at(self, offset: int) -> check.TypeFact | None:
        """The innermost TypeFact whose span contains offset.  When the function does
        not parse, its last good types are used, but only in front of the first
        character that changed since: there the text is the same and, types flowing
        forward through the let chain, so are the types.  Past it, a fact could sit at
        a shifted position or describe code that is gone, so none is shown."""
        it = self.item_at(offset)
        if it is None:
            return None
        facts = it.res.result.types if it.res.result else []
        if not facts and it.name in self._last_good:
            good = self._last_good[it.name]
            same = _common_prefix(good.text, it.res.text)
            facts = [f for f in good.result.types if f.span.end < same]
        local = offset - it.offset
        inside = [f for f in facts if f.span.start <= local <= f.span.end]
        if not inside:
            return None
        best = min(inside, key=lambda f: (f.span.end - f.span.start, -f.span.start))
        return _shift_fact(best, it.offset)

    def _symbol_at(self, offset: int) -> _LocalSym | _FnSym | None:
        """The name at offset: a local (its item, its binding's span) or a function, in
        item-local spans; None elsewhere."""
        it = self.item_at(offset)
        if it is None or it.res.fn is None:
            return None
        local, sym, fn = offset - it.offset, it.res.syms, it.res.fn
        if fn.name_span.contains(local):
            return _FnSym(fn.name)
        for span, name in sym.calls:
            if span.contains(local):
                return _FnSym(name)
        for span, target in sym.uses.items():
            if span.contains(local):
                return _LocalSym(it, target)
        for span in sym.defs:
            if span.contains(local):
                return _LocalSym(it, span)
        return None

    def definition(self, offset: int) -> Span | None:
        """Where the name at offset is defined (a function name, parameter or let)."""
        sym = self._symbol_at(offset)
        if sym is None:
            return None
        if isinstance(sym, _LocalSym):
            return sym.binding.shift(sym.item.offset)
        target = self._first_defs().get(sym.name)
        fn = target.res.fn if target else None
        return fn.name_span.shift(target.offset) if target and fn else None

    def references(self, offset: int) -> list[Span]:
        """Every occurrence (definition included) of the name at offset, in text order."""
        sym = self._symbol_at(offset)
        if sym is None:
            return []
        if isinstance(sym, _LocalSym):
            it, target = sym
            spans = [target] + [use for use, d in it.res.syms.uses.items() if d == target]
            return sorted((s.shift(it.offset) for s in spans), key=lambda s: (s.start, s.end))
        name, out = sym.name, []
        for it in self.items:
            if it.res.fn is None:
                continue
            if it.res.fn.name == name:
                out.append(it.res.fn.name_span.shift(it.offset))
            out += [span.shift(it.offset) for span, callee in it.res.syms.calls if callee == name]
        return sorted(out, key=lambda s: (s.start, s.end))

    def rename_conflict(self, offset: int, new: str) -> tuple[str, Span | None] | None:
        """Why renaming the name at offset to `new` would change what the program means,
        as (message, document span of the clashing name or None); None when it is safe."""
        sym = self._symbol_at(offset)
        if sym is None:
            return None
        if isinstance(sym, _FnSym):
            return names.function_rename_conflict([(it.offset, it.name, it.res.fn, it.res.symbols)
                                                   for it in self.items], sym.name, new)
        it, target = sym
        assert it.res.fn is not None    # a local's item parsed (_symbol_at)
        found = names.local_rename_conflict(it.res.syms, it.res.fn, target, new)
        return None if found is None else (found[0], found[1].shift(it.offset))


class _LocalSym(NamedTuple):
    """A parameter or let at a position: its item and its binding's span (item-local)."""
    item: Item
    binding: Span


class _FnSym(NamedTuple):
    """A function name at a position (its definition or a call)."""
    name: str


@dataclass
class FunctionInfo:
    fn: ast.FnDef
    signature: check.Signature | None


def _common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix of a and b."""
    n = min(len(a), len(b))
    lo, hi = 0, n
    while lo < hi:                       # binary search on slice equality: C-speed compares
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _shift_fact(fact: check.TypeFact, delta: int) -> check.TypeFact:
    return fact if delta == 0 else dataclasses.replace(fact, span=fact.span.shift(delta))
