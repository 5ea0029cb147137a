"""The typed IR: one let chain per function, every value typed.

The checker lowers the AST into this form.  Expressions stay *trees* (a
method chain `x.reshape(..).transpose(..)` is an OpApp whose argument is an
OpApp), because reverseMode's restrictions are about that structure; every
node has its `type` and `span`.  Built-in ops, including the IR-internal
`scatter_add` and `scatter_along_axis`, are all `OpApp`s named by their row in
ops.OPS; attributes are plain Python values (ints, tuples of ints, enum
strings, or a TensorType for `dest_ty`).
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from compiler.core.diagnostics import Span
from compiler.core.sizes import Dim, SizeNumber
from compiler.core.types import TensorType, TupleType, Type

NO_SPAN = Span(0, 0)


def as_tensor(t: Type) -> TensorType:
    """t, known to be a tensor type where the caller stands (a TypeError if it is a tuple)."""
    if not isinstance(t, TensorType):
        raise TypeError(f"expected a tensor type, got {t}")
    return t


@dataclass(frozen=True)
class Var:
    name: str
    type: Type
    span: Span = NO_SPAN

    @property
    def tensor_type(self) -> TensorType:
        """The type of a Var that holds a tensor (every Var a backward graph binds)."""
        return as_tensor(self.type)


@dataclass(frozen=True)
class OpApp:
    op: str                         # key of ops.OPS
    args: list[Expr]              # tensor operands
    attrs: dict[str, Any]           # static attributes, normalised by the checker
    type: Type
    span: Span = NO_SPAN


@dataclass(frozen=True)
class CallFn:
    """A call of a user function (by name).  `sizes`: a call of a size-generic function at
    symbolic sizes (in a dynamic function): the callee's size values, in the order of its
    `Function.sizes`, as Dims of the caller's sizes; () for every other call."""
    fn: str
    args: list[Expr]
    type: Type
    span: Span = NO_SPAN
    sizes: tuple[Dim, ...] = ()


# The effect handlers of the language: the checker accepts these names, the AD stage
# (compiler/ad) implements each one.
HANDLERS = ("reverseMode",)


def is_export(name: str) -> bool:
    """A user function, which a library exports.  Generated functions (`f.rev`: the AD
    pass's) and instantiations of generic functions (`linear$8_4_16`: check/instances.py)
    are private; Kina names hold neither `.` nor `$`."""
    return "." not in name and "$" not in name


@dataclass(frozen=True)
class Handle:
    """`handle fn(args) with reverseMode`; type is (R, g0, .., gk-1) or R when k = 0.

    The autodiff stage replaces it by a CallFn of a generated function."""
    fn: str
    args: list[Expr]
    handler: str
    type: Type
    span: Span = NO_SPAN
    sizes: tuple[Dim, ...] = ()     # as CallFn.sizes


@dataclass(frozen=True)
class Literal:
    """A constant tensor.  values: () = zeros, (x,) = splat, else row-major payload.
    `scalar`: written as a bare number operand (`x * 0.5`), a splat of the other operand's type."""
    values: tuple[float, ...]
    type: TensorType
    span: Span = NO_SPAN
    scalar: bool = False
    # A splat computed from sizes (`x * (1.0 / (B * T))` in a dynamic function): values
    # holds a stand-in, the back end computes this from the sizes of each call.
    size_value: SizeNumber | None = None


@dataclass(frozen=True)
class MakeTuple:
    items: list[Expr]
    type: TupleType
    span: Span = NO_SPAN


Expr = Var | OpApp | CallFn | Handle | Literal | MakeTuple


@dataclass(frozen=True)
class Binding:
    """One `let`: a single name, or a destructuring of a tuple value."""
    names: list[str]
    value: Expr
    destructure: bool = False
    span: Span = NO_SPAN
    name_spans: list[Span] = field(default_factory=list)

    @property
    def types(self) -> list[Type]:
        if self.destructure:
            assert isinstance(self.value.type, TupleType)
            return list(self.value.type.items)
        return [self.value.type]


@dataclass(frozen=True)
class Param:
    name: str
    type: TensorType
    span: Span = NO_SPAN


@dataclass(frozen=True)
class Function:
    name: str
    params: list[Param]
    ret_type: Type
    lets: list[Binding]
    result: Expr
    span: Span = NO_SPAN
    name_span: Span = NO_SPAN
    # A dynamic function (a size-generic function compiled for every size): its size
    # parameters, which its types, attributes and calls use as Dims; () when monomorphic.
    sizes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Program:
    functions: dict[str, Function] = field(default_factory=dict)


# ---- helpers used by passes and tests ----------------------------------------
def scatter_add(updates: Expr, indices: Expr, dest_ty: TensorType, span: Span = NO_SPAN) -> OpApp:
    """ScatterAdd(updates, indices, dest_ty) : dest_ty, the IR-internal VJP of gather
    (zeros of dest_ty with each updates row added at its index; duplicates add)."""
    return OpApp("scatter_add", [updates, indices], {"dest_ty": dest_ty}, dest_ty, span)


def scatter_along_axis(updates: Expr, indices: Expr, axis: int, dest_ty: TensorType,
                       span: Span = NO_SPAN) -> OpApp:
    """ScatterAlongAxis: zeros(dest_ty) with updates added at indices along axis (VJP of take_along_axis)."""
    return OpApp("scatter_along_axis", [updates, indices], {"axis": axis, "dest_ty": dest_ty}, dest_ty, span)


def walk(expr: Expr) -> Iterator[Expr]:
    """Pre-order iteration over an expression tree."""
    yield expr
    for child in children(expr):
        yield from walk(child)


def children(expr: Expr) -> list[Expr]:
    if isinstance(expr, (OpApp, CallFn, Handle)):
        return list(expr.args)
    if isinstance(expr, MakeTuple):
        return list(expr.items)
    return []


def reachable(program: Program, roots: Iterable[str]) -> Program:
    """The functions of `program` that `roots` call or handle, directly or not (the roots
    that exist in it included), in program order."""
    seen: set[str] = set()
    todo = [r for r in roots if r in program.functions]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        fn = program.functions[name]
        for root in [b.value for b in fn.lets] + [fn.result]:
            todo += [e.fn for e in walk(root) if isinstance(e, (CallFn, Handle)) and e.fn in program.functions]
    return Program({n: f for n, f in program.functions.items() if n in seen})
