"""Document highlight: every occurrence of the name under the cursor, the binding
occurrence as Write (a parameter, a `let` name, a function's own name) and the
others as Read (uses of a parameter or let, calls of a function, `handle f(..)`
included).

Name resolution is the compiler's (Snapshot.definition / references: lexical
scope, so two functions' `x` never highlight each other).  Anything that is not
a name the program defines (an op, a keyword, a number) highlights nothing.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from lsprotocol import types as lsp

from ..documents import View

if TYPE_CHECKING:
    from ..base import Safe, Server

T = TypeVar("T")


def _safe(fn: Callable[[int], T], offset: int) -> T | None:
    try:
        return fn(offset)
    except Exception:   # a half-typed buffer: highlight nothing rather than fail
        return None


def highlights(view: View, offset: int) -> list[lsp.DocumentHighlight]:
    snap = view.snapshot
    definition = _safe(snap.definition, offset)
    if definition is None:
        return []
    spans = {(s.start, s.end) for s in (_safe(snap.references, offset) or [])}
    spans.add((definition.start, definition.end))
    out: list[lsp.DocumentHighlight] = []
    for start, end in sorted(spans):
        kind = (lsp.DocumentHighlightKind.Write if (start, end) == (definition.start, definition.end)
                else lsp.DocumentHighlightKind.Read)
        a, b = view.index.positions([start, end])
        rng = lsp.Range(start=a, end=b)
        out.append(lsp.DocumentHighlight(range=rng, kind=kind))
    return out


def register(server: Server, safe: Safe) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_DOCUMENT_HIGHLIGHT)
    @safe(default=list)
    async def on_document_highlight(ls: Server, params: lsp.DocumentHighlightParams) -> list[lsp.DocumentHighlight]:
        view = await ls.view(params.text_document.uri)
        return highlights(view, view.index.offset(params.position)) if view else []
