"""Code actions: the reverseMode "split into two lets" quick fix, plus the
"Build & validate" and "Show MLIR" source actions (commands.py runs them).

The quick fix answers the `ad-structure` diagnostic whose span is a nested
operand of a differentiated op.  It hoists exactly that operand into a fresh
let placed before the enclosing let:

    let y = A.op1(..).op2(..) in
  becomes
    let y_op1 = A.op1(..) in
    let y = y_op1.op2(..) in

Applying it again to the next diagnostic splits a longer chain step by step.
"""
from __future__ import annotations

import re

from lsprotocol import types as lsp

from compiler import syntax as ast

from . import astutil

CMD_VALIDATE = "kina.buildAndValidate"
CMD_MLIR = "kina.showMlir"
SPLIT_CODE = "ad-structure"


def _node_with_span(fn: ast.FnDef, start: int, end: int):
    stack = [fn.body]
    while stack:
        node = stack.pop()
        if node.span.start == start and node.span.end == end:
            return node
        stack.extend(astutil.children(node))
    return None


def _label(node) -> str:
    if isinstance(node, ast.MethodCall):
        return node.method
    if isinstance(node, ast.Call):
        return node.func
    if isinstance(node, ast.BinOp):
        return {"+": "sum", "-": "diff", "*": "prod", "/": "quot", "@": "mm"}.get(node.op, "t")
    return "t"


def _fresh(base: str, text: str) -> str:
    taken = set(re.findall(r"[A-Za-z_]\w*", text))
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}{n}"
    return name


def split_edit(view, uri: str, start: int, end: int) -> lsp.WorkspaceEdit | None:
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
    indent = re.match(r"[ \t]*", text[line_start:let.span.start]).group()
    base = let.names[0].id if let.names else "t"
    name = _fresh(f"{base}_{_label(child)}", text[fn.span.start:fn.span.end])
    hoisted = f"let {name} = {text[start:end]} in\n{indent}"
    at = view.index.position(let.span.start)
    edits = [lsp.TextEdit(range=lsp.Range(start=at, end=at), new_text=hoisted),
             lsp.TextEdit(range=view.index.range(child.span), new_text=name)]
    return lsp.WorkspaceEdit(changes={uri: edits})


def code_actions(view, uri: str, params: lsp.CodeActionParams) -> list[lsp.CodeAction]:
    actions = []
    for diag in params.context.diagnostics or []:
        if diag.code != SPLIT_CODE or "split" not in diag.message:
            continue
        span = view.index.span(diag.range)
        edit = split_edit(view, uri, span.start, span.end)
        if edit is not None:
            actions.append(lsp.CodeAction(title="Split the nested expression into its own let",
                                          kind=lsp.CodeActionKind.QuickFix, diagnostics=[diag],
                                          edit=edit, is_preferred=True))
    for title, cmd in (("Kina: Build & validate", CMD_VALIDATE), ("Kina: Show MLIR", CMD_MLIR)):
        actions.append(lsp.CodeAction(title=title, kind=lsp.CodeActionKind.Source,
                                      command=lsp.Command(title=title, command=cmd, arguments=[uri])))
    only = params.context.only
    if only:
        actions = [a for a in actions if any(_kind_matches(a.kind, k) for k in only)]
    return actions


def _kind_matches(kind, wanted) -> bool:
    """`wanted` may arrive as an enum member or a plain string (VS Code sends kinds,
    such as "quickfix" or "source.organizeImports", that lsprotocol passes through
    as str); a kind matches its own value and any of its sub-kinds."""
    kind, wanted = str(getattr(kind, "value", kind)), str(getattr(wanted, "value", wanted))
    return kind == wanted or kind.startswith(wanted + ".")
