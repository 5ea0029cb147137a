"""The shape and type checker: AST (syntax/nodes.py) -> typed IR (ir/nodes.py).

Per function: resolve the parameter and return types (`signature_of`), walk
the body's let chain binding names, type every expression with the op table's
rules (check/expr.py, check/op_args.py) and compare the result with the
declared return type.  The module-level rules (signatures of every function
first, so calls can be checked in any order; duplicate function names; call
cycles) are applied by the one front-end driver, compiler/analysis.py, with
the rules of compiler/check/module_rules.py.

Diagnostics are collected, never raised: after a broken `let` the name is
bound to the error type, which silences every later rule that uses it, so each
mistake is reported once and the rest of the function is still checked.
Every parameter, let name and sub-expression gets a TypeFact (hover).

The analysis (analysis.py) codes against exactly this API:
  signature_of(fn) -> (Signature | None, diagnostics)
  check_function(fn, signatures) -> FunctionResult
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import cast

from compiler.check.expr import WILDCARD, ExprChecker, TypeFact
from compiler.check.index_literals import index_literal_diagnostics
from compiler.check.sizes import size_evaluator
from compiler.check.type_exprs import ERROR, ErrorType, Signature, is_error, resolve_type
from compiler.core.diagnostics import Diagnostic, DiagnosticBag, Note, Span
from compiler.core.sizes import Dim, Size, instance_name
from compiler.core.types import DType, TensorType, TupleType, Type
from compiler.ir import nodes as ir
from compiler.ir.ops import SURFACE_OPS, OpDef
from compiler.syntax import nodes as syntax

__all__ = ["Signature", "TypeFact", "FunctionResult", "signature_of", "check_function",
           "ERROR"]


@dataclass
class FunctionResult:
    """One function's check.  `function` is None when it has any diagnostic;
    `calls` holds the user functions it calls or handles (its dependencies);
    `call_spans` the span of the first call of each.  A generic function's `function`
    is its symbolic IR (`generic` True), which never goes into a program: its
    instantiations do.  `instances`: the (generic function, sizes) this function's
    calls need, for an instantiation or a monomorphic function (a symbolic check
    records none: its own instantiations will)."""
    function: ir.Function | None
    diagnostics: list[Diagnostic]
    types: list[TypeFact]
    calls: set[str]
    call_spans: dict[str, Span] = field(default_factory=dict)
    generic: bool = False
    instances: set[tuple[str, tuple[int, ...]]] = field(default_factory=set)


# ---- signatures ----------------------------------------------------------------
def size_scope(fn: syntax.FnDef, sizes: Mapping[str, int] | None = None) -> dict[str, Dim]:
    """The sizes a function's types and body see: symbols, or the ints of one instantiation."""
    if sizes is not None:
        return dict(sizes)
    return {s.name: Size.var(s.name) for s in fn.sizes}


def signature_of(fn: syntax.FnDef, sizes: Mapping[str, int] | None = None) -> tuple[Signature, list[Diagnostic]]:
    """The function's type as callers see it.  Broken parts (a bad dtype, a
    tuple-typed parameter) are ERROR in the Signature, and the diagnostics say
    why, so callers still get arity checks without cascades.  check_function
    reports these same diagnostics again; the analysis reports them once.
    A generic function's types hold its sizes as symbols (`sizes`: the ints of one
    instantiation instead)."""
    bag = DiagnosticBag()
    if fn.name in SURFACE_OPS:
        _shadow_warning(bag, fn, SURFACE_OPS[fn.name])
    _check_size_params(bag, fn)
    evaluate = size_evaluator(size_scope(fn, sizes), bag)
    params: list[tuple[str, TensorType | ErrorType]] = []
    seen: dict[str, Span] = {}
    for p in fn.params:
        t = resolve_type(p.type, bag, evaluate)
        if isinstance(t, TupleType):
            bag.error("type-annotation", f"parameter `{p.name}` has tuple type {t}; parameters are tensors",
                      p.type.span)
            t = ERROR
        if p.name in seen:
            bag.error("duplicate", f"parameter `{p.name}` is defined twice in `{fn.name}`", p.name_span,
                      Note("first defined here", seen[p.name]))
        seen.setdefault(p.name, p.name_span)
        params.append((p.name, t))
    ret = resolve_type(fn.ret, bag, evaluate)
    return Signature(fn.name, params, ret, sizes=tuple(s.name for s in fn.sizes)), bag.items


def _check_size_params(bag: DiagnosticBag, fn: syntax.FnDef) -> None:
    seen: dict[str, Span] = {}
    params = {p.name: p.name_span for p in fn.params}
    for s in fn.sizes:
        if s.name in seen:
            bag.error("duplicate", f"size `{s.name}` is declared twice in `{fn.name}`", s.span,
                      Note("first declared here", seen[s.name]))
        elif s.name in params:
            bag.error("duplicate", f"`{s.name}` is both a size and a parameter of `{fn.name}`", s.span,
                      Note("the parameter", params[s.name]))
        seen.setdefault(s.name, s.span)
    if fn.sizes and fn.name == "main":
        bag.error("main", "`main` cannot have size parameters: it is what runs, at one set of sizes",
                  fn.sizes[0].span)


def _shadow_warning(bag: DiagnosticBag, fn: syntax.FnDef, op: OpDef) -> None:
    """A user definition shadows the op's free-call form (`name(x, ..)` and `handle name(..)`),
    so that a program keeps its meaning when a later version adds an op of the same name;
    the method form `x.name(..)` always means the op."""
    if op.operands == 0:   # a builder (iota) has no receiver, so no method form
        reach = "the op has no method form: it is out of reach in this module until the function is renamed"
    else:
        infix = (f"`a {op.infix} b` or " if op.infix and op.operands == 2 else
                 f"`{op.infix}x` or " if op.infix else "")
        reach = f"the op stays reachable as {infix}`x.{op.name}(...)`"
    bag.warning("shadow", f"function `{fn.name}` shadows the built-in op `{op.name}`: `{fn.name}(...)` and "
                f"`handle {fn.name}(...)` call this function", fn.name_span,
                Note(reach))


# ---- one function --------------------------------------------------------------
def check_function(fn: syntax.FnDef, signatures: dict[str, Signature],
                   sizes: Mapping[str, int] | None = None,
                   modules: Mapping[str, frozenset[str] | None] | None = None) -> FunctionResult:
    """Check one function against the signatures of the module's functions
    (its own included).  Reports signature_of(fn)'s diagnostics too.  A generic
    function is checked with its sizes as symbols, or (`sizes`) as one instantiation,
    whose IR function is named `f$8_4` (check/sizes.instance_name).  `modules`: the file's
    imports (name -> the functions its module defines; None for a broken import), whose
    public functions are in `signatures` as `module.f` (docs/language.md, "Modules")."""
    sig, sig_diags = signature_of(fn, sizes)
    scope = size_scope(fn, sizes)
    generic = bool(fn.sizes) and sizes is None
    ck = ExprChecker(fn.name, signatures, DiagnosticBag(list(sig_diags)), sizes=scope, symbolic=generic,
                     modules=modules or {})
    ck.fact(fn.name_span, sig.ret, "fn", fn.name)
    params = _bind_params(ck, fn, sig)
    lets, body = [], fn.body
    while isinstance(body, syntax.Let):
        bindings = _check_pair_let(ck, body) or [_check_let(ck, body)]
        lets += ck.hoisted()         # a long flat chain's segments, bound before their use
        lets += bindings
        body = body.body
    result = ck.expect(body, sig.ret, f"as the result of `{fn.name}`")
    lets += ck.hoisted()
    if not (is_error(result.type) or is_error(sig.ret)) and result.type != sig.ret:
        ck.bag.error("return-type", f"`{fn.name}` is declared to return {sig.ret}, but its body has type "
                     f"{result.type}", body.span, Note("declared here", fn.ret.span))
    function = None
    if not (ck.bag.has_errors() or ck.broken or isinstance(sig.ret, ErrorType) or is_error(sig.ret)):
        name = fn.name if sizes is None or not fn.sizes else instance_name(fn.name, [sizes[s.name] for s in fn.sizes])
        function = ir.Function(name, params, sig.ret, lets, result, fn.span, fn.name_span,
                               tuple(s.name for s in fn.sizes) if generic else ())
        index_errors = index_literal_diagnostics(function)   # constant indices out of range
        if index_errors:
            ck.bag.extend(index_errors)
            function = None
    return FunctionResult(function, ck.bag.items, ck.facts, ck.calls, ck.call_spans, generic,
                          ck.instances)


def _bind_params(ck: ExprChecker, fn: syntax.FnDef, sig: Signature) -> list[ir.Param]:
    if fn.name == "main" and fn.params:
        span = fn.params[0].span.cover(fn.params[-1].span)
        ck.bag.error("main", "`main` takes no parameters; build its inputs from tensor literals "
                     "and pass them to the functions it calls", span)
    params = []
    for p, (_, t) in zip(fn.params, sig.params):
        if p.name not in ck.env:
            ck.env[p.name], ck.def_spans[p.name] = t, p.name_span
        ck.fact(p.name_span, t, "param", p.name)
        params.append(ir.Param(p.name, cast(TensorType, t), p.name_span))   # ERROR: no IR is kept
    return params


def _check_let(ck: ExprChecker, let: syntax.Let) -> ir.Binding:
    """Check one `let PATTERN = EXPR in` and bind its names (ERROR when broken)."""
    value = ck.check(let.value)
    names = [n.id for n in let.names]
    if let.destructure:
        types = _destructure(ck, let, value.type)
    else:
        types = [value.type]
    for n, t in zip(let.names, types):
        if n.id == WILDCARD:      # `_` binds nothing (several may appear in one pattern)
            ck.fact(n.span, t, "let", n.id)
            continue
        if n.id in ck.env:
            ck.bag.error("duplicate", f"`{n.id}` is already defined in `{ck.fn_name}`; let names cannot be rebound",
                         n.span, Note("first defined here", ck.def_spans[n.id]))
            continue
        if n.id in ck.sizes:
            ck.bag.error("duplicate", f"`{n.id}` is a size parameter of `{ck.fn_name}`; choose another name "
                         "for the let", n.span)
            continue
        ck.env[n.id], ck.def_spans[n.id] = t, n.span
        ck.fact(n.span, t, "let", n.id)
    return ir.Binding(names, value, let.destructure, let.span, [n.span for n in let.names])


# `let (values, indices) = x.topk(k) in` (or x.sort(..)): PyTorch's pair, as the values op
# and its index op with the same operand and attributes.
_PAIRS = {"topk": "argtopk", "sort": "argsort"}


def _check_pair_let(ck: ExprChecker, let: syntax.Let) -> list[ir.Binding] | None:
    """`let (v, i) = x.topk(k, ..) in` / `x.sort(..)` (or `topk(x, k)`): two plain lets,
    `v = x.topk(..)` and `i = x.argtopk(..)` (argsort for sort), so that the values stay an
    op a differentiated function can take.  x is checked once (a non-name is bound to a
    hidden let first), the index op adds no diagnostics and no hover facts of its own
    beyond its name; None when the let is not of this form (then it is checked as usual)."""
    call = let.value
    index_call: syntax.Expr
    if isinstance(call, syntax.MethodCall) and call.method in _PAIRS:
        receiver, index_call = call.receiver, replace(call, method=_PAIRS[call.method])
    elif (isinstance(call, syntax.Call) and call.func in _PAIRS and call.func not in ck.signatures
          and call.args):
        receiver, index_call = call.args[0], replace(call, func=_PAIRS[call.func])
    else:
        return None
    if not (let.destructure and len(let.names) == 2):
        return None
    if not isinstance(receiver, syntax.Name):
        ck._settle(receiver)         # checked once, bound to `chain.N`, reused by both ops
    values = _check_let(ck, syntax.Let(let.names[:1], False, call, let.body, let.span))
    name = let.names[1]
    if is_error(values.value.type):  # reported once, by the values op; the indices are ERROR
        if name.id != WILDCARD and name.id not in ck.env:
            ck.env[name.id], ck.def_spans[name.id] = ERROR, name.span
        return [values]
    if name.id == WILDCARD:          # `let (v, _) = ..`: no index op
        if isinstance(values.value.type, TensorType):
            ck.fact(name.span, values.value.type.with_dtype(DType.I64), "let", name.id)
        return [values]
    seen = len(ck.facts)
    indices = _check_let(ck, syntax.Let((name,), False, index_call, let.body, let.span))
    ck.facts[seen:] = [f for f in ck.facts[seen:] if f.span == name.span]
    return [values, indices]


def _destructure(ck: ExprChecker, let: syntax.Let, t: Type | ErrorType) -> list[Type | ErrorType]:
    n = len(let.names)
    if t is ERROR:
        return [ERROR] * n
    pattern = let.names[0].span.cover(let.names[-1].span)
    if not isinstance(t, TupleType):
        ck.bag.error("destructure", f"destructuring let binds {n} name(s), but the value has type {t}, "
                     "which is not a tuple", pattern)
        return [ERROR] * n
    if len(t.items) != n:
        notes = (Note("reverseMode gives (R, one cotangent per floating parameter); I64 parameters get none"),
                 ) if isinstance(let.value, syntax.Handle) else ()
        ck.bag.error("destructure", f"destructuring let binds {n} name(s), but the value has type {t} "
                     f"with {len(t.items)} items", pattern, *notes)
        return [ERROR] * n
    return [ERROR if is_error(i) else i for i in t.items]
