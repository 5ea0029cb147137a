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

The Snapshot an update returns (the per-item results, and the queries: types,
definitions, references, rename clashes) is compiler/snapshot.py; name resolution
within a function and rename clashes are compiler/check/names.py.

A from-scratch `analyze(text)` is the same code with empty caches, which is what
tests/test_incremental.py compares against.

`update(text, stop)` gives up (raises Superseded) when `stop()` says the text is no longer
wanted: the language server passes "the client has sent a newer version", so the analysis
of a replaced 600,000-character document does not delay the one that replaced it.  What
was done by then stays in the caches (parsed items, checked functions), so a document
edited faster than it can be analysed still gets there.
"""
from __future__ import annotations

import dataclasses
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping

from compiler import ad as autodiff
from compiler import check
from compiler.check import module_rules, names
from compiler.core.diagnostics import Diagnostic, Note, Span, display_path
from compiler.ir import nodes as ir
from compiler.modules.reverse import Generic, ImportedFunctions
from compiler.modules.workspace import Workspace
from compiler.snapshot import (
    CheckKey,
    Item,
    ItemResult,
    LastGood,
    Loader,
    ModuleLink,
    SigKey,
    Snapshot,
)
from compiler.syntax import imports as import_lines
from compiler.syntax import items as item_split
from compiler.syntax import parse
from compiler.syntax.imports import ImportDecl

GONE_ITEMS = 256   # results kept for items no longer in the text ...
GONE_CHARS = 64_000   # ... and at most this many characters of them, or the text's length if larger
STOP_EVERY = 32       # items parsed or checked between two calls of update's `stop`


class Superseded(Exception):
    """Analysis.update gave up: its `stop()` said the text is no longer wanted."""


class Analysis:
    """Holds the per-item caches between versions of one document."""

    def __init__(self, path: str = "<input>", loader: Loader | None = None, seed: Snapshot | None = None) -> None:
        """`seed`: an analysis of a nearby text under the same imports (resolved by `loader` to the
        same links) whose item results the first update reuses: an edited copy of a text re-checks
        only the items it changed (the language server's refactors check their result so)."""
        self.path = path
        self._seed = seed
        # resolves the document's import lines: by default a workspace of its own that reads
        # the disk (compiler/modules); the CLI and the language server share one between files
        self.loader: Loader = loader if loader is not None else Workspace(Analysis).loader
        self._modules_key: object = None    # the imports the caches below were made under
        self._items: dict[str, ItemResult] = {}     # item text -> results, for the current text
        # results of items that are gone, most recent last: an undo, a revert or a paste of
        # an older version finds them here instead of re-checking every function
        self._gone: OrderedDict[str, ItemResult] = OrderedDict()
        self._ad: dict[tuple[object, ...], list[Diagnostic]] = {}
        self._imported: tuple[object, ImportedFunctions | None] | None = None
        self._last_good: dict[str, LastGood] = {}
        self.snapshot: Snapshot | None = None
        # the signatures of the last update, and the results valid under them: while no
        # signature changes (the usual edit: inside a body), those need no key comparison
        self._last_sig_keys: dict[str, SigKey | None] | None = None
        self._valid: dict[int, ItemResult] = {}
        self._imported_keys: dict[str, SigKey | None] = {}    # _sig_key of each `name.f` imported
        # function name -> the functions it calls, and the call cycles among them (_good_functions)
        self._calls: dict[str, set[str]] | None = None
        self._cycles: dict[str, tuple[str, list[str]]] = {}

    def update(self, text: str, stop: Callable[[], bool] | None = None) -> Snapshot:
        """The analysis of `text`; raises Superseded when `stop()` turns true (checked every
        STOP_EVERY items parsed or checked), keeping the work done so far."""
        chunks = item_split.split_items(text)
        decls, diags, lines = import_lines.scan(text, chunks)
        diags += item_split.gaps(text, sorted(chunks + lines, key=lambda c: c.start) if lines else chunks)
        links, modules, imported = self._imports(decls, diags)
        self._reset_if_imports_changed(modules)
        aliases = frozenset(modules)
        items: list[Item] = []
        for k, c in enumerate(chunks):
            if stop is not None and k % STOP_EVERY == STOP_EVERY - 1 and stop():
                self._keep_parsed(items)
                raise Superseded
            items.append(Item(c.start, c.end, self._item(text[c.start:c.end], c.name, aliases)))
        current = {it.res.text: it.res for it in items}
        self._forget(current, len(text))
        self._items = current
        first = self._first_definitions(items, diags)
        # (every first definition parsed, so it has a signature)
        signatures = {name: sig for name, it in first.items() if (sig := it.res.signature) is not None}
        sig_keys = {name: it.res.sig_key for name, it in first.items()}
        signatures.update(imported)     # `layers.linear`: no local name has a dot
        sig_keys.update(self._imported_keys)
        unparsed = {it.name for it in items if it.res.fn is None and it.name}
        same_signatures = sig_keys == self._last_sig_keys
        valid: dict[int, ItemResult] = {}
        checked = 0
        for it in items:     # (runs for every item on every edit: no work for a clean one)
            res = it.res
            if not (same_signatures and self._valid.get(id(res)) is res):
                checked += 1
                if stop is not None and checked % STOP_EVERY == 0 and stop():
                    raise Superseded     # (the items checked so far are in self._items)
                it.res = res = self._checked(res, signatures, sig_keys, modules)
            valid[id(res)] = res
            self._items[res.text] = res
            if res.parse_diags:
                diags += _shifted(res.parse_diags, it.offset)
            if res.result is not None and res.result.diagnostics:
                diags += [d for d in _shifted(res.result.diagnostics, it.offset)
                          if not _mentions_unparsed(d, text, unparsed)]
        self._last_sig_keys, self._valid = sig_keys, valid
        good = self._good_functions(first, diags)
        self._remember_good(items)
        snap = Snapshot(text, self.path, items, [], good, dict(self._last_good), links)
        diags += self._ad_diagnostics(good, first, links)
        snap.diagnostics = _dedupe(diags)
        self.snapshot = snap
        return snap

    # ---- imports
    def _imports(self, decls: list[ImportDecl], diags: list[Diagnostic]) -> tuple[
            list[ModuleLink], dict[str, frozenset[str] | None], dict[str, check.Signature]]:
        """(the resolved imports, import name -> the functions its module defines or None
        when the import is broken, `name.f` -> the signature of every public f)."""
        unique: list[ImportDecl] = []
        seen: dict[str, ImportDecl] = {}
        for d in decls:
            if d.name in seen:
                diags.append(Diagnostic("duplicate", f"two imports are named `{d.name}`; import one of them "
                                        "under another name (`as NAME`)", d.name_span,
                                        (Note("first imported here", seen[d.name].name_span),)))
                continue
            seen[d.name] = d
            unique.append(d)
        links = self.loader(self.path, unique) if unique else []
        self._imported_keys = {}
        modules: dict[str, frozenset[str] | None] = {}
        imported: dict[str, check.Signature] = {}
        for link in links:
            name, snap = link.decl.name, link.snapshot
            if link.problem is not None:
                diags.append(link.problem)
            elif snap is not None and snap.error_count:
                n = snap.error_count
                diags.append(Diagnostic("import", f"module {name} has {n} error{'s' if n != 1 else ''}",
                                        link.decl.span, (Note(f"in {display_path(snap.path)}"),)))
            modules[name] = snap.defined_names if snap is not None and link.problem is None else None
            if snap is not None and link.problem is None:
                sigs, keys = _qualified(snap, name)
                imported.update(sigs)
                self._imported_keys.update(keys)
        return links, modules, imported

    def _reset_if_imports_changed(self, modules: dict[str, frozenset[str] | None]) -> None:
        """The per-item caches hold ASTs whose qualified calls depend on the import names, and
        checks whose errors depend on what each module defines: when those change (rare: an
        import line, or a function added to an imported module), start afresh.  A changed
        signature is not such a change: the items that mention it are re-checked."""
        key = tuple(sorted((k, v) for k, v in modules.items()))
        if key == self._modules_key:
            return
        self._modules_key = key
        seed, self._seed = self._seed, None
        if seed is not None and self.snapshot is None:     # (made under these imports: see __init__)
            self._items = {it.res.text: it.res for it in seed.items}
            return
        self._items.clear()
        self._gone.clear()
        self._valid.clear()
        self._last_sig_keys = None

    def _keep_parsed(self, items: list[Item]) -> None:
        """An update given up while parsing: its parsed items join the results kept for
        items not in the text (the next update finds them there; _forget trims them)."""
        for it in items:
            if it.res.text not in self._items:
                self._gone[it.res.text] = it.res

    def _forget(self, current: dict[str, ItemResult], size: int) -> None:
        """Move the results of items that left the text to _gone, which keeps the most recent
        ones within GONE_ITEMS and max(GONE_CHARS, size) characters: what is kept depends on
        the text now, so a document that shrinks (or once held a 250,000-character line)
        does not keep the memory of its largest version."""
        for old_text, res in self._items.items():
            if old_text not in current:
                self._gone[old_text] = res
                self._gone.move_to_end(old_text)
        budget = max(GONE_CHARS, size)
        kept = sum(len(t) for t in self._gone)
        while self._gone and (len(self._gone) > GONE_ITEMS or kept > budget):
            old, _ = self._gone.popitem(last=False)
            kept -= len(old)

    def cache_size(self) -> dict[str, int]:
        """What the caches hold now (for the language server's kina/serverStats): the
        current items, the items kept after they left the text (and their characters),
        the functions remembered for hover while broken."""
        return {"items": len(self._items), "goneItems": len(self._gone),
                "goneChars": sum(len(t) for t in self._gone), "lastGood": len(self._last_good)}

    # ---- per item
    def _item(self, text: str, name: str, aliases: frozenset[str]) -> ItemResult:
        res = self._items.get(text)
        if res is None:
            res = self._gone.pop(text, None)
        if res is not None:
            return res
        fn, pdiags = parse.parse_local(text)
        if fn is not None:
            fn = import_lines.qualify(fn, aliases)   # `layers.linear(x)` -> a call of layers' linear
        res = ItemResult(text, fn.name if fn else name, fn, pdiags)
        if fn is not None:
            res.signature = check.signature_of(fn)[0]
            res.sig_key = _sig_key(res.signature)
            res.symbols = names.resolve(fn)
            res.mentions = names.mentions(res.symbols, fn)
        return res

    @staticmethod
    def _checked(res: ItemResult, signatures: dict[str, check.Signature],
                 sig_keys: dict[str, SigKey | None], modules: dict[str, frozenset[str] | None]) -> ItemResult:
        """res, or a copy re-checked when a signature it depends on changed.  (A copy, so
        that older snapshots keep the results they were built with.)"""
        if res.fn is None:
            return res
        key = tuple(sorted((m, sig_keys.get(m)) for m in res.mentions))
        if res.result is not None and res.check_key == _with_names(key, res.result, signatures):
            return res
        result = check.check_function(res.fn, signatures, modules=modules)
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

    def _good_functions(self, first: dict[str, Item], diags: list[Diagnostic]) -> set[str]:
        """Names of the functions that go into the program; adds call-cycle diagnostics.
        The cycles are found again only when some function's calls changed (a graph
        search over 2,000 functions on every edit of one body was a third of the update)."""
        calls = {name: it.res.checked.calls for name, it in first.items()}
        if calls != self._calls:
            self._calls, self._cycles = calls, module_rules.call_cycles(calls)
        for name, (callee, path) in sorted(self._cycles.items()):
            it = first[name]
            diags.append(module_rules.recursion_diagnostic(
                name, callee, path, it.res.checked.call_spans[callee].shift(it.offset)))
        return {name for name, it in first.items()
                if it.res.checked.function is not None and name not in self._cycles}

    def _remember_good(self, items: list[Item]) -> None:
        for it in items:
            res = it.res
            if res.result is not None and res.result.function is not None:
                known = self._last_good.get(res.name)
                if known is None or known.result is not res.result:
                    self._last_good[res.name] = LastGood(res.text, res.result)
        # only names the text still has: the last good version serves hover on a broken
        # function of that name; every name a long session ever typed would pile up
        names = {it.name for it in items}
        for name in [n for n in self._last_good if n not in names]:
            del self._last_good[name]

    def _ad_diagnostics(self, good: set[str], first: dict[str, Item], links: list[ModuleLink]) -> list[Diagnostic]:
        """reverseMode restrictions of every function that some good function handles.
        Cached by the texts and offsets of the handled function and its callees (a generic
        callee's restrictions are checked on its symbolic body: see Generic), and by the
        analyses of the imported modules (ImportedFunctions: their functions, when one is called)."""
        handlers = {t: n for n in sorted(n for n in good if first[n].res.syms.handled)
                    for t in first[n].res.syms.handled}
        # (built only when something is handled: it copies every imported function, seconds
        # for a 500-function module, and an importer without `handle` needs none of them)
        imported = self._imported_functions(links, frozenset(first)) if handlers else None
        out: list[Diagnostic] = []
        cache: dict[tuple[object, ...], list[Diagnostic]] = {}
        for target in sorted(handlers):
            if target not in good and not (imported and imported.has(target)):
                continue          # its own diagnostics (or unknown-name at the handle) say why
            closure = _callees(target, first)
            if not closure <= good | ({target} if "." in target else set()):
                continue          # a broken callee: its own diagnostics come first
            key = (target, imported) + tuple((n, first[n].res.text, first[n].offset) for n in sorted(closure))
            diags = self._ad.get(key)
            if diags is None:   # only the handled function and its callees (calls are inlined)
                # every function of the closure is good, so it has its IR (in document spans)
                local = {n: f for n in closure if (f := first[n].ir) is not None}
                if imported is None:
                    diags = autodiff.check_differentiable(ir.Program(Generic(local)), target)
                else:
                    at = first[handlers[target]]
                    diags = imported.check(local, target, at.res.checked.call_spans[target].shift(at.offset))
            cache[key] = diags
            out += diags
        self._ad = cache
        return out


    def _imported_functions(self, links: list[ModuleLink], own: frozenset[str]) -> ImportedFunctions | None:
        """ImportedFunctions for these imports, the same object while the imported analyses are the
        same (so the reverseMode cache above keeps its entries between edits of this file)."""
        key = (own, tuple((m.decl.name, m.snapshot) for m in links))   # a Snapshot compares by identity
        if self._imported is None or self._imported[0] != key:
            self._imported = (key, ImportedFunctions.of(links, own) if links else None)
        return self._imported[1]


def _with_names(key: CheckKey, result: check.FunctionResult, signatures: Mapping[str, object]) -> CheckKey:
    """A function with an unknown name also depends on every function name ("did you mean")."""
    if any(d.code == "unknown-name" for d in result.diagnostics):
        return key + (frozenset(signatures),)
    return key


def _mentions_unparsed(d: Diagnostic, text: str, unparsed: set[str]) -> bool:
    """An unknown-name diagnostic for a function whose definition has a syntax error:
    the syntax error is the real problem, so the call is not reported too."""
    return d.code == "unknown-name" and text[d.span.start:d.span.end] in unparsed


# module Snapshot -> import name -> (`name.f` -> f's signature so named, -> its _sig_key): the
# same for every importer of that analysis of the module (an edit of a module imported by 50
# files made each of them rename and repr all its signatures: ~100 ms each for 500 functions)
_QUALIFIED: weakref.WeakKeyDictionary[Snapshot, dict[str, tuple[dict[str, check.Signature],
                                                               dict[str, SigKey | None]]]] = weakref.WeakKeyDictionary()


def _qualified(snap: Snapshot, name: str) -> tuple[dict[str, check.Signature], dict[str, SigKey | None]]:
    per = _QUALIFIED.setdefault(snap, {})
    hit = per.get(name)
    if hit is None:
        sigs = {f"{name}.{f}": dataclasses.replace(sig, name=f"{name}.{f}") for f, sig in snap.public_signatures.items()}
        hit = per[name] = (sigs, {n: _sig_key(sig) for n, sig in sigs.items()})
    return hit


def _sig_key(sig: check.Signature | None) -> SigKey | None:
    """A hashable stand-in for a Signature (dataclasses with lists are not hashable)."""
    if sig is None:
        return None
    return (tuple((n, repr(t)) for n, t in sig.params), repr(sig.ret) + repr(sig.sizes))


def _shifted(diags: Iterable[Diagnostic], delta: int) -> list[Diagnostic]:
    return [d.shift(delta) for d in diags] if delta else list(diags)


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


def analyze(text: str, path: str = "<input>", loader: Loader | None = None) -> Snapshot:
    """Analyse a whole document from scratch (`loader` resolves its imports)."""
    return Analysis(path, loader).update(text)
