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


# ---- size expressions (shapes, sizes, size attributes) ------------------------
@dataclass(frozen=True)
class SizeName:
    """A size parameter used in a size expression: the `T` of `[B, T + 1]`."""
    id: str
    span: Span


@dataclass(frozen=True)
class SizeBin:
    """`lhs op rhs` of sizes, op one of + - * /."""
    op: str
    lhs: SizeExpr
    rhs: SizeExpr
    span: Span


# A size as written: a plain integer (most shapes), or an expression over size parameters.
SizeExpr = int | SizeName | SizeBin


def size_names(e: SizeExpr) -> list[SizeName]:
    """The size parameters a size expression mentions, in order."""
    if isinstance(e, SizeName):
        return [e]
    if isinstance(e, SizeBin):
        return size_names(e.lhs) + size_names(e.rhs)
    return []


def size_text(e: SizeExpr) -> str:
    """The canonical spelling of a size expression (the formatter's and the messages')."""
    if isinstance(e, SizeName):
        return e.id
    if isinstance(e, SizeBin):
        def side(x: SizeExpr, right: bool) -> str:
            loose = isinstance(x, SizeBin) and x.op in "+-" and (e.op in "*/" or right and e.op == "-")
            tight = isinstance(x, SizeBin) and right and e.op == "/"
            return f"({size_text(x)})" if loose or tight else size_text(x)
        return f"{side(e.lhs, False)} {e.op} {side(e.rhs, True)}"
    return str(e)


# ---- types as written -------------------------------------------------------
@dataclass(frozen=True)
class TensorTypeExpr:
    dtype: str                  # as written; the checker validates it
    shape: tuple[SizeExpr, ...]
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
    """A static integer list, e.g. the `[1, 4, 2, 2]` of `x.reshape([1, 4, 2, 2])` (or of sizes:
    `x.reshape([B, T * D])`)."""
    values: tuple[SizeExpr, ...]
    span: Span


@dataclass(frozen=True)
class Number:
    """A bare numeric literal (only meaningful as an attribute value)."""
    value: int | float
    span: Span


@dataclass(frozen=True)
class Attr:
    """A keyword attribute `name=value`; value is int, float, a tuple of sizes, an enum word
    (str; also a lone size parameter, `stop=T`) or a size expression (`stop=T - 1`)."""
    name: str
    name_span: Span
    value: int | float | tuple[SizeExpr, ...] | str | SizeBin
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
    """`func(args..., attr=value...)`: a built-in op in free form or a user function.
    `sizes`: the explicit size arguments of a generic function, `linear[8, 4, 16](x, w)`."""
    func: str
    func_span: Span
    args: tuple[Expr, ...]
    attrs: tuple[Attr, ...]
    span: Span
    sizes: IntList | None = None


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
    """`Tensor[F32, [2, 2]] { 1.0, 2.0, 3.0, 4.0 }`; `{}` gives values == ().  The parser also
    sets `value_spans` (one Span per value) as a plain attribute, not a field: it is not part
    of the tree's shape (the formatter compares trees without spans); read it with
    `value_span(lit, i)`."""
    type: TensorTypeExpr
    values: tuple[float, ...]
    span: Span


def value_span(lit: TensorLit, i: int) -> Span:
    """The span of the i-th value of a parsed tensor literal (the literal's own span when
    the node was not made by the parser)."""
    spans: tuple[Span, ...] = getattr(lit, "value_spans", ())
    return spans[i] if i < len(spans) else lit.span


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
class SizeParam:
    """A size parameter of a generic function: the `M` of `fn linear[M, K, N](...)`."""
    name: str
    span: Span


@dataclass(frozen=True)
class FnDef:
    name: str
    name_span: Span
    params: tuple[Param, ...]
    ret: TypeExpr
    body: Expr
    span: Span                  # from `fn` to the closing brace
    sizes: tuple[SizeParam, ...] = ()   # `fn f[B, T](...)`: a size-generic function


@dataclass(frozen=True)
class Module:
    functions: tuple[FnDef, ...] = ()
    span: Span = Span(0, 0)
