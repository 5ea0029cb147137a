"""Import lines: `import layers`, `import layers as L`, `import "path/to/file.kina" as name`.

Imports open a file, one per line, before its first function (docs/language.md, "Modules").
They are not `fn` items, so the item split (items.py) leaves them in its gaps; `scan` finds
them there, so that `gaps` does not call them junk, and reports an import after the first
function or a malformed one as a `syntax` diagnostic.  Each import line is parsed by a
regular expression: the words `import` and `as` mean something only at the start of a
top-level line, so they stay free as names everywhere else (a parameter may be called `as`).

A qualified call `layers.linear(x, w)` parses as a method call on the name `layers` (the
parser cannot know that `layers` is a module); `qualify(fn, aliases)` rewrites each such
call whose receiver is an import's name, and not a parameter or let of the function, into
`Call("layers.linear", ..)` whose func_span covers `layers.linear`.  The sized form
`layers.linear[8, 4, 16](x, w)` and `handle layers.mlp(..) with reverseMode` parse to that
Call directly.  After `qualify`, a dotted name in a Call is always `module.function`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from compiler.core.diagnostics import BOM, Diagnostic, Span
from compiler.syntax import nodes as ast
from compiler.syntax import walk
from compiler.syntax.items import Item

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_LINE = re.compile(r"[^\r\n]*")
_PLAIN = re.compile(rf"import\s+(?P<mod>{_NAME})(?:\s+as\s+(?P<alias>{_NAME}))?\s*(?://.*)?$")
_QUOTED = re.compile(rf"import\s+\"(?P<path>[^\"\r\n]*)\"(?:\s+as\s+(?P<alias>{_NAME}))?\s*(?://.*)?$")
_STARTS = re.compile(r"(?m)^[ \t]*(import)(?![A-Za-z0-9_])")
RESERVED = frozenset({"fn", "let", "in", "handle", "with", "Tensor", "inf", "nan", "import", "as"})


@dataclass(frozen=True)
class ImportDecl:
    """One import line.  `name`: what the importer writes before the dot; `module`: the
    searched module name (`import layers`: "layers"), None for a quoted path; `path`: the
    quoted path as written (relative to the importing file's folder), else None."""
    name: str
    module: str | None
    path: str | None
    span: Span          # the whole line, comment excluded
    name_span: Span     # the name the importer uses (the alias when there is one)
    target_span: Span   # the module name or the quoted path (quotes included)

    @property
    def target(self) -> str:
        """The module or the path as written (messages)."""
        return self.module if self.module is not None else f'"{self.path}"'


def scan(text: str, items: list[Item]) -> tuple[list[ImportDecl], list[Diagnostic], list[Item]]:
    """(the imports before the first item, the diagnostics of malformed or misplaced import
    lines, every import line as an Item for `gaps`: they are not junk)."""
    first = items[0].start if items else len(text)
    decls: list[ImportDecl] = []
    diags: list[Diagnostic] = []
    lines: list[Item] = []
    for lo, hi in _gap_ranges(text, items):
        for m in _STARTS.finditer(text, lo, hi):
            start = m.start(1)
            end = min(_LINE.match(text, start).end(), hi)   # type: ignore[union-attr]
            line = text[start:end].rstrip()
            code_end = start + len(_strip_comment(line).rstrip())
            lines.append(Item(start, start + len(line), ""))
            if start > first:
                diags.append(Diagnostic("syntax", "imports come at the top of a file, before its first "
                                        "function", Span(start, code_end)))
                continue
            decl, problem = _parse_line(text, start, line, code_end)
            if decl is not None:
                decls.append(decl)
            elif problem is not None:
                diags.append(problem)
    return decls, diags, lines


def _gap_ranges(text: str, items: list[Item]) -> list[tuple[int, int]]:
    out, prev = [], 0
    for it in items:
        out.append((prev, it.start))
        prev = it.end
    out.append((prev, len(text)))
    if out and text.startswith(BOM):
        out[0] = (1, out[0][1]) if out[0][1] >= 1 else out[0]
    return out


def _strip_comment(line: str) -> str:
    """The line without a trailing `//` comment (outside the quoted path)."""
    inside = False
    for i, ch in enumerate(line):
        if ch == '"':
            inside = not inside
        elif not inside and line.startswith("//", i):
            return line[:i]
    return line


def _parse_line(text: str, start: int, line: str, code_end: int) -> tuple[ImportDecl | None, Diagnostic | None]:
    span = Span(start, code_end)
    m = _PLAIN.match(line) or _QUOTED.match(line)
    if m is None:
        return None, Diagnostic("syntax", "malformed import: write `import NAME` (the file NAME.kina on the "
                                "search path) or `import \"path/to/file.kina\" as NAME`", span)
    groups = m.groupdict()
    alias = groups.get("alias")
    if "path" in groups:
        path = groups["path"]
        target = Span(start + m.start("path") - 1, start + m.end("path") + 1)
        if alias is None:
            return None, Diagnostic("syntax", f"an import of a path needs a name: `import \"{path}\" as NAME`", span)
        if not path:
            return None, Diagnostic("syntax", "an import path cannot be empty", target)
        name_span = Span(start + m.start("alias"), start + m.end("alias"))
        return _checked(ImportDecl(alias, None, path, span, name_span, target))
    target = Span(start + m.start("mod"), start + m.end("mod"))
    name_span = Span(start + m.start("alias"), start + m.end("alias")) if alias else target
    return _checked(ImportDecl(alias or groups["mod"], groups["mod"], None, span, name_span, target))


def _checked(decl: ImportDecl) -> tuple[ImportDecl | None, Diagnostic | None]:
    if decl.name in RESERVED:
        return None, Diagnostic("syntax", f"`{decl.name}` is a reserved word; import the module under "
                                "another name (`as NAME`)", decl.name_span)
    return decl, None


# ---- qualified calls ---------------------------------------------------------------------
def qualify(fn: ast.FnDef, aliases: frozenset[str]) -> ast.FnDef:
    """fn with every `alias.f(args)` method call (alias an import's name, not bound in fn)
    turned into Call("alias.f"); fn itself when there is none.  Iterative like every walk."""
    if not aliases:
        return fn
    bound = {p.name for p in fn.params} | {s.name for s in fn.sizes} | _let_names(fn)
    names = aliases - bound
    if not names or not any(_is_qualified(e, names) for e in _nodes(fn)):
        return fn
    return walk.rebuild(fn, lambda e: _as_call(e) if _is_qualified(e, names) else e)


def _let_names(fn: ast.FnDef) -> set[str]:
    out: set[str] = set()
    body = fn.body
    while isinstance(body, ast.Let):
        out |= {n.id for n in body.names}
        body = body.body
    return out


def _nodes(fn: ast.FnDef) -> list[ast.Expr]:
    out, stack = [], list(walk.children(fn))
    while stack:
        e = stack.pop()
        out.append(e)
        stack.extend(walk.children(e))
    return out


def _is_qualified(e: object, names: frozenset[str] | set[str]) -> bool:
    return isinstance(e, ast.MethodCall) and isinstance(e.receiver, ast.Name) and e.receiver.id in names


def _as_call(e: ast.Expr) -> ast.Expr:
    assert isinstance(e, ast.MethodCall) and isinstance(e.receiver, ast.Name)
    func_span = e.receiver.span.cover(e.method_span)
    return ast.Call(f"{e.receiver.id}.{e.method}", func_span, e.args, e.attrs, e.span)


def module_of(func: str) -> tuple[str, str] | None:
    """("layers", "linear") for a qualified name `layers.linear`, else None."""
    alias, dot, name = func.partition(".")
    return (alias, name) if dot else None
