"""The checker's rules for sizes inside a function body (a mixin of check/expr.py's
ExprChecker): size expressions in op arguments (`x.reshape([B, T * D])`, `stop=T - 1`),
sizes used as bare numbers (`1.0 / (B * T)`), and calls of generic functions (their sizes
written or inferred, and the instantiation a call at int sizes records).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import cast

from compiler.check.op_args import Static
from compiler.check.sizes import SizeError, bind_call, display, eval_size, subst_type
from compiler.check.type_exprs import ERROR_TYPE, ErrorType, Signature, ir_type, is_error
from compiler.core.diagnostics import DiagnosticBag, Span
from compiler.core.sizes import SIZE_NUMBER_FUNCTIONS, Dim, Size, SizeNumber, Undecidable, instance_name
from compiler.core.types import DType, TensorType, Type
from compiler.ir import nodes as ir
from compiler.ir.ops import OpDef
from compiler.syntax import nodes as syntax


class SizeRules:
    """Size handling for ExprChecker; the attributes are ExprChecker's fields."""
    bag: DiagnosticBag
    env: dict[str, Type | ErrorType]
    sizes: Mapping[str, Dim]
    broken: bool
    instances: set[tuple[str, tuple[int, ...]]]
    shown: dict[Span, str]
    size_numbers: dict[Span, SizeNumber]
    signatures: dict[str, Signature]
    values: dict[int, int | float | None]

    def _sizes_as_numbers(self, e: syntax.Expr) -> tuple[syntax.Expr, bool]:
        """e with each size parameter used as a value (`1.0 / (B * T)`) replaced by its
        number; True when some size is symbolic (the generic check: the value is a stand-in).
        A flat chain (`N + N + ... + N`) is walked with a loop, innermost link first."""
        links: list[syntax.BinOp | syntax.MethodCall] = []
        while isinstance(e, (syntax.BinOp, syntax.MethodCall)) and id(e) not in self.values:
            links.append(e)
            e = e.lhs if isinstance(e, syntax.BinOp) else e.receiver
        done = self._sizes_link(e, None)
        for link in reversed(links):
            done = self._sizes_link(link, done)
        return done

    def _sizes_link(self, e: syntax.Expr, first: tuple[syntax.Expr, bool] | None) -> tuple[syntax.Expr, bool]:
        """_sizes_as_numbers of one node, `first` being that of its left operand or
        receiver when the caller has it."""
        if id(e) in self.values:         # a link of a flat chain checked already (ExprChecker._settle)
            return e, False
        if isinstance(e, syntax.Name) and e.id in self.sizes and e.id not in self.env:
            value = self.sizes[e.id]
            return syntax.Number(value if isinstance(value, int) else 1, e.span), isinstance(value, Size)
        parts: dict[str, object] = {}
        symbolic = False
        if isinstance(e, syntax.BinOp):
            (lhs, a), (rhs, b) = first or self._sizes_as_numbers(e.lhs), self._sizes_as_numbers(e.rhs)
            parts, symbolic = {"lhs": lhs, "rhs": rhs}, a or b
        elif isinstance(e, syntax.Neg):
            operand, symbolic = self._sizes_as_numbers(e.operand)
            parts = {"operand": operand}
        elif isinstance(e, (syntax.MethodCall, syntax.Call)) and not e.attrs:
            if isinstance(e, syntax.MethodCall):
                receiver, symbolic = first or self._sizes_as_numbers(e.receiver)
                parts = {"receiver": receiver}
            args = [self._sizes_as_numbers(a) for a in e.args]
            parts["args"] = tuple(a for a, _ in args)
            symbolic = symbolic or any(b for _, b in args)
        new_args = cast(tuple[object, ...], parts.get("args", ()))
        same = all(parts[k] is getattr(e, k) for k in parts if k != "args") and \
            all(a is b for a, b in zip(new_args, getattr(e, "args", ())))
        if not parts or same:
            return e, symbolic
        return dataclasses.replace(e, **parts), symbolic   # type: ignore[arg-type]

    def _size_number(self, e: syntax.Expr, number: syntax.Number) -> syntax.Number:
        """A bare-number expression that uses sizes, in a generic body: a stand-in Number
        (its checks are those of any bare number) whose symbolic value `_size_splats`
        gives the splat it becomes (ir.Literal.size_value, computed at run time by a
        dynamic export; an instantiation folds it to a plain number instead)."""
        value = self._symbolic(e)
        if value is None:
            self.bag.error("size", "a size used as a number can be combined only with numbers, other sizes, "
                           f"+ - * / and {', '.join(f for f in SIZE_NUMBER_FUNCTIONS if f != 'neg')} "
                           "(e.g. `1.0 / sqrt(B * T)`)", e.span)
            self.broken = True
        else:
            self.size_numbers[number.span] = value
        return syntax.Number(1 if isinstance(number.value, int) else 1.0, number.span)

    def _symbolic(self, e: syntax.Expr) -> SizeNumber | None:
        if isinstance(e, syntax.Name) and e.id in self.sizes and e.id not in self.env:
            return SizeNumber.of(self.sizes[e.id])
        if isinstance(e, syntax.Number):
            return SizeNumber.of(e.value)
        if isinstance(e, syntax.Neg):
            inner = self._symbolic(e.operand)
            return None if inner is None else SizeNumber("neg", (inner,))
        if isinstance(e, syntax.BinOp) and e.op in ("+", "-", "*"):
            return self._symbolic_chain(e)
        if isinstance(e, syntax.BinOp) and e.op == "/":
            a, b = self._symbolic(e.lhs), self._symbolic(e.rhs)
            return None if a is None or b is None else SizeNumber(e.op, (a, b))
        operand = None
        if isinstance(e, syntax.Call) and len(e.args) == 1 and not e.attrs and e.func not in self.signatures:
            name, operand = e.func, e.args[0]
        elif isinstance(e, syntax.MethodCall) and not e.args and not e.attrs:
            name, operand = e.method, e.receiver
        if operand is not None and name in SIZE_NUMBER_FUNCTIONS:
            inner = self._symbolic(operand)
            return None if inner is None else SizeNumber(name, (inner,))
        return None

    def _symbolic_chain(self, e: syntax.BinOp) -> SizeNumber | None:
        """A `+ -` (or `*`) chain as one n-ary node, its left spine walked by a loop (a
        10,000-term sum must not recurse per term); `a - b` is `a + neg(b)`."""
        kind = ("+", "-") if e.op in ("+", "-") else ("*",)
        terms: list[SizeNumber] = []
        node: syntax.Expr = e
        while isinstance(node, syntax.BinOp) and node.op in kind:
            rhs = self._symbolic(node.rhs)
            if rhs is None:
                return None
            terms.append(SizeNumber("neg", (rhs,)) if node.op == "-" else rhs)
            node = node.lhs
        first = self._symbolic(node)
        if first is None:
            return None
        return SizeNumber(kind[0], (first, *reversed(terms)))

    def _size_splats(self, operands: list[tuple[ir.Expr, Span]]) -> list[tuple[ir.Expr, Span]] | None:
        """The splats of size numbers (`_size_number`) with their symbolic value attached."""
        out = []
        for e, span in operands:
            number = self.size_numbers.get(e.span) if isinstance(e, ir.Literal) and e.scalar else None
            if number is not None and isinstance(e, ir.Literal):
                if e.type.dtype is DType.Bool or (not e.type.is_float and not number.is_integer):
                    self.bag.error("size", f"`{number}` is not a whole number for every size, so it cannot be a "
                                   f"splat of {e.type}", e.span)
                    return None
                e = dataclasses.replace(e, size_value=number)
            out.append((e, span))
        return out

    # ---- sizes in op arguments ------------------------------------------------
    def _sizes_of(self, values: tuple[syntax.SizeExpr, ...], span: Span) -> tuple[Dim, ...] | None:
        try:
            return tuple(eval_size(v, self.sizes, span) for v in values)
        except SizeError as err:
            self.bag.error("size", err.message, err.span, *err.notes)
            self.broken = True
            return None

    def _size_statics(self, statics: list[Static]) -> list[Static] | None:
        """Positional integer lists with their sizes evaluated (`x.reshape([B, T * D])`)."""
        out: list[Static] = []
        for st in statics:
            if isinstance(st, syntax.IntList) and not all(isinstance(v, int) for v in st.values):
                dims = self._sizes_of(st.values, st.span)
                if dims is None:
                    return None
                st = syntax.IntList(dims, st.span)   # type: ignore[arg-type]  # Dims, for the shape rule
            out.append(st)
        return out

    def _size_attrs(self, op: OpDef, attrs: Sequence[syntax.Attr]) -> list[syntax.Attr] | None:
        """Attributes with their sizes evaluated: `stop=T - 1`, `shape=[B, 1]`, and a size
        named alone (`stop=T`) where the attribute is an integer."""
        out: list[syntax.Attr] = []
        for a in attrs:
            spec = op.attr(a.name)
            value: object = a.value
            if isinstance(a.value, syntax.SizeBin):
                dims = self._sizes_of((a.value,), a.value_span)
                value = None if dims is None else dims[0]
            elif isinstance(a.value, tuple) and not all(isinstance(v, int) for v in a.value):
                value = self._sizes_of(a.value, a.value_span)
            elif isinstance(a.value, str) and a.value in self.sizes and spec is not None and spec.kind == "int":
                value = self.sizes[a.value]
            if value is None:
                return None
            out.append(a if value is a.value else dataclasses.replace(a, value=value))   # type: ignore[arg-type]
        return out

    def _call_sizes(self, e: syntax.Call, sig: Signature, args: list[ir.Expr]) -> dict[str, Dim] | None:
        """The sizes of this call of a generic function: written (`f[8, 4](..)`) or inferred
        from the argument types; {} for a monomorphic function; None after a diagnostic."""
        if not sig.sizes:
            if e.sizes is not None:
                self.bag.error("size", f"`{sig.name}` has no size parameters; call it as `{sig.name}(...)`",
                               e.sizes.span)
                return None
            return {}
        if e.sizes is not None:
            dims = self._sizes_of(e.sizes.values, e.sizes.span)
            if dims is None:
                return None
            if len(dims) != len(sig.sizes):
                self.bag.error("size", f"`{sig.name}` has {len(sig.sizes)} size parameter(s) "
                               f"[{', '.join(sig.sizes)}], got {len(dims)}", e.sizes.span)
                return None
            bad = next((i for i, d in enumerate(dims) if not _at_least_one(d)), None)
            if bad is not None:
                self.bag.error("size", f"`{sig.name}`: size {sig.sizes[bad]} = {dims[bad]} must be at least 1",
                               e.sizes.span)
                return None
            return dict(zip(sig.sizes, dims))
        if any(is_error(a.type) for a in args) or any(isinstance(t, ErrorType) for _, t in sig.params):
            return None
        typed = [(t, n) for n, t in sig.params if isinstance(t, TensorType)]
        spans = [(a.type, x.span) for a, x in zip(args, e.args)]
        return bind_call(sig.name, sig.sizes, [(n, t) for t, n in typed], spans, self.bag, e.func_span)

    def _instantiate(self, e: syntax.Call, sig: Signature,
                     env: dict[str, Dim] | None) -> tuple[str, Type, tuple[Dim, ...]]:
        """(IR callee name, result type, sizes) of a call: a generic callee at ints becomes
        its instantiation `f$8_4` (recorded in `instances`); at symbolic sizes it keeps its
        name and the sizes (ir.CallFn.sizes), which a dynamic export passes at run time."""
        if sig.opaque or (sig.sizes and env is None):
            return sig.name, ERROR_TYPE, ()
        if not sig.sizes or env is None:
            return sig.name, ir_type(sig.ret), ()
        ret = ir_type(sig.ret) if isinstance(sig.ret, ErrorType) else subst_type(sig.ret, env)
        values = [env[n] for n in sig.sizes]
        self.shown[e.span] = display(sig.name, sig.sizes, values)
        if all(isinstance(v, int) for v in values):
            ints = tuple(v for v in values if isinstance(v, int))
            self.instances.add((sig.name, ints))
            return instance_name(sig.name, ints), ret, ()
        return sig.name, ret, tuple(values)


def _at_least_one(d: Dim) -> bool:
    try:
        return bool(d >= 1)
    except Undecidable:
        return False


