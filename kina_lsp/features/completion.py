"""Completion and signature help, from the text before the cursor.

Completion must work on half-typed text that does not parse, so the context
is read from the tokens (compiler.syntax.lex, the grammar's own lexer) of the
enclosing function up to the cursor: which call's parens the cursor is in,
what precedes it.  The candidates come from the op table (compiler.ir.ops), the
dtypes, the grammar's keywords, and the names the function binds before the cursor.

In a size-generic function (`fn f[B, T](..)`), where a size is written (a shape, an
integer list, the sizes of a call `g[B, |](..)`, an integer attribute `stop=|`) only its
size parameters are offered; in expressions they are offered with the other names
(a size is a bare number there).  Signature help shows a generic function's size
parameters, and inside `g[..](` the size being written is the active one.
"""
from __future__ import annotations

from dataclasses import dataclass

from lark import Token
from lsprotocol import types as lsp

from compiler.core.types import DType
from compiler.ir.nodes import HANDLERS
from compiler.ir.ops import SURFACE_OPS, OpDef
from compiler.syntax import lex

from ..items import split_items  # incremental: an edit re-splits one item

# The words offered as keywords: the grammar's, and the effect handlers (`with reverseMode`).
KEYWORDS = tuple(sorted(lex.KEYWORDS)) + HANDLERS
_CLOSERS, _OPENERS = {"RPAR", "RSQB", "RBRACE"}, {"LSQB", "LBRACE"}
_RECEIVER_END = {"NAME", "RPAR", "RSQB", "RBRACE"}      # what `.method` can follow


@dataclass
class CallContext:
    name: str               # the op or function being called
    method: bool            # `x.name(` (receiver is operand 0) vs `name(`
    arg_index: int          # which comma-separated argument the cursor is in
    segment: list[Token]    # tokens of that argument up to the cursor
    args: list[Token]       # tokens of every argument up to the cursor


def function_window(text: str, offset: int) -> str:
    """Text from the start of the enclosing top-level item (item_split.split_items) to the cursor."""
    starts = [it.start for it in split_items(text) if it.start < offset]
    return text[starts[-1] if starts else 0:offset]


def call_context(tokens: list[Token]) -> CallContext | None:
    """The innermost call whose `(` is still open at the end of `tokens`."""
    depth, commas, segment_start = 0, 0, None
    for i in range(len(tokens) - 1, -1, -1):
        kind = tokens[i].type
        if kind in _CLOSERS:
            depth += 1
        elif kind in _OPENERS:
            if depth == 0:
                return None  # inside a list or literal, not directly in a call
            depth -= 1
        elif kind == "LPAR":
            if depth > 0:
                depth -= 1
                continue
            callee = _callee(tokens, i)
            if callee is None:
                return None
            method = callee >= 1 and tokens[callee - 1].type == "DOT"
            first = i + 1 if segment_start is None else segment_start
            return CallContext(str(tokens[callee]), method, commas, tokens[first:], tokens[i + 1:])
        elif kind == "COMMA" and depth == 0:
            commas += 1
            segment_start = i + 1 if segment_start is None else segment_start
    return None


def _callee(tokens: list[Token], paren: int) -> int | None:
    """The index of the called name before the `(` at tokens[paren]: `f(`, or `f[8, B](`
    (the explicit sizes of a generic call), else None."""
    i = paren - 1
    if i >= 0 and tokens[i].type == "RSQB":
        depth = 0
        while i >= 0:
            depth += {"RSQB": 1, "LSQB": -1}.get(tokens[i].type, 0)
            if depth == 0:
                break
            i -= 1
        i -= 1
    return i if i >= 0 and tokens[i].type == "NAME" else None


def _keyword_attr(segment: list[Token]) -> str | None:
    """The attribute name of a segment that starts `name =`."""
    return str(segment[0]) if len(segment) >= 2 and segment[0].type == "NAME" and segment[1].type == "EQUAL" else None


def size_params(tokens: list[Token]) -> list[str]:
    """The size parameters a function's tokens declare: the names of `fn f[B, T]`."""
    if len(tokens) < 3 or [t.type for t in tokens[:3]] != ["FN", "NAME", "LSQB"]:
        return []
    out: list[str] = []
    for t in tokens[3:]:
        if t.type not in ("NAME", "COMMA"):
            break
        if t.type == "NAME" and str(t) not in out:
            out.append(str(t))
    return out


def _innermost_open(tokens: list[Token]) -> tuple[int, int] | None:
    """(index of the innermost bracket or parenthesis still open at the end of `tokens`,
    commas at its own level after it), or None when every one is closed."""
    depth, commas = 0, 0
    for i in range(len(tokens) - 1, -1, -1):
        kind = tokens[i].type
        if kind in _CLOSERS:
            depth += 1
        elif kind in _OPENERS or kind == "LPAR":
            if not depth:
                return i, commas
            depth -= 1
        elif kind == "COMMA" and depth == 0:
            commas += 1
    return None


def in_size_list(tokens: list[Token]) -> bool:
    """Whether the innermost open bracket is a list of sizes: a shape `[B, |`, an integer
    list `x.reshape([|`, the sizes of a call `g[|` (not `Tensor[|`, not `fn f[|`)."""
    found = _innermost_open(tokens)
    if found is None or tokens[found[0]].type != "LSQB" or found[0] == 0:
        return False
    i = found[0]
    prev = tokens[i - 1].type
    return prev != "TENSOR" and not (prev == "NAME" and i >= 2 and tokens[i - 2].type == "FN")


def _declaring_sizes(tokens: list[Token]) -> bool:
    """`fn f[B, |`: the size parameters of a header are being written."""
    for i in range(len(tokens) - 1, -1, -1):
        if tokens[i].type not in ("NAME", "COMMA"):
            return tokens[i].type == "LSQB" and i >= 2 and [t.type for t in tokens[i - 2:i]] == ["FN", "NAME"]
    return False


def _size_items(sizes: list[str]) -> list[lsp.CompletionItem]:
    return [lsp.CompletionItem(label=n, kind=lsp.CompletionItemKind.TypeParameter, detail="size parameter",
                               sort_text="0" + n) for n in sizes]


def _scope_names(tokens: list[Token]) -> list[tuple[str, str]]:
    """(name, what) for size parameters, parameters and lets bound before the cursor."""
    names = [(n, "size parameter") for n in size_params(tokens)]
    body = next((i for i, t in enumerate(tokens) if t.type == "LBRACE"), len(tokens))
    paren = next((i for i, t in enumerate(tokens[:body]) if t.type == "LPAR"), body)
    names += [(str(t), "parameter") for t, nxt in zip(tokens[paren:body], tokens[paren + 1:body])
              if t.type == "NAME" and nxt.type == "COLON"]    # in a header only parameters are written `name:`
    ins = [i for i, t in enumerate(tokens) if t.type == "IN"]
    for i in range(body, len(tokens)):
        if tokens[i].type != "LET":
            continue
        bound = _pattern_names(tokens, i + 1)
        # a let binds its names only in its body: after the `in` that ends its value
        # (`let c = |` must not offer `c`; Kina lets do not nest inside a value)
        if ins and ins[-1] > i:
            names += [(n, "let") for n in bound]
    seen, out = set(), []
    for n, what in names:
        if n not in seen and n not in DType.__members__:
            seen.add(n)
            out.append((n, what))
    return out


def _pattern_names(tokens: list[Token], i: int) -> list[str]:
    """The names of the let pattern starting at tokens[i]: `x` or `(a, b)`."""
    if i < len(tokens) and tokens[i].type == "NAME":
        return [str(tokens[i])]
    if i >= len(tokens) or tokens[i].type != "LPAR":
        return []
    out = []
    for t in tokens[i + 1:]:
        if t.type not in ("NAME", "COMMA"):
            break
        if t.type == "NAME":
            out.append(str(t))
    return out


def _op_item(op: OpDef, kind: lsp.CompletionItemKind) -> lsp.CompletionItem:
    return lsp.CompletionItem(label=op.name, kind=kind, detail=op.rule,
                              documentation=op.doc, sort_text="1" + op.name)


def _method_ops() -> list[OpDef]:
    # infix ops are written with their operator; every other op with an operand has a method form
    return [op for op in SURFACE_OPS.values() if op.infix is None and op.operands != 0]


def _free_ops() -> list[OpDef]:
    # free form `op(x, ...)`: every op without an operator, including builders such as iota
    return [op for op in SURFACE_OPS.values() if op.infix is None]


def _word_at_end(tokens: list[Token], end: int) -> bool:
    return bool(tokens) and tokens[-1].type in lex.WORDS and lex.end(tokens[-1]) == end


def _after_dot(tokens: list[Token], window: str) -> bool:
    """`receiver.` on the cursor's line (a method is wanted), not the `1.` of a number being typed."""
    if not tokens or tokens[-1].type != "DOT" or "\n" in window[lex.end(tokens[-1]):]:
        return False
    if len(tokens) == 1:
        return True
    prev = tokens[-2]
    return prev.type in _RECEIVER_END or ("\n" in window[lex.end(prev):lex.start(tokens[-1])]
                                          and prev.type not in lex.NUMBERS)


def complete(text: str, offset: int, functions: list[str]) -> list[lsp.CompletionItem]:
    window = function_window(text, offset)
    all_tokens = lex.tokens(window, comments=True)
    if all_tokens and all_tokens[-1].type == lex.COMMENT and lex.end(all_tokens[-1]) == len(window):
        return []                                  # the cursor is in a comment
    tokens = [t for t in all_tokens if t.type != lex.COMMENT]
    before = tokens[:-1] if _word_at_end(tokens, len(window)) else tokens     # without the word being typed
    if [t.type for t in before[-2:]] == ["TENSOR", "LSQB"]:
        return [lsp.CompletionItem(label=d.value, kind=lsp.CompletionItemKind.TypeParameter,
                                   detail="floating" if d.is_float else "discrete (no cotangent)")
                for d in DType]
    if _after_dot(before, window):
        return [_op_item(op, lsp.CompletionItemKind.Method) for op in _method_ops()]
    sizes = size_params(tokens)
    if _declaring_sizes(before):
        return []                                  # `fn f[B, |`: a new name is being written
    if sizes and in_size_list(before):
        return _size_items(sizes)
    call = call_context(tokens)
    items: list[lsp.CompletionItem] = []
    if call is not None and call.name in SURFACE_OPS and (call.method or call.name not in functions):
        op = SURFACE_OPS[call.name]
        attr = _keyword_attr(call.segment)
        if attr is not None and (len(call.segment) == 2 or (len(call.segment) == 3 and _word_at_end(call.segment, len(window)))):
            spec = op.attr(attr)
            if spec is None:
                return []
            if spec.kind == "int" and sizes:     # `stop=T`, `stop=T - 1`
                return _size_items(sizes)
            return [lsp.CompletionItem(label=c, kind=lsp.CompletionItemKind.EnumMember,
                                       detail=f"{op.name}.{spec.name}") for c in spec.choices]
        given = {str(t) for t, nxt in zip(call.args, call.args[1:]) if t.type == "NAME" and nxt.type == "EQUAL"}
        items += [lsp.CompletionItem(label=a.name, kind=lsp.CompletionItemKind.Property,
                                     insert_text=a.name + "=", sort_text="0" + a.name,
                                     detail=a.shown)
                  for a in op.attrs if a.name not in given]
    items += [lsp.CompletionItem(label=n, kind=lsp.CompletionItemKind.TypeParameter if what == "size parameter"
                                 else lsp.CompletionItemKind.Variable, detail=what, sort_text="0" + n)
              for n, what in _scope_names(tokens)]
    items += [lsp.CompletionItem(label=f, kind=lsp.CompletionItemKind.Function, sort_text="2" + f)
              for f in functions]
    # a user function shadows the op's free form (docs/language.md §4), so the op is not offered there
    items += [_op_item(op, lsp.CompletionItemKind.Function) for op in _free_ops() if op.name not in functions]
    items += [lsp.CompletionItem(label=k, kind=lsp.CompletionItemKind.Keyword, sort_text="3" + k)
              for k in KEYWORDS]
    return items


def function_names(text: str) -> list[str]:
    return list(dict.fromkeys(it.name for it in split_items(text) if it.name))


# ---- signature help -------------------------------------------------------------
def size_call_context(tokens: list[Token]) -> tuple[str, int] | None:
    """(function, index of the size being written) inside the sizes of a call, `g[8, |`."""
    found = _innermost_open(tokens)
    if found is None:
        return None
    i, commas = found
    ok = tokens[i].type == "LSQB" and i >= 1 and tokens[i - 1].type == "NAME" and \
        not (i >= 2 and tokens[i - 2].type in ("FN", "DOT"))
    return (str(tokens[i - 1]), commas) if ok else None


def _offsets(label: str, parts: list[str], start: int) -> list[tuple[int, int]]:
    """[start, end) of each part in label, found in order from start."""
    out = []
    for p in parts:
        at = label.find(p, start)
        if at < 0:
            at = start
        out.append((at, at + len(p)))
        start = at + len(p)
    return out


def signature_help(text: str, offset: int, user_signatures: dict[str, tuple[str, list[str]]],
                   user_sizes: dict[str, list[str]] | None = None) -> lsp.SignatureHelp | None:
    """`user_signatures`: name -> (label, parameter labels) of the user functions;
    `user_sizes`: name -> size parameters of the generic ones (their label is
    `f[B, T](x: ..)`, and the sizes come first in the parameters)."""
    tokens = lex.tokens(function_window(text, offset))
    sizes_of = user_sizes or {}
    in_sizes = size_call_context(tokens)
    if in_sizes is not None and in_sizes[0] in user_signatures and sizes_of.get(in_sizes[0]):
        return _user_help(in_sizes[0], user_signatures[in_sizes[0]], sizes_of[in_sizes[0]], in_sizes[1])
    call = call_context(tokens)
    if call is None:
        return None
    if call.name in SURFACE_OPS and (call.method or call.name not in user_signatures):
        op = SURFACE_OPS[call.name]
        label, params = op.signature(call.method)
        doc = f"{op.rule}\n\n{op.doc}"
    elif call.name in user_signatures:
        sizes = sizes_of.get(call.name, [])
        if sizes:
            params = user_signatures[call.name][1]
            return _user_help(call.name, user_signatures[call.name], sizes,
                              len(sizes) + min(call.arg_index, max(0, len(params) - 1)))
        label, params = user_signatures[call.name]
        doc = None
    else:
        return None
    active = min(call.arg_index, max(0, len(params) - 1))
    attr = _keyword_attr(call.segment)
    if attr is not None:  # a keyword argument selects its attribute, wherever it is written
        active = next((i for i, p in enumerate(params) if p.startswith(attr + "=")), active)
    info = lsp.SignatureInformation(
        label=label, documentation=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value=doc) if doc else None,
        parameters=[lsp.ParameterInformation(label=p) for p in params])
    return lsp.SignatureHelp(signatures=[info], active_signature=0, active_parameter=active)


def _user_help(name: str, sig: tuple[str, list[str]], sizes: list[str], active: int) -> lsp.SignatureHelp:
    """A generic function's help: its size parameters, then its parameters, as label offsets
    (a size `M` is also a letter of other parts of the label)."""
    label, params = sig
    bracket = label.find("[", len(name))
    paren = label.find("(", bracket if bracket >= 0 else len(name))
    spans = _offsets(label, sizes, bracket + 1) + _offsets(label, params, paren + 1)
    doc = f"size-generic: {', '.join(sizes)} are fixed at each call, inferred from the arguments' shapes " \
          f"or written `{name}[{', '.join(sizes)}](..)`"
    info = lsp.SignatureInformation(label=label, documentation=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown,
                                                                                   value=doc),
                                    parameters=[lsp.ParameterInformation(label=s) for s in spans])
    return lsp.SignatureHelp(signatures=[info], active_signature=0,
                             active_parameter=min(active, max(0, len(spans) - 1)))
