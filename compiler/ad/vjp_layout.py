"""VJP rules of contractions, layout, reductions, normalisations and indexing: matmul,
transpose, reshape, broadcast, slice, concat, reduce_keep, softmax, log_softmax,
take_along_axis, gather (rows in compiler/ad/vjp.py)."""
from __future__ import annotations

from compiler.ad.builder import Builder, args_of, only, sum_to, transpose_last_two, user_name
from compiler.core.sizes import Dim, Undecidable
from compiler.core.types import shape_text
from compiler.ir.nodes import (
    OpApp,
    Var,
    as_tensor,
    scatter_add,
    scatter_along_axis,
)


# ---- rules: contractions and layout ---------------------------------------------
def _matmul(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    a, c = args_of(node)                       # y = a @ c: g_a = g @ c^T, g_c = a^T @ g (batch prefix kept)
    return [only(needs, 0, lambda: b.emit("matmul", [g, transpose_last_two(b, c)])),
            only(needs, 1, lambda: b.emit("matmul", [transpose_last_two(b, a), g]))]


def _transpose(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    perm = node.attrs["perm"]
    inverse = tuple(sorted(range(len(perm)), key=lambda i: perm[i]))
    return [only(needs, 0, lambda: b.emit("transpose", [g], perm=inverse))]


def _reshape(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    return [only(needs, 0, lambda: b.emit("reshape", [g], shape=args_of(node)[0].tensor_type.shape))]


def _broadcast(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    return [only(needs, 0, lambda: sum_to(b, g, args_of(node)[0].tensor_type.shape))]


def _reject_broadcast(node: OpApp) -> str | None:
    arg = node.args[0]
    x, shape = as_tensor(arg.type), tuple(node.attrs["shape"])
    if len(shape) == x.rank:
        return None
    unit = shape_text([1] * (len(shape) - x.rank) + list(x.shape))
    name = user_name(arg.name) if isinstance(arg, Var) else "x"
    return (f"broadcast of {x} to rank-{len(shape)} shape {shape_text(shape)} changes the rank, and reverseMode "
            f"only differentiates same-rank broadcast (expanding axes of size 1); add the axes with a "
            f"reshape first: `let t = {name}.reshape({unit}) in t.broadcast({shape_text(shape)})`")



def _may_be_positive(d: Dim) -> bool:
    """d > 0 for some sizes (a dynamic function's part of `N - 1` elements may be empty:
    concatenating an empty part is harmless, dropping a non-empty one is not)."""
    try:
        return bool(d > 0)
    except Undecidable:
        return True


def _slice(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    # g_x = zeros with g inserted: concat(zeros before, g, zeros after) along the axis.
    def make() -> Var:
        x = args_of(node)[0].tensor_type
        axis, start, stop = node.attrs["axis"], node.attrs["start"], node.attrs["stop"]
        parts = []
        for lo, hi in ((0, start), (start, stop), (stop, x.shape[axis])):
            if lo == start and hi == stop:
                parts.append(g)
            elif _may_be_positive(hi - lo):
                parts.append(b.literal(x.with_shape(x.shape[:axis] + (hi - lo,) + x.shape[axis + 1:])))
        return parts[0] if len(parts) == 1 else b.emit("concat", parts, axis=axis)
    return [only(needs, 0, make)]


def _concat(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    axis, out, offset = node.attrs["axis"], [], 0
    for i, arg in enumerate(args_of(node)):
        n = arg.tensor_type.shape[axis]
        out.append(b.emit("slice", [g], axis=axis, start=offset, stop=offset + n) if needs[i] else None)
        offset += n
    return out


def _reduce_keep(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    # y = reduce_keep(op=sum, axis=i) x  =>  g_x = broadcast(shape(x), g).
    return [only(needs, 0, lambda: b.emit("broadcast", [g], shape=args_of(node)[0].tensor_type.shape))]


def _extremum_share(b: Builder, x: Var, y: Var, g: Var, axis: int) -> Var:
    """The cotangent of x in y = max or min of x along axis (keepdims): g goes to the
    elements equal to y, split evenly among ties (torch.amax / amin's rule)."""
    shape = x.tensor_type.shape
    hit = b.emit("cast", [b.emit("eq", [x, b.emit("broadcast", [y], shape=shape)])], dtype=x.tensor_type.dtype.value)
    share = b.emit("div", [g, b.emit("reduce_keep", [hit], op="sum", axis=axis)])
    return b.emit("mul", [hit, b.emit("broadcast", [share], shape=shape)])


def _reduce_keep_rule(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    if node.attrs["op"] in ("max", "min"):
        return [only(needs, 0, lambda: _extremum_share(b, args_of(node)[0], y, g, node.attrs["axis"]))]
    return _reduce_keep(b, node, y, g, needs)


# reduce_keep's op: None where _reduce_keep_rule is its VJP, else why reverseMode rejects it.
_REDUCE_KEEP_REJECT: dict[str, str | None] = {
    "sum": None,
    "mean": "reduce_keep(op=mean) cannot be differentiated under reverseMode (there is no reduce_mean VJP)",
    "max": None,
    "min": None,
}


def _reject_reduce_keep(node: OpApp) -> str | None:
    why = _REDUCE_KEEP_REJECT[node.attrs["op"]]
    if why is None or node.attrs["op"] != "mean":
        return why
    return f"{why}; {_mean_as_sum(node)}"


def _mean_as_sum(node: OpApp) -> str:
    """The rewrite that reverseMode accepts, with the axis's size written out: a number, or
    the size expression of a generic function (sizes used as numbers, docs/language.md)."""
    axis = node.attrs["axis"]
    shape = args_of(node)[0].tensor_type.shape
    if not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
        return "write it as reduce_keep(op=sum) times 1.0 / n, n the size of the axis"
    n = str(shape[axis])
    n = n if n.isidentifier() or n.isdigit() else f"({n})"
    return f"write it as reduce_keep(op=sum, axis={axis}) times 1.0 / {n} (the size of axis {axis})"


# ---- rules: normalisations and indexing ------------------------------------------
def _softmax(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    # g_x = y * (g - sum(g * y, axis) broadcast)
    def make() -> Var:
        axis = node.attrs["axis"]
        dot = b.emit("reduce_keep", [b.emit("mul", [g, y])], op="sum", axis=axis)
        return b.emit("mul", [y, b.emit("sub", [g, b.emit("broadcast", [dot], shape=y.tensor_type.shape)])])
    return [only(needs, 0, make)]


def _log_softmax(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    # g_x = g - exp(y) * sum(g, axis) broadcast
    def make() -> Var:
        axis = node.attrs["axis"]
        total = b.emit("broadcast", [_row_sums(b, g, axis)], shape=y.tensor_type.shape)
        return b.emit("sub", [g, b.emit("mul", [b.emit("exp", [y]), total])])
    return [only(needs, 0, make)]


def _row_sums(b: Builder, g: Var, axis: int) -> Var:
    """reduce_keep(g, sum, axis); or, when g is take_along_axis's cotangent of one pick per
    row along `axis` (a cross-entropy's `nll_loss(log_softmax(x), targets)`), the picks'
    cotangent itself: the row holds that value and zeros, so the sum is exact, and the
    [N, V] pass that summed the one-hot rows is gone (1.3 ms of the large StoryLM step)."""
    made, t = b.value_of(g), g.tensor_type
    summed = t.with_shape(1 if d == axis else n for d, n in enumerate(t.shape))   # IR axes are normalised
    if isinstance(made, OpApp) and made.op == "scatter_along_axis" and made.attrs["axis"] == axis:
        picks, idx = made.args
        if isinstance(picks, Var) and isinstance(idx, Var) and picks.tensor_type == summed \
                and idx.tensor_type.shape == summed.shape:
            return picks
    return b.emit("reduce_keep", [g], op="sum", axis=axis)


def _take_along_axis(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    x, idx = args_of(node)
    return [only(needs, 0, lambda: b.expr(scatter_along_axis(g, idx, node.attrs["axis"], x.tensor_type), hint="scatter")),
            None]


def _gather(b: Builder, node: OpApp, y: Var, g: Var, needs: list[bool]) -> list[Var | None]:
    # g_values[v, d] = sum over indices[i] = v of g[i ++ [d]]  (ScatterAdd, duplicates add).
    # ScatterAdd's rule wants indices of rank >= 1: a rank-0 index (one row) is scattered as
    # indices [1] and updates [1, D].
    values, idx = args_of(node)

    def make() -> Var:
        i, upd = idx, g
        if idx.tensor_type.rank == 0:
            i = b.emit("reshape", [idx], shape=(1,))
            upd = b.emit("reshape", [g], shape=(1,) + g.tensor_type.shape)
        return b.expr(scatter_add(upd, i, values.tensor_type), hint="scatter_add")
    return [only(needs, 0, make), None]
