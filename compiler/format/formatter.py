"""Format: Kina source -> the same program in the one Kina style (`kinac fmt`).

The text is parsed (a file with a syntax error is refused with its located
diagnostics), each function is printed from its AST through compiler/format/layout.py
within 100 columns, and the `//` comments are woven back in by position:

- the AST says what is printed; the source gives only the spelling of numbers
  (`1e-3` stays `1e-3`) and where each comment and blank line was;
- a comment alone on its line stays alone on its line, before the token that
  followed it; a comment after code on the same line ("trailing") stays at the
  end of the line of the token it followed, and that line ends right after it;
- blank lines are kept (at most one) between the links of a let chain and
  between top-level items and comments; functions are separated by one blank line.

The style (docs/language.md, "Formatting"): two-space indentation, one `let`
per line, spaces around binary operators and after commas, none inside
brackets (`[1, 4]`) or around `=` of attributes (`axis=1`); parentheses only
where precedence needs them (and around a `handle` used as a receiver); a list
that does not fit puts one item per line with a trailing comma; a method chain
of two or more calls that does not fit puts one `.call(...)` per line; tensor
literal values fill their lines.

Every result is checked before it is returned: it must parse to the same AST
(modulo spans) and hold the same comments in the same order, else FormatError
(an internal error; nothing is written).  Formatting twice changes nothing more
(tests/test_format.py checks that, with hypothesis-generated programs).
"""
from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import fields, is_dataclass
from typing import TypeVar

from compiler.core.diagnostics import BOM, Diagnostic, Span
from compiler.format import imports, layout
from compiler.format.comments import Emitter, Spanned
from compiler.syntax import nodes as ast
from compiler.syntax.items import gaps, split_items
from compiler.syntax.parse import parse_local
from compiler.syntax.walk import SPINE, children, shift, spine

WIDTH = 100
INDENT = 2

_COMMENT = re.compile(r"//[^\n]*")
_PREC = {"+": 1, "-": 1, "*": 2, "/": 2, "@": 3}
_NEG, _POSTFIX, _ATOM = 4, 5, 6
# `x.op(..)`, and `x.name` (a field access, printed for its diagnostic)
_POSTFIX_NODES = (ast.MethodCall, ast.Field)
_Item = TypeVar("_Item", bound=Spanned)
_V = TypeVar("_V")


class FormatError(Exception):
    """The text cannot be formatted: its syntax errors (or an internal check failed)."""

    def __init__(self, message: str, diagnostics: list[Diagnostic] | None = None) -> None:
        super().__init__(message)
        self.diagnostics = diagnostics or []


def comments_of(text: str) -> list[str]:
    """The comments of a text, in order (Kina has no strings, so `//` always starts one)."""
    return [m.group().rstrip() for m in _COMMENT.finditer(text)]



# ---- the printer -------------------------------------------------------------------------
class _Formatter(Emitter):
    _size_parens = 0    # the source's `(` skipped inside the size expression being printed

    def module(self, module: ast.Module) -> None:
        self.structural = self._structural_opens(module)
        for i, fn in enumerate(module.functions):
            if i:
                self.brk(layout.HARD)
                self.b.add(layout.BLANK)
            self.function(fn)
        self.finish()

    # -- items and types
    def function(self, fn: ast.FnDef) -> None:
        self.tok("fn", fn.span.start, blank_ok=True)
        self.space()
        self.tok(fn.name, fn.name_span.start)
        with self.b.group():
            pos = self.size_params(fn)
            # the parameters break when `(params) -> type {` does not fit, never the
            # return type's shape list while the parameters stay on one line
            pos = self.bracketed(fn.params, self.param, pos, grouped=False)
            self.space()
            pos = self.expect("->", pos)
            self.space()
            self.type_expr(fn.ret)
        self.space()
        self.tok("{", self.find("{", fn.ret.span.end))
        close = fn.span.end - 1
        with self.b.indent(INDENT):
            self.brk(layout.HARD)
            self.chain(fn.body)
            self.dangling(close, blank_ok=True)
        self.brk(layout.HARD)
        self.tok("}", close)

    def size_params(self, fn: ast.FnDef) -> int:
        """`[B, T]` of a size-generic function; the offset where its parameter list is looked for."""
        if not fn.sizes:
            return fn.name_span.end

        def name(p: ast.SizeParam, pos: int) -> int:
            self.tok(p.name, p.span.start)
            return p.span.end
        return self.square(fn.sizes, name, fn.name_span.end)

    def param(self, p: ast.Param) -> None:
        self.tok(p.name, p.name_span.start)
        self.expect(":", p.name_span.end)
        self.space()
        self.type_expr(p.type)

    def type_expr(self, t: ast.TypeExpr) -> None:
        if isinstance(t, ast.TupleTypeExpr):
            self.bracketed(t.items, self.type_expr, t.span.start, one_comma=len(t.items) == 1)
            return
        self.tok("Tensor", t.span.start)
        pos = self.expect("[", t.span.start + len("Tensor"))
        pos = self.expect(t.dtype, pos)
        pos = self.expect(",", pos)
        self.space()
        pos = self.int_list(t.shape, pos)
        if t.placement is not None:
            pos = self.expect(",", pos)
            self.space()
            pos = self.expect("@", pos)
            pos = self.expect(t.placement, pos)
        self.expect("]", pos)

    def bracketed(self, items: Sequence[_Item], each: Callable[[_Item], None], after: int, one_comma: bool = False,
                  end_of: Callable[[_Item], int] | None = None, grouped: bool = True) -> int:
        """`(items)` in a group: flat, or one item per line with a trailing comma.  `after`:
        where the opening bracket is looked for.  Returns the offset after the closer.
        grouped=False: its breaks belong to the enclosing group (a signature's, so that
        whether the parameters break is decided with the return type on the same line)."""
        end = end_of or self.end_of
        at = self.find("(", after)
        pos = at + 1 if at is not None else after
        with self.b.group() if grouped else contextlib.nullcontext():
            self.tok("(", at)
            with self.b.indent(INDENT):
                if items:
                    self.brk(layout.SOFT)
                for i, item in enumerate(items):
                    each(item)
                    pos = max(pos, end(item))
                    comma = self.find(",", pos)
                    if i + 1 < len(items):
                        self.tok(",", comma)
                        self.brk(layout.LINE)
                    elif one_comma:
                        self.tok(",", comma)
                    else:
                        self.skip(comma)
                        self.b.add(layout.IfBreak(","))
                    if comma is not None:
                        pos = comma + 1
                closing = self.find(")", pos)
                if closing is not None:
                    self.dangling(closing)
            if items:
                self.brk(layout.SOFT)
            self.tok(")", closing)
        return closing + 1 if closing is not None else pos

    def end_of(self, node: Spanned) -> int:
        if isinstance(node, (ast.Param, ast.Attr, ast.TensorTypeExpr, ast.TupleTypeExpr)):
            return node.span.end
        return self.outer(node)[1]

    def _structural_opens(self, module: ast.Module) -> set[int]:
        """Offsets of the `(` that are not grouping parentheses (see Emitter.outer)."""
        opens: set[int | None] = set()
        stack: list[ast.Expr | ast.FnDef | ast.TypeExpr] = list(module.functions)
        while stack:
            node = stack.pop()
            if isinstance(node, ast.FnDef):
                opens.add(self.find("(", self._after_size_params(node)))
                stack += [p.type for p in node.params] + [node.ret, node.body]
            elif isinstance(node, ast.Let):
                if node.destructure:
                    opens.add(self.find("(", node.span.start + 3))
                stack += [node.value, node.body]
            elif isinstance(node, (ast.TupleExpr, ast.TupleTypeExpr)):
                opens.add(node.span.start)
                stack += node.items
            elif isinstance(node, (ast.Call, ast.MethodCall)):
                name = node.func_span if isinstance(node, ast.Call) else node.method_span
                sizes = node.sizes if isinstance(node, ast.Call) else None
                opens.add(self.find("(", sizes.span.end if sizes is not None else name.end))
                stack += [*node.args, *(c for c in children(node) if c not in node.args)]
            else:
                stack += children(node)
        return {o for o in opens if o is not None}

    def _after_size_params(self, fn: ast.FnDef) -> int:
        """The source offset after the `]` of `fn f[B, T]` (the name's end without sizes)."""
        if not fn.sizes:
            return fn.name_span.end
        pos = fn.sizes[-1].span.end
        comma = self.find(",", pos)
        pos = comma + 1 if comma is not None else pos
        closing = self.find("]", pos)
        return closing + 1 if closing is not None else pos

    def int_list(self, values: Sequence[ast.SizeExpr], pos: int) -> int:
        """`[1, 2]`, `[B * T, D]` (a group: one value per line if it ever gets that long)."""
        return self.square(values, self.size, pos)

    def square(self, values: Sequence[_V], each: Callable[[_V, int], int], pos: int) -> int:
        """`[a, b]` in a group: flat, or one value per line with a trailing comma.  `each`
        prints a value found in the source at or after an offset and returns the offset
        after it; `pos`: where the `[` is looked for.  Returns the offset after the `]`."""
        at = self.find("[", pos)
        pos = at + 1 if at is not None else pos
        with self.b.group():
            self.tok("[", at)
            with self.b.indent(INDENT):
                if values:
                    self.brk(layout.SOFT)
                for i, v in enumerate(values):
                    pos = each(v, pos)
                    comma = self.find(",", pos)
                    if i + 1 < len(values):
                        self.tok(",", comma)
                        self.brk(layout.LINE)
                    else:
                        self.skip(comma)
                        self.b.add(layout.IfBreak(","))
                    if comma is not None:
                        pos = comma + 1
                closing = self.find("]", pos)
                if closing is not None:
                    self.dangling(closing)
            if values:
                self.brk(layout.SOFT)
            self.tok("]", closing)
        return closing + 1 if closing is not None else pos

    def size(self, e: ast.SizeExpr, pos: int) -> int:
        """A size expression (`B * (T + 1)`), found in the source at or after pos; returns the
        offset after it.  Parentheses are printed where the tree needs them (both operands of
        a left-associative operator, as the parser reads them), the source's are dropped (their
        comments go with the next token printed, as for the parentheses of expressions)."""
        self._size_parens = 0
        return self._size(e, pos, 0)

    def _size(self, e: ast.SizeExpr, pos: int, need: int) -> int:
        if isinstance(e, ast.SizeBin):     # a left-associative run of one level, as binop
            level = _PREC[e.op]
            run: list[ast.SizeBin] = []
            node: ast.SizeExpr = e
            while isinstance(node, ast.SizeBin) and _PREC[node.op] == level:
                run.append(node)
                node = node.lhs
            run.reverse()
            if level < need:
                self.tok("(")
            with self.b.group():
                pos = self._size(node, pos, level)
                with self.b.indent(INDENT):
                    for op in run:
                        self.brk(layout.LINE)
                        pos = self.expect(op.op, pos)
                        self.space()
                        pos = self._size(op.rhs, pos, level + 1)
            if level < need:
                self.tok(")")
            return pos
        while (at := self.find("(", pos)) is not None:   # the source's parentheses around an atom
            self._size_parens += 1
            pos = at + 1
        if isinstance(e, ast.SizeName):
            self.tok(e.id, e.span.start)
            pos = e.span.end
        else:
            pos = self.value(e, pos)
        while self._size_parens and (at := self.find(")", pos)) is not None:
            self._size_parens -= 1
            pos = at + 1
        return pos

    def value(self, v: int | float, pos: int, blank_ok: bool = False) -> int:
        """A number (of a list, a literal or an attribute) spelled as in the source at pos."""
        hit = self.number_at(pos)
        if hit is None or float(hit[2]) != abs(v):     # (`-0` is the integer 0: no sign)
            self.tok(_number_text(v))
            return pos
        at, end, digits, _ = hit
        self.tok(("-" if _negative(v) else "") + digits, at, end, blank_ok=blank_ok)
        return end

    # -- the body
    def chain(self, node: ast.Expr) -> None:
        first = True
        while isinstance(node, ast.Let):
            if not first:
                self.brk(layout.HARD)
            first = False
            self.let(node)
            node = node.body
        if not first:
            self.brk(layout.HARD)
        self.expr(node, 0, blank_ok=True)
        self.last_end = max(self.last_end, self.outer(node)[1])   # blank lines before the `}` count from here

    def let(self, let: ast.Let) -> None:
        self.tok("let", let.span.start, blank_ok=True)
        self.space()
        if let.destructure:
            pos = self.bracketed(let.names, lambda n: self.tok(n.id, n.span.start), let.span.start + 3,
                                 end_of=lambda n: n.span.end)
        else:
            self.tok(let.names[0].id, let.names[0].span.start)
            pos = let.names[0].span.end
        self.space()
        self.expect("=", pos)
        self.space()
        self.expr(let.value, 0)
        self.space()
        self.expect("in", self.outer(let.value)[1])
        self.last_end = max(self.last_end, self.outer(let.value)[1])

    # -- expressions
    def expr(self, e: ast.Expr, need: int, blank_ok: bool = False) -> None:
        """Print e; in parentheses when its precedence is below `need`."""
        if _prec(e) < need:
            op, cl = self.parens_of(e)
            if op is None:
                self.lead(self.outer(e)[0], blank_ok)
            self.tok("(", op, blank_ok=blank_ok)
            self.expr(e, 0)
            self.tok(")", cl)
            return
        if isinstance(e, ast.Name):
            self.tok(e.id, e.span.start, blank_ok=blank_ok)
        elif isinstance(e, ast.Number):
            self.value(e.value, e.span.start, blank_ok)
        elif isinstance(e, ast.IntList):
            if blank_ok:
                self.lead(e.span.start, blank_ok=True)
            self.int_list(e.values, e.span.start)
        elif isinstance(e, ast.BinOp):
            self.binop(e, blank_ok)
        elif isinstance(e, ast.Neg):
            self.tok("-", e.span.start, blank_ok=blank_ok)
            self.expr(e.operand, _POSTFIX)
        elif isinstance(e, _POSTFIX_NODES):
            self.method_chain(e, blank_ok)
        elif isinstance(e, ast.Call):
            self.call(e, blank_ok)
        elif isinstance(e, ast.Handle):
            self.tok("handle", e.span.start, blank_ok=blank_ok)
            self.space()
            self.call(e.call)
            self.space()
            self.expect("with", e.call.span.end)
            self.space()
            self.tok(e.handler, e.handler_span.start)
        elif isinstance(e, ast.TensorLit):
            self.tensor_lit(e, blank_ok)
        elif isinstance(e, ast.TupleExpr):
            if blank_ok:
                self.lead(e.span.start, blank_ok=True)
            self.bracketed(e.items, lambda x: self.expr(x, 0), e.span.start, one_comma=len(e.items) == 1)
        else:
            raise FormatError(f"internal error: no layout for {type(e).__name__}")

    def binop(self, e: ast.BinOp, blank_ok: bool) -> None:
        """A left-associative run of one precedence level: `a + b - c` breaks before each operator."""
        level = _PREC[e.op]
        rest: list[ast.BinOp] = []
        node: ast.Expr = e
        while isinstance(node, ast.BinOp) and _PREC[node.op] == level:
            rest.append(node)
            node = node.lhs
        rest.reverse()
        with self.b.group():
            self.expr(node, level, blank_ok)
            with self.b.indent(INDENT):
                for op in rest:
                    self.brk(layout.LINE)
                    self.tok(op.op, op.op_span.start)
                    self.space()
                    self.expr(op.rhs, level + 1)

    def method_chain(self, e: ast.MethodCall | ast.Field, blank_ok: bool) -> None:
        """`x.a(..).b(..)`: two or more calls that do not fit go one per line (a field
        access `x.T`, which the checker rejects, is a link without arguments)."""
        calls: list[ast.MethodCall | ast.Field] = []
        receiver: ast.Expr = e
        while isinstance(receiver, _POSTFIX_NODES):
            calls.append(receiver)
            receiver = receiver.receiver
        calls.reverse()
        with self.b.group():
            # a `handle` receiver is parenthesised: `(handle f(x) with reverseMode).m()` reads right
            self.expr(receiver, _ATOM if isinstance(receiver, ast.Handle) else _POSTFIX, blank_ok)
            with self.b.indent(INDENT):
                for call in calls:
                    if len(calls) > 1:
                        self.brk(layout.SOFT)
                    self.expect(".", self.outer(call.receiver)[1])
                    if isinstance(call, ast.MethodCall):
                        self.tok(call.method, call.method_span.start)
                        self.bracketed([*call.args, *call.attrs], self.argument, call.method_span.end)
                    else:
                        self.tok(call.name, call.name_span.start)

    def call(self, e: ast.Call, blank_ok: bool = False) -> None:
        self.tok(e.func, e.func_span.start, blank_ok=blank_ok)
        pos = e.func_span.end
        if e.sizes is not None:     # `linear[8, 4, 16](x, w)`
            pos = self.int_list(e.sizes.values, pos)
        self.bracketed([*e.args, *e.attrs], self.argument, pos)

    def argument(self, a: ast.Expr | ast.Attr) -> None:
        if not isinstance(a, ast.Attr):
            self.expr(a, 0)
            return
        self.tok(a.name, a.name_span.start)
        pos = self.expect("=", a.name_span.end)
        if isinstance(a.value, tuple):
            self.int_list(a.value, pos)
        elif isinstance(a.value, str):
            self.tok(a.value, a.value_span.start)
        elif isinstance(a.value, ast.SizeBin):
            self.size(a.value, pos)
        else:
            self.value(a.value, pos)

    def tensor_lit(self, e: ast.TensorLit, blank_ok: bool) -> None:
        """`Tensor[F32, [2]] { 1.0, 2.0 }`; values that do not fit fill their lines."""
        if blank_ok:
            self.lead(e.span.start, blank_ok=True)
        self.type_expr(e.type)
        self.space()
        brace = self.find("{", e.type.span.end)
        pos = brace + 1 if brace is not None else e.type.span.end
        with self.b.group():
            self.tok("{", brace)
            with self.b.indent(INDENT):
                if e.values:
                    self.brk(layout.LINE)
                with self.b.fill():
                    for i, v in enumerate(e.values):
                        pos = self.value(v, pos)
                        comma = self.find(",", pos)
                        if i + 1 < len(e.values):
                            self.tok(",", comma)
                            self.brk(layout.LINE)
                        else:
                            self.skip(comma)
                        if comma is not None:
                            pos = comma + 1
                close = self.find("}", pos)   # (e.span may cover parentheses around the literal)
                if close is not None:
                    self.dangling(close)
            if e.values:
                self.brk(layout.LINE)
            self.tok("}", close)

def _negative(v: int | float) -> bool:
    return math.copysign(1.0, v) < 0 if isinstance(v, float) else v < 0


def _prec(e: ast.Expr) -> int:
    if isinstance(e, ast.BinOp):
        return _PREC[e.op]
    if isinstance(e, (ast.Neg, ast.Handle)):
        return _NEG
    if isinstance(e, ast.Number) and _negative(e.value):
        return _NEG
    if isinstance(e, _POSTFIX_NODES):
        return _POSTFIX
    return _ATOM


def _number_text(v: int | float) -> str:
    return repr(v) if isinstance(v, float) else str(v)


# ---- checks ---------------------------------------------------------------------------------
def ast_shape(node: object) -> object:
    """An AST without its spans, as nested tuples (let chains walked with a loop)."""
    if isinstance(node, ast.Let):
        links: list[object] = []
        body: ast.Expr = node
        while isinstance(body, ast.Let):
            links.append(("let", ast_shape(body.names), body.destructure, ast_shape(body.value)))
            body = body.body
        return ("chain", tuple(links), ast_shape(body))
    if type(node) in SPINE:            # a flat chain, walked with a loop: it may be long
        return ("spine", tuple(_link_shape(link) for link in spine(node)))
    if isinstance(node, (list, tuple)):
        return tuple(ast_shape(x) for x in node)
    if isinstance(node, float):     # NaN as a word: nan != nan would make every tree with one differ
        return ("float", "nan" if math.isnan(node) else node, math.copysign(1.0, node))
    if is_dataclass(node) and not isinstance(node, Span):
        return (type(node).__name__,) + tuple(ast_shape(getattr(node, f.name)) for f in fields(node)
                                              if not isinstance(getattr(node, f.name), Span))
    return node


def _link_shape(node: object) -> object:
    """One link of a flat chain without the link it continues (its SPINE field)."""
    if type(node) not in SPINE:
        return ast_shape(node)
    skip = SPINE[type(node)]
    parts = [ast_shape(getattr(node, f.name)) for f in fields(node)   # type: ignore[arg-type]
             if f.name != skip and not isinstance(getattr(node, f.name), Span)]
    return (type(node).__name__, *parts)


def _parse(text: str) -> tuple[ast.Module, list[Diagnostic], list[str]]:
    """parse_module, through the per-item cache (parse_local): the language server has
    parsed these items already, and an item that formatting leaves as it is costs nothing
    the second time.  Also returns each function's item text."""
    items = split_items(text)
    diags = gaps(text, items)
    functions: list[ast.FnDef] = []
    texts: list[str] = []
    for it in items:
        fn, item_diags = parse_local(text[it.start:it.end])
        diags += [d.shift(it.start) for d in item_diags]
        if fn is not None:
            functions.append(shift(fn, it.start))
            texts.append(text[it.start:it.end])
    diags.sort(key=lambda d: (d.span.start, d.span.end))
    return ast.Module(tuple(functions), Span(0, len(text))), diags, texts


def _parse_or_raise(text: str, what: str) -> tuple[ast.Module, list[str]]:
    module, diags, texts = _parse(text)
    if diags:
        raise FormatError(f"{what} has syntax errors", diags)
    return module, texts


# ---- entry points -----------------------------------------------------------------------------
def format_source(text: str, width: int = WIDTH) -> str:
    """The formatted text, or FormatError (with the syntax diagnostics, spans in `text`) when
    it does not parse.  A byte-order mark opening the text opens the result too (the
    formatter changes layout, not encoding)."""
    if not text.startswith(BOM):
        return _format(text, width)
    try:
        return BOM + _format(text[1:], width)
    except FormatError as e:
        raise FormatError(str(e), [d.shift(1) for d in e.diagnostics]) from e


def _format(text: str, width: int) -> str:
    crlf = "\r\n" in text[:text.find("\n") + 1] if "\n" in text else False
    plain = text.replace("\r\n", "\n") if crlf else text
    try:
        header, rest, at = imports.split_header(plain)
    except imports.ImportProblem as e:
        raise FormatError("the input has syntax errors", e.diagnostics) from e
    if not header:
        out = _format_items(plain, width)
    else:
        try:
            body = _format_items(rest, width)
        except FormatError as e:
            raise FormatError(str(e), [d.shift(at) for d in e.diagnostics]) from e
        out = header + ("\n" + body if body else "")
    return out.replace("\n", "\r\n") if crlf else out


def _format_items(plain: str, width: int) -> str:
    """The formatted functions (and comments) of a text without import lines."""
    module, texts = _parse_or_raise(plain, "the input")
    f = _Formatter(plain)
    f.module(module)
    out = layout.render(f.b.root, width).strip("\n")
    out = out + "\n" if out else ""
    _check(plain, module, texts, out)
    return out


def _check(before: str, module: ast.Module, texts: list[str], after: str) -> None:
    """The formatted text must mean the same program and keep every comment, in order
    (a function whose text did not change is the same function)."""
    try:
        formatted, new_texts = _parse_or_raise(after, "the formatted text")
    except FormatError as e:
        raise FormatError("internal error: the formatted text does not parse "
                          f"({e.diagnostics[0].message if e.diagnostics else e}); the file was left as it is") from e
    same = len(formatted.functions) == len(module.functions) and all(
        t == u or ast_shape(f) == ast_shape(g)
        for t, u, f, g in zip(texts, new_texts, module.functions, formatted.functions))
    if not same:
        raise FormatError("internal error: formatting would change the program; the file was left as it is")
    if comments_of(after) != comments_of(before):
        raise FormatError("internal error: formatting would lose or merge a comment; the file was left as it is")
