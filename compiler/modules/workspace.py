"""The module loader: import lines -> the analyses of the files they name, each analysed
once and shared by every importer.

A Workspace keeps one incremental analysis per file (the same kind the language server
keeps per open document) and, per file, the Snapshot of its last analysis with the
*fingerprint* it was made under: the SHA-256 of the file's text and of the fingerprints of
the files it imports (and of where each import resolved).  A file is analysed again only
when its fingerprint changed, so an edit in `layers.kina` re-analyses `layers.kina` and the
files that import it, directly or not, and nothing else.

Files are read through `read(path) -> text | None` (the disk by default; the language
server passes one that prefers its open editors' buffers), at most once per load.

Import cycles are found on the graph of import lines before anything is analysed: an
import of a file that imports the importer back, directly or not, is an `import-cycle`
diagnostic naming the path (`import cycle: a.kina -> b.kina -> a.kina`), and the file is
not loaded, so loading always ends.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from compiler.core.diagnostics import BOM, Diagnostic, Note, display_path
from compiler.modules import search
from compiler.snapshot import Loader, ModuleLink, Snapshot
from compiler.syntax import imports as import_lines
from compiler.syntax import items as item_split
from compiler.syntax.imports import ImportDecl


class Analyzer(Protocol):
    """What the workspace needs of an analysis (compiler/analysis.Analysis)."""
    def update(self, text: str, stop: Callable[[], bool] | None = None) -> Snapshot: ...


def read_file(path: str) -> str | None:
    """A file's text from disk (a leading byte-order mark dropped), None when it cannot be
    read as UTF-8 text."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return text[1:] if text.startswith(BOM) else text


@dataclass
class _Load:
    """What one load reads and works out, so each file is read and fingerprinted once."""
    texts: dict[str, str | None] = field(default_factory=dict)
    edges: dict[str, list[tuple[ImportDecl, str | None, list[str]]]] = field(default_factory=dict)
    fingerprints: dict[str, str] = field(default_factory=dict)
    done: dict[str, Snapshot | None] = field(default_factory=dict)


class Workspace:
    """Modules by path.  `make_analysis(path, loader)`: a new incremental analysis of one
    file (compiler/analysis.Analysis); `read`: file texts (default: the disk); `kina_path`:
    the $KINA_PATH folders (default: read from the environment now)."""

    def __init__(self, make_analysis: Callable[[str, Loader], Analyzer], read: Callable[[str], str | None] | None = None,
                 kina_path: Sequence[str] | None = None) -> None:
        self._make = make_analysis
        self._read = read or read_file
        self.kina_path = search.kina_path_dirs() if kina_path is None else [os.path.abspath(p) for p in kina_path]
        self._analyses: dict[str, Analyzer] = {}
        self._results: dict[str, tuple[str, Snapshot]] = {}    # path -> (fingerprint, snapshot)
        self._load: _Load | None = None
        self._scans: dict[str, tuple[str, list[ImportDecl]]] = {}   # path -> (text, its import lines)

    # ---- public
    def analyse(self, path: str, text: str | None = None, stop: Callable[[], bool] | None = None) -> Snapshot | None:
        """The analysis of the file at `path` (its text given, or read), its imports
        resolved; None when it cannot be read.  `stop`: the analyser's (its update may give
        up on this file, not on the files it imports)."""
        key = _key(path)
        with self._loading() as load:
            if text is not None:
                load.texts[key] = text
            return self._module(key, load, stop)

    def loader(self, importer: str, decls: Sequence[ImportDecl]) -> list[ModuleLink]:
        """An analysis.Loader: the import lines of the file `importer`, resolved and loaded."""
        with self._loading() as load:
            return [self._link(_key(importer), d, load) for d in decls]

    def modules(self) -> dict[str, Snapshot]:
        """The last analysis of every file loaded so far, by path."""
        return {path: snap for path, (_, snap) in self._results.items()}

    def importers_of(self, path: str) -> list[str]:
        """The files whose analysis depends on the file at `path` (they import it, directly or
        not), as of their last analysis: the ones to re-check when it changes."""
        key = _key(path)
        users: dict[str, set[str]] = {}
        for p, (_, snap) in self._results.items():
            for m in snap.imports:
                if m.path is not None:
                    users.setdefault(m.path, set()).add(p)
        out: list[str] = []
        todo = sorted(users.get(key, ()))
        while todo:
            p = todo.pop(0)
            if p not in out and p != key:
                out.append(p)
                todo += sorted(users.get(p, ()))
        return out

    def forget(self, path: str) -> None:
        """Drop what is known of a file (deleted, or closed in the editor)."""
        key = _key(path)
        self._analyses.pop(key, None)
        self._results.pop(key, None)
        self._scans.pop(key, None)

    # ---- loading
    @contextmanager
    def _loading(self) -> Iterator[_Load]:
        """One load: files are read once; nested loads (an analysis calling `loader`) share it."""
        if self._load is not None:
            yield self._load
            return
        self._load = _Load()
        try:
            yield self._load
        finally:
            self._load = None

    def _text(self, path: str, load: _Load) -> str | None:
        if path not in load.texts:
            load.texts[path] = self._read(path)
        return load.texts[path]

    def _module(self, path: str, load: _Load, stop: Callable[[], bool] | None = None) -> Snapshot | None:
        if path in load.done:
            return load.done[path]
        text = self._text(path, load)
        snap = None
        if text is not None:
            fp = self._fingerprint(path, load, set())
            hit = self._results.get(path)
            if hit is not None and hit[0] == fp:
                snap = hit[1]
            else:
                analysis = self._analyses.get(path)
                if analysis is None:
                    analysis = self._analyses[path] = self._make(path, self.loader)
                snap = analysis.update(text, stop)
                self._results[path] = (fp, snap)
        load.done[path] = snap
        return snap

    def _edges(self, path: str, load: _Load) -> list[tuple[ImportDecl, str | None, list[str]]]:
        """The file's import lines, each with the file it names (None: not found) and the
        files tried."""
        if path not in load.edges:
            text = self._text(path, load) or ""
            decls = self._decls(path, text)
            load.edges[path] = [(d, *search.resolve(d, path, self.kina_path, lambda p: self._text(p, load)))
                                for d in decls]
        return load.edges[path]

    def _decls(self, path: str, text: str) -> list[ImportDecl]:
        """The import lines of a text, kept per file while its text stays the same: every load
        of each of its importers needs them, and the item split behind them costs ~20 ms on a
        5,000-line file (50 importers refreshed after an edit split it 50 times)."""
        hit = self._scans.get(path)
        if hit is not None and (hit[0] is text or hit[0] == text):
            return hit[1]
        decls, _, _ = import_lines.scan(text, item_split.split_items(text))
        self._scans[path] = (text, decls)
        return decls

    def _fingerprint(self, path: str, load: _Load, visiting: set[str]) -> str:
        if path in load.fingerprints:
            return load.fingerprints[path]
        h = hashlib.sha256((self._text(path, load) or "").encode("utf-8", "surrogatepass"))
        visiting = visiting | {path}
        for decl, target, _ in self._edges(path, load):
            dep = "missing" if target is None else "cycle" if target in visiting else \
                self._fingerprint(target, load, visiting)
            h.update(f"\0{decl.name}\0{target}\0{dep}".encode("utf-8", "surrogatepass"))
        load.fingerprints[path] = fp = h.hexdigest()
        return fp

    def _link(self, importer: str, decl: ImportDecl, load: _Load) -> ModuleLink:
        target, tried = search.resolve(decl, importer, self.kina_path, lambda p: self._text(p, load))
        if target is None:
            return ModuleLink(decl, None, None, _missing(decl, tried))
        cycle = self._path_to(target, importer, load)
        if cycle is not None:
            names = [_short(p, importer) for p in [importer, *cycle]]
            return ModuleLink(decl, None, None, Diagnostic("import-cycle", "import cycle: " + " -> ".join(names),
                                                           decl.span))
        snap = self._module(target, load)
        if snap is None:
            return ModuleLink(decl, None, None, Diagnostic("import", f"cannot read {display_path(target)}", decl.span))
        return ModuleLink(decl, target, snap)

    def _path_to(self, start: str, goal: str, load: _Load) -> list[str] | None:
        """[start, ..., goal] along import lines, or None when `goal` is not reachable."""
        prev: dict[str, str | None] = {start: None}
        todo = [start]
        while todo:
            here = todo.pop(0)
            if here == goal:
                out: list[str] = []
                node: str | None = here
                while node is not None:
                    out.append(node)
                    node = prev[node]
                return out[::-1]
            for _, target, _ in self._edges(here, load):
                if target is not None and target not in prev:
                    prev[target] = here
                    todo.append(target)
        return None


def _key(path: str) -> str:
    """One file, one key: absolute and normalised (`<stdin>` and the like stay as they are)."""
    return path if path.startswith("<") else search.normal(path)


def _short(path: str, importer: str) -> str:
    """A path in a message, relative to the importing file's folder when that is shorter."""
    if path.startswith("<"):
        return path
    base = os.path.dirname(importer) if not importer.startswith("<") else os.getcwd()
    rel = os.path.relpath(path, base)
    return display_path(rel if len(rel) < len(path) else path)


def _missing(decl: ImportDecl, tried: list[str]) -> Diagnostic:
    if decl.module is None:
        return Diagnostic("import", f"no file {decl.target}: {display_path(tried[0])} is not a readable file", decl.span)
    where = [display_path(os.path.dirname(p)) for p in tried if not search.is_std(p)]
    notes = (Note("$KINA_PATH adds folders to search (separated by `" + os.pathsep + "`)"),)
    return Diagnostic("import", f"no module `{decl.module}`: looked for {decl.module}.kina in "
                      + ", ".join(where) + " and the standard library", decl.target_span, notes)


def import_closure(path: str, text: str, read: Callable[[str], str | None] = read_file,
                   kina_path: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """(path, text) of the file and of every file it imports, directly or not, each once,
    without analysing any (the build cache's hint; files that cannot be found are left out)."""
    dirs = search.kina_path_dirs() if kina_path is None else list(kina_path)
    texts: dict[str, str | None] = {_key(path): text}

    def cached(p: str) -> str | None:
        if p not in texts:
            texts[p] = read(p)
        return texts[p]
    out: list[tuple[str, str]] = []
    todo = [_key(path)]
    seen: set[str] = set()
    while todo:
        here = todo.pop(0)
        body = cached(here)
        if here in seen or body is None:
            continue
        seen.add(here)
        out.append((here, body))
        decls, _, _ = import_lines.scan(body, item_split.split_items(body))
        todo += [p for d in decls if (p := search.resolve(d, here, dirs, cached)[0]) is not None]
    return out
