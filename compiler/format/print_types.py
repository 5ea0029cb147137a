"""The printer's items and types: signatures, tensor types, bracketed lists, size
expressions and numbers spelled as in the source (`kinac fmt`, see formatter.py).

TypePrinter walks the AST together with the source: every token is printed at the
offset it was found at, so the comment-aware Emitter (comments.py) can weave comments
and blank lines back in by position.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from typing import TypeVar

from compiler.format import layout
from compiler.format.comments import Emitter, Spanned
from compiler.syntax import nodes as ast
from compiler.syntax.walk import children

INDENT = 2
PREC = {"+": 1, "-": 1, "*": 2, "/": 2, "@": 3}
_Item = TypeVar("_Item", bound=Spanned)
_V = TypeVar("_V")


class TypePrinter(Emitter):
    _size_parens = 0    # the source's `(` skipped inside the size expression being printed

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
            level = PREC[e.op]
            run: list[ast.SizeBin] = []
            node: ast.SizeExpr = e
            while isinstance(node, ast.SizeBin) and PREC[node.op] == level:
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
            self.tok(number_text(v))
            return pos
        at, end, digits, _ = hit
        self.tok(("-" if negative(v) else "") + digits, at, end, blank_ok=blank_ok)
        return end


def negative(v: int | float) -> bool:
    return math.copysign(1.0, v) < 0 if isinstance(v, float) else v < 0


def number_text(v: int | float) -> str:
    return repr(v) if isinstance(v, float) else str(v)
