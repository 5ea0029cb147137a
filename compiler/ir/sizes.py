"""Sizes in the IR of dynamic functions: substituting values for size parameters.

A dynamic function (`Function.sizes` non-empty) holds its sizes as Dims in its types,
in the attributes of its ops (`reshape(shape=[B*T, D])`, `slice(stop=T - 1)`, a
`dest_ty`), in the splats computed from sizes (`Literal.size_value`) and in the sizes of
its calls of other generic functions (`CallFn.sizes`).  `subst_function` replaces some
of them at once: the AD pass inlines a callee into a caller's namespace with it, and a
build binds the `--size` values of a partly bound export with it.  A call whose sizes
all become ints is then a call of the monomorphic instance (`f$4_8`), which the caller
of subst_function must make (the `requests` it returns).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, cast

from compiler.core.sizes import Dim, Size, instance_name, subst
from compiler.core.types import TensorType, TupleType, Type
from compiler.ir.nodes import CallFn, Expr, Function, Handle, Literal, MakeTuple, OpApp, Param, Var

__all__ = ["subst_function", "subst_expr", "subst_type", "free_sizes", "map_calls"]

Env = Mapping[str, Dim]


def subst_type(t: Type, env: Env) -> Type:
    if isinstance(t, TupleType):
        return TupleType(tuple(subst_type(i, env) for i in t.items))
    return TensorType(t.dtype, cast(tuple[int, ...], tuple(subst(d, env) for d in t.shape)), t.placement)


def _attr(value: Any, env: Env) -> Any:
    if isinstance(value, Size):
        return subst(value, env)
    if isinstance(value, tuple):
        return tuple(_attr(v, env) for v in value)
    if isinstance(value, TensorType):
        return subst_type(value, env)
    return value


class _Subst:
    def __init__(self, env: Env) -> None:
        self.env = env
        self.requests: set[tuple[str, tuple[int, ...]]] = set()

    def expr(self, e: Expr) -> Expr:
        env = self.env
        if isinstance(e, Var):
            return dataclasses.replace(e, type=subst_type(e.type, env))
        if isinstance(e, Literal):
            t = cast(TensorType, subst_type(e.type, env))
            if e.size_value is None:
                return dataclasses.replace(e, type=t)
            number = e.size_value.subst(env)
            value = number.constant()
            if value is None:
                return dataclasses.replace(e, type=t, size_value=number)
            return dataclasses.replace(e, type=t, values=(int(value) if not t.is_float else float(value),),
                                       size_value=None)
        if isinstance(e, MakeTuple):
            return dataclasses.replace(e, items=[self.expr(i) for i in e.items],
                                       type=cast(TupleType, subst_type(e.type, env)))
        if isinstance(e, OpApp):
            return dataclasses.replace(e, args=[self.expr(a) for a in e.args], type=subst_type(e.type, env),
                                       attrs={k: _attr(v, env) for k, v in e.attrs.items()})
        if isinstance(e, (CallFn, Handle)):
            sizes = tuple(subst(d, env) for d in e.sizes)
            fn = e.fn
            if sizes and all(isinstance(d, int) for d in sizes):
                ints = cast(tuple[int, ...], sizes)
                self.requests.add((fn, ints))
                fn, sizes = instance_name(fn, ints), ()
            return dataclasses.replace(e, fn=fn, sizes=sizes, args=[self.expr(a) for a in e.args],
                                       type=subst_type(e.type, env))
        raise TypeError(f"cannot substitute sizes in {type(e).__name__}")


def subst_expr(e: Expr, env: Env) -> tuple[Expr, set[tuple[str, tuple[int, ...]]]]:
    s = _Subst(env)
    return s.expr(e), s.requests


def subst_function(fn: Function, env: Env, name: str | None = None) -> tuple[Function, set[tuple[str, tuple[int, ...]]]]:
    """fn with the sizes of env replaced (simultaneously) everywhere; its `sizes` keep the
    names env does not bind.  Returns the instances its calls now need."""
    s = _Subst(env)
    params = [Param(p.name, cast(TensorType, subst_type(p.type, env)), p.span) for p in fn.params]
    lets = [dataclasses.replace(b, value=s.expr(b.value)) for b in fn.lets]
    out = dataclasses.replace(fn, name=name or fn.name, params=params, ret_type=subst_type(fn.ret_type, env),
                              lets=lets, result=s.expr(fn.result),
                              sizes=tuple(n for n in fn.sizes if n not in env))
    return out, s.requests


def free_sizes(t: Type) -> set[str]:
    """The size names in a type."""
    if isinstance(t, TupleType):
        return set().union(*(free_sizes(i) for i in t.items)) if t.items else set()
    return {n for d in t.shape if isinstance(d, Size) for n in cast(Size, d).names}


def map_calls(fn: Function, target: Callable[[CallFn | Handle], str]) -> Function:
    """fn with each call and handle renamed to `target(node)` (nested arguments too)."""
    def go(e: Expr) -> Expr:
        if isinstance(e, (CallFn, Handle)):
            return dataclasses.replace(e, fn=target(e), args=[go(a) for a in e.args])
        if isinstance(e, OpApp):
            return dataclasses.replace(e, args=[go(a) for a in e.args])
        if isinstance(e, MakeTuple):
            return dataclasses.replace(e, items=[go(i) for i in e.items])
        return e
    return dataclasses.replace(fn, lets=[dataclasses.replace(b, value=go(b.value)) for b in fn.lets],
                               result=go(fn.result))
