"""Checking a refactor's result with the compiler core: the edited text is analysed again
(compiler.analysis, the same front end as the CLI's and the server's own), and the
refactor is offered only when that analysis agrees with the one of the text before.

What "agrees" means (`agrees`):

- no diagnostic appears that the text before did not have (compared by code and message:
  the messages name shapes and types, never positions, so a moved diagnostic is the same
  one), and the diagnostic a quick fix is for is gone;
- the edited function binds the same names with the same types, except the names the
  refactor adds (each with the type it must have: that of the expression it now names) and
  the ones it removes.  Its signature is outside the edit, so its result type is unchanged
  whenever it checks (`return-type` would say otherwise).

The edited text is analysed with the imports of the text before, as the module loader
resolved them (a refactor never edits an import line), so no file is read again.  The
server runs this on its analysis worker thread (the only thread that runs analyses).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from compiler.analysis import Analysis
from compiler.core.diagnostics import Diagnostic
from compiler.snapshot import Item, ModuleLink, Snapshot
from compiler.syntax.imports import ImportDecl

Edit = tuple[int, int, str]     # replace text[start:end] by the string (offsets of the text before)


@dataclass(frozen=True)
class Expect:
    """What a refactor of function `function` must leave as it was, and what it changes."""
    function: str
    added: Mapping[str, str]            # new binding -> the type it must have (as printed)
    removed: frozenset[str] = frozenset()
    fixes: Diagnostic | None = None     # the diagnostic a quick fix must remove


@dataclass(frozen=True)
class Plan:
    """One refactor at one place: its title and LSP kind, its edits, and what it must leave."""
    title: str
    kind: str                      # a CodeActionKind value: "refactor.extract", "quickfix", ...
    edits: tuple[Edit, ...]
    expect: Expect


def apply(text: str, edits: Sequence[Edit]) -> str:
    """`text` with the edits made (they may not overlap; insertions at one offset keep their order)."""
    out, at = [], 0
    for start, end, new in sorted(edits, key=lambda e: (e[0], e[1])):
        out += [text[at:start], new]
        at = end
    out.append(text[at:])
    return "".join(out)


def reanalyse(before: Snapshot, text: str) -> Snapshot:
    """The analysis of `text` (an edit of before.text), with before's resolved imports."""
    links = {link.decl.name: link for link in before.imports}

    def loader(path: str, decls: Sequence[ImportDecl]) -> list[ModuleLink]:
        return [links.get(d.name) or ModuleLink(d, None, None, Diagnostic(
            "import", f"`{d.name}` is not an import of the text before the refactor", d.span)) for d in decls]
    return Analysis(before.path, loader, seed=before).update(text)


def _item(snap: Snapshot, function: str) -> Item | None:
    return next((it for it in snap.items if it.res.fn is not None and it.name == function), None)


def bindings(snap: Snapshot, function: str) -> dict[str, str] | None:
    """name -> type (as printed) of every parameter and let of `function`, or None when it
    is not there or does not check cleanly.  (Item-local facts: no copy of the document's.)"""
    it = _item(snap, function)
    if it is None or it.res.result is None or it.res.result.function is None:
        return None
    return {f.name: str(f.type) for f in it.res.result.types if f.kind in ("param", "let") and f.name}


def type_of(snap: Snapshot, start: int, end: int) -> str | None:
    """The type (as printed) of the expression at exactly [start, end), if it has one."""
    it = snap.item_at(start)
    if it is None or it.res.result is None:
        return None
    lo, hi = start - it.offset, end - it.offset
    return next((str(f.type) for f in it.res.result.types
                 if f.span.start == lo and f.span.end == hi and f.kind in ("expr", "call", "handle")), None)


def agrees(before: Snapshot, after: Snapshot, expect: Expect) -> bool:
    """Whether `after` (the edited text's analysis) is `before` refactored as `expect` says."""
    old = Counter((d.code, d.message) for d in before.diagnostics)
    if expect.fixes is not None:
        key = (expect.fixes.code, expect.fixes.message)
        if old[key] == 0:
            return False
        old[key] -= 1
    new = Counter((d.code, d.message) for d in after.diagnostics)
    if new - old:
        return False
    if expect.fixes is not None:
        # a quick fix in a broken function: its diagnostic is gone and no other came; the
        # function need not check cleanly yet (it may have more than one mistake)
        return True
    had, has = bindings(before, expect.function), bindings(after, expect.function)
    if had is None or has is None:
        return False
    want = {n: t for n, t in had.items() if n not in expect.removed} | dict(expect.added)
    return has == want


def checks(before: Snapshot, edits: Sequence[Edit], expect: Expect) -> bool:
    """Whether the text with `edits` made re-checks as `expect` says."""
    return agrees(before, reanalyse(before, apply(before.text, edits)), expect)
