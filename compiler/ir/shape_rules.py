"""The typing rules of the built-in ops: one `infer(args, attrs) -> TensorType` per row
of ops.OPS (operand types in, result type out).

A violated rule raises OpError with a message that names the operand, its whole type
and the failing dimension, and says what to point at (`where`): an operand index, an
attribute name, or None for the whole op.  check_op_args turns it into a diagnostic.
Rules see attributes already normalised by ops.normalise_axes (no negative axes).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

from compiler.core.types import Attrs, DType, TensorType

# A typing rule: operand types and (normalised) attributes in, the result type out.
Infer = Callable[[list[TensorType], Attrs], TensorType]


class OpError(Exception):
    """A violated typing rule.  `where` says what to point at: an operand index
    (int), an attribute name (str), or None (the whole op)."""

    def __init__(self, code: str, message: str, where: int | str | None = None,
                 cast_to: DType | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.where = code, message, where
        self.cast_to = cast_to   # operand `where` becomes right with `.cast(dtype=cast_to)`


def castable(src: DType, dst: DType) -> bool:
    """What `cast` allows: to a floating dtype from any dtype, from Bool to I64, or to the
    operand's own dtype (the identity: `ids.cast(dtype=I64)` of argmax's I64 result)."""
    return src is dst or dst.is_float or (dst is DType.I64 and src is DType.Bool)


def dtypes_differ(message: str, args: list[TensorType], ref: int, at: int) -> OpError:
    """The error for operand `at` whose dtype differs from operand `ref`'s, with the cast
    that fixes it: operand `at` to ref's dtype, else (a cast `cast` refuses) operand `ref`
    to at's dtype."""
    a, b = args[ref].dtype, args[at].dtype
    if castable(b, a):
        return OpError("dtype", message, at, cast_to=a)
    if castable(a, b):
        return OpError("dtype", message, ref, cast_to=b)
    return OpError("dtype", message, at)


# ---- helpers ---------------------------------------------------------------
def _shape(s: Iterable[int]) -> str:
    return "[" + ", ".join(str(d) for d in s) + "]"


def _same_placement(args: list[TensorType], op: str) -> None:
    for i, a in enumerate(args[1:], 1):
        if a.placement != args[0].placement:
            raise OpError("placement", f"{op}: operands live on different placements: "
                          f"operand 0 is {args[0]}, operand {i} is {a}", i)


def require_float(t: TensorType, i: int, op: str, what: str = "operand") -> None:
    if not t.is_float:
        raise OpError("dtype", f"{op}: {what} {t} must be floating (F16, BF16, F32, F64, F8E4M3, F8E5M2), not {t.dtype}", i)


def _axis(axis: int, rank: int, t: TensorType, op: str) -> int:
    if not (0 <= axis < rank):
        raise OpError("attr", f"{op}: axis={axis} is out of range for {t} (rank {rank}: 0..{rank - 1})", "axis")
    return axis


# ---- shape rules -------------------------------------------------------------
def infer_elementwise(args: list[TensorType], attrs: Attrs, op: str = "elementwise") -> TensorType:
    a, b = args
    _same_placement(args, op)
    if a.dtype != b.dtype:
        raise dtypes_differ(f"{op}: operand dtypes differ: lhs {a}, rhs {b}", args, 0, 1)
    require_float(a, 0, op, "lhs")
    if a.shape != b.shape:
        if a.rank != b.rank:
            where = f"ranks differ ({a.rank} vs {b.rank})"
        else:   # same rank, different shapes: some dimension differs
            diff = next(i for i in range(a.rank) if a.shape[i] != b.shape[i])
            where = f"dimension {diff} is {a.shape[diff]} vs {b.shape[diff]}"
        raise OpError("shape", f"{op}: operand shapes differ: lhs {a}, rhs {b}: {where} "
                      "(Kina has no implicit broadcasting; use .broadcast)", 1)
    return a


def infer_unary(args: list[TensorType], attrs: Attrs, op: str = "unary") -> TensorType:
    (a,) = args
    require_float(a, 0, op)
    return a


def infer_matmul(args: list[TensorType], attrs: Attrs) -> TensorType:
    a, b = args
    _same_placement(args, "matmul")
    if a.dtype != b.dtype:
        raise dtypes_differ(f"matmul: operand dtypes differ: lhs {a}, rhs {b}", args, 0, 1)
    require_float(a, 0, "matmul", "lhs")
    for i, t in enumerate(args):
        if t.rank < 2:
            raise OpError("shape", f"matmul: {'lhs' if i == 0 else 'rhs'} {t} has rank {t.rank}; matmul needs rank >= 2", i)
    if a.shape[-1] != b.shape[-2]:
        raise OpError("shape", f"matmul: inner dimensions differ: lhs {a} has K={a.shape[-1]}, "
                      f"rhs {b} has K={b.shape[-2]}", 1)
    if a.rank != b.rank or a.shape[:-2] != b.shape[:-2]:
        raise OpError("shape", f"matmul: batch dimensions differ: lhs {a} has batch {_shape(a.shape[:-2])}, "
                      f"rhs {b} has batch {_shape(b.shape[:-2])} (no implicit broadcasting; reshape or broadcast first)", 1)
    return a.with_shape(a.shape[:-1] + (b.shape[-1],))


def infer_transpose(args: list[TensorType], attrs: Attrs) -> TensorType:
    (a,) = args
    perm = attrs["perm"]
    if sorted(perm) != list(range(a.rank)):
        raise OpError("attr", f"transpose: perm {_shape(perm)} is not a permutation of the {a.rank} axes of {a}", "perm")
    return a.with_shape(tuple(a.shape[p] for p in perm))


def infer_reshape(args: list[TensorType], attrs: Attrs) -> TensorType:
    (a,) = args
    shape = tuple(attrs["shape"])
    new = a.with_shape(shape)
    if any(d < 0 for d in shape):
        raise OpError("attr", f"reshape: target shape {_shape(shape)} has a negative dimension", "shape")
    if new.volume != a.volume:
        raise OpError("shape", f"reshape: volume differs: {a} has {a.volume} elements, "
                      f"target shape {_shape(shape)} has {new.volume}", "shape")
    return new


def infer_broadcast(args: list[TensorType], attrs: Attrs) -> TensorType:
    (a,) = args
    shape = tuple(attrs["shape"])
    if any(d < 0 for d in shape):
        raise OpError("attr", f"broadcast: target shape {_shape(shape)} has a negative dimension", "shape")
    if len(shape) < a.rank:
        raise OpError("shape", f"broadcast: target shape {_shape(shape)} has lower rank than {a}", "shape")
    lead = len(shape) - a.rank  # rank-changing broadcast prepends axes
    for i, d in enumerate(a.shape):
        if d != 1 and d != shape[lead + i]:
            raise OpError("shape", f"broadcast: {a} cannot broadcast to {_shape(shape)}: "
                          f"dimension {i} is {d}, target is {shape[lead + i]} (only 1 expands)", "shape")
    return a.with_shape(shape)


def infer_slice(args: list[TensorType], attrs: Attrs) -> TensorType:
    (a,) = args
    axis = _axis(attrs["axis"], a.rank, a, "slice")
    start, stop = attrs["start"], attrs["stop"]
    if not (0 <= start < stop <= a.shape[axis]):
        raise OpError("attr", f"slice: bounds start={start}, stop={stop} are not within 0 <= start < stop <= "
                      f"{a.shape[axis]} (dimension {axis} of {a})", "stop" if start >= 0 and start < stop else "start")
    return a.with_shape(a.shape[:axis] + (stop - start,) + a.shape[axis + 1:])


def infer_concat(args: list[TensorType], attrs: Attrs) -> TensorType:
    _same_placement(args, "concat")
    a = args[0]
    axis = _axis(attrs["axis"], a.rank, a, "concat")
    total = 0
    for i, t in enumerate(args):
        if t.dtype != a.dtype:
            raise dtypes_differ(f"concat: operand {i} {t} has dtype {t.dtype}, operand 0 has {a.dtype}", args, 0, i)
        if t.rank != a.rank or any(t.shape[j] != a.shape[j] for j in range(a.rank) if j != axis):
            raise OpError("shape", f"concat: operand {i} {t} does not match operand 0 {a} "
                          f"outside axis {axis}", i)
        total += t.shape[axis]
    return a.with_shape(a.shape[:axis] + (total,) + a.shape[axis + 1:])


def infer_gather(args: list[TensorType], attrs: Attrs) -> TensorType:
    values, indices = args
    _same_placement(args, "gather")
    require_float(values, 0, "gather", "values")
    if values.rank != 2:
        raise OpError("shape", f"gather: values {values} must have rank 2 ([V, D])", 0)
    if indices.dtype != DType.I64:
        raise OpError("dtype", f"gather: indices {indices} must be I64", 1)
    return values.with_shape(indices.shape + (values.shape[1],))


def _nonempty_axis(a: TensorType, axis: int, op: str) -> None:
    """A reduction over a zero-size axis is an error (docs/language.md, "Zero-size
    dimensions"): max and argmax have no identity, mean would divide by zero, and -O2's
    tiled reductions abort on an empty axis (so an empty sum, 0 at -O0, is refused too)."""
    if not a.shape[axis] >= 1:   # a symbolic size that may be 0 raises Undecidable (checker: "cannot show")
        raise OpError("shape", f"{op}: axis {axis} of {a} is empty (size 0); a reduction needs at least "
                               "one element along its axis", 0)


def infer_reduce_keep(args: list[TensorType], attrs: Attrs) -> TensorType:
    (a,) = args
    axis = _axis(attrs["axis"], a.rank, a, "reduce_keep")
    _nonempty_axis(a, axis, f"reduce_keep(op={attrs.get('op')})")
    return a.with_shape(a.shape[:axis] + (1,) + a.shape[axis + 1:])


def infer_logsumexp(args: list[TensorType], attrs: Attrs, op: str = "logsumexp") -> TensorType:
    (a,) = args
    require_float(a, 0, op)
    axis = _axis(attrs["axis"], a.rank, a, op)
    _nonempty_axis(a, axis, op)
    return a.with_shape(a.shape[:axis] + (1,) + a.shape[axis + 1:])


def infer_sort(args: list[TensorType], attrs: Attrs, op: str = "sort") -> TensorType:
    """sort (values: x's type) and argsort (I64 positions of x's shape)."""
    (a,) = args
    require_float(a, 0, op)
    _nonempty_axis(a, _axis(attrs["axis"], a.rank, a, op), op)
    return a if op == "sort" else TensorType(DType.I64, a.shape, a.placement)


def infer_topk(args: list[TensorType], attrs: Attrs, op: str = "topk") -> TensorType:
    """topk (the k largest values, descending) and argtopk (their I64 positions): x with dim
    axis = k, 1 <= k <= that dim."""
    (a,) = args
    require_float(a, 0, op)
    axis, k = _axis(attrs["axis"], a.rank, a, op), attrs["k"]
    if not 1 <= k:
        raise OpError("attr", f"{op}: k={k} must be at least 1", "k")
    if not k <= a.shape[axis]:   # a symbolic size raises Undecidable (checker: "cannot show")
        raise OpError("attr", f"{op}: k={k} is larger than axis {axis} of {a} ({a.shape[axis]} elements)", "k")
    shape = a.shape[:axis] + (k,) + a.shape[axis + 1:]
    return a.with_shape(shape) if op == "topk" else TensorType(DType.I64, shape, a.placement)


def infer_softmax(args: list[TensorType], attrs: Attrs, op: str = "softmax") -> TensorType:
    (a,) = args
    require_float(a, 0, op)
    _nonempty_axis(a, _axis(attrs["axis"], a.rank, a, op), op)
    return a


def infer_take_along_axis(args: list[TensorType], attrs: Attrs) -> TensorType:
    a, idx = args
    _same_placement(args, "take_along_axis")
    require_float(a, 0, "take_along_axis")
    if idx.dtype != DType.I64:
        raise OpError("dtype", f"take_along_axis: indices {idx} must be I64", 1)
    axis = _axis(attrs["axis"], a.rank, a, "take_along_axis")
    if idx.rank != a.rank or any(idx.shape[j] != a.shape[j] for j in range(a.rank) if j != axis):
        raise OpError("shape", f"take_along_axis: indices {idx} must have the rank of {a} and equal "
                      f"dimensions outside axis {axis}", 1)
    return a.with_shape(idx.shape)


def infer_scatter_add(args: list[TensorType], attrs: Attrs) -> TensorType:
    updates, indices = args
    dest: TensorType = attrs["dest_ty"]
    _same_placement([updates, indices, dest], "scatter_add")
    if indices.dtype != DType.I64 or indices.rank < 1:
        raise OpError("dtype", f"scatter_add: indices {indices} must be I64 of rank >= 1", 1)
    if dest.rank != 2 or updates.shape != indices.shape + (dest.shape[1],) or updates.dtype != dest.dtype:
        raise OpError("shape", f"scatter_add: updates {updates} must be indices.shape ++ [D] for dest {dest}", 0)
    return dest


def infer_scatter_along_axis(args: list[TensorType], attrs: Attrs) -> TensorType:
    updates, indices = args
    dest: TensorType = attrs["dest_ty"]
    if updates.shape != indices.shape or indices.dtype != DType.I64:
        raise OpError("shape", f"scatter_along_axis: updates {updates} and I64 indices {indices} must share a shape", 0)
    return dest


def infer_same(args: list[TensorType], attrs: Attrs, op: str = "elementwise") -> TensorType:
    """Any number of floating operands of one type (maximum_grad's g, x, y)."""
    _same_placement(args, op)
    a = args[0]
    require_float(a, 0, op)
    for i, t in enumerate(args[1:], 1):
        if t != a:
            raise OpError("shape" if t.dtype == a.dtype else "dtype",
                          f"{op}: operand {i} {t} differs from operand 0 {a}", i)
    return a


def infer_pow(args: list[TensorType], attrs: Attrs) -> TensorType:
    return infer_unary(args, attrs, "pow")


def infer_clamp(args: list[TensorType], attrs: Attrs) -> TensorType:
    (a,) = args
    require_float(a, 0, "clamp")
    lo, hi = attrs.get("min"), attrs.get("max")
    if lo is None and hi is None:
        raise OpError("attr", "clamp: give min=, max= or both (x.clamp(min=0.0, max=6.0))", None)
    if lo is not None and hi is not None and lo > hi:
        raise OpError("attr", f"clamp: min={lo} is greater than max={hi}", "min")
    return a


def infer_cast(args: list[TensorType], attrs: Attrs) -> TensorType:
    (a,) = args
    target = DType.named(attrs["dtype"])
    if castable(a.dtype, target):
        return a.with_dtype(target)
    raise OpError("dtype", f"cast: {a} cannot be cast to {target}: casts go to a floating dtype "
                  "(from any dtype), from Bool to I64, or to the operand's own dtype; use argmax for indices",
                  "dtype")


def infer_iota(args: list[TensorType], attrs: Attrs) -> TensorType:
    shape = tuple(attrs["shape"])
    if any(d < 0 for d in shape):
        raise OpError("attr", f"iota: shape {_shape(shape)} has a negative dimension", "shape")
    if not shape:
        raise OpError("attr", "iota: shape [] has no axis to count along; give a shape of rank >= 1", "shape")
    return TensorType(DType.I64, shape)


def infer_tril(args: list[TensorType], attrs: Attrs) -> TensorType:
    (a,) = args
    if a.rank < 2:
        raise OpError("shape", f"tril: {a} has rank {a.rank}; tril keeps the lower triangle of the last two "
                      "axes, so it needs rank >= 2", 0)
    return a


def infer_argmax(args: list[TensorType], attrs: Attrs) -> TensorType:
    (a,) = args
    require_float(a, 0, "argmax")
    axis = _axis(attrs["axis"], a.rank, a, "argmax")
    _nonempty_axis(a, axis, "argmax")
    return TensorType(DType.I64, a.shape[:axis] + (1,) + a.shape[axis + 1:], a.placement)


def infer_compare(args: list[TensorType], attrs: Attrs, op: str = "compare") -> TensorType:
    """Two operands of one type (any dtype) -> a Bool tensor of their shape."""
    a, b = args
    _same_placement(args, op)
    if a.dtype != b.dtype:
        raise dtypes_differ(f"{op}: operand dtypes differ: lhs {a}, rhs {b}", args, 0, 1)
    if a.shape != b.shape:
        raise OpError("shape", f"{op}: operand shapes differ: lhs {a}, rhs {b} "
                      "(Kina has no implicit broadcasting; use .broadcast)", 1)
    return a.with_dtype(DType.Bool)


def infer_where(args: list[TensorType], attrs: Attrs) -> TensorType:
    cond, a, b = args
    _same_placement(args, "where")
    if cond.dtype is not DType.Bool:
        raise OpError("dtype", f"where: the condition {cond} must be Bool (a comparison such as "
                      "`gt(x, 0.0)` makes one)", 0)
    if a.dtype != b.dtype:
        raise dtypes_differ(f"where: the two values differ in dtypes: {a} and {b}", args, 1, 2)
    if a != b:
        raise OpError("shape", f"where: the two values differ in shapes: {a} and {b}", 2)
    if cond.shape != a.shape:
        raise OpError("shape", f"where: the condition {cond} and the values {a} differ in shape "
                      "(Kina has no implicit broadcasting; use .broadcast)", 0)
    return a


def _named(fn: Callable[[list[TensorType], Attrs, str], TensorType], op: str) -> Infer:
    """The rule `fn` specialised to the op it names in its messages."""
    return lambda args, attrs: fn(args, attrs, op)


