"""Per-document analysis state, kept off the event loop.

Each open document owns one incremental `compiler.analysis.Analysis`; its
`update(text)` re-checks only the functions whose text changed.  All updates
run on one worker thread (the Analysis objects are not thread-safe, and one
thread keeps results in edit order), so the event loop stays free to answer
requests while a big file is being checked.  A snapshot is tagged with the
exact text it was computed from; feature handlers ask `current()` and get a
snapshot of the text the client sees right now.

Requests give `current()` a time budget: when the analysis of the newest text
takes longer (a function with tens of thousands of tokens was just edited),
the request is answered as if nothing were known (null / empty) instead of
holding the client up; the analysis goes on and the next request gets it.  A
queued analysis whose text the client has already edited again is skipped, so
the worker always works on the newest text and a burst of edits costs one
analysis, not one per edit.
"""
from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from compiler.analysis import Analysis

from .convert import LineIndex, index_of

log = logging.getLogger(__name__)


@dataclass
class View:
    """A snapshot together with the text it describes and its position index."""
    snapshot: object
    text: str
    index: LineIndex


@dataclass
class DocState:
    uri: str
    analysis: Analysis = field(default_factory=Analysis)
    view: View | None = None
    debounce: asyncio.Task | None = None
    extra: list = field(default_factory=list)   # LSP diagnostics from "Build & validate"
    symbols: dict = field(default_factory=dict)  # navigation.document_symbols' per-function cache


class Documents:
    def __init__(self, text_of, encoding=lambda: "utf-16"):
        """text_of(uri) -> (text, version) of the client's current buffer, or None;
        encoding() -> the negotiated LSP position encoding."""
        self._text_of = text_of
        self._encoding = encoding
        self._docs: dict[str, DocState] = {}
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kina-analysis")

    def state(self, uri: str) -> DocState:
        if uri not in self._docs:
            self._docs[uri] = DocState(uri)
        return self._docs[uri]

    def close(self, uri: str) -> None:
        st = self._docs.pop(uri, None)
        if st and st.debounce:
            st.debounce.cancel()

    def _analyse(self, st: DocState, text: str) -> View | None:
        """Runs on the worker thread.  A crash of the analysis is logged, never raised."""
        if st.view is not None and st.view.text == text:
            return st.view
        cur = self._text_of(st.uri)
        if cur is None or cur[0] != text:
            return None   # obsolete: the client has edited (or closed) it since; its answer is moot
        try:
            snap = st.analysis.update(text)
        except Exception:  # the compiler must not take the server down
            log.exception("analysis failed for %s", st.uri)
            st.analysis = Analysis()  # its incremental state may be inconsistent now
            return None
        st.view = View(snap, text, index_of(text, self._encoding()))
        return st.view

    async def current(self, uri: str, budget: float | None = None) -> View | None:
        """A view of the buffer as it is now (computing it if an edit is pending), or None
        when the document is not open, or its analysis did not finish within `budget`
        seconds."""
        cur = self._text_of(uri)
        if cur is None:
            return None
        text, _version = cur
        st = self.state(uri)
        if st.view is not None and st.view.text == text:
            return st.view
        loop = asyncio.get_running_loop()
        job = loop.run_in_executor(self._executor, self._analyse, st, text)
        if budget is None:
            return await job
        try:
            return await asyncio.wait_for(asyncio.shield(job), budget)
        except asyncio.TimeoutError:
            log.info("analysis of %s is over the %.0f ms request budget; answering without it",
                     uri, budget * 1000)
            return None

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
