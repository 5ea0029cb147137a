"""The Kina AST: what the parser produces, before any typing.

Every node carries `span`, a character-offset Span into the *whole document*
(the parser shifts per-function spans).  Names that can be clicked on (function
names, parameters, let names, methods, attributes) carry their own span too.

Nodes are frozen and hold tuples, not lists: parse.parse_local caches one AST per
item text for the whole process, and the language server's snapshots and every
analysis share those trees, so nothing may change one in place (a changed copy is
made with dataclasses.replace, or ast_walk.shift for spans).
"""
from __future__ import annotations

from dataclasses import dataclass

from compiler.core.diagnostics import Span


# ---- types as written -------------------------------------------------------
@dataclass(frozen=True)
class TensorTypeExpr:
    dtype: str                  # as written; the checker validates it
    shape: tuple[int, ...]
    placement: str | None       # None = omitted (means host)
    span: Span


@dataclass(frozen=True)
class TupleTypeExpr:
    items: tuple[TypeExpr, ...]
    span: Span


TypeExpr = TensorTypeExpr | TupleTypeExpr


# ---- expressions -------------------------------------------------------------
@dataclass(frozen=True)
class Name:
    """A reference to a parameter or a let-bound variable."""
    id: str
    span: Span


@dataclass(frozen=True)
class IntList:
    """A static integer list, e.g. the `[1, 4, 2, 2]` of `x.reshape([1, 4, 2, 2])`."""
    values: tuple[int, ...]
    span: Span


@dataclass(frozen=True)
class Number:
    """A bare numeric literal (only meaningful as an attribute value)."""
    value: int | float
    span: Span


@dataclass(frozen=True)
class Attr:
    """A keyword attribute `name=value`; value is int, float, tuple[int, ...] or an enum word (str)."""
    name: str
    name_span: Span
    value: int | float | tuple[int, ...] | str
    value_span: Span
    span: Span


@dataclass(frozen=True)
class MethodCall:
    """`receiver.method(args..., attr=value...)`."""
    receiver: Expr
    method: str
    method_span: Span
    args: tuple[Expr, ...]
    attrs: tuple[Attr, ...]
    span: Span


@dataclass(frozen=True)
class Field:
    """`receiver.name` without parentheses (`x.T`, `x.shape`): Kina has no attributes
    on values; the checker reports it with the Kina spelling."""
    receiver: Expr
    name: str
    name_span: Span
    span: Span


@dataclass(frozen=True)
class Call:
    """`func(args..., attr=value...)`: a built-in op in free form or a user function."""
    func: str
    func_span: Span
    args: tuple[Expr, ...]
    attrs: tuple[Attr, ...]
    span: Span


@dataclass(frozen=True)
class BinOp:
    op: str                     # one of + - * / @
    lhs: Expr
    rhs: Expr
    op_span: Span
    span: Span


@dataclass(frozen=True)
class Neg:
    operand: Expr
    span: Span


@dataclass(frozen=True)
class Handle:
    """`handle f(args) with handler`."""
    call: Call
    handler: str
    handler_span: Span
    span: Span


@dataclass(frozen=True)
class TensorLit:
    """`Tensor[F32, [2, 2]] { 1.0, 2.0, 3.0, 4.0 }`; `{}` gives values == ()."""
    type: TensorTypeExpr
    values: tuple[float, ...]
    span: Span


@dataclass(frozen=True)
class TupleExpr:
    items: tuple[Expr, ...]
    span: Span


@dataclass(frozen=True)
class Let:
    """`let x = value in body` or `let (a, b) = value in body`."""
    names: tuple[Name, ...]           # binding occurrences (with their spans)
    destructure: bool           # True for the `(a, b)` form, even with one name
    value: Expr
    body: Expr
    span: Span


Expr = Name | IntList | Number | MethodCall | Field | Call | BinOp | Neg | Handle | TensorLit | TupleExpr | Let


# ---- items -------------------------------------------------------------------
@dataclass(frozen=True)
class Param:
    name: str
    name_span: Span
    type: TypeExpr
    span: Span


@dataclass(frozen=True)
class FnDef:
    name: str
    name_span: Span
    params: tuple[Param, ...]
    ret: TypeExpr
    body: Expr
    span: Span                  # from `fn` to the closing brace


@dataclass(frozen=True)
class Module:
    functions: tuple[FnDef, ...] = ()
    span: Span = Span(0, 0)
