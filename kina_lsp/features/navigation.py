"""Definition, references, rename and document symbols.

Name resolution is the compiler's (Snapshot.definition / references /
rename_conflict); this module only turns spans into LSP locations and edits,
and guards rename so that it can only produce a program that still names the
same things.  A refused rename is an LSP RequestFailed error (-32803) whose
message says why; editors show it as it is.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import TypeVar

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException

from compiler.core.diagnostics import Span
from compiler.core.types import DType
from compiler.ir.nodes import HANDLERS
from compiler.ir.ops import OPS, SURFACE_OPS
from compiler.syntax import lex
from compiler.syntax import nodes as ast

from ..convert import LineIndex
from ..documents import SymbolCache, View
from . import astutil

RESERVED = lex.KEYWORDS | {d.value for d in DType} | set(OPS) | set(HANDLERS) | {"main"}


def word_at(text: str, offset: int) -> tuple[str, int, int] | None:
    """The identifier touching offset (cursor just after it counts)."""
    tok = lex.word_at(text, offset)
    return (str(tok), lex.start(tok), lex.end(tok)) if tok is not None else None


class RenameRefused(JsonRpcException):
    """The rename cannot be done as asked (LSP RequestFailed)."""
    CODE = -32803


T = TypeVar("T")
# A JSON object of a DocumentSymbol (built without lsprotocol: see document_symbols).
SymbolJSON = dict[str, object]


def _safe(fn: Callable[[int], T], offset: int) -> T | None:
    """fn(offset), or None when it fails (a half-typed buffer)."""
    try:
        return fn(offset)
    except Exception:
        return None


def definition(view: View, uri: str, offset: int) -> lsp.Location | None:
    span = _safe(view.snapshot.definition, offset)
    return lsp.Location(uri=uri, range=view.index.range(span)) if span is not None else None


def type_definition(view: View, uri: str, offset: int) -> lsp.Location | None:
    """Where the type of the name at offset is written: a parameter's annotation; a size
    parameter's declaration (`fn f[B, T]`) for a size used in a type or as a value; the
    return type for a function's name.  A let has no written type (None)."""
    fn = view.snapshot.function_at(offset)
    if fn is None:
        return None
    for s in fn.sizes:
        if s.span.start <= offset <= s.span.end:
            return lsp.Location(uri=uri, range=view.index.range(s.span))
    word = word_at(view.text, offset)
    if word is not None:
        size = next((s for s in fn.sizes if s.name == word[0]), None)
        if size is not None and not any(p.name == word[0] for p in fn.params):
            return lsp.Location(uri=uri, range=view.index.range(size.span))
    span = _safe(view.snapshot.definition, offset)
    if span is None:
        return None
    target = view.snapshot.function_at(span.start)
    if target is not None and target.name_span == span:
        return lsp.Location(uri=uri, range=view.index.range(target.ret.span))
    for p in (target.params if target is not None else ()):
        if p.name_span == span:
            return lsp.Location(uri=uri, range=view.index.range(p.type.span))
    return None


def _name_spans(view: View, offset: int) -> list[tuple[int, int]]:
    """Definition + references of the symbol at offset, each narrowed to the name itself."""
    hit = word_at(view.text, offset)
    if hit is None:
        return []
    name = hit[0]
    spans = list(_safe(view.snapshot.references, offset) or [])
    d = _safe(view.snapshot.definition, offset)
    if d is not None:
        spans.append(d)
    out: set[tuple[int, int]] = set()
    for s in spans:
        first = next((t for t in lex.tokens(view.text, s.start, s.end) if str(t) == name), None)
        if first is not None:
            out.add((lex.start(first), lex.end(first)))
    return sorted(out)


def references(view: View, uri: str, offset: int, include_declaration: bool) -> list[lsp.Location]:
    d = _safe(view.snapshot.definition, offset)
    locs = []
    for start, end in _name_spans(view, offset):
        if not include_declaration and d is not None and d.start <= start < d.end:
            continue
        locs.append(lsp.Location(uri=uri, range=view.index.range(Span(start, end))))
    return locs


def prepare_rename(view: View, offset: int) -> lsp.PrepareRenamePlaceholder | None:
    hit = word_at(view.text, offset)
    if hit is None or (hit[0] in RESERVED and hit[0] not in SURFACE_OPS):
        return None        # a user function may be named like an op: `definition` tells which it is
    if _safe(view.snapshot.definition, offset) is None:
        return None
    name, start, end = hit
    return lsp.PrepareRenamePlaceholder(range=view.index.range(Span(start, end)), placeholder=name)


def check_new_name(new_name: object) -> None:
    if not isinstance(new_name, str) or not lex.is_word(new_name):
        raise RenameRefused(f"`{new_name}` is not a valid Kina name: use letters, digits and `_`, "
                            "not starting with a digit")
    if new_name in RESERVED:
        dtypes = {d.value for d in DType}
        what = ("a dtype name, a reserved word" if new_name in dtypes else "a keyword" if new_name in lex.KEYWORDS
                else "a built-in op" if new_name in OPS else "reserved")
        raise RenameRefused(f"`{new_name}` is {what} in Kina and cannot name a function, parameter or let")


def rename(view: View, uri: str, offset: int, new_name: str) -> lsp.WorkspaceEdit | None:
    check_new_name(new_name)
    if prepare_rename(view, offset) is None:
        raise RenameRefused("there is no function, parameter or let to rename here")
    conflict = view.snapshot.rename_conflict(offset, new_name)
    if conflict is not None:
        message, span = conflict
        where = f" (line {view.index.position(span.start).line + 1})" if span is not None else ""
        raise RenameRefused(f"cannot rename to `{new_name}`: {message}{where}")
    edits = [lsp.TextEdit(range=view.index.range(Span(s, e)), new_text=new_name)
             for s, e in _name_spans(view, offset)]
    return lsp.WorkspaceEdit(changes={uri: edits})


def _symbols(fn: ast.FnDef, index: _At) -> list[SymbolJSON]:
    """The symbols of one function, JSON-ready (positions from `index`): a generic one is
    named with its sizes (`linear[M, K, N]`), which are its first children."""
    def rng(span: Span) -> dict[str, dict[str, int]]:
        a, b = index.position(span.start), index.position(span.end)
        return {"start": {"line": a.line, "character": a.character}, "end": {"line": b.line, "character": b.character}}

    kids: list[SymbolJSON] = [{"name": s.name, "detail": "size parameter", "kind": lsp.SymbolKind.TypeParameter.value,
                               "range": rng(s.span), "selectionRange": rng(s.span)} for s in fn.sizes]
    kids += [{"name": p.name, "detail": astutil.type_text(p.type), "kind": lsp.SymbolKind.Variable.value,
              "range": rng(p.span), "selectionRange": rng(p.name_span)} for p in fn.params]
    for let in astutil.lets(fn):
        for n in let.names:
            kids.append({"name": n.id, "kind": lsp.SymbolKind.Variable.value, "range": rng(n.span),
                         "selectionRange": rng(n.span)})
    return [{"name": astutil.generic_name(fn), "detail": astutil.signature(fn), "kind": lsp.SymbolKind.Function.value,
             "range": rng(fn.span), "selectionRange": rng(fn.name_span), "children": kids}]


class _At:
    """A LineIndex stand-in: positions of item-local offsets, for an item that starts at (line, col)."""

    def __init__(self, index: LineIndex, line: int, col: int) -> None:
        self.index, self.line, self.col = index, line, col

    def position(self, offset: int) -> lsp.Position:
        p = self.index.position(offset)
        return lsp.Position(line=p.line + self.line, character=p.character + self.col if p.line == 0 else p.character)


def document_symbols(view: View, cache: SymbolCache | None = None) -> str:
    """Every function with its parameters and lets, as the JSON text of a DocumentSymbol[].

    A 1,000-line file has a thousand symbols, and clients ask again after every edit:
    building them as lsprotocol objects and serialising them through cattrs took longer
    than the whole analysis.  So each function's symbols are kept as a JSON fragment in
    `cache` (one per document), reused while the function's text and its place (line and
    column of its first character) stay the same; the server sends the joined fragments
    as they are (protocol.RawResult)."""
    cache = {} if cache is None else cache
    fragments: list[str] = []
    seen: SymbolCache = {}
    encoding = view.index.encoding
    for it in view.snapshot.items:
        res = it.res
        if res.fn is None:
            continue
        start = view.index.position(it.offset)
        key = (start.line, start.character, encoding)
        hit = cache.get(id(res))
        if hit is None or hit[0] is not res or hit[1] != key:
            local = LineIndex(res.text, encoding) if hit is None or hit[0] is not res or hit[1][2] != encoding \
                else hit[3]
            text = json.dumps(_symbols(res.fn, _At(local, start.line, start.character)), separators=(",", ":"))
            hit = (res, key, text[1:-1], local)
        seen[id(res)] = hit
        fragments.append(hit[2])
    cache.clear()
    cache.update(seen)
    return "[" + ",".join(fragments) + "]"
