"""Size parameters in the checker: size expressions -> Dims, and the sizes of a call.

A generic function `fn linear[M, K, N](...)` is checked once with a scope that maps
each size to a symbolic `Size` (core/sizes.py), and once more per instantiation with
the scope mapping each size to an int; everything here takes the scope, so the two
checks are the same code.

`bind_call` infers the sizes of a generic callee from its arguments: each parameter
dimension that is a size (`K`) or linear in one unbound size (`T + 1`, `2*D`) binds it
from the argument's dimension; the others are then checked as equalities.  A size
bound twice to different values is one diagnostic naming both arguments.
"""
from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import cast

from compiler.check.type_exprs import SizeEval, did_you_mean
from compiler.core.diagnostics import DiagnosticBag, Note, Span
from compiler.core.sizes import Bound, Dim, Size, Undecidable, exact_div, nonnegative, solve, subst
from compiler.core.types import TensorType, TupleType, Type
from compiler.syntax import nodes as syntax

SizeScope = Mapping[str, Dim]
# Callee sizes are renamed apart from the caller's while a call is unified.
_FRESH = "'"


class SizeError(Exception):
    """An ill-formed size expression: reported once, at `span`."""

    def __init__(self, message: str, span: Span, *notes: Note) -> None:
        super().__init__(message)
        self.message, self.span, self.notes = message, span, notes


def eval_size(e: syntax.SizeExpr, scope: SizeScope, span: Span) -> Dim:
    """The Dim of a written size (`span`: where a plain int sits), or SizeError."""
    if isinstance(e, syntax.SizeName):
        if e.id not in scope:
            hint = did_you_mean(e.id, scope, "the size ")
            if not scope:
                hint = (Note("declare size parameters after the function name: `fn f[N](...)`"),)
            raise SizeError(f"unknown size `{e.id}`", e.span, *hint)
        return scope[e.id]
    if isinstance(e, syntax.SizeBin):
        a, b = eval_size(e.lhs, scope, e.span), eval_size(e.rhs, scope, e.span)
        if e.op == "+":
            return a + b
        if e.op == "-":
            return a - b
        if e.op == "*":
            return a * b
        q = exact_div(a, b)
        if q is None:
            raise SizeError(f"`{syntax.size_text(e)}` is not a whole number for every size: {b} does not "
                            f"divide {a}", e.span,
                            Note("`/` divides sizes only where it is exact, e.g. `(H * DH) / H`; "
                                 "name the quotient as a size parameter instead"))
        return q
    return e


def eval_sizes(values: Sequence[syntax.SizeExpr], scope: SizeScope, span: Span) -> tuple[Dim, ...]:
    return tuple(eval_size(v, scope, span) for v in values)


def check_dim(d: Dim, span: Span, what: str) -> None:
    """A dimension must be >= 0 for every size (SizeError otherwise)."""
    if not nonnegative(d):
        if isinstance(d, int):
            raise SizeError(f"{what} has a negative dimension ({d}); dimensions are non-negative", span)
        raise SizeError(f"{what}: dimension `{d}` can be negative (sizes are only known to be >= 1)", span)


def size_evaluator(scope: Mapping[str, Dim], bag: DiagnosticBag) -> SizeEval:
    """Evaluates the size expressions of a written type in `scope`, reporting what is wrong."""
    def evaluate(values: tuple[syntax.SizeExpr, ...], texpr: syntax.TensorTypeExpr) -> tuple[Dim, ...] | None:
        try:
            dims = eval_sizes(values, scope, texpr.span)
            for d in dims:
                if not isinstance(d, int):
                    check_dim(d, texpr.span, f"shape [{', '.join(map(str, dims))}]")
            return dims
        except SizeError as err:
            bag.error("size", err.message, err.span, *err.notes)
            return None
    return evaluate


# ---- calls of generic functions ---------------------------------------------------
def fresh(t: Type, names: Sequence[str]) -> Type:
    """A callee's type with its sizes renamed apart from the caller's."""
    return subst_type(t, {n: Size.var(_FRESH + n) for n in names})


def subst_type(t: Type, env: Mapping[str, Dim]) -> Type:
    if isinstance(t, TupleType):
        return TupleType(tuple(subst_type(i, env) for i in t.items))
    return TensorType(t.dtype, cast(tuple[int, ...], tuple(subst(d, env) for d in t.shape)), t.placement)


def subst_tensor(t: TensorType, env: Mapping[str, Dim]) -> TensorType:
    return TensorType(t.dtype, cast(tuple[int, ...], tuple(subst(d, env) for d in t.shape)), t.placement)


def display(name: str, sizes: Sequence[str], values: Sequence[Dim]) -> str:
    """`linear[M=8, K=4, N=16]`."""
    return f"{name}[{', '.join(f'{n}={v}' for n, v in zip(sizes, values))}]"


def bind_call(fn: str, sizes: Sequence[str], params: Sequence[tuple[str, TensorType]],
              args: Sequence[tuple[Type, Span]], bag: DiagnosticBag, call_span: Span) -> dict[str, Dim] | None:
    """The callee's sizes inferred from the argument types (None after a diagnostic).
    Parameters whose argument is broken or not a tensor are skipped (reported elsewhere).
    The unification is core.sizes.solve, which the runtime uses on arrays too."""
    names = [_FRESH + n for n in sizes]
    todo: list[tuple[Hashable, Dim, Dim]] = []   # ((arg, dim), parameter dim, argument dim)
    for i, ((_, ptype), (atype, _)) in enumerate(zip(params, args)):
        p = fresh(ptype, sizes)
        if not isinstance(atype, TensorType) or not isinstance(p, TensorType) or p.rank != atype.rank:
            continue
        todo += [((i, j), pd, ad) for j, (pd, ad) in enumerate(zip(p.shape, atype.shape))]
    sol = solve(names, todo)
    if sol.unsolvable is not None:
        name, key, pd, ad = sol.unsolvable
        i, j = cast(tuple[int, int], key)      # bind_call's keys are (argument, dimension)
        _conflict_unsolvable(bag, fn, name, ptype_dim=pd, got=ad, arg=args[i], i=i, j=j, param=params[i][0])
        return None
    missing = [n for n in names if n not in sol.found]
    if missing:
        bag.error("size", f"`{fn}`: cannot infer size {missing[0][1:]} from the arguments; give the sizes "
                  f"explicitly: `{fn}[{', '.join(sizes)}](...)` with numbers", call_span)
        return None
    for key, want, ad in sol.checks:
        i, j = cast(tuple[int, int], key)
        if want != ad:
            pd = next(p for key, p, _ in todo if key == (i, j))
            _conflict(bag, fn, sol.found, pd, want, args, i, j, [n for n, _ in params])
            return None
    return {n[1:]: sol.found[n].value for n in names}


def _at_least_one(d: Dim) -> bool:
    try:
        return bool(d >= 1)
    except Undecidable:
        return False


def _conflict(bag: DiagnosticBag, fn: str, found: dict[str, Bound], pd: Dim, want: Dim,
              args: Sequence[tuple[Type, Span]], i: int, j: int, params: list[str]) -> None:
    """`linear: size K is 4 from x (dimension 1) but 8 from w (dimension 0)`, at the
    second argument, with a note at the first."""
    got = ir_dim(args[i][0], j)
    if isinstance(pd, Size) and len(pd.terms) == 1 and pd.terms[0][1] == 1 and len(pd.terms[0][0]) == 1:
        name = pd.terms[0][0][0]
        first = found[name]
        arg, dim = cast(tuple[int, int], first.source)   # bind_call's keys are (argument, dimension)
        bag.error("size", f"{fn}: size {name[1:]} is {first.value} from {params[arg]} (dimension "
                  f"{dim}) but {got} from {params[i]} (dimension {j})", args[i][1],
                  Note(f"{name[1:]} is {first.value} from this argument", args[arg][1]))
        return
    bag.error("size", f"{fn}: {params[i]} (argument {i}) has {got} at dimension {j}, but `{_plain(pd)}` "
              f"is {_plain(want)} with the sizes the other arguments give", args[i][1])


def _conflict_unsolvable(bag: DiagnosticBag, fn: str, name: str, ptype_dim: Dim, got: Dim,
                         arg: tuple[Type, Span], i: int, j: int, param: str) -> None:
    bag.error("size", f"{fn}: argument {i} (`{param}`) has {got} at dimension {j}, which no size "
              f"{name[1:]} >= 1 makes equal to `{_plain(ptype_dim)}`", arg[1])


def _plain(d: Dim) -> str:
    return str(d).replace(_FRESH, "")


def ir_dim(t: Type, j: int) -> Dim:
    return t.shape[j] if isinstance(t, TensorType) else 0
