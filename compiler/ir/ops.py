"""The op table: one row per built-in op, with its surface forms, attributes,
shape rule and documentation.

Other stages keep their own per-op tables keyed by the same names
(vjp.VJPS, interp.NUMPY_OPS, emit_ops.LOWERINGS); tests/test_tables.py
fails when a row is missing anywhere.  Each row's typing rule (`infer`) lives in
ir/shape_rules.py and raises OpError with a message that names the operand, its
whole type and the failing dimension.  Axis attributes are normalised here
(`normalise_axes`) before the rule runs.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from compiler.core.types import Attrs, DType, TensorType
from compiler.ir.random_rules import infer_categorical, infer_fold_in, infer_random, infer_split
from compiler.ir.shape_rules import (
    Infer,
    OpError,
    _named,
    _shape,
    infer_argmax,
    infer_broadcast,
    infer_cast,
    infer_clamp,
    infer_compare,
    infer_concat,
    infer_elementwise,
    infer_gather,
    infer_iota,
    infer_logsumexp,
    infer_matmul,
    infer_pow,
    infer_reduce_keep,
    infer_reshape,
    infer_same,
    infer_scatter_add,
    infer_scatter_along_axis,
    infer_slice,
    infer_softmax,
    infer_sort,
    infer_take_along_axis,
    infer_topk,
    infer_transpose,
    infer_tril,
    infer_unary,
    infer_where,
    require_float,
)

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
    finite: bool = False           # "float": infinities and NaN are refused (pow's exponent)

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
    infer: Infer
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
    # Value-flow facts (compiler/ir/uses.py): a layout op passes its operands' elements through
    # unchanged; `index_bound(operand types, attrs)` is the exclusive bound its I64 index
    # operand (operand 1) must respect; `positive(attrs)` says its float operand must be > 0
    # for a finite result (the interpreter then draws positive inputs).
    layout: bool = False
    index_bound: Callable[[list[TensorType], Attrs], int] | None = None
    positive: Callable[[Attrs], bool] | None = None
    # The row a call with one more tensor operand means: `x.pow(e)` with a tensor e is
    # pow_tensor (the checker switches rows before checking the arity).
    overload: str | None = None

    def attr(self, name: str) -> AttrSpec | None:
        return next((a for a in self.attrs if a.name == name), None)

    def signature(self, method: bool) -> tuple[str, list[str]]:
        """(label, parameters) of the call as editors and the docs show it:
        `x.reduce_keep(op=sum|mean|max|min, axis=int)` or `reduce_keep(x, ...)`."""
        n = self.operands if self.operands >= 0 else 2
        operands = [f"x{i}" if n > 1 else "x" for i in range(n)]
        if self.operands < 0:
            operands.append("...")
        method = method and bool(operands)        # a builder (iota) has no receiver
        params = operands[1:] if method else operands
        params += [f"{a.name}={a.shown}" for a in self.attrs]
        prefix = f"{operands[0]}.{self.name}(" if method else f"{self.name}("
        return prefix + ", ".join(params) + ")", params

    def forms(self) -> list[str]:
        """Every way the op is written in source (none for an IR-internal op)."""
        if self.internal:
            return []
        if self.infix == "-" and self.operands == 1:
            return ["-x", self.signature(True)[0]]
        if self.infix is not None:
            return [f"a {self.infix} b"]
        forms = [self.signature(True)[0], self.signature(False)[0]]
        return list(dict.fromkeys(forms))


def _rank_of(spec: AttrSpec, args: list[TensorType], attrs: Attrs) -> tuple[int, str]:
    """The rank an axis attribute indexes, and what to call it in a message."""
    if isinstance(spec.of, str):
        n = len(attrs.get(spec.of, ()))
        return n, f"`{spec.of}` {_shape(attrs.get(spec.of, ()))}"
    t = args[spec.of]
    return t.rank, str(t)


def _normal_axis(op: str, spec: AttrSpec, axis: int, rank: int, what: str,
                 given: tuple[int, ...] | None = None) -> int:
    if not (-rank <= axis < rank):
        span = f"axes -{rank}..{rank - 1}" if rank else "no axes"
        head = f"{spec.name}={axis}" if given is None else f"{spec.name} {_shape(given)} has axis {axis}, which"
        raise OpError("attr", f"{op}: {head} is out of range for {what} "
                      f"(rank {rank}: {span}; negative axes count from the end)", spec.name)
    return axis + rank if axis < 0 else axis


def normalise_axes(op: OpDef, args: list[TensorType], attrs: Attrs) -> Attrs:
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

def check_float_only(op: OpDef, types: list[TensorType]) -> None:
    """Rows with float_only=True take floating tensors except at their I64 index operands
    (most rules check this themselves; this catches the rest, e.g. transpose and
    reduce_keep of an I64 tensor).  The checker and the IR verifier both apply it."""
    if not op.float_only:
        return
    for i, t in enumerate(types):
        if i not in op.index_operands:
            require_float(t, i, op.name)


OPS: dict[str, OpDef] = {}


def _ALWAYS(attrs: Attrs) -> bool:
    return True


def _row(op: OpDef) -> None:
    assert op.name not in OPS, op.name
    OPS[op.name] = op


for _n, (_sym, _doc) in _ELEMENTWISE_DOCS.items():
    _row(OpDef(_n, _named(infer_elementwise, _n), f"a {_sym} b : T, with a, b : T (same dtype, shape, placement)",
               _doc, operands=2, infix=_sym, linear=_n in ("add", "sub"), scalars=(0, 1)))
for _n, _doc in _UNARY_DOCS.items():
    _row(OpDef(_n, _named(infer_unary, _n), f"x.{_n}() : T, with x : T floating", _doc,
               infix="-" if _n == "neg" else None, linear=_n == "neg",
               positive=_ALWAYS if _n in ("log", "sqrt", "rsqrt") else None))
_row(OpDef("matmul", infer_matmul, "a @ b : σ++[M,N], with a : σ++[M,K], b : σ++[K,N], rank >= 2",
           "batched matrix product over a shared batch prefix σ", operands=2, infix="@"))
_row(OpDef("transpose", infer_transpose, "x.transpose(perm) : [x.shape[perm[0]], ...]",
           "permute the axes of x", attrs=(AttrSpec("perm", "axes", positional=True),), linear=True, layout=True))
_row(OpDef("reshape", infer_reshape, "x.reshape(shape) : shape, with vol(shape) = vol(x)",
           "same elements in row-major order, new shape", attrs=(AttrSpec("shape", "ints", positional=True),),
           linear=True, float_only=False, layout=True))
_row(OpDef("broadcast", infer_broadcast, "x.broadcast(shape) : shape; each axis of x equal or 1 (axes may be prepended)",
           "expand unit axes (and prepend new ones)", attrs=(AttrSpec("shape", "ints", positional=True),),
           linear=True, float_only=False, layout=True))
_row(OpDef("slice", infer_slice, "x.slice(axis=i, start=s, stop=e) : x with dim i = e - s, 0 <= s < e <= dim",
           "a contiguous range along one axis",
           attrs=(AXIS, AttrSpec("start", "int"), AttrSpec("stop", "int")), linear=True, float_only=False, layout=True))
_row(OpDef("concat", infer_concat, "concat(a, b, ..., axis=i) : shapes equal except on axis i, which adds up",
           "join tensors along an axis", operands=-1, attrs=(AXIS,), linear=True, float_only=False, layout=True))
_row(OpDef("gather", infer_gather, "gather(values : [V, D], indices : I64 σ) : σ++[D]",
           "embedding lookup: rows of values picked by indices", operands=2, linear=True, index_operands=(1,),
           index_bound=lambda args, attrs: args[0].shape[0]))
_row(OpDef("reduce_keep", infer_reduce_keep, "x.reduce_keep(op=sum|mean|max|min, axis=i) : x with dim i = 1",
           "reduce one axis, keeping it with size 1 (max/min: the cotangent is split evenly among tied extremes)",
           attrs=(AttrSpec("op", "enum", ("sum", "mean", "max", "min")), AXIS)))
_row(OpDef("softmax", _named(infer_softmax, "softmax"), "x.softmax(axis=i) : T, x floating",
           "exp(x) / sum(exp(x)) along axis i (max-subtracted)", attrs=(AXIS,)))
_row(OpDef("log_softmax", _named(infer_softmax, "log_softmax"), "x.log_softmax(axis=i) : T, x floating",
           "x - log(sum(exp(x))) along axis i (max-subtracted)", attrs=(AXIS,)))
_row(OpDef("take_along_axis", infer_take_along_axis,
           "x.take_along_axis(idx : I64, axis=i) : idx.shape; idx has x's rank and equal dims outside i",
           "pick one element per position along axis i (like numpy.take_along_axis)",
           operands=2, attrs=(AXIS,), linear=True, index_operands=(1,),
           index_bound=lambda args, attrs: args[0].shape[attrs["axis"]]))
_row(OpDef("scatter_add", infer_scatter_add, "ScatterAdd(updates : σ++[D], indices : I64 σ, dest_ty : [V, D]) : dest_ty",
           "IR-internal (VJP of gather): out[v, d] = sum of updates[i, d] over indices[i] = v",
           operands=2, attrs=(DEST,), internal=True, linear=True, index_operands=(1,),
           index_bound=lambda args, attrs: attrs["dest_ty"].shape[0]))
_row(OpDef("scatter_along_axis", infer_scatter_along_axis,
           "ScatterAlongAxis(updates : idx.shape, idx : I64, axis=i, dest_ty) : dest_ty",
           "IR-internal (VJP of take_along_axis): zeros with updates added at idx along axis i",
           operands=2, attrs=(AXIS, DEST), internal=True, linear=True, index_operands=(1,),
           index_bound=lambda args, attrs: attrs["dest_ty"].shape[attrs["axis"]]))

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
           attrs=(AttrSpec("p", "float", positional=True, finite=True),), overload="pow_tensor",
           positive=lambda attrs: not float(attrs["p"]).is_integer()))   # x^p is NaN for x < 0
_row(OpDef("pow_tensor", _named(infer_elementwise, "pow"),
           "x.pow(e) : T, with x, e : T floating (a tensor exponent; also written pow(x, e))",
           "elementwise x^e with a tensor exponent (NaN where x < 0 and e is not an integer)",
           operands=2, positive=_ALWAYS))   # x^e for x < 0 is NaN for most e: the interpreter draws x > 0
_row(OpDef("clamp", infer_clamp, "x.clamp(min=a, max=b) : T, with x : T floating; either bound may be left out",
           "elementwise min(max(x, a), b) (the cotangent passes where a <= x <= b)",
           attrs=(AttrSpec("min", "float", default=None), AttrSpec("max", "float", default=None))))
_row(OpDef("gelu", _named(infer_unary, "gelu"), "x.gelu(approximate=none|tanh) : T, with x : T floating",
           "0.5 x (1 + erf(x / sqrt 2)); approximate=tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))",
           attrs=(AttrSpec("approximate", "enum", ("none", "tanh"), default="none"),)))
_row(OpDef("cast", infer_cast, "x.cast(dtype=D) : x with dtype D; D floating (from any dtype), I64 from Bool, or x's own dtype",
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

# ---- scans and stable reductions ------------------------------------------------------------
_row(OpDef("cumsum", _named(infer_softmax, "cumsum"), "x.cumsum(axis=i) : T, x floating",
           "running sum along axis i (y[.., j, ..] = x[.., 0, ..] + .. + x[.., j, ..]); its VJP is a reverse cumsum",
           attrs=(AXIS,), linear=True))
_row(OpDef("cumprod", _named(infer_softmax, "cumprod"), "x.cumprod(axis=i) : T, x floating",
           "running product along axis i; its VJP divides by x, so it is not finite where x is 0",
           attrs=(AXIS,), positive=_ALWAYS))
_row(OpDef("logsumexp", _named(infer_logsumexp, "logsumexp"), "x.logsumexp(axis=i) : x with dim i = 1, x floating",
           "log(sum(exp(x))) along axis i, keeping it with size 1 (max-subtracted: stable)", attrs=(AXIS,)))
_LAST = AttrSpec("axis", "axis", default=-1)
_DESCENDING = AttrSpec("descending", "enum", ("false", "true"), default="false")
_row(OpDef("sort", _named(infer_sort, "sort"), "x.sort(axis=-1, descending=false) : T, x floating",
           "x's values along axis i in order, stable (ties keep their index order; NaN counts as largest); "
           "its VJP scatters g back through argsort; `let (v, i) = x.sort(..) in` binds the values and "
           "argsort's indices", attrs=(_LAST, _DESCENDING)))
_row(OpDef("argsort", _named(infer_sort, "argsort"),
           "x.argsort(axis=-1, descending=false) : Tensor[I64, x.shape], x floating",
           "the positions that sort x along axis i (stable, as torch.sort(stable=True)'s indices); no cotangent",
           attrs=(_LAST, _DESCENDING)))
_row(OpDef("topk", _named(infer_topk, "topk"), "x.topk(k, axis=-1) : x with dim i = k, 1 <= k <= dim",
           "the k largest values along axis i, largest first (ties: lower index first); its VJP scatters "
           "g back through argtopk; `let (v, i) = x.topk(k) in` binds the values and argtopk's indices",
           attrs=(AttrSpec("k", "int", positional=True), _LAST)))
_row(OpDef("argtopk", _named(infer_topk, "argtopk"), "x.argtopk(k, axis=-1) : Tensor[I64, x.shape with dim i = k]",
           "the positions of topk's values along axis i; no cotangent",
           attrs=(AttrSpec("k", "int", positional=True), _LAST)))
# ---- random numbers (keys: Tensor[I64, [2]]; compiler/ir/random_rules.py) -------------------
_SHAPE = AttrSpec("shape", "ints")
_row(OpDef("random_split", infer_split, "random_split(key, n) : Tensor[I64, [n, 2]], key : Tensor[I64, [2]]",
           "n new keys from one (jax.random.split: Threefry-2x32); split, never reuse a key",
           attrs=(AttrSpec("n", "int", positional=True),), float_only=False))
_row(OpDef("random_fold_in", infer_fold_in, "random_fold_in(key, i : Tensor[I64, []]) : Tensor[I64, [2]]",
           "a new key for step i (jax.random.fold_in; i modulo 2^32)", operands=2, float_only=False))
_row(OpDef("random_bits", _named(infer_random, "random_bits"), "random_bits(key, shape=[..]) : Tensor[I64, shape]",
           "uniform 32-bit words in [0, 2^32) (jax.random.bits)", attrs=(_SHAPE,), float_only=False))
_FLOAT = AttrSpec("dtype", "dtype", tuple(d.value for d in DType if d.is_float), default="F32")
_row(OpDef("random_uniform", _named(infer_random, "random_uniform"),
           "random_uniform(key, shape=[..], dtype=F32) : Tensor[dtype, shape]",
           "uniform floats in [0, 1), m * 2^-mantissa bits (jax.random.uniform, bit for bit in every "
           "float dtype but F64, which draws the F32 values: 32-bit draws); no cotangent", attrs=(_SHAPE, _FLOAT), float_only=False))
_row(OpDef("random_normal", _named(infer_random, "random_normal"),
           "random_normal(key, shape=[..], dtype=F32) : Tensor[dtype, shape]",
           "standard normal floats, sqrt(2) erfinv(u) in F32 (jax.random.normal), rounded to dtype "
           "(F64: the same polynomial in f64 of the F32 u); no cotangent", attrs=(_SHAPE, _FLOAT), float_only=False))
_row(OpDef("bernoulli", _named(infer_random, "bernoulli"), "bernoulli(key, p, shape=[..]) : Tensor[Bool, shape], 0 <= p <= 1",
           "true with probability p: random_uniform(key, shape) < p (jax.random.bernoulli); dropout's mask",
           attrs=(AttrSpec("p", "float", positional=True, finite=True), _SHAPE), float_only=False))
_row(OpDef("categorical", infer_categorical,
           "categorical(key, logits, axis=-1) : Tensor[I64, logits.shape with dim i = 1], logits floating",
           "one draw per row with probabilities softmax(logits) (Gumbel-max, jax.random.categorical)",
           operands=2, attrs=(AttrSpec("axis", "axis", default=-1, of=1),), float_only=False))

INFIX = {op.infix: op.name for op in OPS.values() if op.infix and op.operands == 2}
SURFACE_OPS = {name: op for name, op in OPS.items() if not op.internal}
