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

from compiler.check.fold import fold, writes_nonfinite
from compiler.check.op_args import Static, apply_op, is_static_arg
from compiler.check.scalars import literal_text, number_message, splat_operands, value_problem
from compiler.check.size_rules import SizeRules
from compiler.check.sizes import size_evaluator, subst_tensor, subst_type
from compiler.check.type_exprs import (
    ERROR,
    ERROR_TYPE,
    ErrorType,
    Signature,
    did_you_mean,
    ir_type,
    is_error,
    mismatch,
    resolve_tensor_type,
)
from compiler.core.diagnostics import DiagnosticBag, Fix, Note, Span
from compiler.core.sizes import Dim, Size, SizeNumber
from compiler.core.types import DType, TensorType, TupleType, Type
from compiler.ir import nodes as ir
from compiler.ir.nodes import HANDLERS
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
class ExprChecker(SizeRules):
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
        t = resolve_tensor_type(e.type, self.bag, size_evaluator(self.sizes, self.bag))
        if isinstance(t, ErrorType):
            return ir.Var("<error>", ERROR_TYPE, e.span)
        n = len(e.values)
        if isinstance(t.volume, Size) and n > 1:
            self.bag.error("literal", f"tensor literal of type {t} has {n} values, but its volume {t.volume} "
                           "depends on the sizes; give 0 values (zeros) or 1 (a splat)", e.span)
            return ir.Var("<error>", ERROR_TYPE, e.span)
        if n not in (0, 1, t.volume):
            self.bag.error("literal", f"tensor literal of type {t} has {n} values; give 0 (zeros), 1 (a splat) "
                           f"or {t.volume} (the volume, row-major)", e.span)
            return ir.Var("<error>", ERROR_TYPE, e.span)
        too_big = next((i for i, v in enumerate(e.values) if value_problem(v, t, range_only=True)), None)
        if too_big is not None:
            v = e.values[too_big]
            self.bag.error("literal", f"tensor literal of type {t}: the value {v} does not fit: "
                           f"{value_problem(v, t, range_only=True)}", syntax.value_span(e, too_big))
            return ir.Var("<error>", ERROR_TYPE, e.span)
        if t.dtype is DType.I64:
            bad = next((v for v in e.values if not isinstance(v, int) or isinstance(v, bool)), None)
            if bad is not None:
                self.bag.error("literal", f"tensor literal of type {t} holds indices, so its values must be "
                               f"integers; got {bad}", e.span)
                return ir.Var("<error>", ERROR_TYPE, e.span)
            values: tuple[float, ...] = tuple(int(v) for v in e.values)
        elif not t.is_float:   # Bool: 0 (false) or 1 (true)
            bad = next((v for v in e.values if v not in (0, 1) or isinstance(v, float)), None)
            if bad is not None:
                self.bag.error("literal", f"tensor literal of type {t} holds truth values, so its values must be "
                               f"0 (false) or 1 (true); got {bad}", e.span)
                return ir.Var("<error>", ERROR_TYPE, e.span)
            values = tuple(int(v) for v in e.values)
        else:
            values = tuple(float(v) for v in e.values)
        return ir.Literal(values, t, e.span)

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
        op = self._builtin(e.method, e.method_span, method=True)
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
        the import line or the call): one diagnostic, not an unknown name and an unknown op."""
        r = e.receiver
        if (not self.modules or not isinstance(r, syntax.Name) or e.method in SURFACE_OPS or r.id in self.env
                or r.id in self.sizes or r.id in self.signatures or r.id in SURFACE_OPS or r.id == WILDCARD
                or did_you_mean(r.id, self.env)):     # a mistyped variable: the usual diagnostics say so
            return False
        self._split_args(e.args, None, 1)
        self.bag.error("unknown-name", f"`{r.id}` is neither a name in scope nor an imported module, so "
                       f"`{r.id}.{e.method}(..)` calls nothing", r.span,
                       *did_you_mean(r.id, self.modules))
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
        op = self._builtin(e.func, e.func_span, method=False)
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

    def _builtin(self, name: str, span: Span, method: bool) -> OpDef | None:
        op = SURFACE_OPS.get(name)
        if op is not None:
            return op
        if name in OPS:
            self.bag.error("unknown-name", f"unknown op `{name}`", span,
                           Note(f"`{name}` is IR-internal: the autodiff pass builds it; it has no surface form"))
        elif name == "return":
            self.bag.error("syntax", RETURN_MESSAGE, span)
        elif method:
            notes = foreign_note(name) or did_you_mean(name, SURFACE_OPS)
            if name in self.signatures:
                notes = (Note(f"`{name}` is a user function; call it as `{name}(x, ...)`"),)
            self.bag.error("unknown-name", f"unknown op `{name}` in method call `.{name}(...)`", span, *notes)
        else:
            self.bag.error("unknown-name", f"unknown function or op `{name}`", span,
                           *(foreign_note(name) or did_you_mean(name, list(self.signatures) + list(SURFACE_OPS))))
        return None

    # ---- user functions and handlers -------------------------------------------
    def _call_args(self, e: syntax.Call, sig: Signature) -> tuple[list[ir.Expr], dict[str, Dim] | None]:
        """The checked arguments of `f(args)` (a call or a handle), and the sizes of a
        generic f (None when they cannot be found; {} for a monomorphic f); a wrong
        argument does not change the call's type, which is f's declared one."""
        self.calls.add(sig.name)
        self.call_spans.setdefault(sig.name, e.func_span)
        if sig.name == self.fn_name:
            self.bag.error("recursion", f"`{sig.name}` calls itself; Kina functions cannot recurse "
                           "(the graph must be finite to lower and differentiate)", e.func_span)
        params = [] if sig.opaque else sig.params
        args = [self.expect(a, params[i][1] if i < len(params) and not sig.sizes else None,
                            f"as argument {i} (`{params[i][0]}`) of `{sig.name}`" if i < len(params) else "")
                for i, a in enumerate(e.args)]
        if sig.opaque:
            return args, None
        for a in e.attrs:
            self.bag.error("attr", f"`{sig.name}` is a user function; it takes no attributes "
                           f"(`{a.name}=` is only for built-in ops)", a.span)
        if len(args) != len(sig.params):
            names = ", ".join(n for n, _ in sig.params)
            self.bag.error("arity", f"`{sig.name}` takes {len(sig.params)} argument(s) ({names}), "
                           f"got {len(args)}", e.func_span)
        env = self._call_sizes(e, sig, args)
        for i, (arg, (pname, ptype)) in enumerate(zip(args, sig.params)):
            if is_error(arg.type) or isinstance(ptype, ErrorType) or env is None:
                continue
            ptype = subst_tensor(ptype, env) if env else ptype
            if arg.type == ptype:
                continue
            code, detail = mismatch(ptype, arg.type)
            self.bag.error(code, f"argument {i} (`{pname}`) of `{sig.name}` expects {ptype}, "
                           f"got {arg.type}: {detail}", e.args[i].span)
        return args, env

    def handle(self, e: syntax.Handle) -> ir.Expr:
        ok = True
        if e.handler not in HANDLERS:
            self.bag.error("unknown-name", f"unknown handler `{e.handler}`; the built-in handler is `reverseMode`",
                           e.handler_span, *did_you_mean(e.handler, HANDLERS))
            ok = False
        sig = self.signatures.get(e.call.func)
        if sig is None and "." in e.call.func:
            return self._unresolved(e.call, e.span)
        if sig is None:
            if e.call.func in OPS:
                msg = f"`handle ... with reverseMode` needs a user function; `{e.call.func}` is a built-in op"
                self.bag.error("unknown-name", msg, e.call.func_span,
                               Note(f"wrap it: fn f(x: ...) -> ... {{ x.{e.call.func}() }}"))
            else:
                self.bag.error("unknown-name", f"unknown function `{e.call.func}`", e.call.func_span,
                               *did_you_mean(e.call.func, self.signatures))
            for a in e.call.args:
                self.check(a)
            return ir.Var("<error>", ERROR_TYPE, e.span)
        args, env = self._call_args(e.call, sig)
        name, _, sizes = self._instantiate(e.call, sig, env)
        if sig.sizes and env is not None:
            sig = Signature(sig.name, [(n, t if isinstance(t, ErrorType) else subst_tensor(t, env))
                                       for n, t in sig.params],
                            sig.ret if isinstance(sig.ret, ErrorType) else subst_type(sig.ret, env), sig.opaque)
        t = self._handle_type(sig, e) if ok and not (sig.sizes and env is None) else ERROR_TYPE
        if e.call.span in self.shown:
            self.shown[e.span] = self.shown[e.call.span]
        return ir.Handle(name, args, e.handler, t, e.span, sizes)

    def _unresolved(self, e: syntax.Call, span: Span) -> ir.Expr:
        """A qualified call `module.f(..)` that no import provides: say why (nothing when the
        import itself is broken: its own diagnostic is the one to fix)."""
        for a in e.args:
            self.check(a)
        module, _, name = e.func.partition(".")
        names = self.modules.get(module)
        if module not in self.modules:
            self.bag.error("unknown-name", f"`{module}` is not an imported module", e.func_span,
                           *did_you_mean(module, self.modules, "the module "))
        elif names is None:
            pass
        elif name.startswith("_") and name in names:
            self.bag.error("private", f"`{name}` is private to module `{module}`: names starting with `_` are "
                           "not visible to importers", e.func_span)
        elif name not in names:
            public = [f"{module}.{n}" for n in names if not n.startswith("_")]
            self.bag.error("unknown-name", f"module `{module}` has no function `{name}`", e.func_span,
                           *did_you_mean(e.func, public))
        self.broken = True
        return ir.Var("<error>", ERROR_TYPE, span)

    def _handle_type(self, sig: Signature, e: syntax.Handle) -> Type:
        """The reverseMode result type: (R, g0, .., gk-1), one cotangent per floating parameter
        in parameter order (I64 parameters are omitted); k = 0 gives R."""
        if sig.opaque or is_error(sig.ret) or any(is_error(t) for _, t in sig.params):
            return ERROR_TYPE
        if not isinstance(sig.ret, TensorType):
            self.bag.error("ad-result", f"reverseMode seeds ones of a tensor result, but `{sig.name}` returns "
                           f"{sig.ret}", e.call.func_span)
            return ERROR_TYPE
        grads = tuple(t for _, t in sig.params if isinstance(t, TensorType) and t.is_float)
        return TupleType((sig.ret,) + grads) if grads else sig.ret


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
