"""Code actions: the quick fixes of diagnostics that carry a Fix, the refactors
(features/refactor.py: extract, inline, method chain <-> lets, and the `.broadcast` /
`.reshape` fixes of shape diagnostics), plus the "Build & validate" and "Show MLIR" source
actions (features/commands.py runs them; they stay commands).

This module registers textDocument/codeAction and codeAction/resolve.  A client that can
resolve an action's edit (VS Code, neovim) gets the list without edits, and each edit when
it asks for it (the action's `data` says which fix or refactor, where, and for which text);
any other client gets the edits in the list.

A quick fix is chosen by the diagnostic's Fix kind (compiler.core.diagnostics.FIXES),
which the client hands back in the diagnostic's `data` (QUICK_FIXES has one row
per kind; never a match on the message text).

`split-let` answers the `ad-structure` diagnostic whose span is a nested
operand of a differentiated op.  It hoists exactly that operand into a fresh
let placed before the enclosing let:

    let y = A.op1(..).op2(..) in
  becomes
    let y_op1 = A.op1(..) in
    let y = y_op1.op2(..) in

Applying it again to the next diagnostic splits a longer chain step by step.
`write`: the `literal` diagnostic of a bare number where a tensor is needed writes
the literal that type-checks there.  `cast`: of two operands whose dtypes differ, the
one the `dtype` diagnostic points at gets `.cast(dtype=D)`.  `import`: a standard module
called without its import (`nn.linear(..)` with no `import nn`) gets its import line.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from lsprotocol import types as lsp

from compiler.core.diagnostics import Span
from compiler.syntax import lex
from compiler.syntax import nodes as ast
from compiler.syntax.walk import children

from ..documents import View, read_only
from . import astutil, refactor
from .refactor_syntax import parenthesized

if TYPE_CHECKING:
    from ..base import Safe, Server

CMD_VALIDATE = "kina.buildAndValidate"
CMD_MLIR = "kina.showMlir"


def _node_with_span(fn: ast.FnDef, start: int, end: int) -> ast.Expr | None:
    stack = [fn.body]
    while stack:
        node = stack.pop()
        if node.span.start == start and node.span.end == end:
            return node
        stack.extend(children(node))
    return None


def _label(node: ast.Expr) -> str:
    if isinstance(node, ast.MethodCall):
        return node.method
    if isinstance(node, ast.Call):
        return node.func
    if isinstance(node, ast.BinOp):
        return {"+": "sum", "-": "diff", "*": "prod", "/": "quot", "@": "mm"}.get(node.op, "t")
    return "t"


def _indent(line: str) -> str:
    """The leading blanks of a line."""
    return line[:len(line) - len(line.lstrip(" \t"))]


def _fresh(base: str, text: str) -> str:
    taken = {str(t) for t in lex.tokens(text) if t.type in lex.WORDS}
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}{n}"
    return name


def split_edit(view: View, uri: str, start: int, end: int, _text: str | None = None) -> lsp.WorkspaceEdit | None:
    """The WorkspaceEdit hoisting the expression at [start, end) into its own let."""
    fn = view.snapshot.function_at(start)
    if fn is None:
        return None
    let = astutil.let_of(fn, start)
    child = _node_with_span(fn, start, end)
    if let is None or child is None or child is let.value:
        return None
    text = view.text
    line_start = text.rfind("\n", 0, let.span.start) + 1
    indent = _indent(text[line_start:let.span.start])
    base = let.names[0].id if let.names else "t"
    name = _fresh(f"{base}_{_label(child)}", text[fn.span.start:fn.span.end])
    hoisted = f"let {name} = {text[start:end]} in\n{indent}"
    at = view.index.position(let.span.start)
    edits = [_insertion(at, hoisted),
             lsp.TextEdit(range=view.index.range(child.span), new_text=name)]
    return lsp.WorkspaceEdit(changes={uri: edits})


def write_edit(view: View, uri: str, start: int, end: int, text: str | None) -> lsp.WorkspaceEdit | None:
    """The WorkspaceEdit writing `text` (a tensor literal) over [start, end)."""
    if not text:
        return None
    return lsp.WorkspaceEdit(changes={uri: [lsp.TextEdit(range=view.index.range(Span(start, end)), new_text=text)]})


# Operands that bind tighter than `.cast(..)` needs: `x.cast(..)`, `f(x).cast(..)`, `x.exp().cast(..)`.
_POSTFIX = (ast.Name, ast.MethodCall, ast.Call, ast.TensorLit, ast.TupleExpr)


def cast_edit(view: View, uri: str, start: int, end: int, dtype: str | None) -> lsp.WorkspaceEdit | None:
    """Cast the operand at [start, end) to `dtype` (the `dtype` diagnostic of two operands
    whose dtypes differ): `y` -> `y.cast(dtype=F16)`, `a - b` -> `(a - b).cast(dtype=F16)`."""
    fn = astutil.function_at(view.snapshot.module, start)
    node = _node_with_span(fn, start, end) if fn is not None and dtype else None
    if node is None:
        return None
    cast = f".cast(dtype={dtype})"
    at = view.index.position(end)
    edits = [_insertion(at, cast)]
    if not (isinstance(node, _POSTFIX) or parenthesized(view.text[start:end])):
        start_at = view.index.position(start)
        edits = [_insertion(start_at, "("), _insertion(at, ")" + cast)]
    return lsp.WorkspaceEdit(changes={uri: edits})


def import_edit(view: View, uri: str, _start: int, _end: int, module: str | None) -> lsp.WorkspaceEdit | None:
    """Add `import module` (a standard module the file calls without importing it) on a line
    after the file's last import line; in a file with none, after its header comment when a
    blank line ends that comment (the examples' layout), else on the first line."""
    if not module:
        return None
    decls = [link.decl for link in view.snapshot.imports]
    if decls:
        at, text = view.index.position(max(d.span.end for d in decls)), f"\nimport {module}"
    else:
        lines = view.text.splitlines()
        header = next((i for i, line in enumerate(lines) if not line.lstrip().startswith("//")), len(lines))
        line = header + 1 if 0 < header < len(lines) and not lines[header].strip() else 0
        at, text = lsp.Position(line=line, character=0), f"import {module}\n\n"
    return lsp.WorkspaceEdit(changes={uri: [_insertion(at, text)]})


def _insertion(at: lsp.Position, text: str) -> lsp.TextEdit:
    """An edit that inserts `text` at `at`."""
    return lsp.TextEdit(range=lsp.Range(start=at, end=at), new_text=text)


class MakeEdit(Protocol):
    """A quick fix's edit: the WorkspaceEdit for the diagnostic at [start, end) of uri's view
    (`text`: the Fix's text), or None when it does not apply."""
    def __call__(self, view: View, uri: str, start: int, end: int, text: str | None, /) -> lsp.WorkspaceEdit | None: ...


# Fix kind (compiler.core.diagnostics.FIXES) -> (edit(view, uri, start, end, fix text), the action's title;
# `{text}` is the fix text).
QUICK_FIXES: dict[str, tuple[MakeEdit, str]] = {
    "split-let": (split_edit, "Split the nested expression into its own let"),
    "write": (write_edit, "Write {text}"),
    "cast": (cast_edit, "Cast to {text}"),
    "import": (import_edit, "Add `import {text}`"),
}


def _fix_of(diag: lsp.Diagnostic) -> tuple[str, str | None] | None:
    """(kind, text) of the Fix a diagnostic carries in `data` (what to_lsp put there)."""
    data = diag.data
    if not isinstance(data, dict) or data.get("fix") not in QUICK_FIXES:
        return None
    text = data.get("text")
    return data["fix"], text if isinstance(text, str) else None


def quick_fix(view: View, uri: str, diag: lsp.Diagnostic, lazy: bool = False) -> lsp.CodeAction | None:
    found = _fix_of(diag)
    if found is None:
        return None
    kind, text = found
    make, title = QUICK_FIXES[kind]
    span = view.index.span(diag.range)
    edit = make(view, uri, span.start, span.end, text)
    if edit is None:
        return None
    data = {"uri": uri, "fix": kind, "start": span.start, "end": span.end, "fixText": text,
            "text": refactor.text_key(view.text)}
    return lsp.CodeAction(title=title.format(text=text), kind=lsp.CodeActionKind.QuickFix, diagnostics=[diag],
                          edit=None if lazy else edit, is_preferred=True, data=data)


def code_actions(view: View, uri: str, params: lsp.CodeActionParams, lazy: bool = False) -> list[lsp.CodeAction]:
    """The quick fixes of the diagnostics that carry a Fix, and the source actions (not the
    refactors, which need the analysis worker: `on_code_action`)."""
    actions = [fix for diag in params.context.diagnostics or [] if (fix := quick_fix(view, uri, diag, lazy))]
    for title, cmd in (("Kina: Build & validate", CMD_VALIDATE), ("Kina: Show MLIR", CMD_MLIR)):
        actions.append(lsp.CodeAction(title=title, kind=lsp.CodeActionKind.Source,
                                      command=lsp.Command(title=title, command=cmd, arguments=[uri])))
    only = params.context.only
    if only:
        actions = [a for a in actions if any(_kind_matches(a.kind, k) for k in only)]
    return actions


def resolve_quick_fix(view: View | None, action: lsp.CodeAction) -> lsp.CodeAction:
    """A lazily listed quick fix with its edit (made again: cheap), if the text is the same."""
    data: dict[str, Any] = action.data if isinstance(action.data, dict) else {}
    row = QUICK_FIXES.get(str(data.get("fix")))
    start, end, uri, text = data.get("start"), data.get("end"), data.get("uri"), data.get("fixText")
    if view is None or row is None or not (isinstance(start, int) and isinstance(end, int) and isinstance(uri, str)):
        return action
    if data.get("text") == refactor.text_key(view.text):
        action.edit = row[0](view, uri, start, end, text if isinstance(text, str) else None)
    return action


OPTIONS = lsp.CodeActionOptions(
    code_action_kinds=[lsp.CodeActionKind.QuickFix, lsp.CodeActionKind.RefactorExtract,
                       lsp.CodeActionKind.RefactorInline, lsp.CodeActionKind.RefactorRewrite,
                       lsp.CodeActionKind.Source],
    resolve_provider=True)


def _lazy(server: Server) -> bool:
    """Whether the client resolves an action's edit (codeAction.resolveSupport has "edit")."""
    caps = server.client_capabilities.text_document
    support = caps.code_action.resolve_support if caps and caps.code_action else None
    return support is not None and "edit" in support.properties


def register(server: Server, safe: Safe) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_CODE_ACTION, OPTIONS)
    @safe(default=list)
    async def on_code_action(ls: Server, params: lsp.CodeActionParams) -> list[lsp.CodeAction]:
        uri = params.text_document.uri
        if read_only(uri):      # no edit of the standard library
            return []
        view = await ls.view(uri)
        if view is None:
            return []
        lazy = _lazy(ls)
        listed = code_actions(view, uri, params, lazy)
        only = [str(getattr(k, "value", k)) for k in params.context.only or []] or None
        found = refactor.candidates(view, view.index.span(params.range), list(params.context.diagnostics or []), only)
        good = await ls.documents.on_worker(lambda _ws: refactor.verified(view, found)) if found else []
        refactors = [refactor.to_action(view, uri, *c, lazy=lazy) for c in good]
        fixes = [a for a in listed if a.kind == lsp.CodeActionKind.QuickFix]
        return fixes + refactors + [a for a in listed if a.kind != lsp.CodeActionKind.QuickFix]

    @server.feature(lsp.CODE_ACTION_RESOLVE)
    @safe(default=lambda: None)
    async def on_code_action_resolve(ls: Server, action: lsp.CodeAction) -> lsp.CodeAction:
        data = action.data if isinstance(action.data, dict) else {}
        uri = data.get("uri")
        view = await ls.view(uri, wait=True) if isinstance(uri, str) else None
        if "refactor" in data:
            return refactor.resolve(view, action)
        return resolve_quick_fix(view, action)


def _kind_matches(kind: lsp.CodeActionKind | str | None, wanted: lsp.CodeActionKind | str) -> bool:
    """`wanted` may arrive as an enum member or a plain string (VS Code sends kinds,
    such as "quickfix" or "source.organizeImports", that lsprotocol passes through
    as str); a kind matches its own value and any of its sub-kinds."""
    kind, wanted = str(getattr(kind, "value", kind)), str(getattr(wanted, "value", wanted))
    return kind == wanted or kind.startswith(wanted + ".")
