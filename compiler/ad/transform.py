"""Reverse-mode AD (`transform_ad`): typed IR -> typed IR.

`handle f(args) with reverseMode` is replaced by a call of a generated
function `f.rev` that returns (R, g0, ..., gk-1): the primal result and one
cotangent per floating parameter (I64 parameters are discrete and omitted;
with k = 0 the result is R).  The pass, as the language's reverseMode contract
specifies it (docs/language.md, "Reverse mode"):

  1. inline   calls of user functions in f's body, with fresh dotted names
              (no Kina identifier contains a dot, so nothing is captured);
  2. check    the restrictions: a let chain ending with a Var, single ops on
              Vars, no destructuring, a floating tensor result, and ops whose
              VJP exists (vjp.VJPS rows, some with per-instance rejections).
              A nested operand that receives no cotangent (discrete, such as a
              `where` condition or a gather index, or inactive, such as a
              constant) is fine: it is hoisted into a let of its own first;
              only nested operands that would carry a cotangent are refused;
  3. walk     the lets in reverse with an adjoint table seeded with ones of R;
              contributions to one name are summed with `add`; lets that are
              inactive (depend on no floating parameter) or never reached from
              R get no cotangent and are skipped.

The result is a new ir.Function: the (inlined) forward lets, then the
backward lets, then MakeTuple(R, g...).  A floating parameter that receives no
contribution gets a zeros literal.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from compiler.ad.builder import VJP, Builder, user_name
from compiler.ad.vjp import VJPS
from compiler.core.diagnostics import Diagnostic, Fix, Note, Span
from compiler.core.sizes import written_name
from compiler.core.types import TensorType, TupleType, Type, shape_text
from compiler.ir import nodes as ir
from compiler.ir.nodes import HANDLERS, Binding, CallFn, Expr, Function, Handle, Literal, MakeTuple, OpApp, Program, Var
from compiler.ir.ops import OPS
from compiler.ir.sizes import subst_function

_MAX_INLINE_DEPTH = 32


# ---- 1. inlining -------------------------------------------------------------------
# The call a let was inlined from (callee, span of the call), None for f's own lets.
_Origin = tuple[str, Span] | None


@dataclass
class _Let:
    """A let of the inlined body; `origin` is the call it was inlined from (for notes), and
    `written` the helper's let as its author wrote it: in the helper's own names and sizes,
    before the caller's arguments and sizes were substituted (for messages)."""
    binding: Binding
    origin: _Origin = None
    written: Binding | None = None


def _rename(expr: Expr, env: dict[str, Expr]) -> Expr:
    """Rebuild expr with free variables replaced according to env."""
    if isinstance(expr, Var):
        return env.get(expr.name, expr)
    if isinstance(expr, (OpApp, CallFn, Handle)):
        return dataclasses.replace(expr, args=[_rename(a, env) for a in expr.args])
    if isinstance(expr, MakeTuple):
        return dataclasses.replace(expr, items=[_rename(a, env) for a in expr.items])
    return expr


class _Inliner:
    def __init__(self, program: Program) -> None:
        self.program = program
        self.count = 0
        self.diags: list[Diagnostic] = []

    def fresh(self, fn: str, name: str) -> str:
        self.count += 1
        return f"{fn}.{self.count}.{name}"

    def body(self, fn: Function, env: dict[str, Expr], origin: _Origin, depth: int, out: list[_Let],
             written: Function | None = None) -> Expr:
        """Append fn's lets (renamed by env, calls inlined) to out; return its renamed result.
        `written` is fn before its sizes were substituted (fn itself when it has none)."""
        for b, w in zip(fn.lets, (written or fn).lets):
            value = _rename(b.value, env)
            if origin is None:
                names = list(b.names)
            else:
                names = [self.fresh(fn.name, n) for n in b.names]
                env.update({old: Var(new, t, b.value.span) for old, new, t in zip(b.names, names, b.types)})
            if isinstance(value, CallFn) and value.fn in self.program.functions:
                value = self.call(value, origin or (value.fn, value.span), depth + 1, out)
            out.append(_Let(dataclasses.replace(b, names=names, value=value), origin,
                            w if origin is not None else None))
        return _rename(fn.result, env)

    def call(self, call: CallFn, origin: _Origin, depth: int, out: list[_Let]) -> Expr:
        callee = written = self.program.functions[call.fn]
        if call.sizes:   # a generic callee at the caller's symbolic sizes: its body in the caller's sizes
            callee, _ = subst_function(callee, dict(zip(callee.sizes, call.sizes)))
        if depth > _MAX_INLINE_DEPTH:
            self.diags.append(Diagnostic("recursion", f"cannot inline `{call.fn}` under reverseMode: calls nest "
                                         f"deeper than {_MAX_INLINE_DEPTH} (is it recursive?)", call.span))
            return call
        env: dict[str, Expr] = {}
        for p, arg in zip(callee.params, call.args):
            if not isinstance(arg, Var):   # bind a non-variable argument to its own let
                name = self.fresh(callee.name, p.name)
                value: Expr = arg
                if isinstance(arg, CallFn) and arg.fn in self.program.functions:
                    # a call as an argument (`cross_entropy(net(x), labels)`): inlined before
                    # the callee's body, as a call bound by a let is
                    value = self.call(arg, origin, depth + 1, out)
                out.append(_Let(Binding([name], value, span=arg.span), origin))
                arg = Var(name, arg.type, arg.span)
            env[p.name] = arg
        result = self.body(callee, env, origin, depth, out, written)
        if isinstance(result, CallFn) and result.fn in self.program.functions:
            result = self.call(result, origin, depth + 1, out)
        return result


def _inline(program: Program, fn: Function) -> tuple[list[_Let], Expr, list[Diagnostic]]:
    inliner = _Inliner(program)
    lets: list[_Let] = []
    result = inliner.body(fn, {}, None, 0, lets)
    return lets, result, inliner.diags


# ---- 2. restrictions ------------------------------------------------------------------
def _vars_in(expr: Expr) -> list[Var]:
    return [e for e in ir.walk(expr) if isinstance(e, Var)]


def _describe(expr: Expr) -> str:
    """A short spelling of an expression for messages: `x.reshape(..)`, `b * c`, `f(..)`,
    in the names the user wrote (not the inliner's `layer_norm.1.mu`)."""
    if isinstance(expr, OpApp):
        names = [user_name(a.name) if isinstance(a, Var) else ".." for a in expr.args]
        sym = OPS[expr.op].infix
        if sym and len(names) == 2:
            return f"{names[0]} {sym} {names[1]}"
        if sym:
            return f"{sym}{names[0]}"
        if expr.args and isinstance(expr.args[0], Var) and OPS[expr.op].operands == 1:
            return f"{names[0]}.{expr.op}(..)"
        return f"{expr.op}({', '.join(names)}, ..)" if expr.attrs else f"{expr.op}({', '.join(names)})"
    if isinstance(expr, CallFn):
        return f"{written_name(expr.fn)}(..)"
    if isinstance(expr, Handle):
        return f"handle {expr.fn}(..) with {expr.handler}"
    if isinstance(expr, Literal):
        return f"Tensor[{expr.type.dtype}, {shape_text(expr.type.shape)}] {{..}}"
    if isinstance(expr, MakeTuple):
        return "(..)"
    return user_name(expr.name)


def _is_float_tensor(t: Type) -> bool:
    return isinstance(t, TensorType) and t.is_float


def _activity(fn: Function, lets: list[_Let]) -> set[str]:
    """Names that depend on a floating parameter (only these can carry cotangents)."""
    active = {p.name for p in fn.params if p.type.is_float}
    for let in lets:
        b = let.binding
        if any(v.name in active for v in _vars_in(b.value)):
            active.update(n for n, t in zip(b.names, b.types) if _is_float_tensor(t))
    return active


def _receives_no_cotangent(expr: Expr, active: set[str]) -> bool:
    """A discrete value (a mask, a condition, an index) or one that depends on no floating
    parameter (a constant): nothing flows back into it."""
    return not _is_float_tensor(expr.type) or not any(v.name in active for v in _vars_in(expr))


def _hoist_inert(lets: list[_Let], active: set[str]) -> list[_Let]:
    """The lets with every nested operand that receives no cotangent bound to a let of its
    own (placed just before), so the reverse walk sees single ops on variables.  The new
    lets are inactive or discrete, so they are never differentiated and may nest freely.
    Their names (`inert.N`) contain a dot, so no Kina name can capture them."""
    out: list[_Let] = []
    for let in lets:
        value = let.binding.value
        if isinstance(value, OpApp) and not let.binding.destructure:
            args = []
            for arg in value.args:
                if not isinstance(arg, Var) and _receives_no_cotangent(arg, active):
                    name = f"inert.{len(out)}"
                    out.append(_Let(Binding([name], arg, span=arg.span), let.origin))
                    arg = Var(name, arg.type, arg.span)
                args.append(arg)
            let = dataclasses.replace(let, binding=dataclasses.replace(let.binding,
                                                                       value=dataclasses.replace(value, args=args)))
        out.append(let)
    return out


def _needed(lets: list[_Let], result: Expr, active: set[str]) -> set[str]:
    """Active names reached backwards from the result: the lets the reverse walk differentiates."""
    needed = {v.name for v in _vars_in(result) if v.name in active}
    for let in reversed(lets):
        b = let.binding
        if any(n in needed for n in b.names):
            needed.update(v.name for v in _vars_in(b.value) if v.name in active)
    return needed


class _Checker:
    def __init__(self, fn: Function) -> None:
        self.fn = fn
        self.diags: list[Diagnostic] = []

    def error(self, code: str, message: str, span: Span, origin: _Origin = None, fix: Fix | None = None) -> None:
        notes: tuple[Note, ...] = ()
        if origin is not None:
            notes = (Note(f"inlined from this call of `{written_name(origin[0])}` in `{written_name(self.fn.name)}`",
                          origin[1]),)
        self.diags.append(Diagnostic(code, message, span, notes, fix=fix))

    def result(self, result: Expr) -> None:
        fn = self.fn
        if isinstance(result.type, TupleType):
            self.error("ad-result", f"reverseMode seeds one floating tensor, but `{fn.name}` returns the tuple "
                       f"{result.type}; differentiate a function that returns a single tensor (e.g. the loss) "
                       "and build the tuple outside it", result.span)
        elif not result.type.is_float:
            self.error("ad-result", f"reverseMode cannot seed the {result.type.dtype} result {result.type} of "
                       f"`{fn.name}`: only floating tensors have cotangents", result.span)
        elif not isinstance(result, Var):
            self.error("ad-structure", f"the body of `{fn.name}` must end with a variable under reverseMode; "
                       f"bind the final expression `{_describe(result)}` with a let: `let out = ... in out`",
                       result.span)

    def let(self, let: _Let, needed: set[str]) -> None:
        b = let.binding
        if b.destructure:
            self.error("ad-structure", f"destructuring let `let ({', '.join(map(user_name, b.names))}) = ...` "
                       "is not supported "
                       "inside a function differentiated by reverseMode; return a single tensor from the helper "
                       "or destructure outside the differentiated function", b.span, let.origin)
            return
        if b.names[0] not in needed:
            return                     # never receives a cotangent: not differentiated
        value = b.value
        if isinstance(value, Handle):
            self.error("ad-unsupported", f"nested `{_describe(value)}` inside a differentiated function is not "
                       "supported (no higher-order reverseMode)", value.span, let.origin)
        elif isinstance(value, CallFn):
            # The inliner leaves a call only when its callee is not in the program: the
            # checker dropped it for its own errors, reported at its definition.  Say so, so
            # the reader goes there (not to this call) for the cause.
            fn, _, sizes = value.fn.partition("$")
            at = f" at sizes {sizes.replace('_', ', ')}" if sizes else ""
            self.error("ad-structure", f"reverseMode cannot differentiate through `{fn}`{at}: that function has "
                       "errors (reported at its definition); fix them first", value.span, let.origin)
        elif isinstance(value, OpApp):
            written = let.written.value if let.written is not None else None
            self.op(value, let.origin, written if isinstance(written, OpApp) else None)

    def op(self, node: OpApp, origin: _Origin, written: OpApp | None = None) -> None:
        """`written` is node as the inlined helper's author wrote it: a rejection is
        decided on node (the instance) but worded, when it applies there too, on the
        helper's own names and sizes (`b.reshape([1, O])`, not the caller's `b1` at 64)."""
        for i, child in enumerate(node.args):
            if not isinstance(child, Var):   # only operands that carry a cotangent are left (_hoist_inert)
                nested = _describe(child)
                self.error("ad-structure", f"operand {i} of `{node.op}` is the nested expression `{nested}`, "
                           "which receives a cotangent, but reverseMode differentiates single ops on variables: "
                           f"split it into two lets (`let t = {nested} in ...`, then use `t`)", child.span, origin,
                           Fix("split-let"))
        row: VJP = VJPS[node.op]
        if row.rule is None:
            self.error("ad-unsupported", f"{row.unsupported}; it cannot be differentiated", node.span, origin)
        elif row.reject is not None and (message := row.reject(node)):
            worded = row.reject(written) if written is not None and written.op == node.op else None
            self.error("ad-unsupported", worded or message, node.span, origin)


def _analyse(program: Program, fn_name: str) -> tuple[Function, list[_Let], Expr, set[str], set[str],
                                                      list[Diagnostic]]:
    """Inline and check; returns (fn, lets, result, active, needed, diagnostics)."""
    fn = program.functions[fn_name]
    lets, result, diags = _inline(program, fn)
    checker = _Checker(fn)
    checker.result(result)
    active = _activity(fn, lets)
    lets = _hoist_inert(lets, active)
    needed = _needed(lets, result, active)
    for let in lets:
        checker.let(let, needed)
    return fn, lets, result, active, needed, diags + checker.diags


def _unknown(fn_name: str, span: Span) -> Diagnostic:
    return Diagnostic("unknown-name", f"reverseMode: no function named `{fn_name}` to differentiate", span)


def check_differentiable(program: Program, fn_name: str, span: Span = ir.NO_SPAN) -> list[Diagnostic]:
    """The reverseMode restrictions for fn_name (what the language server reports at a `handle`)."""
    if fn_name not in program.functions:
        return [_unknown(fn_name, span)]
    return _analyse(program, fn_name)[-1]


# ---- 3. the reverse walk ---------------------------------------------------------------
class _Adjoints:
    """name -> cotangent Var; a second contribution is summed with an `add` let."""

    def __init__(self, builder: Builder) -> None:
        self.b = builder
        self.table: dict[str, Var] = {}

    def add(self, name: str, ct: Var) -> None:
        prev = self.table.get(name)
        self.table[name] = ct if prev is None else self.b.emit("add", [prev, ct])



def with_cotangents(fn: Function, result: Var, grads: list[Var]) -> tuple[Type, Expr]:
    """The result of a reverse function of fn and its type: (y, g_1, ...), or y alone when
    no parameter gets a cotangent."""
    if not grads:
        return result.type, result
    ret = TupleType((result.type, *(g.type for g in grads)))
    return ret, MakeTuple([result, *grads], ret, fn.span)

def _backward(fn: Function, lets: list[_Let], result: Var, active: set[str], needed: set[str],
              seed: Var | None = None) -> tuple[Builder, list[Var]]:
    """The backward lets and one cotangent per floating parameter; `seed` is the cotangent
    of the result (a parameter of a VJP export, vjp_export.py), else ones (reverseMode)."""
    b = Builder("ct")
    adj = _Adjoints(b)
    b.span = result.span
    if result.name in active:
        adj.add(result.name, seed or b.literal(result.tensor_type, (1.0,), name=b.fresh("seed")))
    for let in reversed(lets):
        (name,) = let.binding.names
        g = adj.table.get(name)
        if g is None or name not in needed:
            continue
        value = let.binding.value
        if isinstance(value, Var):
            if value.name in active:
                adj.add(value.name, g)
        elif isinstance(value, OpApp):
            b.span = value.span
            y = Var(name, value.type, value.span)
            args = [a for a in value.args if isinstance(a, Var)]   # single ops on Vars (checked)
            rule = VJPS[value.op].rule
            assert rule is not None and len(args) == len(value.args), value.op   # checked by _analyse
            wants = [a.name in active for a in args]
            for arg, ct in zip(args, rule(b, value, y, g, wants)):
                if ct is not None:
                    assert ct.type == arg.type, (value.op, ct.type, arg.type)
                    adj.add(arg.name, ct)
    grads = []
    for p in fn.params:
        if p.type.is_float:
            grads.append(adj.table.get(p.name) or b.literal(p.type, (), name=b.fresh(f"zero_{p.name}")))
    return b, grads


def transform_ad(program: Program, fn_name: str) -> tuple[Function | None, list[Diagnostic]]:
    """Build `fn_name.rev` computing (R, g0, .., gk-1), or return None with the violated restrictions."""
    if fn_name not in program.functions:
        return None, [_unknown(fn_name, ir.NO_SPAN)]
    fn, lets, result, active, needed, diags = _analyse(program, fn_name)
    if diags:
        return None, diags
    assert isinstance(result, Var), result   # no diagnostic: the body ends with a variable
    b, grads = _backward(fn, lets, result, active, needed)
    backward = [Binding([n], v, span=v.span) for n, v in b.lets]
    ret, out = with_cotangents(fn, result, grads)
    rev = Function(f"{fn.name}.rev", [dataclasses.replace(p) for p in fn.params], ret,
                   [let.binding for let in lets] + backward, out, fn.span, fn.name_span, fn.sizes)
    return rev, []


# ---- lowering `handle` ------------------------------------------------------------------
def _replace_handles(expr: Expr, seen: list[Handle]) -> Expr:
    if isinstance(expr, Handle):
        seen.append(expr)
        args = [_replace_handles(a, seen) for a in expr.args]
        return CallFn(f"{expr.fn}.rev", args, expr.type, expr.span, expr.sizes)
    if isinstance(expr, (OpApp, CallFn)):
        return dataclasses.replace(expr, args=[_replace_handles(a, seen) for a in expr.args])
    if isinstance(expr, MakeTuple):
        return dataclasses.replace(expr, items=[_replace_handles(a, seen) for a in expr.items])
    return expr


def _lower_function(fn: Function, seen: list[Handle]) -> Function:
    lets = [dataclasses.replace(b, value=_replace_handles(b.value, seen)) for b in fn.lets]
    return dataclasses.replace(fn, lets=lets, result=_replace_handles(fn.result, seen))


def lower_handles(program: Program) -> tuple[Program, list[Diagnostic]]:
    """A new Program where every Handle is a CallFn of a generated `f.rev` (added to the program).

    Generated functions are lowered too (a skipped, never-differentiated let of f may hold a handle)."""
    out = Program(dict(program.functions))
    diags: list[Diagnostic] = []
    done: set[str] = set()
    work = list(program.functions)
    while work:
        name = work.pop(0)
        seen: list[Handle] = []
        out.functions[name] = _lower_function(out.functions[name], seen)
        for h in seen:
            diags.extend(_generate(program, out, h, done, work))
    return out, diags


def _generate(program: Program, out: Program, h: Handle, done: set[str], work: list[str]) -> list[Diagnostic]:
    if h.handler not in HANDLERS:
        return [Diagnostic("unknown-name", f"unknown handler `{h.handler}`; the built-in handler is reverseMode",
                           h.span)]
    if h.fn in done:
        return []
    done.add(h.fn)
    if h.fn not in program.functions:
        return [_unknown(h.fn, h.span)]
    rev, diags = transform_ad(program, h.fn)
    if rev is None:
        note = Note(f"`{h.fn}` is differentiated by this `handle ... with reverseMode`", h.span)
        return [dataclasses.replace(d, notes=d.notes + (note,)) for d in diags]
    out.functions[rev.name] = rev
    work.append(rev.name)
    return []
