"""Completion and signature help, from the text before the cursor.

Completion must work on half-typed text that does not parse, so the context
is read lexically from the enclosing function's text (which call's parens the
cursor is in, what precedes it), and the candidates come from the op table
(compiler.ops), the dtypes, and the names the function binds before the cursor.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from lsprotocol import types as lsp

from compiler.ops import SURFACE_OPS, OpDef
from compiler.types import DType

KEYWORDS = ("fn", "let", "in", "handle", "with", "Tensor", "reverseMode")
_FN_HEADER = re.compile(r"(?m)^[ \t]*fn[ \t]+([A-Za-z_]\w*)")
_LET = re.compile(r"\blet\s+(?:\(([^)]*)\)|([A-Za-z_]\w*))")
_PARAM = re.compile(r"([A-Za-z_]\w*)\s*:")
_IN = re.compile(r"\bin\b")
_CALLEE = re.compile(r"(\.)?\s*([A-Za-z_]\w*)\s*$")


@dataclass
class CallContext:
    name: str               # the op or function being called
    method: bool            # `x.name(` (receiver is operand 0) vs `name(`
    arg_index: int          # which comma-separated argument the cursor is in
    segment: str            # text of that argument up to the cursor
    args: str               # text of every argument up to the cursor


def function_window(text: str, offset: int) -> str:
    """Text from the start of the enclosing `fn` to the cursor."""
    starts = [m.start() for m in _FN_HEADER.finditer(text, 0, offset)]
    return text[starts[-1] if starts else 0:offset]


def call_context(before: str) -> CallContext | None:
    """The innermost call whose `(` is still open before the cursor."""
    depth, commas = 0, 0
    for i in range(len(before) - 1, -1, -1):
        ch = before[i]
        if ch in ")]}":
            depth += 1
        elif ch in "[{":
            if depth == 0:
                return None  # inside a list or literal, not directly in a call
            depth -= 1
        elif ch == "(":
            if depth > 0:
                depth -= 1
                continue
            m = _CALLEE.search(before, 0, i)
            if m is None:
                return None
            seg_start = max(before.rfind(",", i), i) + 1
            return CallContext(m.group(2), bool(m.group(1)), commas, before[seg_start:], before[i + 1:])
        elif ch == "," and depth == 0:
            commas += 1
        elif ch == "{" or ch == ";":
            return None
    return None


def _scope_names(window: str) -> list[tuple[str, str]]:
    """(name, what) for parameters and lets bound before the cursor."""
    names = []
    header_end = window.find("{")
    header = window[:header_end] if header_end >= 0 else window
    paren = header.find("(")
    if paren >= 0:  # in a header only parameters are written `name:`
        names += [(m.group(1), "parameter") for m in _PARAM.finditer(header, paren)]
    if header_end >= 0:
        for m in _LET.finditer(window, header_end):
            # a let binds its names only in its body: after the `in` that ends its value
            # (`let c = |` must not offer `c`; Kina lets do not nest inside a value)
            if not _IN.search(window, m.end()):
                continue
            for n in (m.group(1) or m.group(2)).split(","):
                if n.strip():
                    names.append((n.strip(), "let"))
    seen, out = set(), []
    for n, what in names:
        if n not in seen and n not in DType.__members__:
            seen.add(n)
            out.append((n, what))
    return out


def _op_item(op: OpDef, kind) -> lsp.CompletionItem:
    return lsp.CompletionItem(label=op.name, kind=kind, detail=op.rule,
                              documentation=op.doc, sort_text="1" + op.name)


def _method_ops():
    # infix ops are written with their operator; every other op with an operand has a method form
    return [op for op in SURFACE_OPS.values() if op.infix is None and op.operands != 0]


def _free_ops():
    # free form `op(x, ...)`: every op without an operator, including builders such as iota
    return [op for op in SURFACE_OPS.values() if op.infix is None]


def complete(text: str, offset: int, functions: list[str]) -> list[lsp.CompletionItem]:
    window = function_window(text, offset)
    line = window[window.rfind("\n") + 1:]
    if re.search(r"Tensor\s*\[\s*\w*$", line):
        return [lsp.CompletionItem(label=d.value, kind=lsp.CompletionItemKind.TypeParameter,
                                   detail="floating" if d.is_float else "discrete (no cotangent)")
                for d in DType]
    if re.search(r"(?:[\w)\]]|^)\s*\.\s*\w*$", line) and not re.search(r"\d\.\w*$", line):
        return [_op_item(op, lsp.CompletionItemKind.Method) for op in _method_ops()]
    call = call_context(window)
    items: list[lsp.CompletionItem] = []
    if call is not None and call.name in SURFACE_OPS:
        op = SURFACE_OPS[call.name]
        m = re.match(r"\s*([A-Za-z_]\w*)\s*=\s*(\w*)$", call.segment)
        if m:
            spec = op.attr(m.group(1))
            return [lsp.CompletionItem(label=c, kind=lsp.CompletionItemKind.EnumMember,
                                       detail=f"{op.name}.{spec.name}")
                    for c in (spec.choices if spec else ())]
        given = set(re.findall(r"([A-Za-z_]\w*)\s*=", call.args))
        items += [lsp.CompletionItem(label=a.name, kind=lsp.CompletionItemKind.Property,
                                     insert_text=a.name + "=", sort_text="0" + a.name,
                                     detail=a.shown)
                  for a in op.attrs if a.name not in given]
    items += [lsp.CompletionItem(label=n, kind=lsp.CompletionItemKind.Variable, detail=what, sort_text="0" + n)
              for n, what in _scope_names(window)]
    items += [lsp.CompletionItem(label=f, kind=lsp.CompletionItemKind.Function, sort_text="2" + f)
              for f in functions]
    items += [_op_item(op, lsp.CompletionItemKind.Function) for op in _free_ops()]
    items += [lsp.CompletionItem(label=k, kind=lsp.CompletionItemKind.Keyword, sort_text="3" + k)
              for k in KEYWORDS]
    return items


def function_names(text: str) -> list[str]:
    return list(dict.fromkeys(_FN_HEADER.findall(text)))


# ---- signature help -------------------------------------------------------------
def _op_signature(op: OpDef, method: bool) -> tuple[str, list[str]]:
    n = op.operands if op.operands >= 0 else 2
    operands = [f"x{i}" if n > 1 else "x" for i in range(n)]
    if op.operands < 0:
        operands.append("...")
    method = method and bool(operands)        # a builder (iota) has no receiver
    params = operands[1:] if method else operands
    params += [f"{a.name}={a.shown}" for a in op.attrs]
    prefix = f"{operands[0]}.{op.name}(" if method else f"{op.name}("
    return prefix + ", ".join(params) + ")", params


def signature_help(text: str, offset: int, user_signatures: dict[str, tuple[str, list[str]]]):
    call = call_context(function_window(text, offset))
    if call is None:
        return None
    if call.name in SURFACE_OPS:
        op = SURFACE_OPS[call.name]
        label, params = _op_signature(op, call.method)
        doc = f"{op.rule}\n\n{op.doc}"
    elif call.name in user_signatures:
        label, params = user_signatures[call.name]
        doc = None
    else:
        return None
    active = min(call.arg_index, max(0, len(params) - 1))
    m = re.match(r"\s*([A-Za-z_]\w*)\s*=", call.segment)
    if m:  # a keyword argument selects its attribute, wherever it is written
        active = next((i for i, p in enumerate(params) if p.startswith(m.group(1) + "=")), active)
    info = lsp.SignatureInformation(
        label=label, documentation=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value=doc) if doc else None,
        parameters=[lsp.ParameterInformation(label=p) for p in params])
    return lsp.SignatureHelp(signatures=[info], active_signature=0, active_parameter=active)
