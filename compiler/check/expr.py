"""Expression checking: one AST expression -> one typed IR expression.

`ExprChecker.check` dispatches on the AST node class (the `_RULES` table at the
bottom).  Built-in ops in every surface form (infix, prefix `-`, `x.op(..)`,
`op(x, ..)`) go through `check_op_args.apply_op`, which reads the op's row in
ops.OPS; user calls and `handle` are checked against the callee's Signature.

A broken sub-expression gets the type ERROR after its diagnostic; a rule that
sees an ERROR operand gives ERROR without a second diagnostic.  Method chains
stay trees in the IR (reverseMode's restrictions are about that structure).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from compiler.check.calls import CallRules
from compiler.check.fold import fold, writes_nonfinite
from compiler.check.literals import check_tensor_literal
from compiler.check.op_args import Static, apply_op, is_static_arg, resolve_builtin
from compiler.check.scalars import literal_text, number_message, splat_operands
from compiler.check.type_exprs import (
    ERROR,
    ERROR_TYPE,
    ErrorType,
    Signature,
    did_you_mean,
    ir_type,
    is_error,
)
from compiler.core.diagnostics import DiagnosticBag, Fix, Note, Span
from compiler.core.sizes import Dim, SizeNumber
from compiler.core.stdlib import std_modules
from compiler.core.types import TensorType, TupleType, Type
from compiler.ir import nodes as ir
from compiler.ir.ops import INFIX, OPS, SURFACE_OPS, OpDef
from compiler.syntax import nodes as syntax
from compiler.syntax.hints import RETURN_MESSAGE, foreign_note
from compiler.syntax.walk import SPINE

WILDCARD = "_"   # a let pattern item that binds nothing
CHAIN_STEP = 16  # links of a flat chain checked per recursion (ExprChecker._settle_chain)
# An operand as written: checked, or a bare number kept for the op's scalar splat (_splat).
Operand = tuple[ir.Expr | syntax.Number, Span]


@dataclass
class TypeFact:
    """What hover shows: the type of the thing at `span`.
    kind: "param" | "let" | "expr" | "call" | "handle" | "fn"; name: the bound
    name, the op, or the callee (None for literals and tuples)."""
    span: Span
    type: Type
    kind: str
    name: str | None


@dataclass
class ExprChecker(CallRules):
    """Per-function checking state: the environment of bound names and what
    was found (diagnostics, hover facts, callees)."""
    fn_name: str
    signatures: dict[str, Signature]
    bag: DiagnosticBag
    env: dict[str, Type | ErrorType] = field(default_factory=dict)
    def_spans: dict[str, Span] = field(default_factory=dict)  # name -> Span of its binding
    facts: list[TypeFact] = field(default_factory=list)
    calls: set[str] = field(default_factory=set)
    call_spans: dict[str, Span] = field(default_factory=dict)  # callee -> Span of its first call
    broken: bool = False  # some node got the error type (the IR must not be built)
    # the function's size parameters: symbols (its generic check) or ints (an instantiation)
    sizes: Mapping[str, Dim] = field(default_factory=dict)
    symbolic: bool = False
    instances: set[tuple[str, tuple[int, ...]]] = field(default_factory=set)
    shown: dict[Span, str] = field(default_factory=dict)   # a generic call's span -> `linear[M=8, K=4]`
    size_numbers: dict[Span, SizeNumber] = field(default_factory=dict)   # `1.0 / (B * T)` in a generic body
    # Flat chains (`y + y + ... + y`): links already checked, by id, with the node kept
    # alive (an id is only unique while its object lives), and the lets they were hoisted
    # into (`chain.1`: no Kina name has a dot), which check_function takes with `hoisted()`.
    known: dict[int, tuple[syntax.Expr, ir.Expr | syntax.Number]] = field(default_factory=dict)
    values: dict[int, int | float | None] = field(default_factory=dict)   # the same links, for fold
    pending: list[ir.Binding] = field(default_factory=list)
    temps: int = 0
    # the file's imports: name -> every function the module defines (private ones included,
    # for the `private` error), or None when the import itself is broken (diagnosed there)
    modules: Mapping[str, frozenset[str] | None] = field(default_factory=dict)

    # ---- entry point ----------------------------------------------------------
    def check(self, e: syntax.Expr) -> ir.Expr:
        done = self._known(e)
        if isinstance(done, syntax.Number):   # a folded link checked as an expression: as before
            return self.static(done)
        if done is not None:
            return done
        if type(e) in SPINE:
            self._settle_chain(e)
        node: ir.Expr = _RULES[type(e)](self, e)
        self.broken = self.broken or is_error(node.type)
        if not is_error(node.type) and not isinstance(e, syntax.Let):
            self.fact(e.span, node.type, _FACT_KIND.get(type(node), "expr"),
                      self.shown.get(e.span) or _fact_name(e, node))
        return node

    # ---- flat chains --------------------------------------------------------------
    def _known(self, e: syntax.Expr) -> ir.Expr | syntax.Number | None:
        hit = self.known.get(id(e))
        return hit[1] if hit is not None and hit[0] is e else None

    def _settle_chain(self, e: syntax.Expr) -> None:
        """Check a long flat chain (walk.SPINE) from its first link up, every CHAIN_STEP
        links, so that the recursion of check() (and of fold) never goes deeper than
        CHAIN_STEP links; each settled link becomes a let of its own (`chain.N`), so the IR
        of a chain is CHAIN_STEP ops deep at most and every later stage may recurse on it."""
        links: list[syntax.Expr] = []
        node: syntax.Expr = e
        while type(node) in SPINE and self._known(node) is None:
            links.append(node)
            node = getattr(node, SPINE[type(node)])
        for i in range(len(links) - CHAIN_STEP, 0, -CHAIN_STEP):
            self._settle(links[i])

    def _settle(self, link: syntax.Expr) -> None:
        folded = self.folded(link)
        if isinstance(folded, syntax.Number):
            self.known[id(link)], self.values[id(link)] = (link, folded), folded.value
            return
        value = self.check(link)
        if not is_error(value.type) and not isinstance(value, (ir.Var, ir.Literal)):
            self.temps += 1
            name = f"chain.{self.temps}"
            self.pending.append(ir.Binding([name], value, span=value.span, name_spans=[value.span]))
            value = ir.Var(name, value.type, value.span)
        self.known[id(link)], self.values[id(link)] = (link, value), None

    def hoisted(self) -> list[ir.Binding]:
        """The lets settled chains were split into since the last call (they go before the
        let or result being checked)."""
        out, self.pending = self.pending, []
        return out

    def fact(self, span: Span, t: Type | ErrorType, kind: str, name: str | None) -> None:
        if not (isinstance(t, ErrorType) or is_error(t)):
            self.facts.append(TypeFact(span, t, kind, name))

    # ---- leaves ---------------------------------------------------------------
    def name(self, e: syntax.Name) -> ir.Expr:
        t = self.env.get(e.id)
        if t is None:
            self._unknown_name(e)
            t = ERROR
        return ir.Var(e.id, ir_type(t), e.span)

    def _unknown_name(self, e: syntax.Name) -> None:
        if e.id == "return":
            self.bag.error("syntax", RETURN_MESSAGE, e.span)
        elif e.id == WILDCARD:
            self.bag.error("unknown-name", "`_` binds nothing, so it cannot be used as a value; "
                           "give the item a name to use it", e.span)
        elif e.id in self.sizes:
            self.bag.error("literal", f"`{e.id}` is a size: as a value it is a bare number, which takes the type "
                           f"of the tensor beside it (`x * {e.id}`, `1.0 / {e.id}`)", e.span)
        elif e.id in self.signatures:
            self.bag.error("unknown-name", f"`{e.id}` is a function, not a value; call it as `{e.id}(...)`", e.span)
        elif e.id in SURFACE_OPS:
            self.bag.error("unknown-name", f"`{e.id}` is a built-in op, not a value; apply it as "
                           f"`x.{e.id}(...)` or `{e.id}(x, ...)`", e.span)
        else:
            self.bag.error("unknown-name", f"unknown name `{e.id}`", e.span, *did_you_mean(e.id, self.env))

    def static(self, e: syntax.Number | syntax.IntList, expected: Type | ErrorType | None = None,
               where: str = "") -> ir.Expr:
        """A bare number or integer list where a tensor is needed: an error whose message
        offers a literal that type-checks there (`expected`: the type the context wants)."""
        fix = None
        if isinstance(e, syntax.Number) and isinstance(expected, TensorType):
            fix = Fix("write", literal_text(e.value, expected))
        self.bag.error("literal", number_message(e, expected, where), e.span, fix=fix)
        return ir.Var("<error>", ERROR_TYPE, e.span)

    def folded(self, e: syntax.Expr) -> syntax.Expr:
        """e, or the one bare number it computes when it is made of bare numbers only
        (`1.0 - 1e-3 * 0.01`, `0.9.log()`: check/fold.py); a non-finite result is an error."""
        done = self._known(e)
        if done is not None:
            return done if isinstance(done, syntax.Number) else e
        if type(e) in SPINE:
            self._settle_chain(e)
        original = e
        if self.sizes:
            e, symbolic = self._sizes_as_numbers(e)
        else:
            symbolic = False
        if symbolic and isinstance(e, syntax.Number):    # a size alone (`x * N`)
            return self._size_number(original, e)
        if isinstance(e, (syntax.Number, syntax.Name, syntax.TensorLit, syntax.IntList)):
            return e
        number = fold(e, self.signatures, self.values)
        if number is None:
            # not one number: its parts are checked (and folded) one by one; in a generic body
            # from the text as written, so a part over sizes stays symbolic (_size_number)
            return original if symbolic else e
        if symbolic:      # its value depends on the sizes: kept symbolic (size_rules._size_number)
            return self._size_number(original, number)
        if not math.isfinite(number.value) and not writes_nonfinite(e):
            self.bag.error("literal", f"this constant expression of bare numbers evaluates to {number.value}, "
                           "not a finite number (write `inf`, `-inf` or `nan` to mean one)", e.span)
            self.broken = True
        return number

    def expect(self, e: syntax.Expr, expected: Type | ErrorType | None, where: str) -> ir.Expr:
        """check(e), with the fix for a bare number naming the type the context expects."""
        e = self.folded(e)
        if isinstance(e, syntax.Number):
            return self.static(e, expected, where)
        return self.check(e)

    def tensor_lit(self, e: syntax.TensorLit) -> ir.Expr:
        return check_tensor_literal(self.bag, e, self.sizes)

    def tuple_expr(self, e: syntax.TupleExpr) -> ir.Expr:
        items = [self.check(i) for i in e.items]
        if any(is_error(i.type) for i in items):
            return ir.MakeTuple(items, cast(TupleType, ERROR), e.span)
        return ir.MakeTuple(items, TupleType(tuple(i.type for i in items)), e.span)

    def nested_let(self, e: syntax.Let) -> ir.Expr:
        self.bag.error("syntax", "`let` may only start a step of a function body's chain, "
                       "not appear inside an expression", e.span)
        return ir.Var("<error>", ERROR_TYPE, e.span)

    # ---- built-in ops ---------------------------------------------------------
    def binop(self, e: syntax.BinOp) -> ir.Expr:
        op = OPS[INFIX[e.op]]
        items: list[Operand] = []
        for i, x in enumerate((self.folded(e.lhs), self.folded(e.rhs))):
            if isinstance(x, syntax.Number) and i not in op.scalars:
                items.append((self.static(x, where=f"as operand {i} of `{op.name}`"), x.span))
            else:
                items.append((x if isinstance(x, syntax.Number) else self.check(x), x.span))
        operands = self._splat(op, items)
        if operands is None:
            return ir.Var("<error>", ERROR_TYPE, e.span)
        return apply_op(self.bag, op, operands, [], [], e.op_span, e.span, method=False)

    def neg(self, e: syntax.Neg) -> ir.Expr:
        operand = self.check(e.operand)
        op_span = Span(e.span.start, e.span.start + 1)
        return apply_op(self.bag, OPS["neg"], [(operand, e.operand.span)], [], [], op_span, e.span, method=False)

    def method_call(self, e: syntax.MethodCall) -> ir.Expr:
        if self._unknown_module(e):
            return ir.Var("<error>", ERROR_TYPE, e.span)
        op = resolve_builtin(self.bag, e.method, e.method_span, True, self.signatures)
        if op is None:
            self.check(e.receiver)
            self._split_args(e.args, None, 1)
            return ir.Var("<error>", ERROR_TYPE, e.span)
        receiver: Operand
        folded = self.folded(e.receiver)
        if isinstance(folded, syntax.Number) and 0 in op.scalars:
            receiver = (folded, folded.span)
        else:
            receiver = (self.check(folded), folded.span)
        items, statics = self._split_args(e.args, op, 1)
        op = _overload(op, 1 + len(items))
        operands = self._splat(op, [receiver] + items)
        attrs = self._size_attrs(op, e.attrs)
        if operands is None or statics is None or attrs is None:
            return ir.Var("<error>", ERROR_TYPE, e.span)
        return apply_op(self.bag, op, operands, statics, attrs, e.method_span, e.span, method=True)

    def _unknown_module(self, e: syntax.MethodCall) -> bool:
        """`optim.adamw(..)` where `optim` is neither a name in scope nor an import (a typo in
        the import line or the call, or a standard module the file forgot to import): one
        diagnostic, not an unknown name and an unknown op."""
        r = e.receiver
        if (not isinstance(r, syntax.Name) or e.method in SURFACE_OPS or r.id in self.env
                or r.id in self.sizes or r.id in self.signatures or r.id in SURFACE_OPS or r.id == WILDCARD):
            return False
        std = r.id in std_modules()
        if not std and (not self.modules or did_you_mean(r.id, self.env)):
            return False         # a mistyped variable, or a file that imports nothing: the usual diagnostics
        self._split_args(e.args, None, 1)
        notes = (*did_you_mean(r.id, self.modules),
                 *((Note(f"`{r.id}` is a module of the standard library: add `import {r.id}` at the top of the "
                         "file"),) if std else ()))
        self.bag.error("unknown-name", f"`{r.id}` is neither a name in scope nor an imported module, so "
                       f"`{r.id}.{e.method}(..)` calls nothing", r.span, *notes,
                       fix=Fix("import", r.id) if std else None)
        return True

    def field(self, e: syntax.Field) -> ir.Expr:
        """`x.T`, `x.shape`: values have no attributes in Kina."""
        self.check(e.receiver)
        notes = foreign_note(e.name)
        if e.name in SURFACE_OPS:
            notes = (Note(f"call the op with parentheses: `x.{e.name}(...)`"),)
        elif e.name in ("shape", "dtype", "ndim", "size"):
            notes = (Note("shapes and dtypes are static: they are in the type, which hover shows"),)
        self.bag.error("unknown-name", f"`.{e.name}` is not an op call; Kina values have no attributes", e.name_span,
                       *notes)
        return ir.Var("<error>", ERROR_TYPE, e.span)

    def call(self, e: syntax.Call) -> ir.Expr:
        sig = self.signatures.get(e.func)
        if sig is None and "." in e.func:
            return self._unresolved(e, e.span)
        if sig is not None:
            args, env = self._call_args(e, sig)
            name, ret, sizes = self._instantiate(e, sig, env)
            return ir.CallFn(name, args, ret, e.span, sizes)
        op = resolve_builtin(self.bag, e.func, e.func_span, False, self.signatures)
        if e.sizes is not None and op is not None:
            self.bag.error("size", f"`{e.func}` is a built-in op; only size-generic functions take sizes "
                           "in brackets", e.sizes.span)
            op = None
        items, statics = self._split_args(e.args, op, 0)
        op = _overload(op, len(items)) if op is not None else None
        operands = self._splat(op, items) if op is not None else None
        attrs = self._size_attrs(op, e.attrs) if op is not None else None
        if op is None or operands is None or statics is None or attrs is None:
            return ir.Var("<error>", ERROR_TYPE, e.span)
        return apply_op(self.bag, op, operands, statics, attrs, e.func_span, e.span, method=False)

    def _split_args(self, args: Sequence[syntax.Expr], op: OpDef | None,
                    first: int) -> tuple[list[Operand], list[Static] | None]:
        """(operands, statics): tensor operands are checked; a bare number at one of the
        op's `scalars` positions stays a syntax.Number (for `_splat`); a bare number at
        another operand position is an error; other static args (int lists, numbers) go
        to the attributes.  `first` is the operand position of args[0]."""
        items: list[Operand] = []
        statics: list[Static] = []
        for a in map(self.folded, args):
            position = first + len(items)
            if op is not None and isinstance(a, syntax.Number) and position in op.scalars:
                items.append((a, a.span))
            elif op is not None and isinstance(a, syntax.Number) and _number_is_operand(op, position):
                items.append((self.static(a, where=f"as operand {position} of `{op.name}`"), a.span))
            elif is_static_arg(a):
                statics.append(a)
            else:
                items.append((self.check(a), a.span))
        return items, self._size_statics(statics)

    def _splat(self, op: OpDef, items: list[Operand]) -> list[tuple[ir.Expr, Span]] | None:
        """Bare-number operands -> splat Literals of the other operand's type (None after
        a diagnostic); each gets a hover fact, so hovering `0.5` shows the splat's type."""
        operands = splat_operands(self.bag, op, items)
        if operands is not None and self.size_numbers:
            operands = self._size_splats(operands)
        for e, _ in operands or ():
            if isinstance(e, ir.Literal) and e.scalar:
                self.fact(e.span, e.type, "expr", None)
        return operands


def _overload(op: OpDef, operands: int) -> OpDef:
    """The row a call with `operands` tensor operands means: `x.pow(e)` with a tensor e is
    pow_tensor (OpDef.overload), `x.pow(2)` stays pow."""
    if op.overload is not None and op.operands >= 0 and operands == op.operands + 1:
        return OPS[op.overload]
    return op


def _number_is_operand(op: OpDef, position: int) -> bool:
    """Is a bare number at this argument position meant as a tensor operand (an error)
    rather than the op's positional attribute?"""
    if any(a.positional and a.kind == "float" for a in op.attrs):
        return False
    return op.operands == -1 or position < op.operands


def _fact_name(e: syntax.Expr, node: ir.Expr) -> str | None:
    if isinstance(e, syntax.Name):
        return e.id
    if isinstance(node, ir.OpApp):
        return node.op
    if isinstance(node, (ir.CallFn, ir.Handle)):
        return node.fn
    return None


_FACT_KIND = {ir.CallFn: "call", ir.Handle: "handle"}

# Each rule takes the node class of its key; a dict cannot tie a key's type to its value's
# parameter type, hence Any for the node (check() dispatches on type(e), so they match).
_RULES: dict[type, Callable[[ExprChecker, Any], ir.Expr]] = {
    syntax.Name: ExprChecker.name,
    syntax.IntList: ExprChecker.static,
    syntax.Number: ExprChecker.static,
    syntax.TensorLit: ExprChecker.tensor_lit,
    syntax.TupleExpr: ExprChecker.tuple_expr,
    syntax.Let: ExprChecker.nested_let,
    syntax.BinOp: ExprChecker.binop,
    syntax.Neg: ExprChecker.neg,
    syntax.MethodCall: ExprChecker.method_call,
    syntax.Field: ExprChecker.field,
    syntax.Call: ExprChecker.call,
    syntax.Handle: ExprChecker.handle,
}
