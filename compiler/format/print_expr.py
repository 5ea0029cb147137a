"""The printer's function bodies: let chains, operators with the parentheses precedence
needs, method chains, calls and tensor literals (`kinac fmt`, see formatter.py)."""
from __future__ import annotations

from compiler.format import layout
from compiler.format.errors import FormatError
from compiler.format.print_types import INDENT, PREC, TypePrinter, negative
from compiler.syntax import nodes as ast

NEG, POSTFIX, ATOM = 4, 5, 6
# `x.op(..)`, and `x.name` (a field access, printed for its diagnostic)
POSTFIX_NODES = (ast.MethodCall, ast.Field)


class ExprPrinter(TypePrinter):
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
        if precedence(e) < need:
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
            self.expr(e.operand, POSTFIX)
        elif isinstance(e, POSTFIX_NODES):
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
        level = PREC[e.op]
        rest: list[ast.BinOp] = []
        node: ast.Expr = e
        while isinstance(node, ast.BinOp) and PREC[node.op] == level:
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
        while isinstance(receiver, POSTFIX_NODES):
            calls.append(receiver)
            receiver = receiver.receiver
        calls.reverse()
        with self.b.group():
            # a `handle` receiver is parenthesised: `(handle f(x) with reverseMode).m()` reads right
            self.expr(receiver, ATOM if isinstance(receiver, ast.Handle) else POSTFIX, blank_ok)
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


def precedence(e: ast.Expr) -> int:
    if isinstance(e, ast.BinOp):
        return PREC[e.op]
    if isinstance(e, (ast.Neg, ast.Handle)):
        return NEG
    if isinstance(e, ast.Number) and negative(e.value):
        return NEG
    if isinstance(e, POSTFIX_NODES):
        return POSTFIX
    return ATOM
