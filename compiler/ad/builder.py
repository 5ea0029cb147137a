"""The Builder the VJP rules emit backward lets through, the VJP row type, and the small
builders the rules share (compiler/ad/vjp.py holds the table; vjp_elementwise.py,
vjp_layout.py and vjp_scan.py its rules by op family)."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from compiler.core.diagnostics import Span
from compiler.core.types import TensorType
from compiler.ir.nodes import (
    NO_SPAN,
    Binding,
    Expr,
    Function,
    Literal,
    OpApp,
    Param,
    Var,
)
from compiler.ir.ops import OPS


def user_name(name: str) -> str:
    """The name a user wrote, for messages: the AD pass's generated names are
    `<prefix>.<n>.<name>` (Builder.fresh here, and the inliner's fresh names of a helper's
    lets and parameters), so `layer_norm.1.mu` is the helper's `mu`."""
    return name.rsplit(".", 1)[-1]


class Builder:
    """Emits single-op lets with fresh, printable names (`<prefix>.<n>.<hint>`).

    The dot makes generated names impossible to spell in Kina source, so they
    never capture a user's name.  Tests use the same builder (with explicit
    names) to write forward graphs by hand."""

    def __init__(self, prefix: str = "ct") -> None:
        self.prefix = prefix
        self.lets: list[tuple[str, Expr]] = []
        self._values: dict[str, Expr] = {}     # each let's value by name (`value_of`)
        self._count = 0
        # The source span given to emitted nodes: autodiff sets it to the forward
        # node being differentiated, so the backward graph's MLIR `loc`s (and any
        # toolchain error) point at the Kina op the cotangent comes from.
        self.span: Span = NO_SPAN

    def fresh(self, hint: str) -> str:
        self._count += 1
        return f"{self.prefix}.{self._count}.{hint}"

    def bind(self, value: Expr, name: str | None = None, hint: str = "t") -> Var:
        name = name or self.fresh(hint)
        if value.span == NO_SPAN:   # e.g. a ScatterAdd built by ir.scatter_add
            value = dataclasses.replace(value, span=self.span)
        self.lets.append((name, value))
        self._values[name] = value
        return Var(name, value.type, value.span)

    def value_of(self, var: Var) -> Expr | None:
        """The value this builder bound to `var`, or None (a forward value or a parameter):
        what a rule reads to see how a cotangent it receives was made."""
        return self._values.get(var.name)

    def emit(self, op_name: str, args: list[Var], name: str | None = None,
             span: Span = NO_SPAN, **attrs: Any) -> Var:
        """Bind `op_name(args, attrs)`; the result type comes from the op's shape rule.
        `attrs` are the op's attribute values (types.Attrs: what each holds is the op's row)."""
        ty = OPS[op_name].infer([a.tensor_type for a in args], attrs)
        return self.bind(OpApp(op_name, list(args), attrs, ty, span if span != NO_SPAN else self.span),
                         name, op_name)

    def literal(self, ty: TensorType, values: tuple[float, ...] = (), name: str | None = None) -> Var:
        """A constant: () zeros, (x,) splat."""
        return self.bind(Literal(tuple(values), ty, self.span), name, "zeros" if not values else "const")

    def expr(self, value: Expr, name: str | None = None, hint: str = "t") -> Var:
        return self.bind(value, name, hint)

    def function(self, name: str, params: list[Var], result: Expr) -> Function:
        """Wrap the emitted lets into a function (how tests write forward graphs by hand)."""
        return Function(name, [Param(p.name, p.tensor_type) for p in params], result.type,
                        [Binding([n], v, span=v.span) for n, v in self.lets], result)


Rule = Callable[[Builder, OpApp, Var, Var, list[bool]], list[Var | None]]


@dataclass(frozen=True)
class VJP:
    rule: Rule | None
    unsupported: str = ""                                  # why there is no rule
    reject: Callable[[OpApp], str | None] | None = None    # instances the rule does not cover


# ---- small builders ----------------------------------------------------------
def args_of(node: OpApp) -> list[Var]:
    """The operands of a forward op: Vars, since the AD pass differentiates single ops on Vars."""
    args = [a for a in node.args if isinstance(a, Var)]
    if len(args) != len(node.args):
        raise TypeError(f"{node.op}: the AD pass differentiates ops on Vars only")
    return args


def const(b: Builder, like: TensorType, value: float) -> Var:
    return b.literal(like, (value,))


def transpose_last_two(b: Builder, x: Var) -> Var:
    """The transpose a batched matmul's VJP needs: identity on the batch prefix, swap the last two axes."""
    r = x.tensor_type.rank
    return b.emit("transpose", [x], perm=tuple(range(r - 2)) + (r - 1, r - 2))


def sum_to(b: Builder, g: Var, shape: tuple[int, ...]) -> Var:
    """keepdims-sum g over every axis where `shape` has a 1 that g expanded."""
    for axis, (src, dst) in enumerate(zip(shape, g.tensor_type.shape)):
        if src == 1 and dst != 1:
            g = b.emit("reduce_keep", [g], op="sum", axis=axis)
    return g


def only(needs: list[bool], i: int, make: Callable[[], Var]) -> Var | None:
    return make() if needs[i] else None
