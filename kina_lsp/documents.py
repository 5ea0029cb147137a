"""The server's state, in one place: what it knows about each open document and when
that knowledge is thrown away.

State, and who owns it:

- the text: pygls' workspace holds the client's buffers (didOpen / didChange /
  didClose keep it in sync); the server never reads an open document from disk;
- per open document, one `DocState` here: the incremental `Analysis` (its
  per-item caches), the last `View` (a Snapshot with the exact text it was
  computed from and its position index), the pending diagnostics push, the
  "Build & validate" diagnostics, the document-symbol fragments and the last
  semantic-token array (for deltas);
- process-wide and immutable: the parse cache (compiler.syntax.parse.parse_local: one
  frozen AST per item text, shared by every document); the worker pools hold no
  document state.

Lifecycle of a document:

- didOpen: a push of its diagnostics is scheduled (at once); its DocState is made
  on first use;
- didChange: the new text is in the workspace at once; the validation
  diagnostics are dropped (they describe the old text) and a debounced push is
  scheduled.  Nothing is recomputed eagerly: the View stays as it is and becomes
  stale, because every request compares the View's text with the buffer;
- a request: `current()` returns the View of the buffer *as it is now*: the kept
  View if its text is the buffer's, else one the worker computes from it
  (`Analysis.update` re-parses only items whose text changed and re-checks only
  functions whose text or callees' signatures changed).  Within the request
  budget, else None (the request answers as if nothing were known and the
  analysis goes on for the next one).  A request therefore never sees a
  snapshot of a text the client no longer has;
- didClose: the DocState goes, with everything in it (a pending push is cancelled).

All analysis runs on one worker thread (Analysis objects are not thread-safe,
and one thread keeps results in edit order), so the event loop stays free to
answer requests while a big file is being checked.  A queued analysis whose
text the client has already edited again is skipped, so a burst of edits costs
one analysis, not one per edit; a running one gives up (Superseded) within 32
items when a newer text arrives, so the work for a replaced version never holds
up the next one (issue 31).  A crash of the analysis is logged, and the
document starts again from an empty Analysis.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcContentModified
from pygls.uris import from_fs_path, to_fs_path

from compiler.analysis import Analysis, Superseded
from compiler.modules.search import is_std, normal
from compiler.modules.workspace import Workspace, read_file
from compiler.snapshot import ItemResult, Loader, Snapshot

from .convert import LineIndex, index_of
from .items import common_ends, split_items

# (text, version) of the client's buffer of a document
Buffer = tuple[str, int | None]
# features/navigation.document_symbols' per-function cache: id(ItemResult) -> (the ItemResult,
# (line, column, encoding) of its first character, its symbols' JSON fragment, its item-local LineIndex)
SymbolCache = dict[int, tuple[ItemResult, tuple[int, int, str], str, LineIndex]]

log = logging.getLogger(__name__)
T = TypeVar("T")


def path_of(uri: str) -> str | None:
    """The normalised file path of a file: URI (the Workspace's key), else None."""
    if not uri.startswith("file:"):
        return None
    path = to_fs_path(uri)
    return normal(path) if path else None


def read_only(uri: str) -> bool:
    """A file of Kina's standard library (compiler/std/*.kina): the editor opens it read-only
    (the client learns where std lives from the server's capabilities: protocol.py), and
    the server offers no edit of it (rename, formatting, code actions)."""
    path = path_of(uri)
    return path is not None and is_std(path)


def split_items_around(text: str, offset: int) -> list[tuple[int, int]]:
    """[start, end) of the top-level item holding offset (an empty list outside any)."""
    return [(it.start, it.end) for it in split_items(text) if it.start <= offset <= it.end][:1]


@dataclass
class View:
    """A snapshot together with the text it describes and its position index."""
    snapshot: Snapshot
    text: str
    index: LineIndex


@dataclass
class DocState:
    uri: str
    analysis: Analysis = field(default_factory=Analysis)
    view: View | None = None
    debounce: asyncio.Task[None] | None = None
    extra: list[lsp.Diagnostic] = field(default_factory=list)   # LSP diagnostics from "Build & validate"
    symbols: SymbolCache = field(default_factory=dict)  # features/navigation.document_symbols' per-function cache
    tokens: tuple[str, list[int]] | None = None  # (result id, data) of the last full semantic tokens
    stale: bool = False     # a file it imports changed since `view` was made: analyse again


class Documents:
    def __init__(self, text_of: Callable[[str], Buffer | None],
                 encoding: Callable[[], str] = lambda: "utf-16") -> None:
        """text_of(uri) -> (text, version) of the client's current buffer, or None;
        encoding() -> the negotiated LSP position encoding."""
        self._text_of = text_of
        self._encoding = encoding
        self._docs: dict[str, DocState] = {}
        self._result_ids = itertools.count(1)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kina-analysis")
        # One module loader for every document (issue 29): a file: document is analysed by
        # it, so importers share the analysis of the files they import, and it reads an
        # open document's buffer rather than its file.  Used on the worker thread only.
        self._uris: dict[str, str] = {}            # normalised path -> URI of an open document
        self._made: dict[str, Analysis] = {}       # path -> the workspace's analysis of it (for stats)
        self.workspace = Workspace(make_analysis=self._make_analysis, read=self.read)

    def _make_analysis(self, path: str, loader: Loader) -> Analysis:
        self._made[path] = analysis = Analysis(path, loader)
        return analysis

    def read(self, path: str) -> str | None:
        """A file's text for the module loader: its open buffer, else the disk."""
        uri = self._uris.get(normal(path))
        cur = self._text_of(uri) if uri is not None else None
        return cur[0] if cur is not None else read_file(path)

    def uri_of(self, path: str) -> str:
        """The URI of the file at path: the client's own when it has it open."""
        return self._uris.get(normal(path)) or from_fs_path(path) or path

    def open_uri(self, path: str) -> str | None:
        """The URI of the open document of the file at path, if there is one."""
        uri = self._uris.get(normal(path))
        return uri if uri is not None and self._text_of(uri) is not None else None

    def open_uris(self) -> list[str]:
        return [u for u in self._uris.values() if self._text_of(u) is not None]

    def has_import_problem(self, uri: str) -> bool:
        """The document's last analysis has an import that did not load."""
        st = self._docs.get(uri)
        return st is not None and st.view is not None and any(m.problem for m in st.view.snapshot.imports)

    def opened(self, uri: str) -> None:
        path = path_of(uri)
        if path is not None:
            self._uris[path] = uri

    async def on_worker(self, work: Callable[[Workspace], T]) -> T:
        """work(workspace) on the analysis worker (the Workspace is not thread-safe)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, work, self.workspace)

    def state(self, uri: str) -> DocState:
        if uri not in self._docs:
            self._docs[uri] = DocState(uri)
        return self._docs[uri]

    def put_tokens(self, uri: str, data: list[int]) -> str:
        """Keep a document's newest full semantic-token array; its fresh result id."""
        rid = str(next(self._result_ids))
        self.state(uri).tokens = (rid, data)
        return rid

    def tokens(self, uri: str, rid: str) -> list[int] | None:
        """The array sent under result id `rid`, if it is the document's newest."""
        st = self._docs.get(uri)
        hit = st.tokens if st is not None else None
        return hit[1] if hit is not None and hit[0] == rid else None

    def stats(self) -> dict[str, dict[str, int]]:
        """Per document, what its caches hold (kina/serverStats)."""
        return {uri: {**self._analysis_of(st).cache_size(), "symbols": len(st.symbols),
                      "viewChars": len(st.view.text) if st.view is not None else 0}
                for uri, st in self._docs.items()}

    def _analysis_of(self, st: DocState) -> Analysis:
        path = path_of(st.uri)
        return self._made.get(path, st.analysis) if path is not None else st.analysis

    def close(self, uri: str) -> None:
        st = self._docs.pop(uri, None)
        if st and st.debounce:
            st.debounce.cancel()
        path = path_of(uri)
        if path is not None and self._uris.get(path) == uri:
            del self._uris[path]
            # read from disk from now on; its analysis goes (an importer loads it again)
            self._executor.submit(self._forget, path)

    def _forget(self, path: str) -> None:
        self.workspace.forget(path)
        self._made.pop(path, None)

    def invalidate(self, uri: str) -> None:
        """A file the document imports changed: its next request analyses it again."""
        st = self._docs.get(uri)
        if st is not None:
            st.stale = True

    def _analyse(self, st: DocState, text: str) -> View | None:
        """Runs on the worker thread.  A crash of the analysis is logged, never raised."""
        if st.view is not None and st.view.text == text and not st.stale:
            return st.view
        cur = self._text_of(st.uri)
        if cur is None or cur[0] != text:
            return None   # obsolete: the client has edited (or closed) it since; its answer is moot
        stale, st.stale = st.stale, False
        path = path_of(st.uri)

        def replaced() -> bool:     # the client sent a newer text (or closed it): give up on this one
            now = self._text_of(st.uri)
            return now is None or now[0] is not text and now[0] != text
        try:
            snap = st.analysis.update(text, replaced) if path is None else self.workspace.analyse(path, text, replaced)
        except Superseded:
            st.stale = st.stale or stale      # (not analysed after all)
            return None
        except Exception:  # the compiler must not take the server down
            log.exception("analysis failed for %s", st.uri)
            st.analysis = Analysis()  # its incremental state may be inconsistent now
            if path is not None:
                self._forget(path)
            return None
        if snap is None:
            return None
        if st.view is not None and st.view.snapshot is snap and not stale:
            return st.view
        st.view = View(snap, text, index_of(text, self._encoding()))
        return st.view

    async def current(self, uri: str, budget: float | None = None, modified: bool = False) -> View | None:
        """A view of the buffer as it is now (computing it if an edit is pending), or None
        when the document is not open, or its analysis did not finish within `budget`
        seconds.  `modified`: when the client edited the text while it was being analysed
        (the analysis of the old text is dropped), raise ContentModified instead of
        returning None, which would answer "nothing here" about a text the client no
        longer has."""
        cur = self._text_of(uri)
        if cur is None:
            return None
        text, _version = cur
        st = self.state(uri)
        if st.view is not None and st.view.text == text and not st.stale:
            return st.view
        loop = asyncio.get_running_loop()
        job = loop.run_in_executor(self._executor, self._analyse, st, text)
        if budget is None:
            view = await job
            now = self._text_of(uri)
            if view is None and modified and now is not None and now[0] != text:
                raise JsonRpcContentModified("the document changed while this was being computed; ask again")
            return view
        try:
            return await asyncio.wait_for(asyncio.shield(job), budget)
        except TimeoutError:
            log.info("analysis of %s is over the %.0f ms request budget; answering without it",
                     uri, budget * 1000)
            return None

    def last_good(self, uri: str, text: str, offset: int) -> tuple[View, int] | None:
        """The document's last analysed View and `offset` moved into its text, when the
        top-level item around `offset` in `text` is one the View analysed unchanged (it
        lies wholly before or after the part of the text edited since); else None.  Hover
        right after an edit answers from it instead of nothing (issue 31)."""
        st = self._docs.get(uri)
        old = st.view if st is not None else None
        if old is None:
            return None
        prefix, suffix = common_ends(old.text, text)
        item = next((it for it in split_items_around(text, offset)), None)
        if item is None:
            return None
        start, end = item
        if end <= prefix:
            return old, offset
        delta = len(text) - len(old.text)
        if start >= len(text) - suffix:
            return old, offset - delta
        return None

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
