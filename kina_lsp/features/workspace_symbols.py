"""Workspace symbols: the functions of every open document and of the `.kina` files
in the workspace folders, matched against the query as VS Code does (the query's
characters in order, case-insensitively; prefix and substring matches first).

Only files under the workspace folders are ever read: the walk does not follow
symbolic links to folders, a linked file counts only if it resolves inside its
folder, and hidden folders, virtual environments and node_modules are skipped.
The work is bounded (files visited, bytes per file, results) and runs on a worker
thread; each file's functions are cached by (size, mtime), so a repeated query
reads nothing.  An open document's buffer wins over its file on disk.

Function names come from the item split (compiler.syntax.items.split_items), which
needs no full parse: a file with syntax errors still lists its functions.  A size-generic
function is listed with its size parameters, `linear[M, K, N]` (the query is matched
against its name).
"""
from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from lark import Token
from lsprotocol import types as lsp
from pygls.uris import from_fs_path, to_fs_path

from compiler.syntax import items as item_split
from compiler.syntax import lex

from ..convert import LineIndex

if TYPE_CHECKING:
    from ..base import Safe, Server

MAX_FILES = 5000            # files and folders looked at per query
MAX_FILE_BYTES = 1 << 20    # larger .kina files are not read
MAX_RESULTS = 500
SKIP_DIRS = {"node_modules", "__pycache__", "venv", "site-packages", "dist", "build", "artifacts"}

# (name, name start, name end, item start, item end, shown name) of one function
Symbol = tuple[str, int, int, int, int, str]
_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kina-symbols")


def functions_in(text: str) -> list[Symbol]:
    """(name, name start, name end, item start, item end, shown name) of every function of a
    text; the shown name has the size parameters of a generic function: `linear[M, K, N]`."""
    out: list[Symbol] = []
    for item in item_split.split_items(text):
        head = lex.tokens(text, item.start, min(item.end, item.start + 256))   # `fn NAME [B, T]`
        if len(head) >= 2 and head[1].type == "NAME":
            name = str(head[1])
            out.append((name, lex.start(head[1]), lex.end(head[1]), item.start, item.end, name + _sizes(head)))
    return out


def _sizes(head: list[Token]) -> str:
    """`[B, T]` of a header's tokens `fn f [ B , T ] (`, or "" (also when it is cut short)."""
    if len(head) < 3 or head[2].type != "LSQB":
        return ""
    names: list[str] = []
    for t in head[3:]:
        if t.type == "RSQB":
            return f"[{', '.join(names)}]" if names else ""
        if t.type == "NAME":
            names.append(str(t))
        elif t.type != "COMMA":
            return ""
    return ""


def matches(query: str, name: str) -> int | None:
    """Rank of a match (lower is better) or None: prefix 0, substring 1, subsequence 2."""
    q, n = query.lower(), name.lower()
    if not q or n.startswith(q):
        return 0
    if q in n:
        return 1
    it = iter(n)
    return 2 if all(ch in it for ch in q) else None


def kina_files(roots: list[Path], budget: int = MAX_FILES) -> Iterator[Path]:
    """The .kina files under the roots, bounded, never leaving a root."""
    for root in roots:
        try:
            real_root = root.resolve(strict=True)
        except OSError:
            continue
        for folder, dirs, files in os.walk(real_root, followlinks=False):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS)
            for name in sorted(files):
                budget -= 1
                if budget < 0:
                    return
                if not name.endswith(".kina"):
                    continue
                path = Path(folder, name)
                try:
                    real = path.resolve(strict=True)
                except OSError:
                    continue
                if real.is_relative_to(real_root) and real.is_file():
                    yield path
            budget -= len(dirs)
            if budget < 0:
                return


class SymbolIndex:
    """Functions per file, cached by (size, mtime_ns)."""

    def __init__(self) -> None:
        self._files: dict[str, tuple[tuple[int, int], tuple[str, list[Symbol]]]] = {}

    def of_file(self, path: Path) -> tuple[str, list[Symbol]] | None:
        """(text, functions) of a file on disk, or None if it is unreadable or too big."""
        try:
            st = path.stat()
            if st.st_size > MAX_FILE_BYTES:
                return None
            key = (st.st_size, st.st_mtime_ns)
            hit = self._files.get(str(path))
            if hit is not None and hit[0] == key:
                return hit[1]
            text = path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            return None
        entry = (text, functions_in(text))
        self._files[str(path)] = (key, entry)
        return entry


def _symbols(uri: str, text: str, fns: list[Symbol], query: str, encoding: str,
             container: str) -> list[tuple[int, lsp.WorkspaceSymbol]]:
    hits = [(rank, f) for f in fns if (rank := matches(query, f[0])) is not None]
    if not hits:
        return []
    index = LineIndex(text, encoding)
    out: list[tuple[int, lsp.WorkspaceSymbol]] = []
    for rank, (_, s, e, _, _, shown) in hits:
        a, b = index.positions([s, e])
        out.append((rank, lsp.WorkspaceSymbol(name=shown, kind=lsp.SymbolKind.Function, container_name=container,
                                              location=lsp.Location(uri=uri, range=lsp.Range(start=a, end=b)))))
    return out


def search(query: str, open_docs: dict[str, str], roots: list[Path], index: SymbolIndex,
           encoding: str = "utf-16") -> list[lsp.WorkspaceSymbol]:
    """Matching functions of open documents (their buffers) and workspace files, best first."""
    found: list[tuple[int, lsp.WorkspaceSymbol]] = []
    seen_paths: set[str] = set()
    for uri, text in open_docs.items():
        fs_path = to_fs_path(uri) if uri.startswith("file:") else None
        if fs_path:
            seen_paths.add(os.path.realpath(fs_path))
        found += _symbols(uri, text, functions_in(text), query, encoding, Path(fs_path or uri).name)
    for path in kina_files(roots):
        if os.path.realpath(path) in seen_paths:
            continue
        entry = index.of_file(path)
        if entry is not None:
            found += _symbols(from_fs_path(str(path)), entry[0], entry[1], query, encoding, path.name)
        if len(found) >= 4 * MAX_RESULTS:
            break
    found.sort(key=lambda r: (r[0], r[1].name.lower(), r[1].location.uri))
    return [sym for _, sym in found[:MAX_RESULTS]]


def workspace_roots(ls: Server) -> list[Path]:
    """The workspace folders (or the root) that are local folders."""
    uris = [f.uri for f in ls.workspace.folders.values()] or ([ls.workspace.root_uri] if ls.workspace.root_uri else [])
    roots = []
    for uri in uris:
        path = to_fs_path(uri) if uri and uri.startswith("file:") else None
        if path and os.path.isdir(path):
            roots.append(Path(path))
    return roots


def register(server: Server, safe: Safe) -> None:
    index = SymbolIndex()

    @server.feature(lsp.WORKSPACE_SYMBOL)
    @safe(default=list)
    async def on_workspace_symbol(ls: Server, params: lsp.WorkspaceSymbolParams) -> list[lsp.WorkspaceSymbol]:
        docs = {uri: doc.source for uri, doc in ls.workspace.text_documents.items()
                if uri.endswith(".kina") or getattr(doc, "language_id", None) == "kina"}
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_pool, search, params.query or "", docs, workspace_roots(ls), index,
                                          ls.position_encoding())
