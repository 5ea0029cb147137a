"""The checker's rules for calls of user functions and `handle f(..) with reverseMode` (a
mixin of check/expr.py's ExprChecker): arity, argument types against the callee's
Signature (at a generic callee's sizes), recursion, qualified names that no import
provides, and the reverseMode result type (R, g0, .., gk-1).
"""
from __future__ import annotations

from collections.abc import Mapping

from compiler.check.size_rules import SizeRules
from compiler.check.sizes import subst_tensor, subst_type
from compiler.check.type_exprs import ERROR_TYPE, ErrorType, Signature, did_you_mean, is_error, mismatch
from compiler.core.diagnostics import Note, Span
from compiler.core.sizes import Dim
from compiler.core.types import TensorType, TupleType, Type
from compiler.ir import nodes as ir
from compiler.ir.nodes import HANDLERS
from compiler.ir.ops import OPS
from compiler.syntax import nodes as syntax


class CallRules(SizeRules):
    """Calls and handles for ExprChecker; the attributes are ExprChecker's fields."""
    fn_name: str
    calls: set[str]
    call_spans: dict[str, Span]
    modules: Mapping[str, frozenset[str] | None]

    # ExprChecker's own entry points, which the call rules recurse into
    def check(self, e: syntax.Expr) -> ir.Expr:
        raise NotImplementedError

    def expect(self, e: syntax.Expr, expected: Type | ErrorType | None, where: str) -> ir.Expr:
        raise NotImplementedError

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
