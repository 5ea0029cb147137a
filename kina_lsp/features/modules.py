"""Imported modules in one document (issue 29): definition, hover and completion on a
qualified name (`layers.linear`), and document links on import paths.

Everything comes from the document's Snapshot: `snap.imports` (compiler.snapshot.ModuleLink:
the import line's spans, the file it resolved to and that file's own Snapshot), so nothing
here reads a file or checks anything; the other file's spans are converted with a
LineIndex of its text.  `uri_of(path)` gives the URI of a file (the client's own when it
has the file open).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lsprotocol import types as lsp

from compiler.core.diagnostics import Span
from compiler.snapshot import ModuleLink, Snapshot
from compiler.syntax import lex
from compiler.syntax import nodes as ast

from ..convert import index_of
from ..documents import View
from . import astutil

UriOf = Callable[[str], str]


@dataclass(frozen=True)
class Qualified:
    """A qualified name `module.function` at the cursor (the function part may be missing
    or not yet typed)."""
    link: ModuleLink
    module: Span            # the module word (the import's name)
    function: str
    function_span: Span

    @property
    def module_snapshot(self) -> Snapshot:
        assert self.link.snapshot is not None
        return self.link.snapshot

    @property
    def definition(self) -> ast.FnDef | None:
        return self.module_snapshot.function_named(self.function) if self.function else None


def _word(text: str, offset: int) -> tuple[str, int, int] | None:
    tok = lex.word_at(text, offset)
    return (str(tok), lex.start(tok), lex.end(tok)) if tok is not None else None


def qualified_at(snap: Snapshot, text: str, offset: int) -> Qualified | None:
    """The qualified name `m.f` touching offset, when `m` names a loaded import."""
    hit = _word(text, offset)
    if hit is None:
        return None
    name, s, e = hit
    mod = fun = None
    if s >= 1 and text[s - 1] == ".":
        prev = _word(text, s - 1)
        if prev is not None and prev[2] == s - 1:
            mod, fun = prev, hit
    if mod is None and text[e:e + 1] == ".":
        nxt = _word(text, e + 1)
        mod, fun = hit, (nxt if nxt is not None and nxt[1] == e + 1 else None)
    if mod is None:
        return None
    link = snap.link(mod[0])
    if link is None or link.snapshot is None or link.path is None:
        return None
    fspan = Span(fun[1], fun[2]) if fun else Span(e + 1, e + 1)
    return Qualified(link, Span(mod[1], mod[2]), fun[0] if fun else "", fspan)


def location(uri_of: UriOf, link: ModuleLink, span: Span, encoding: str) -> lsp.Location:
    assert link.path is not None and link.snapshot is not None
    return lsp.Location(uri=uri_of(link.path), range=index_of(link.snapshot.text, encoding).range(span))


def definition(view: View, offset: int, uri_of: UriOf) -> lsp.Location | None:
    """The imported function's name in its file (on the function part), or the imported
    file's start (on the module part)."""
    q = qualified_at(view.snapshot, view.text, offset)
    if q is None:
        return None
    encoding = view.index.encoding
    if q.module.start <= offset <= q.module.end:
        return location(uri_of, q.link, Span(0, 0), encoding)
    fn = q.definition
    return location(uri_of, q.link, fn.name_span, encoding) if fn is not None else None


def doc_comment(text: str, fn: ast.FnDef) -> str:
    """The `//` lines right above a function (its documentation), without the slashes."""
    lines = text[:fn.span.start].rstrip(" \t").split("\n")
    if lines and not lines[-1].strip():
        lines.pop()       # the line break before `fn`
    out: list[str] = []
    while lines and lines[-1].strip().startswith("//"):
        out.append(lines.pop().strip()[2:].strip())
    return "\n".join(reversed(out))


def hover(view: View, offset: int) -> lsp.Hover | None:
    """On `m.f`: the signature of `f` as written in its module, and its doc comment."""
    q = qualified_at(view.snapshot, view.text, offset)
    if q is None:
        return None
    fn = q.definition
    if fn is None or not (q.module.start <= offset <= q.function_span.end):
        return None
    parts = [f"```kina\n{astutil.signature(fn)}\n```", f"module `{q.link.decl.name}` ({q.link.path})"]
    doc = doc_comment(q.module_snapshot.text, fn)
    if doc:
        parts.insert(1, doc)
    return lsp.Hover(contents=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value="\n\n".join(parts)),
                     range=view.index.range(Span(q.module.start, q.function_span.end)))


def module_before(text: str, offset: int) -> str | None:
    """`m` when the text before offset ends with `m.` or `m.partial` (completion's trigger)."""
    i = offset
    while i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_"):
        i -= 1
    if i == 0 or text[i - 1] != ".":
        return None
    j = i - 1
    while j > 0 and (text[j - 1].isalnum() or text[j - 1] == "_"):
        j -= 1
    name = text[j:i - 1]
    return name if name and lex.is_word(name) else None


def completions(snap: Snapshot, module: str) -> list[lsp.CompletionItem] | None:
    """The public functions of the module imported as `module`, with their signatures
    (None when `module` is no import of the document: not a qualified name)."""
    link = snap.link(module)
    m = link.snapshot if link is not None else None
    if m is None:
        return None
    items = []
    for name in sorted(m.public_signatures):
        fn = m.function_named(name)
        if fn is None:
            continue
        doc = doc_comment(m.text, fn)
        items.append(lsp.CompletionItem(
            label=name, kind=lsp.CompletionItemKind.Function, detail=astutil.signature(fn),
            documentation=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value=doc) if doc else None))
    return items


def import_links(view: View, uri_of: UriOf, tooltips: bool = False) -> list[lsp.DocumentLink]:
    """A link on each import's module word or quoted path, to the file it resolved to."""
    return [lsp.DocumentLink(range=view.index.range(link.decl.target_span), target=uri_of(link.path),
                             tooltip=link.path if tooltips else None)
            for link in view.snapshot.imports if link.path is not None]
