"""The refactor code actions: which exist, how they are listed and how they are resolved.

  refactor_extract.py   extract an expression into a let; split a method chain into lets
  refactor_inline.py    inline a let; join a let into the next let's method chain
  refactor_shape.py     quick fixes of `shape` diagnostics: `.broadcast(..)` / `.reshape(..)`
  refactor_check.py     the re-analysis of the edited text that decides what is offered
  refactor_syntax.py    the syntax queries and text pieces they share

Each refactor is a row of REFACTORS: find(view, selection) -> the args of every candidate
there, make(view, args) -> its Plan (title, kind, edits, and what it must leave unchanged).
Listing (textDocument/codeAction) makes each candidate's plan and keeps the ones whose edited
text re-checks (refactor_check.checks, on the analysis worker); the actions go out without
their edits (when the client resolves edits: every client we know does), carrying `data`
{uri, refactor, args, text}.  codeAction/resolve makes the plan again from the args (cheap:
no re-check, the text being the one it was checked on) and returns it with its
WorkspaceEdit; when the document changed since (another `text` key), the action comes back
without an edit, which the client shows as nothing to do.
"""
from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from lsprotocol import types as lsp

from compiler.core.diagnostics import Span

from ..documents import View
from . import refactor_extract, refactor_inline, refactor_shape
from .refactor_check import Plan, checks

Args = dict[str, Any]
Find = Callable[[View, int, int, list[tuple[int, int, str]]], list[Args]]
Make = Callable[[View, Args], Plan | None]


def _selection(find: Callable[[View, int, int], list[Args]]) -> Find:
    return lambda view, start, end, _diags: find(view, start, end)


REFACTORS: dict[str, tuple[Find, Make]] = {
    "extract": (_selection(refactor_extract.find_extract), refactor_extract.make_extract),
    "split-chain": (_selection(refactor_extract.find_split), refactor_extract.make_split),
    "inline": (_selection(refactor_inline.find_inline), refactor_inline.make_inline),
    "join-chain": (_selection(refactor_inline.find_join), refactor_inline.make_join),
    "shape-fix": (lambda view, _s, _e, diags: refactor_shape.find_fixes(view, diags), refactor_shape.make_fix),
}


def text_key(text: str) -> str:
    """Which text an action was listed for (str hashes are cached: cheap on every request)."""
    return f"{len(text)}:{hash(text) & 0xFFFFFFFFFFFF:x}"


def wanted(kind: str, only: list[str] | None) -> bool:
    return not only or any(kind == k or kind.startswith(k + ".") for k in only)


def candidates(view: View, span: Span, diags: list[lsp.Diagnostic],
               only: list[str] | None) -> list[tuple[str, Args, Plan, list[lsp.Diagnostic]]]:
    """(refactor, args, plan, the diagnostics it fixes) of every refactor that applies at span
    (not yet checked)."""
    spans = [(s.start, s.end, str(d.code)) for d in diags if (s := view.index.span(d.range))]
    out = []
    for name, (find, make) in REFACTORS.items():
        for args in find(view, span.start, span.end, spans):
            plan = make(view, args)
            if plan is None or not wanted(plan.kind, only):
                continue
            fixed = [d for d in diags if plan.expect.fixes is not None
                     and view.index.span(d.range) == plan.expect.fixes.span]
            out.append((name, args, plan, fixed))
    return out


# (text key, refactor, args) -> whether it re-checked: an editor asks for the actions at the
# cursor again and again (each move, each new diagnostic); the text decides the answer
_CHECKED: OrderedDict[tuple[str, str, str], bool] = OrderedDict()
_CHECKED_MAX = 512


def verified(view: View, found: list[tuple[str, Args, Plan, list[lsp.Diagnostic]]]
             ) -> list[tuple[str, Args, Plan, list[lsp.Diagnostic]]]:
    """The candidates whose edited text re-checks (run on the analysis worker)."""
    key = text_key(view.text)
    out = []
    for c in found:
        k = (key, c[0], json.dumps(c[1], sort_keys=True))
        ok = _CHECKED.get(k)
        if ok is None:
            ok = _CHECKED[k] = checks(view.snapshot, c[2].edits, c[2].expect)
            while len(_CHECKED) > _CHECKED_MAX:
                _CHECKED.popitem(last=False)
        if ok:
            out.append(c)
    return out


def to_action(view: View, uri: str, name: str, args: Args, plan: Plan, fixed: list[lsp.Diagnostic],
              lazy: bool) -> lsp.CodeAction:
    action = lsp.CodeAction(title=plan.title, kind=plan.kind, diagnostics=fixed or None,
                            is_preferred=True if plan.kind == "quickfix" else None,
                            data={"uri": uri, "refactor": name, "args": args, "text": text_key(view.text)})
    if not lazy:
        action.edit = workspace_edit(view, uri, plan)
    return action


def workspace_edit(view: View, uri: str, plan: Plan) -> lsp.WorkspaceEdit:
    edits = [lsp.TextEdit(range=view.index.range(Span(s, e)), new_text=new) for s, e, new in plan.edits]
    return lsp.WorkspaceEdit(changes={uri: edits})


def resolve(view: View | None, action: lsp.CodeAction) -> lsp.CodeAction:
    """The action with its edit, when its document still has the text it was listed for."""
    data = action.data if isinstance(action.data, dict) else {}
    row = REFACTORS.get(str(data.get("refactor")))
    args, uri = data.get("args"), data.get("uri")
    if view is None or row is None or not isinstance(args, dict) or not isinstance(uri, str):
        return action
    if data.get("text") != text_key(view.text):
        return action
    plan = row[1](view, args)
    if plan is not None:
        action.edit = workspace_edit(view, uri, plan)
    return action
