"""Folding ranges: functions, let chains, multi-line lets and literals, parameter
lists and argument lists, and runs of `//` comment lines.

Functions come from the item split (compiler.syntax.items.split_items), so a function
with a syntax error still folds; everything inside a function comes from its
AST.  A fold ends on the line before its closing bracket when that bracket
starts its own line, so `}` stays visible when the fold is collapsed (as
rust-analyzer and gopls do).  Ranges are whole lines; the client's rangeLimit
is honoured (the outermost ranges are kept).
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from compiler.syntax import nodes as ast
from compiler.syntax import walk as ast_walk

from .. import background
from ..background import Checkpoint, never
from ..documents import View
from ..items import split_items
from . import astutil

if TYPE_CHECKING:
    from ..base import Safe, Server

class _Lines:
    """Line numbers of offsets, computed in one sorted pass through the view's index."""

    def __init__(self, view: View) -> None:
        self.view = view
        self.spans: list[tuple[int, int, str | None]] = []

    def add(self, start: int, end: int, kind: str | None = None) -> None:
        self.spans.append((start, end, kind))

    def ranges(self) -> list[lsp.FoldingRange]:
        offsets = sorted({o for s, e, _ in self.spans for o in (s, e)})
        lines = dict(zip(offsets, (p.line for p in self.view.index.positions(offsets))))
        text = self.view.text
        out: list[lsp.FoldingRange] = []
        seen: set[tuple[int, int]] = set()
        for s, e, kind in self.spans:
            first, last = lines[s], lines[e]
            if e > s and text[e - 1] in ")]}" and _starts_line(text, e - 1):
                last -= 1                      # keep the closing bracket's line visible
            if last > first and (first, last) not in seen:
                seen.add((first, last))
                out.append(lsp.FoldingRange(start_line=first, end_line=last, kind=kind))
        return out


def _starts_line(text: str, pos: int) -> bool:
    line_start = max(text.rfind("\n", 0, pos), text.rfind("\r", 0, pos)) + 1
    return not text[line_start:pos].strip()


# one line: (its text without the line end), and where its first non-blank character is
_LINE = re.compile(r"([ \t\f\v]*([^\r\n]*))(?:\r\n|\r|\n|$)")


def _comment_runs(text: str, lines: _Lines, checkpoint: Checkpoint = never) -> None:
    """Two or more consecutive lines holding only a comment.  A line scan, not the lexer:
    a comment that starts its line is exactly a line whose first non-blank characters are
    `//` (Kina has no strings), and lexing a 128,000-character line of junk took seconds."""
    run_start = run_end = None
    for n, m in enumerate(_LINE.finditer(text)):
        if n % 512 == 0:
            checkpoint()
        pos, line_end = m.start(), m.end(1)
        if text.startswith("//", m.start(2)):
            if run_start is None:
                run_start = pos
            else:
                run_end = line_end
        else:
            if run_start is not None and run_end is not None:
                lines.add(run_start, run_end, lsp.FoldingRangeKind.Comment)
            run_start = run_end = None
    if run_start is not None and run_end is not None:
        lines.add(run_start, run_end, lsp.FoldingRangeKind.Comment)


def _in_function(fn: ast.FnDef, text: str, lines: _Lines) -> None:
    if fn.params:
        open_ = text.find("(", fn.name_span.end)
        close = text.rfind(")", fn.params[-1].span.end, fn.ret.span.start)
        if 0 <= open_ < close:
            lines.add(open_, close + 1)
    chain = list(astutil.lets(fn))
    if len(chain) > 1:
        lines.add(chain[0].span.start, chain[-1].value.span.end)
    for let in chain:
        lines.add(let.span.start, let.value.span.end)
    stack = [let.value for let in chain] + [chain[-1].body if chain else fn.body]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.TensorLit, ast.Call, ast.MethodCall, ast.TupleExpr)):
            start = node.method_span.end if isinstance(node, ast.MethodCall) else node.span.start
            lines.add(start, node.span.end)
        stack.extend(ast_walk.children(node))


def folding_ranges(view: View, limit: int | None = None, checkpoint: Checkpoint = never) -> list[lsp.FoldingRange]:
    """The folds of the view's text; `checkpoint` is called between slices of the work
    (it raises once the document has changed: background.py)."""
    text = view.text
    lines = _Lines(view)
    for item in split_items(text):
        lines.add(item.start, item.end)
    for fn in (view.snapshot.module.functions if view.snapshot.module else ()):
        checkpoint()
        _in_function(fn, text, lines)
    _comment_runs(text, lines, checkpoint)
    checkpoint()
    out = sorted(lines.ranges(), key=lambda r: (r.start_line, -r.end_line))
    if limit is not None and limit >= 0 and len(out) > limit:
        # keep the outermost folds: the widest ranges first
        keep = sorted(out, key=lambda r: (r.start_line - r.end_line, r.start_line))[:limit]
        out = sorted(keep, key=lambda r: (r.start_line, -r.end_line))
    return out


def register(server: Server, safe: Safe) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_FOLDING_RANGE)
    @safe(default=list)
    async def on_folding_range(ls: Server, params: lsp.FoldingRangeParams) -> list[lsp.FoldingRange]:
        view = await ls.view(params.text_document.uri)
        if view is None:
            return []
        caps = ls.client_capabilities.text_document
        folding = caps.folding_range if caps else None
        limit = folding.range_limit if folding else None
        cur = ls.buffer(params.text_document.uri)
        version = cur[1] if cur is not None and cur[0] == view.text else None
        return await background.run(ls, params.text_document.uri, view.text, version,
                                    lambda checkpoint: folding_ranges(view, limit, checkpoint))
