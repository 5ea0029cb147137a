"""The Kina AST: what the parser produces, before any typing.

Every node carries `span`, a character-offset Span into the *whole document*
(the parser shifts per-function spans).  Names that can be clicked on (function
names, parameters, let names, methods, attributes) carry their own span too.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .diagnostics import Span


# ---- types as written -------------------------------------------------------
@dataclass
class TensorTypeExpr:
    dtype: str                  # as written; the checker validates it
    shape: list[int]
    placement: str | None       # None = omitted (means host)
    span: Span


@dataclass
class TupleTypeExpr:
    items: list["TypeExpr"]
    span: Span


TypeExpr = TensorTypeExpr | TupleTypeExpr


# ---- expressions -------------------------------------------------------------
@dataclass
class Name:
    """A reference to a parameter or a let-bound variable."""
    id: str
    span: Span


@dataclass
class IntList:
    """A static integer list, e.g. the `[1, 4, 2, 2]` of `x.reshape([1, 4, 2, 2])`."""
    values: list[int]
    span: Span


@dataclass
class Number:
    """A bare numeric literal (only meaningful as an attribute value)."""
    value: int | float
    span: Span


@dataclass
class Attr:
    """A keyword attribute `name=value`; value is int, float, list[int] or an enum word (str)."""
    name: str
    name_span: Span
    value: int | float | list[int] | str
    value_span: Span
    span: Span


@dataclass
class MethodCall:
    """`receiver.method(args..., attr=value...)`."""
    receiver: "Expr"
    method: str
    method_span: Span
    args: list["Expr"]
    attrs: list[Attr]
    span: Span


@dataclass
class Field:
    """`receiver.name` without parentheses (`x.T`, `x.shape`): Kina has no attributes
    on values; the checker reports it with the Kina spelling."""
    receiver: "Expr"
    name: str
    name_span: Span
    span: Span


@dataclass
class Call:
    """`func(args..., attr=value...)`: a built-in op in free form or a user function."""
    func: str
    func_span: Span
    args: list["Expr"]
    attrs: list[Attr]
    span: Span


@dataclass
class BinOp:
    op: str                     # one of + - * / @
    lhs: "Expr"
    rhs: "Expr"
    op_span: Span
    span: Span


@dataclass
class Neg:
    operand: "Expr"
    span: Span


@dataclass
class Handle:
    """`handle f(args) with handler`."""
    call: Call
    handler: str
    handler_span: Span
    span: Span


@dataclass
class TensorLit:
    """`Tensor[F32, [2, 2]] { 1.0, 2.0, 3.0, 4.0 }`; `{}` gives values == []."""
    type: TensorTypeExpr
    values: list[float]
    span: Span


@dataclass
class TupleExpr:
    items: list["Expr"]
    span: Span


@dataclass
class Let:
    """`let x = value in body` or `let (a, b) = value in body`."""
    names: list[Name]           # binding occurrences (with their spans)
    destructure: bool           # True for the `(a, b)` form, even with one name
    value: "Expr"
    body: "Expr"
    span: Span


Expr = Name | IntList | Number | MethodCall | Field | Call | BinOp | Neg | Handle | TensorLit | TupleExpr | Let


# ---- items -------------------------------------------------------------------
@dataclass
class Param:
    name: str
    name_span: Span
    type: TypeExpr
    span: Span


@dataclass
class FnDef:
    name: str
    name_span: Span
    params: list[Param]
    ret: TypeExpr
    body: Expr
    span: Span                  # from `fn` to the closing brace


@dataclass
class Module:
    functions: list[FnDef] = field(default_factory=list)
    span: Span = field(default_factory=lambda: Span(0, 0))
