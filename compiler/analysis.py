"""The incremental front end: text -> parse + check + reverseMode diagnostics, types
and name resolution, shared by the CLI and the language server.

`Analysis().update(text)` splits the text into top-level items and keeps every
per-item result in *item-local* coordinates (spans relative to the item's first
character), keyed by the item's text.  So:

- an item whose text did not change is not re-parsed, even if it moved (its
  results are shifted to document offsets only when someone asks for them);
- a function is re-checked only when its text changed or when the signature of
  a function it mentions changed (and, when it has an unknown name, when the set
  of function names changed: "did you mean" depends on it);
- module-level facts (duplicate names, call cycles, reverseMode restrictions of
  handled functions) are recomputed from the per-item results each time; they are
  cheap;
- document-offset copies of an item's AST and IR are made when asked for, per item,
  and reused by the next snapshot while the item neither changes nor moves, so the
  first request after an edit copies one function, not the file;
- results of items that disappeared are kept for a while (an undo or a revert brings
  them back without re-checking).

Name resolution within a function and rename clashes are compiler/names.py.

A from-scratch `analyze(text)` is the same code with empty caches, which is what
tests/test_incremental.py compares against.
"""
from __future__ import annotations

import bisect
import dataclasses
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple, TypeVar

from . import autodiff, check, ir, item_split, module_rules, names, parse
from . import syntax as ast
from .ast_walk import shift
from .diagnostics import Diagnostic, SourceText, Span

# ---- per-item, position-independent results -------------------------------------------
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


@dataclass
class LastGood:
    """The last IR and types of a function that checked cleanly (for hover while it is broken)."""
    text: str
    result: check.FunctionResult


# ---- the snapshot ---------------------------------------------------------------------
class Snapshot:
    """The analysis of one version of the text.  Cheap things are computed eagerly
    (diagnostics); document-offset copies of ASTs and IR lazily, per item, and reused
    by the next snapshot for every item that neither changed nor moved.  Queries about
    one place (function_at, ir_function_at, type_at, definition) touch only the item
    there; the whole-document views (module, program, types) copy every item."""

    def __init__(self, text: str, path: str, items: list[Item], diagnostics: list[Diagnostic],
                 good: set[str], last_good: dict[str, LastGood]) -> None:
        self.text, self.path = text, path
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
        """The functions that checked cleanly (not recursive, first definitions), document spans."""
        return ir.Program({it.name: f for it in self._first_defs().values()
                           if it.name in self._good and (f := it.ir) is not None})

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


# ---- the incremental driver ------------------------------------------------------------
GONE_ITEMS = 256   # results kept for items no longer in the text
class Analysis:
    """Holds the per-item caches between versions of one document."""

    def __init__(self, path: str = "<input>") -> None:
        self.path = path
        self._items: dict[str, ItemResult] = {}     # item text -> results, for the current text
        # results of items that are gone, most recent last: an undo, a revert or a paste of
        # an older version finds them here instead of re-checking every function
        self._gone: OrderedDict[str, ItemResult] = OrderedDict()
        self._ad: dict[tuple[object, ...], list[Diagnostic]] = {}
        self._last_good: dict[str, LastGood] = {}
        self.snapshot: Snapshot | None = None
        # the signatures of the last update, and the results valid under them: while no
        # signature changes (the usual edit: inside a body), those need no key comparison
        self._last_sig_keys: dict[str, SigKey | None] | None = None
        self._valid: dict[int, ItemResult] = {}

    def update(self, text: str) -> Snapshot:
        chunks = item_split.split_items(text)
        diags = item_split.gaps(text, chunks)
        items = [Item(c.start, c.end, self._item(text[c.start:c.end], c.name)) for c in chunks]
        current = {it.res.text: it.res for it in items}
        for old_text, res in self._items.items():
            if old_text not in current:
                self._gone[old_text] = res
                self._gone.move_to_end(old_text)
        while len(self._gone) > GONE_ITEMS:
            self._gone.popitem(last=False)
        self._items = current
        first = self._first_definitions(items, diags)
        # (every first definition parsed, so it has a signature)
        signatures = {name: sig for name, it in first.items() if (sig := it.res.signature) is not None}
        sig_keys = {name: it.res.sig_key for name, it in first.items()}
        unparsed = {it.name for it in items if it.res.fn is None and it.name}
        same_signatures = sig_keys == self._last_sig_keys
        valid: dict[int, ItemResult] = {}
        for it in items:
            if not (same_signatures and self._valid.get(id(it.res)) is it.res):
                it.res = self._checked(it.res, signatures, sig_keys)
            valid[id(it.res)] = it.res
            self._items[it.res.text] = it.res
            diags += _shifted(it.res.parse_diags, it.offset)
            if it.res.result is not None:
                diags += [d for d in _shifted(it.res.result.diagnostics, it.offset)
                          if not _mentions_unparsed(d, text, unparsed)]
        self._last_sig_keys, self._valid = sig_keys, valid
        good = self._good_functions(first, diags)
        self._remember_good(items)
        snap = Snapshot(text, self.path, items, [], good, dict(self._last_good))
        diags += self._ad_diagnostics(snap, first)
        snap.diagnostics = _dedupe(diags)
        self.snapshot = snap
        return snap

    # ---- per item
    def _item(self, text: str, name: str) -> ItemResult:
        res = self._items.get(text)
        if res is None:
            res = self._gone.pop(text, None)
        if res is not None:
            return res
        fn, pdiags = parse.parse_local(text)
        res = ItemResult(text, fn.name if fn else name, fn, pdiags)
        if fn is not None:
            res.signature = check.signature_of(fn)[0]
            res.sig_key = _sig_key(res.signature)
            res.symbols = names.resolve(fn)
            res.mentions = names.mentions(res.symbols, fn)
        return res

    @staticmethod
    def _checked(res: ItemResult, signatures: dict[str, check.Signature],
                 sig_keys: dict[str, SigKey | None]) -> ItemResult:
        """res, or a copy re-checked when a signature it depends on changed.  (A copy, so
        that older snapshots keep the results they were built with.)"""
        if res.fn is None:
            return res
        key = tuple(sorted((m, sig_keys.get(m)) for m in res.mentions))
        if res.result is not None and res.check_key == _with_names(key, res.result, signatures):
            return res
        result = check.check_function(res.fn, signatures)
        # same text: the same AST (its copy stays valid), a new IR
        return dataclasses.replace(res, result=result, check_key=_with_names(key, result, signatures),
                                   ir_copy=None)

    # ---- module level
    @staticmethod
    def _first_definitions(items: list[Item], diags: list[Diagnostic]) -> dict[str, Item]:
        first, dups = module_rules.first_definitions([(it, it.offset, it.res.fn) for it in items
                                                       if it.res.fn is not None])
        diags += dups
        return first

    @staticmethod
    def _good_functions(first: dict[str, Item], diags: list[Diagnostic]) -> set[str]:
        """Names of the functions that go into the program; adds call-cycle diagnostics."""
        results = {name: _shifted_calls(it.res.checked, it.offset) for name, it in first.items()}
        diags += module_rules.recursion_diagnostics(results)
        recursive = module_rules.recursive_functions(results)
        return {name for name, it in first.items()
                if it.res.checked.function is not None and name not in recursive}

    def _remember_good(self, items: list[Item]) -> None:
        for it in items:
            if it.res.result is not None and it.res.result.function is not None:
                known = self._last_good.get(it.name)
                if known is None or known.result is not it.res.result:
                    self._last_good[it.name] = LastGood(it.res.text, it.res.result)

    def _ad_diagnostics(self, snap: Snapshot, first: dict[str, Item]) -> list[Diagnostic]:
        """reverseMode restrictions of every function that some good function handles.
        Cached by the texts and offsets of the handled function and its callees."""
        targets = sorted({t for name in snap._good for t in first[name].res.syms.handled})
        out: list[Diagnostic] = []
        cache: dict[tuple[object, ...], list[Diagnostic]] = {}
        for target in targets:
            if target not in snap._good:
                continue          # its own diagnostics (or unknown-name at the handle) say why
            closure = _callees(target, first)
            if not closure <= snap._good:
                continue          # a broken callee: its own diagnostics come first
            key = (target,) + tuple((n, first[n].res.text, first[n].offset) for n in sorted(closure))
            diags = self._ad.get(key)
            if diags is None:   # only the handled function and its callees (calls are inlined)
                # every function of the closure is good, so it has its IR (in document spans)
                program = ir.Program({n: f for n in closure if (f := first[n].ir) is not None})
                diags = autodiff.check_differentiable(program, target)
            cache[key] = diags
            out += diags
        self._ad = cache
        return out


def _with_names(key: CheckKey, result: check.FunctionResult, signatures: Mapping[str, object]) -> CheckKey:
    """A function with an unknown name also depends on every function name ("did you mean")."""
    if any(d.code == "unknown-name" for d in result.diagnostics):
        return key + (frozenset(signatures),)
    return key


def _mentions_unparsed(d: Diagnostic, text: str, unparsed: set[str]) -> bool:
    """An unknown-name diagnostic for a function whose definition has a syntax error:
    the syntax error is the real problem, so the call is not reported too."""
    return d.code == "unknown-name" and text[d.span.start:d.span.end] in unparsed


def _sig_key(sig: check.Signature | None) -> SigKey | None:
    """A hashable stand-in for a Signature (dataclasses with lists are not hashable)."""
    if sig is None:
        return None
    return (tuple((n, repr(t)) for n, t in sig.params), repr(sig.ret))


def _shifted(diags: Iterable[Diagnostic], delta: int) -> list[Diagnostic]:
    return [d.shift(delta) for d in diags] if delta else list(diags)


def _shifted_calls(result: check.FunctionResult, delta: int) -> check.FunctionResult:
    spans = {k: v.shift(delta) for k, v in result.call_spans.items()}
    return check.FunctionResult(None, [], [], result.calls, spans)


def _dedupe(diags: list[Diagnostic]) -> list[Diagnostic]:
    seen: set[tuple[str, str, Span]] = set()
    out: list[Diagnostic] = []
    for d in diags:
        key = (d.code, d.message, d.span)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return sorted(out, key=lambda d: (d.span.start, d.span.end, d.code))


def handles(fn: ir.Function) -> Iterator[ir.Handle]:
    for e in [b.value for b in fn.lets] + [fn.result]:
        for node in ir.walk(e):
            if isinstance(node, ir.Handle):
                yield node


def _callees(name: str, first: dict[str, Item]) -> set[str]:
    """name and every function it calls, transitively."""
    seen: set[str] = set()
    stack = [name]
    while stack:
        n = stack.pop()
        if n in seen or n not in first or first[n].res.result is None:
            continue
        seen.add(n)
        stack.extend(first[n].res.checked.calls)
    return seen


def analyze(text: str, path: str = "<input>") -> Snapshot:
    """Analyse a whole document from scratch."""
    return Analysis(path).update(text)
