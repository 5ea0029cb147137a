"""The op table: one row per built-in op, with its surface forms, attributes,
shape rule and documentation.

Other stages keep their own per-op tables keyed by the same names
(autodiff.VJPS, interp.NUMPY_OPS, emit_mlir.LOWERINGS); tests/test_tables.py
fails when a row is missing anywhere.  Shape rules raise OpError with a
message that names the operand, its whole type and the failing dimension.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .types import DType, TensorType


class OpError(Exception):
    """A violated typing rule.  `where` says what to point at: an operand index
    (int), an attribute name (str), or None (the whole op)."""

    def __init__(self, code: str, message: str, where: int | str | None = None):
        super().__init__(message)
        self.code, self.message, self.where = code, message, where


_MISSING = object()


@dataclass(frozen=True)
class AttrSpec:
    name: str
    kind: str                      # "int" | "ints" | "axis" | "axes" | "enum" | "float" | "dtype" | "type"
    choices: tuple[str, ...] = ()  # for enums
    default: object = _MISSING
    positional: bool = False       # may be given as the first non-tensor positional arg
    # "axis" / "axes": the rank they index is operand `of` (an int) or the length of
    # the list attribute named `of` (iota's shape).  Negative values count from the end
    # and are normalised by `normalise_axes` before the shape rule runs.
    of: int | str = 0

    @property
    def required(self) -> bool:
        return self.default is _MISSING

    @property
    def shown(self) -> str:
        """The kind as editors show it (`axis=int`, `perm=ints`, `dtype=F32|F16|..`)."""
        if self.choices:
            return "|".join(self.choices)
        return {"axis": "int", "axes": "ints"}.get(self.kind, self.kind)


@dataclass(frozen=True)
class OpDef:
    name: str
    infer: Callable[[list[TensorType], dict], TensorType]
    rule: str                      # the typing rule, as shown in hover and docs
    doc: str                       # one line of documentation
    operands: int = 1              # number of tensor operands; -1 = variadic (>= 2)
    attrs: tuple[AttrSpec, ...] = ()
    infix: str | None = None       # "+", "-", "*", "/", "@"; "neg" is prefix "-"
    internal: bool = False         # IR-only (no surface form)
    linear: bool = False           # linear in its float operands (finite-difference step 1)
    float_only: bool = True        # every float operand must be floating
    index_operands: tuple[int, ...] = ()  # operands that are I64 indices (exempt from float_only)
    # Operand positions where a bare number (`x * 0.5`, `1e-5 + v`) is accepted: it means a
    # splat of the type of the first tensor operand among these positions.
    scalars: tuple[int, ...] = ()

    def attr(self, name: str) -> AttrSpec | None:
        return next((a for a in self.attrs if a.name == name), None)


# ---- helpers ---------------------------------------------------------------
def _shape(s) -> str:
    return "[" + ", ".join(str(d) for d in s) + "]"


def _same_placement(args: list[TensorType], op: str) -> None:
    for i, a in enumerate(args[1:], 1):
        if a.placement != args[0].placement:
            raise OpError("placement", f"{op}: operands live on different placements: "
                          f"operand 0 is {args[0]}, operand {i} is {a}", i)


def _float(t: TensorType, i: int, op: str, what: str = "operand") -> None:
    if not t.is_float:
        raise OpError("dtype", f"{op}: {what} {t} must be floating (F16, BF16, F32, F8E4M3, F8E5M2), not {t.dtype}", i)


def _axis(axis: int, rank: int, t: TensorType, op: str) -> int:
    if not (0 <= axis < rank):
        raise OpError("attr", f"{op}: axis={axis} is out of range for {t} (rank {rank}: 0..{rank - 1})", "axis")
    return axis


def _rank_of(spec: "AttrSpec", args: list[TensorType], attrs: dict) -> tuple[int, str]:
    """The rank an axis attribute indexes, and what to call it in a message."""
    if isinstance(spec.of, str):
        n = len(attrs.get(spec.of, ()))
        return n, f"`{spec.of}` {_shape(attrs.get(spec.of, ()))}"
    t = args[spec.of]
    return t.rank, str(t)


def _normal_axis(op: str, spec: "AttrSpec", axis: int, rank: int, what: str, given=None) -> int:
    if not (-rank <= axis < rank):
        span = f"axes -{rank}..{rank - 1}" if rank else "no axes"
        head = f"{spec.name}={axis}" if given is None else f"{spec.name} {_shape(given)} has axis {axis}, which"
        raise OpError("attr", f"{op}: {head} is out of range for {what} "
                      f"(rank {rank}: {span}; negative axes count from the end)", spec.name)
    return axis + rank if axis < 0 else axis


def normalise_axes(op: "OpDef", args: list[TensorType], attrs: dict) -> dict:
    """attrs with every `axis`/`axes` attribute made non-negative (axis=-1 is the last
    axis, as in NumPy and PyTorch); an out-of-range axis raises OpError.  The IR, the
    later stages, the diagnostics of the shape rule and hover all see normalised axes."""
    out = dict(attrs)
    for spec in op.attrs:
        if spec.kind not in ("axis", "axes") or spec.name not in out:
            continue
        if isinstance(spec.of, int) and spec.of >= len(args):
            continue  # an arity error is reported instead
        rank, what = _rank_of(spec, args, out)
        value = out[spec.name]
        if spec.kind == "axis":
            out[spec.name] = _normal_axis(op.name, spec, value, rank, what)
        else:
            out[spec.name] = tuple(_normal_axis(op.name, spec, v, rank, what, value) for v in value)
    return out


# ---- shape rules -------------------------------------------------------------
def infer_elementwise(args, attrs, op="elementwise"):
    a, b = args
    _same_placement(args, op)
    if a.dtype != b.dtype:
        raise OpError("dtype", f"{op}: operand dtypes differ: lhs {a}, rhs {b}", 1)
    _float(a, 0, op, "lhs")
    if a.shape != b.shape:
        diff = next((i for i in range(min(a.rank, b.rank)) if a.shape[i] != b.shape[i]), None)
        where = (f"ranks differ ({a.rank} vs {b.rank})" if a.rank != b.rank
                 else f"dimension {diff} is {a.shape[diff]} vs {b.shape[diff]}")
        raise OpError("shape", f"{op}: operand shapes differ: lhs {a}, rhs {b}: {where} "
                      "(Kina has no implicit broadcasting; use .broadcast)", 1)
    return a


def infer_unary(args, attrs, op="unary"):
    (a,) = args
    _float(a, 0, op)
    return a


def infer_matmul(args, attrs):
    a, b = args
    _same_placement(args, "matmul")
    if a.dtype != b.dtype:
        raise OpError("dtype", f"matmul: operand dtypes differ: lhs {a}, rhs {b}", 1)
    _float(a, 0, "matmul", "lhs")
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


def infer_transpose(args, attrs):
    (a,) = args
    perm = attrs["perm"]
    if sorted(perm) != list(range(a.rank)):
        raise OpError("attr", f"transpose: perm {_shape(perm)} is not a permutation of the {a.rank} axes of {a}", "perm")
    return a.with_shape(tuple(a.shape[p] for p in perm))


def infer_reshape(args, attrs):
    (a,) = args
    shape = tuple(attrs["shape"])
    new = a.with_shape(shape)
    if any(d < 0 for d in shape):
        raise OpError("attr", f"reshape: target shape {_shape(shape)} has a negative dimension", "shape")
    if new.volume != a.volume:
        raise OpError("shape", f"reshape: volume differs: {a} has {a.volume} elements, "
                      f"target shape {_shape(shape)} has {new.volume}", "shape")
    return new


def infer_broadcast(args, attrs):
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


def infer_slice(args, attrs):
    (a,) = args
    axis = _axis(attrs["axis"], a.rank, a, "slice")
    start, stop = attrs["start"], attrs["stop"]
    if not (0 <= start < stop <= a.shape[axis]):
        raise OpError("attr", f"slice: bounds start={start}, stop={stop} are not within 0 <= start < stop <= "
                      f"{a.shape[axis]} (dimension {axis} of {a})", "stop" if start >= 0 and start < stop else "start")
    return a.with_shape(a.shape[:axis] + (stop - start,) + a.shape[axis + 1:])


def infer_concat(args, attrs):
    _same_placement(args, "concat")
    a = args[0]
    axis = _axis(attrs["axis"], a.rank, a, "concat")
    total = 0
    for i, t in enumerate(args):
        if t.dtype != a.dtype:
            raise OpError("dtype", f"concat: operand {i} {t} has dtype {t.dtype}, operand 0 has {a.dtype}", i)
        if t.rank != a.rank or any(t.shape[j] != a.shape[j] for j in range(a.rank) if j != axis):
            raise OpError("shape", f"concat: operand {i} {t} does not match operand 0 {a} "
                          f"outside axis {axis}", i)
        total += t.shape[axis]
    return a.with_shape(a.shape[:axis] + (total,) + a.shape[axis + 1:])


def infer_gather(args, attrs):
    values, indices = args
    _same_placement(args, "gather")
    _float(values, 0, "gather", "values")
    if values.rank != 2:
        raise OpError("shape", f"gather: values {values} must have rank 2 ([V, D])", 0)
    if indices.dtype != DType.I64:
        raise OpError("dtype", f"gather: indices {indices} must be I64", 1)
    return values.with_shape(indices.shape + (values.shape[1],))


def infer_reduce_keep(args, attrs):
    (a,) = args
    axis = _axis(attrs["axis"], a.rank, a, "reduce_keep")
    return a.with_shape(a.shape[:axis] + (1,) + a.shape[axis + 1:])


def infer_softmax(args, attrs, op="softmax"):
    (a,) = args
    _float(a, 0, op)
    _axis(attrs["axis"], a.rank, a, op)
    return a


def infer_take_along_axis(args, attrs):
    a, idx = args
    _same_placement(args, "take_along_axis")
    _float(a, 0, "take_along_axis")
    if idx.dtype != DType.I64:
        raise OpError("dtype", f"take_along_axis: indices {idx} must be I64", 1)
    axis = _axis(attrs["axis"], a.rank, a, "take_along_axis")
    if idx.rank != a.rank or any(idx.shape[j] != a.shape[j] for j in range(a.rank) if j != axis):
        raise OpError("shape", f"take_along_axis: indices {idx} must have the rank of {a} and equal "
                      f"dimensions outside axis {axis}", 1)
    return a.with_shape(idx.shape)


def infer_scatter_add(args, attrs):
    updates, indices = args
    dest: TensorType = attrs["dest_ty"]
    _same_placement([updates, indices, dest], "scatter_add")
    if indices.dtype != DType.I64 or indices.rank < 1:
        raise OpError("dtype", f"scatter_add: indices {indices} must be I64 of rank >= 1", 1)
    if dest.rank != 2 or updates.shape != indices.shape + (dest.shape[1],) or updates.dtype != dest.dtype:
        raise OpError("shape", f"scatter_add: updates {updates} must be indices.shape ++ [D] for dest {dest}", 0)
    return dest


def infer_scatter_along_axis(args, attrs):
    updates, indices = args
    dest: TensorType = attrs["dest_ty"]
    if updates.shape != indices.shape or indices.dtype != DType.I64:
        raise OpError("shape", f"scatter_along_axis: updates {updates} and I64 indices {indices} must share a shape", 0)
    return dest


def infer_same(args, attrs, op="elementwise"):
    """Any number of floating operands of one type (maximum_grad's g, x, y)."""
    _same_placement(args, op)
    a = args[0]
    _float(a, 0, op)
    for i, t in enumerate(args[1:], 1):
        if t != a:
            raise OpError("shape" if t.dtype == a.dtype else "dtype",
                          f"{op}: operand {i} {t} differs from operand 0 {a}", i)
    return a


def infer_pow(args, attrs):
    return infer_unary(args, attrs, "pow")


def infer_clamp(args, attrs):
    (a,) = args
    _float(a, 0, "clamp")
    lo, hi = attrs.get("min"), attrs.get("max")
    if lo is None and hi is None:
        raise OpError("attr", "clamp: give min=, max= or both (x.clamp(min=0.0, max=6.0))", None)
    if lo is not None and hi is not None and lo > hi:
        raise OpError("attr", f"clamp: min={lo} is greater than max={hi}", "min")
    return a


def infer_cast(args, attrs):
    (a,) = args
    target = DType(attrs["dtype"])
    if target.is_float or (target is DType.I64 and a.dtype is DType.Bool):
        return a.with_dtype(target)
    raise OpError("dtype", f"cast: {a} cannot be cast to {target}: casts go to a floating dtype "
                  "(from any dtype), or from Bool to I64; use argmax for indices", "dtype")


def infer_iota(args, attrs):
    shape = tuple(attrs["shape"])
    if any(d < 0 for d in shape):
        raise OpError("attr", f"iota: shape {_shape(shape)} has a negative dimension", "shape")
    if not shape:
        raise OpError("attr", "iota: shape [] has no axis to count along; give a shape of rank >= 1", "shape")
    return TensorType(DType.I64, shape)


def infer_tril(args, attrs):
    (a,) = args
    if a.rank < 2:
        raise OpError("shape", f"tril: {a} has rank {a.rank}; tril keeps the lower triangle of the last two "
                      "axes, so it needs rank >= 2", 0)
    return a


def infer_argmax(args, attrs):
    (a,) = args
    _float(a, 0, "argmax")
    axis = _axis(attrs["axis"], a.rank, a, "argmax")
    return TensorType(DType.I64, a.shape[:axis] + (1,) + a.shape[axis + 1:], a.placement)


def infer_compare(args, attrs, op="compare"):
    """Two operands of one type (any dtype) -> a Bool tensor of their shape."""
    a, b = args
    _same_placement(args, op)
    if a.dtype != b.dtype:
        raise OpError("dtype", f"{op}: operand dtypes differ: lhs {a}, rhs {b} (cast one first)", 1)
    if a.shape != b.shape:
        raise OpError("shape", f"{op}: operand shapes differ: lhs {a}, rhs {b} "
                      "(Kina has no implicit broadcasting; use .broadcast)", 1)
    return a.with_dtype(DType.Bool)


def infer_where(args, attrs):
    cond, a, b = args
    _same_placement(args, "where")
    if cond.dtype is not DType.Bool:
        raise OpError("dtype", f"where: the condition {cond} must be Bool (a comparison such as "
                      "`gt(x, 0.0)` makes one)", 0)
    if a != b:
        what = "dtypes" if a.dtype != b.dtype else "shapes"
        raise OpError("dtype" if what == "dtypes" else "shape",
                      f"where: the two values differ in {what}: {a} and {b}", 2)
    if cond.shape != a.shape:
        raise OpError("shape", f"where: the condition {cond} and the values {a} differ in shape "
                      "(Kina has no implicit broadcasting; use .broadcast)", 0)
    return a


def _named(fn, op):
    return lambda args, attrs: fn(args, attrs, op)


# ---- the table ---------------------------------------------------------------
AXIS = AttrSpec("axis", "axis")
DEST = AttrSpec("dest_ty", "type")

_ELEMENTWISE_DOCS = {"add": ("+", "elementwise sum"), "sub": ("-", "elementwise difference"),
                     "mul": ("*", "elementwise product"), "div": ("/", "elementwise quotient")}
_UNARY_DOCS = {
    "neg": "elementwise negation (prefix `-`)",
    "exp": "elementwise e^x",
    "log": "elementwise natural logarithm",
    "tanh": "elementwise hyperbolic tangent",
    "sqrt": "elementwise square root",
    "rsqrt": "elementwise 1/sqrt(x)",
    "sigmoid": "elementwise logistic function 1/(1+e^-x)",
    "relu": "elementwise max(x, 0)",
}

OPS: dict[str, OpDef] = {}


def _row(op: OpDef) -> None:
    assert op.name not in OPS, op.name
    OPS[op.name] = op


for _n, (_sym, _doc) in _ELEMENTWISE_DOCS.items():
    _row(OpDef(_n, _named(infer_elementwise, _n), f"a {_sym} b : T, with a, b : T (same dtype, shape, placement)",
               _doc, operands=2, infix=_sym, linear=_n in ("add", "sub"), scalars=(0, 1)))
for _n, _doc in _UNARY_DOCS.items():
    _row(OpDef(_n, _named(infer_unary, _n), f"x.{_n}() : T, with x : T floating", _doc,
               infix="-" if _n == "neg" else None, linear=_n == "neg"))
_row(OpDef("matmul", infer_matmul, "a @ b : σ++[M,N], with a : σ++[M,K], b : σ++[K,N], rank >= 2",
           "batched matrix product over a shared batch prefix σ", operands=2, infix="@"))
_row(OpDef("transpose", infer_transpose, "x.transpose(perm) : [x.shape[perm[0]], ...]",
           "permute the axes of x", attrs=(AttrSpec("perm", "axes", positional=True),), linear=True))
_row(OpDef("reshape", infer_reshape, "x.reshape(shape) : shape, with vol(shape) = vol(x)",
           "same elements in row-major order, new shape", attrs=(AttrSpec("shape", "ints", positional=True),),
           linear=True, float_only=False))
_row(OpDef("broadcast", infer_broadcast, "x.broadcast(shape) : shape; each axis of x equal or 1 (axes may be prepended)",
           "expand unit axes (and prepend new ones)", attrs=(AttrSpec("shape", "ints", positional=True),),
           linear=True, float_only=False))
_row(OpDef("slice", infer_slice, "x.slice(axis=i, start=s, stop=e) : x with dim i = e - s, 0 <= s < e <= dim",
           "a contiguous range along one axis",
           attrs=(AXIS, AttrSpec("start", "int"), AttrSpec("stop", "int")), linear=True, float_only=False))
_row(OpDef("concat", infer_concat, "concat(a, b, ..., axis=i) : shapes equal except on axis i, which adds up",
           "join tensors along an axis", operands=-1, attrs=(AXIS,), linear=True, float_only=False))
_row(OpDef("gather", infer_gather, "gather(values : [V, D], indices : I64 σ) : σ++[D]",
           "embedding lookup: rows of values picked by indices", operands=2, linear=True, index_operands=(1,)))
_row(OpDef("reduce_keep", infer_reduce_keep, "x.reduce_keep(op=sum|mean|max, axis=i) : x with dim i = 1",
           "reduce one axis, keeping it with size 1",
           attrs=(AttrSpec("op", "enum", ("sum", "mean", "max")), AXIS)))
_row(OpDef("softmax", _named(infer_softmax, "softmax"), "x.softmax(axis=i) : T, x floating",
           "exp(x) / sum(exp(x)) along axis i (max-subtracted)", attrs=(AXIS,)))
_row(OpDef("log_softmax", _named(infer_softmax, "log_softmax"), "x.log_softmax(axis=i) : T, x floating",
           "x - log(sum(exp(x))) along axis i (max-subtracted)", attrs=(AXIS,)))
_row(OpDef("take_along_axis", infer_take_along_axis,
           "x.take_along_axis(idx : I64, axis=i) : idx.shape; idx has x's rank and equal dims outside i",
           "pick one element per position along axis i (like numpy.take_along_axis)",
           operands=2, attrs=(AXIS,), linear=True, index_operands=(1,)))
_row(OpDef("scatter_add", infer_scatter_add, "ScatterAdd(updates : σ++[D], indices : I64 σ, dest_ty : [V, D]) : dest_ty",
           "IR-internal (VJP of gather): out[v, d] = sum of updates[i, d] over indices[i] = v",
           operands=2, attrs=(DEST,), internal=True, linear=True, index_operands=(1,)))
_row(OpDef("scatter_along_axis", infer_scatter_along_axis,
           "ScatterAlongAxis(updates : idx.shape, idx : I64, axis=i, dest_ty) : dest_ty",
           "IR-internal (VJP of take_along_axis): zeros with updates added at idx along axis i",
           operands=2, attrs=(AXIS, DEST), internal=True, linear=True, index_operands=(1,)))

_row(OpDef("relu_grad", _named(infer_elementwise, "relu_grad"), "ReluGrad(g : T, x : T) : T",
           "IR-internal (VJP of relu): g where x > 0, else 0", operands=2, internal=True))

# ---- elementwise math, casts, index builders and argmax ------------------------------
_BINARY_MATH = {"maximum": "elementwise max (NaN propagates; a tie splits the cotangent in half, as in PyTorch)",
                "minimum": "elementwise min (NaN propagates; a tie splits the cotangent in half, as in PyTorch)"}
for _n, _doc in _BINARY_MATH.items():
    _row(OpDef(_n, _named(infer_elementwise, _n),
               f"{_n}(a, b) : T, with a, b : T (a bare number takes the other operand's type)",
               _doc, operands=2, scalars=(0, 1)))
_UNARY_MATH = {
    "abs": "elementwise |x| (cotangent g * sign(x), 0 at 0)",
    "sign": "elementwise sign: -1, 0 or 1 (NaN stays NaN); its cotangent is 0",
    "square": "elementwise x * x",
    "erf": "elementwise Gauss error function",
}
for _n, _doc in _UNARY_MATH.items():
    _row(OpDef(_n, _named(infer_unary, _n), f"x.{_n}() : T, with x : T floating", _doc))
_row(OpDef("pow", infer_pow, "x.pow(p) : T, with x : T floating and p a static number",
           "elementwise x^p (an integer p allows negative x; a fractional p gives NaN there)",
           attrs=(AttrSpec("p", "float", positional=True),)))
_row(OpDef("clamp", infer_clamp, "x.clamp(min=a, max=b) : T, with x : T floating; either bound may be left out",
           "elementwise min(max(x, a), b) (the cotangent passes where a <= x <= b)",
           attrs=(AttrSpec("min", "float", default=None), AttrSpec("max", "float", default=None))))
_row(OpDef("gelu", _named(infer_unary, "gelu"), "x.gelu(approximate=none|tanh) : T, with x : T floating",
           "0.5 x (1 + erf(x / sqrt 2)); approximate=tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))",
           attrs=(AttrSpec("approximate", "enum", ("none", "tanh"), default="none"),)))
_row(OpDef("cast", infer_cast, "x.cast(dtype=D) : x with dtype D; D floating (from any dtype), or I64 from Bool",
           "convert elementwise (round to nearest even; the cotangent is cast back)",
           attrs=(AttrSpec("dtype", "dtype", tuple(d.value for d in DType)),), float_only=False))
_row(OpDef("iota", infer_iota, "iota(shape=[..], axis=i) : Tensor[I64, shape]",
           "positions: element [.., j, ..] holds j, its index along axis i", operands=0,
           attrs=(AttrSpec("shape", "ints"), AttrSpec("axis", "axis", of="shape")), float_only=False))
_row(OpDef("tril", infer_tril, "x.tril(k=0) : T, with x : T of rank >= 2 (any dtype)",
           "keep the lower triangle of the last two axes (j - i <= k), zero the rest: causal masks",
           attrs=(AttrSpec("k", "int", default=0),), linear=True, float_only=False))
_row(OpDef("argmax", infer_argmax, "x.argmax(axis=i) : Tensor[I64, x.shape with dim i = 1], x floating",
           "index of the largest element along axis i (the first on ties; NaN counts as largest); no cotangent",
           attrs=(AXIS,)))
_COMPARISONS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
for _n, _sym in _COMPARISONS.items():
    _row(OpDef(_n, _named(infer_compare, _n),
               f"{_n}(a, b) : Tensor[Bool, shape], with a, b : T (any dtype; a bare number takes the other's type)",
               f"elementwise a {_sym} b " + ("(true where either is NaN)" if _n == "ne" else "(false where either is NaN)"),
               operands=2, scalars=(0, 1), float_only=False))
_row(OpDef("where", infer_where, "where(cond : Tensor[Bool, σ], a : T, b : T) : T, with T of shape σ",
           "elementwise choice: a where cond is true, b where it is false (a bare number takes the other's type)",
           operands=3, scalars=(1, 2), float_only=False))
_row(OpDef("maximum_grad", _named(infer_same, "maximum_grad"), "MaximumGrad(g : T, x : T, y : T) : T",
           "IR-internal (VJP of maximum and minimum): g where x > y, g / 2 where x == y, else 0",
           operands=3, internal=True))
_row(OpDef("clamp_grad", _named(infer_elementwise, "clamp_grad"), "ClampGrad(g : T, x : T, min, max) : T",
           "IR-internal (VJP of clamp): g where min <= x <= max, else 0", operands=2, internal=True,
           attrs=(AttrSpec("min", "float", default=None), AttrSpec("max", "float", default=None))))
_row(OpDef("gelu_grad", _named(infer_elementwise, "gelu_grad"), "GeluGrad(g : T, x : T, approximate) : T",
           "IR-internal (VJP of gelu): g * gelu'(x)", operands=2, internal=True,
           attrs=(AttrSpec("approximate", "enum", ("none", "tanh"), default="none"),)))

INFIX = {op.infix: op.name for op in OPS.values() if op.infix and op.operands == 2}
SURFACE_OPS = {name: op for name, op in OPS.items() if not op.internal}
