"""VJP rules of the scans and sorts: cumsum and cumprod (a reverse cumsum), logsumexp,
sort and topk (g scattered back through argsort / argtopk) (rows in compiler/ad/vjp.py)."""
from __future__ import annotations

from compiler.ad.builder import Builder, args_of, only
from compiler.ir.nodes import (
    OpApp,
    Var,
    scatter_along_axis,
)


def _reverse_cumsum(b: Builder, g: Var, axis: int) -> Var:
    """sum of g[k] over k >= j along axis, as total - cumsum(g) + g (no reverse scan op)."""
    total = b.emit("broadcast", [b.emit("reduce_keep", [g], op="sum", axis=axis)], shape=g.tensor_type.shape)
    return b.emit("add", [b.emit("sub", [total, b.emit("cumsum", [g], axis=axis)]), g])


def _cumsum(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    return [only(needs, 0, lambda: _reverse_cumsum(b, g, node.attrs["axis"]))]


def _cumprod(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    # g_x[j] = sum over k >= j of g[k] y[k] / x[j]: not finite where x[j] = 0 (documented)
    return [only(needs, 0, lambda: b.emit("div", [
        _reverse_cumsum(b, b.emit("mul", [g, y]), node.attrs["axis"]), args_of(node)[0]]))]


def _logsumexp(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    # g_x = g exp(x - y), both broadcast along the axis (softmax(x) * g)
    def make() -> Var:
        x = args_of(node)[0]
        shape = x.tensor_type.shape
        p = b.emit("exp", [b.emit("sub", [x, b.emit("broadcast", [y], shape=shape)])])
        return b.emit("mul", [p, b.emit("broadcast", [g], shape=shape)])
    return [only(needs, 0, make)]


def _sort(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    # y = x taken at argsort(x): g_x = g scattered back to where each value came from
    def make() -> Var:
        x = args_of(node)[0]
        idx = b.emit("argsort", [x], axis=node.attrs["axis"], descending=_SORT_DESCENDING[node.attrs["descending"]])
        return b.expr(scatter_along_axis(g, idx, node.attrs["axis"], x.tensor_type), hint="scatter")
    return [only(needs, 0, make)]


# sort's `descending` -> the argsort its VJP scatters through
_SORT_DESCENDING = {"false": "false", "true": "true"}


def _topk(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    def make() -> Var:
        x = args_of(node)[0]
        idx = b.emit("argtopk", [x], k=node.attrs["k"], axis=node.attrs["axis"])
        return b.expr(scatter_along_axis(g, idx, node.attrs["axis"], x.tensor_type), hint="scatter")
    return [only(needs, 0, make)]
