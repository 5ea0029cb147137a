"""Index literals: a constant index out of its table's range is an `index` error.

The index operand of gather, take_along_axis, scatter_add and scatter_along_axis (the op
rows with an `index_bound`, ir/ops.py) is known at compile time when it is a tensor
literal: written in place, or a let name bound to one, possibly reshaped, transposed or
broadcast on the way (those keep every element; a slice may drop the bad one, so it is
not followed, and neither are calls: the library's own bounds check, which returns an
error, covers what is not checked here).  Every element must lie in [0, bound): the
error sits at the literal and names the value, its position and the bound.
"""
from __future__ import annotations

from compiler.core.diagnostics import Diagnostic, Note
from compiler.core.sizes import Undecidable
from compiler.ir import nodes as ir
from compiler.ir.ops import OPS

# Layout ops that keep every element of their operand (the index values pass unchanged).
_KEEP_ALL = frozenset({"reshape", "transpose", "broadcast"})


def index_literal_diagnostics(fn: ir.Function) -> list[Diagnostic]:
    """An `index` error for every constant index operand of `fn` with a value outside its op's range."""
    bound_to = {b.names[0]: b.value for b in fn.lets if not b.destructure}
    diags: list[Diagnostic] = []
    seen: set[int] = set()
    for root in [b.value for b in fn.lets] + [fn.result]:
        for node in ir.walk(root):
            if not isinstance(node, ir.OpApp) or (rule := OPS[node.op].index_bound) is None:
                continue
            literal = _constant(node.args[1], bound_to)
            if literal is None or id(literal) in seen:
                continue
            bound = rule([ir.as_tensor(a.type) for a in node.args], node.attrs)
            bad = _first_outside(literal, bound)
            if bad is not None:
                seen.add(id(literal))
                diags.append(_diagnostic(node, literal, bad, bound))
    return diags


def _constant(e: ir.Expr, bound_to: dict[str, ir.Expr]) -> ir.Literal | None:
    """The literal whose elements `e` holds, through lets and element-keeping layout ops."""
    for _ in range(len(bound_to) + 64):     # a let chain has no cycles; the limit only bounds the walk
        if isinstance(e, ir.Literal):
            return e
        if isinstance(e, ir.Var) and e.name in bound_to:
            e = bound_to[e.name]
        elif isinstance(e, ir.OpApp) and e.op in _KEEP_ALL:
            e = e.args[0]
        else:
            return None
    return None


def _first_outside(lit: ir.Literal, bound: int) -> tuple[int, int] | None:
    """(flat position, value) of the first element outside [0, bound), or None."""
    values = lit.values or (0,)          # () is all zeros, (x,) a splat
    for i, v in enumerate(values):
        try:
            inside = 0 <= v < bound
        except Undecidable:              # a generic function's table of symbolic size: it must
            inside = False               # hold for every size, and `5 < V` does not
        if not inside:
            return i, int(v)
    return None


def _diagnostic(op: ir.OpApp, lit: ir.Literal, bad: tuple[int, int], bound: int) -> Diagnostic:
    position, value = bad
    where = "every element" if len(lit.values) <= 1 else f"element {list(_unravel(position, lit.type.shape))}"
    table = {"gather": "the rows of `values`", "take_along_axis": "axis {axis} of `x`",
             "scatter_add": "the rows of the destination", "scatter_along_axis": "axis {axis} of the destination"}
    what = table.get(op.op, "its range").format(axis=op.attrs.get("axis"))
    outside = f"is outside [0, {bound})" if isinstance(bound, int) else f"may be outside [0, {bound}) for some sizes"
    return Diagnostic("index", f"{op.op}: index {value} ({where} of this literal) {outside}, "
                               f"{what}", lit.span,
                      (Note(f"the {op.op} that uses it", op.span),))


def _unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for d in reversed(shape):
        out.append(flat % d if d else 0)
        flat //= d if d else 1
    return tuple(reversed(out))
