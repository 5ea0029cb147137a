"""Formatting (textDocument/formatting and rangeFormatting) through compiler.format.formatter,
the same formatter as `kinac fmt`.

The answer is the smallest set of line edits that turns the buffer into the
formatted text (a line diff), so the cursor, folds and marks outside the changed
lines stay put.  Range formatting formats the whole text and keeps the edits
that touch the functions overlapping the range (a function is the unit of
layout).  A buffer with syntax errors is left alone (no edits; the reason goes
to the client's log, the diagnostics already show where), as gopls and
rust-analyzer do.  The style is fixed, like gofmt's: the client's tab size and
insertSpaces options are not used.  Formatting runs on a worker thread.
"""
from __future__ import annotations

import difflib
import logging
from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from compiler.core.diagnostics import Span
from compiler.format import FormatError, format_source
from compiler.syntax import items as item_split

from .. import background
from ..documents import View, read_only

if TYPE_CHECKING:
    from ..base import Safe, Server

log = logging.getLogger(__name__)


def line_edits(old: str, new: str) -> list[tuple[int, int, str]]:
    """(start offset, end offset in old, replacement) turning old into new, line by line."""
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    starts = [0]
    for line in a:
        starts.append(starts[-1] + len(line))
    out: list[tuple[int, int, str]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            out.append((starts[i1], starts[i2], "".join(b[j1:j2])))
    return out


def formatted_edits(text: str, span: Span | None = None) -> list[tuple[int, int, str]]:
    """The edits formatting text (only those touching the functions that overlap span)."""
    new = format_source(text)
    edits = line_edits(text, new)
    if span is None:
        return edits
    items = [it for it in item_split.split_items(text) if it.start <= span.end and span.start <= it.end]
    if not items:
        return []
    lo, hi = min(it.start for it in items), max(it.end for it in items)
    return [e for e in edits if e[0] <= hi and lo <= e[1]]


def to_lsp(view: View, edits: list[tuple[int, int, str]]) -> list[lsp.TextEdit]:
    out: list[lsp.TextEdit] = []
    for start, end, new_text in edits:
        a, b = view.index.positions([start, end])
        out.append(lsp.TextEdit(range=lsp.Range(start=a, end=b), new_text=new_text))
    return out


async def _edits(ls: Server, uri: str, rng: lsp.Range | None) -> list[lsp.TextEdit]:
    if read_only(uri):      # the standard library is not the user's to reformat
        return []
    view = await ls.view(uri, wait=True)      # the user asked for it and waits
    if view is None:
        return []
    span = view.index.span(rng) if rng is not None else None
    cur = ls.buffer(uri)
    version = cur[1] if cur is not None and cur[0] == view.text else None
    try:   # on the document worker; skipped when the text is replaced before it starts
        edits = await background.run(ls, uri, view.text, version, lambda _: formatted_edits(view.text, span))
    except FormatError as e:
        where = ""
        if e.diagnostics:
            pos = view.index.position(e.diagnostics[0].span.start)
            where = f" (line {pos.line + 1}: {e.diagnostics[0].message})"
        ls.window_log_message(lsp.LogMessageParams(type=lsp.MessageType.Info,
                                                   message=f"Kina: not formatted: {e}{where}"))
        return []
    return to_lsp(view, edits)


def register(server: Server, safe: Safe) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_FORMATTING)
    @safe(default=list)
    async def on_formatting(ls: Server, params: lsp.DocumentFormattingParams) -> list[lsp.TextEdit]:
        return await _edits(ls, params.text_document.uri, None)

    @server.feature(lsp.TEXT_DOCUMENT_RANGE_FORMATTING)
    @safe(default=list)
    async def on_range_formatting(ls: Server, params: lsp.DocumentRangeFormattingParams) -> list[lsp.TextEdit]:
        return await _edits(ls, params.text_document.uri, params.range)
