"""References and rename of a function across the workspace (issue 29).

A function of the file D is used in D itself (its definition and calls) and, as `m.f`, in
every file that imports D (under any name).  The files looked at are the open documents
and every `.kina` file of the workspace folders (features/workspace_symbols.kina_files);
a file whose text does not contain the name is skipped without analysis, the others are
analysed by the server's module loader (the Workspace, on the analysis worker: this
module's `gather` runs there).  Name resolution is the compiler's: Snapshot.references in
D, and on a qualified call in an importer (it lists the calls of that qualified name).

Rename refuses when the new name clashes in D (Snapshot.rename_conflict: another function
of that name ...), and when it would make a function that other files call private (`_`).
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from compiler.core.diagnostics import Span
from compiler.modules.search import normal
from compiler.modules.workspace import Workspace
from compiler.snapshot import Snapshot

from ..convert import index_of
from ..documents import View, path_of
from .modules import qualified_at
from .workspace_symbols import kina_files, workspace_roots

if TYPE_CHECKING:
    from ..base import Server

_IMPORT = re.compile(r"^[ \t]*import\b", re.MULTILINE)


@dataclass(frozen=True)
class Target:
    """A function: its file and name."""
    path: str
    name: str


@dataclass
class Uses:
    """Where a function is named: per file, its text and the spans of the name."""
    target: Target
    files: dict[str, tuple[str, list[Span]]]
    conflict: str | None = None     # why a rename to the asked name is refused
    declaration: Span | None = None   # the function's name in its definition


def target_at(snap: Snapshot, text: str, offset: int, path: str | None) -> Target | None:
    """The function named at offset: a qualified call `m.f` (f in m's file), or a
    function of this file (its definition or a call), else None (a local, an op)."""
    q = qualified_at(snap, text, offset)
    if q is not None and q.link.path is not None and q.definition is not None \
            and q.function_span.start <= offset <= q.function_span.end:
        return Target(q.link.path, q.function)
    if path is None:
        return None
    try:
        d = snap.definition(offset)
    except Exception:
        return None
    fn = snap.function_at(d.start) if d is not None else None
    if fn is None or d is None or fn.name_span.start != d.start:
        return None
    return Target(path, fn.name)


def _name_part(text: str, spans: Iterable[Span], name: str) -> list[Span]:
    """Each span narrowed to the function's name at its end (`layers.linear` -> `linear`)."""
    out = {Span(s.end - len(name), s.end) for s in spans if text[s.end - len(name):s.end] == name}
    return sorted(out, key=lambda s: s.start)


def _in_definer(m: Snapshot, name: str) -> list[Span]:
    fn = m.function_named(name)
    return _name_part(m.text, m.references(fn.name_span.start), name) if fn is not None else []


def _in_importer(snap: Snapshot, target: Target) -> list[Span]:
    out: list[Span] = []
    for link in snap.imports:
        if link.path != target.path:
            continue
        pattern = re.compile(rf"\b{re.escape(link.decl.name)}\s*\.\s*{re.escape(target.name)}\b")
        for hit in pattern.finditer(snap.text):
            spans = snap.references(hit.end() - 1)
            if spans:
                out += _name_part(snap.text, spans, target.name)
                break
    return sorted(set(out), key=lambda s: s.start)


def gather(ws: Workspace, read: Callable[[str], str | None], target: Target, roots: list[Path], open_paths: Iterable[str],
           new_name: str | None = None) -> Uses:
    """Every use of target in the workspace (runs on the analysis worker)."""
    paths = {normal(p) for p in open_paths} | {normal(str(p)) for p in kina_files(roots)} | {target.path}
    word = re.compile(rf"\b{re.escape(target.name)}\b")
    uses = Uses(target, {})
    for path in sorted(paths):
        text = read(path)
        if text is None or not word.search(text) or (path != target.path and not _IMPORT.search(text)):
            continue    # (only its own file and files with import lines can name it)
        snap = ws.analyse(path, text)
        if snap is None:
            continue
        spans = _in_definer(snap, target.name) if path == target.path else _in_importer(snap, target)
        if spans:
            uses.files[path] = (snap.text, spans)
        if path == target.path and (fn := snap.function_named(target.name)) is not None:
            uses.declaration = fn.name_span
    if new_name is not None:
        uses.conflict = _conflict(ws, uses, new_name)
    return uses


def _conflict(ws: Workspace, uses: Uses, new: str) -> str | None:
    t = uses.target
    m = ws.analyse(t.path)
    fn = m.function_named(t.name) if m is not None else None
    if m is None or fn is None:
        return f"`{t.name}` is not defined in {t.path}"
    found = m.rename_conflict(fn.name_span.start, new)
    if found is not None:
        message, span = found
        where = f" line {m.source.line_col(span.start)[0]}" if span is not None else ""
        return f"{message} (in {Path(t.path).name}{where})"
    others = [Path(p).name for p in uses.files if p != t.path]
    if new.startswith("_") and others:
        return f"a name starting with `_` is private to its module, and {', '.join(others)} call `{t.name}`"
    return None


# ---- the requests (the server's handlers call these first; None: not a function, so the
# single-document answer of features/navigation.py stands)
async def uses_at(ls: Server, uri: str, view: View, offset: int, new_name: str | None = None) -> Uses | None:
    target = target_at(view.snapshot, view.text, offset, path_of(uri))
    if target is None:
        return None
    docs = ls.documents
    roots = workspace_roots(ls)
    open_paths = [p for u in docs.open_uris() if (p := path_of(u)) is not None]
    return await docs.on_worker(lambda ws: gather(ws, docs.read, target, roots, open_paths, new_name))


def _ranges(uses: Uses, encoding: str) -> Iterator[tuple[str, Span, lsp.Range]]:
    for path, (text, spans) in uses.files.items():
        index = index_of(text, encoding)
        for span in spans:
            yield path, span, index.range(span)


def locations(uses: Uses, uri_of: Callable[[str], str], encoding: str,
              include_declaration: bool) -> list[lsp.Location]:
    out = []
    for path, span, rng in _ranges(uses, encoding):
        if not include_declaration and path == uses.target.path and span == uses.declaration:
            continue
        out.append(lsp.Location(uri=uri_of(path), range=rng))
    return out


def workspace_edit(uses: Uses, uri_of: Callable[[str], str], encoding: str, new_name: str) -> lsp.WorkspaceEdit:
    changes: dict[str, list[lsp.TextEdit]] = {}
    for path, _span, rng in _ranges(uses, encoding):
        changes.setdefault(uri_of(path), []).append(lsp.TextEdit(range=rng, new_text=new_name))
    return lsp.WorkspaceEdit(changes=changes)


def prepare(view: View, offset: int) -> lsp.PrepareRenamePlaceholder | None:
    """Rename on the function part of a qualified call (`layers.linear`)."""
    q = qualified_at(view.snapshot, view.text, offset)
    if q is None or q.definition is None or not q.function_span.start <= offset <= q.function_span.end:
        return None
    return lsp.PrepareRenamePlaceholder(range=view.index.range(q.function_span), placeholder=q.function)
