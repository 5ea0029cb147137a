"""Random well-typed Kina programs for differential testing (in the spirit of Csmith and
NNSmith): the generator behind compiler/oracle/differential.py and scripts/fuzz_compile.py.

    case = progen.generate(seed, progen.GenConfig())
    case.source("f")            # Kina text: fn f(..) (and fn f_g(..) = handle f(..) when case.ad)
    case.module_source([(name, c), ...])        # many cases in one file (one library per batch)

A `Case` is one generated program: a forward function `f` (a DAG of lets over float
and I64 parameters, every op built from its row of ops.OPS, so its type is the op's own
typing rule) and, for half of the cases, a wrapper `f_g` that differentiates `f` with
`handle f(..) with reverseMode` (and then uses the cotangents, e.g. an SGD update).
Under reverseMode the generator keeps the spec's restrictions: a let chain ending with
a variable, single ops on variables, no reduce_keep(mean), no rank-changing broadcast.

What is covered, and how (one row per op in progen_ops.MAKERS; tests/test_progen.py
fails when an op of ops.OPS is never generated):
- every surface op with valid attributes; the IR-internal ops (scatter_add,
  scatter_along_axis, relu_grad, maximum_grad, clamp_grad, gelu_grad) through the VJPs
  of gather, take_along_axis, relu, maximum/minimum, clamp and gelu; comparisons,
  sign and argmax of parameters (exact everywhere), Bool masks consumed by where or a
  cast, iota positions, precision round trips by cast (oracle/progen/makers_math.py);
- ranks 0-5, dims that do and do not divide the -O2 tiles (1, 3, 4, 7, 8, 16, 17, 32, 33, ..),
  occasionally shapes big enough for -O2's parallel loops;
- F32, F64, F16, BF16 and both F8 formats (one float dtype per case) and I64 indices;
- chains as models write them (progen/motifs.py's MOTIFS): head split/merge by reshape and
  transpose, attention, transposed weights, fused-QKV slices, concats of shards,
  layer-norm style broadcasts, embedding lookups, NLL by take_along_axis;
- tuple results, repeated results `(y, y)`, parameters and literals returned directly;
- calls: the first lets of some cases form a helper function that the case calls (an
  exported call at -O0/-O2; inlined by the AD pass under reverseMode);
- size-generic helpers (progen/generic.py): `fn f_s1[A, B](..)` with sizes in its types,
  size attributes and bare numbers, called by f at two sizes (instances `f_s1$2_3`), one
  calling another, and `handle f_s1(..) with reverseMode` in a wrapper f_gh.

Values stay O(1): every value carries a magnitude estimate, and a value that may grow
past MAX_MAG (a matmul's fan-in, a sum) is rescaled by a literal, as attention scales
its scores; log/sqrt/rsqrt and division only see operands that are positive by
construction (parameters the input generator draws in [0.5, 2), or sigmoid(x) + 0.5).

Every random decision goes through `Choices`, which records it.  Replaying an edited
record regenerates a program that is still well-typed (the shrinker in
compiler/oracle/differential.py minimises failing cases this way); a choice of 0 is always the
simplest option (fewer lets, smaller dims, the first op, no extra results).
"""
from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from compiler.core.types import DType, TensorType
from compiler.ir.ops import OPS
from compiler.oracle.progen.case import AttrValue, Case, Let, Value
from compiler.oracle.progen.driver import build_case

T = TypeVar("T")
DIMS = (1, 2, 3, 4, 7, 8, 16, 17, 32, 33)   # sorted: a smaller choice is a smaller dim
BIG_DIMS = (64, 128, 256, 512)                # -O2 threads generics of 131,072 elements and more
MAX_MAG = 4.0                                 # values are rescaled above this magnitude


@dataclass(frozen=True)
class GenConfig:
    max_lets: int = 12              # ops per case (motifs count each of their lets)
    ad_fraction: float = 0.5        # cases wrapped in handle .. with reverseMode
    max_rank: int = 5
    max_elements: int = 2048        # per tensor (keeps references and finite differences fast)
    big_fraction: float = 0.03      # cases allowed up to BIG_ELEMENTS per tensor
    big_elements: int = 1 << 17
    wide_fraction: float = 0.5     # big cases that start with an LM head of 2,048 columns (motifs._wide_head)
    motif_fraction: float = 0.35    # steps that add a model-like chain instead of one op
    dtypes: tuple[tuple[DType, int], ...] = ((DType.F32, 54), (DType.F64, 6), (DType.F16, 14), (DType.BF16, 14),
                                             (DType.F8E4M3, 6), (DType.F8E5M2, 6))
    ops: tuple[str, ...] | None = None   # restrict the single-op steps to these ops (None: all)
    generic_fraction: float = 0.2   # cases with size-generic helpers (generic.py); none when ops is set


DEFAULT = GenConfig()


# ---- recorded random decisions ------------------------------------------------------------
class Choices:
    """The random decisions of one generation.  With `replay`, decisions are read from that
    list instead (clamped into range; 0 once it runs out), so an edited record of a failing
    case regenerates a smaller, still well-typed program."""

    def __init__(self, seed: int | None = None, replay: list[int] | None = None) -> None:
        self.rng = random.Random(seed)
        self.replay = replay
        self.record: list[int] = []

    def below(self, n: int) -> int:
        """0 <= k < n; 0 is the simplest."""
        if n <= 1:
            k = 0
        elif self.replay is not None:
            i = len(self.record)
            k = min(self.replay[i], n - 1) if i < len(self.replay) else 0
        else:
            k = self.rng.randrange(n)
        self.record.append(k)
        return k

    def between(self, lo: int, hi: int) -> int:
        return lo + self.below(hi - lo + 1)

    def pick(self, seq: Sequence[T]) -> T:
        return seq[self.below(len(seq))]

    def weighted(self, items: Sequence[T], weights: Sequence[int]) -> T:
        k = self.below(sum(weights))
        for item, w in zip(items, weights):
            if k < w:
                return item
            k -= w
        return items[-1]

    def coin(self, p: float) -> bool:
        """True with probability p (a choice of 0 is False)."""
        return self.below(1000) >= 1000 - int(p * 1000)


# ---- the generator --------------------------------------------------------------------------
class Gen:
    """State of one generation: parameters, lets, and the pools of usable values.
    progen_ops' makers call the helpers below; every op goes through `emit`."""

    def __init__(self, ch: Choices, cfg: GenConfig, ad: bool, dtype: DType, max_elements: int) -> None:
        self.ch, self.cfg, self.ad, self.dtype = ch, cfg, ad, dtype
        self.max_elements = max_elements
        self.params: list[Value] = []
        self.lets: list[Let] = []
        self.pool: list[Value] = []          # float values
        self.index_pool: list[Value] = []    # I64 values
        self.bool_pool: list[Value] = []     # Bool values (comparisons)
        self._count = 0

    def pool_of(self, t: TensorType) -> list[Value]:
        if t.is_float:
            return self.pool
        return self.bool_pool if t.dtype is DType.Bool else self.index_pool

    # ---- shapes --------------------------------------------------------------------
    def dim(self, limit: int | None = None) -> int:
        dims = [d for d in (DIMS + (BIG_DIMS if self.max_elements > self.cfg.max_elements else ()))
                if limit is None or d <= limit]
        return self.ch.pick(dims or [1])

    def shape(self, rank: int | None = None, min_rank: int = 0) -> tuple[int, ...]:
        if rank is None:
            rank = self.ch.weighted(list(range(min_rank, self.cfg.max_rank + 1)),
                                    [1, 3, 6, 5, 3, 2][min_rank:self.cfg.max_rank + 1])
        dims: list[int] = []
        budget = self.max_elements
        for _ in range(rank):
            d = self.dim(max(1, budget // max(1, 2 ** (rank - len(dims) - 1))))
            dims.append(d)
            budget = max(1, budget // d)
        return tuple(dims)

    def fits(self, shape: Sequence[int]) -> bool:
        return math.prod(shape) <= self.max_elements

    # ---- values --------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        self._count += 1
        return f"{hint}{self._count}"

    def param(self, t: TensorType, positive: bool = False) -> Value:
        """A new parameter; positive ones are drawn in [0.5, 2) by interp.random_inputs,
        which the caller guarantees by using it directly as log/sqrt/rsqrt's operand."""
        v = Value(self.fresh("p" if t.is_float else "i"), t, 1.0, 0.5 if positive else None)
        self.params.append(v)
        if not positive:
            self.pool_of(t).append(v)
        return v

    def emit(self, op_name: str, args: list[Value], mag: float = 1.0, pos_lo: float | None = None,
             index_hi: int | None = None, **attrs: AttrValue) -> Value:
        """Bind `op_name(args, attrs)`; its type comes from the op's own typing rule.
        `index_hi`: an I64 result's largest value (argmax, iota), so it may serve as an index."""
        t = OPS[op_name].infer([a.type for a in args], attrs)
        v = Value(self.fresh("v"), t, mag, pos_lo, index_hi)
        self.lets.append(Let(v.name, op_name, [a.name for a in args], dict(attrs), t))
        self.pool_of(t).append(v)
        return v

    def literal(self, t: TensorType, values: tuple[float, ...], pool: bool = False) -> Value:
        v = Value(self.fresh("c"), t, abs(values[0]) if values and t.is_float else 1.0,
                  values[0] if values and t.is_float and len(values) == 1 and values[0] > 0 else None,
                  int(max(values)) if values and not t.is_float else None)   # I64 literals hold ints
        self.lets.append(Let(v.name, None, [], {}, t, tuple(values)))
        if pool:
            self.pool_of(t).append(v)
        return v

    def alias(self, v: Value) -> Value:
        """`let a = v in ..`: a let whose value is a variable."""
        a = Value(self.fresh("a"), v.type, v.mag, v.pos_lo, v.index_hi)
        self.lets.append(Let(a.name, None, [v.name], {}, v.type))
        self.pool_of(v.type).append(a)
        return a

    def operand(self, want: Callable[[TensorType], bool] | None = None, fresh: float = 0.15) -> Value | None:
        """A float value for an op: mostly the newest one, so the lets form one connected
        chain as a model's do; else an older one (recent first); None (a new parameter)
        with probability `fresh`, or when no value satisfies `want(type)`."""
        cands = [v for v in self.pool if want is None or want(v.type)]
        if not cands or self.ch.coin(fresh):
            return None
        if len(cands) == 1 or not self.ch.coin(0.4):
            return cands[-1]
        return self.ch.weighted(cands, [1 + i for i in range(len(cands))])

    def float_operand(self, want: Callable[[TensorType], bool] | None = None,
                      shape_fn: Callable[[], tuple[int, ...]] | None = None) -> Value:
        v = self.operand(want)
        if v is None:
            v = self.param(TensorType(self.dtype, shape_fn() if shape_fn else self.shape()))
        return v

    def like(self, t: TensorType, reuse: float = 0.5) -> Value:
        """A value of exactly type t: an existing one, or a new parameter."""
        cands = [v for v in self.pool_of(t) if v.type == t]
        if cands and self.ch.coin(reuse):
            return self.ch.pick(cands)
        return self.param(t)

    def index(self, shape: tuple[int, ...], bound: int) -> Value:
        """An I64 value of this shape whose entries are < bound: an existing parameter (the
        input generator draws it below the smallest bound of its uses), a literal, or a new one."""
        cands = [v for v in self.index_pool if v.type.shape == shape
                 and (v.index_hi is None or v.index_hi < bound)]
        if cands and self.ch.coin(0.4):
            return self.ch.pick(cands)
        if self.ch.coin(0.15) and math.prod(shape) <= 64:
            vals = tuple(self.ch.below(bound) for _ in range(math.prod(shape)))   # one value: a splat
            return self.literal(TensorType(DType.I64, shape), vals, pool=True)
        return self.param(TensorType(DType.I64, shape))

    def positive(self, t: TensorType, lo: float = 0.3) -> Value:
        """A value of type t bounded below by `lo` > 0: an existing one, or sigmoid(x) + 0.5."""
        cands = [v for v in self.pool if v.type == t and v.pos_lo is not None and v.pos_lo >= lo]
        if cands and self.ch.coin(0.5):
            return self.ch.pick(cands)
        x = self.like(t)
        s = self.emit("sigmoid", [x], 0.5, None)
        half = self.literal(t, (0.5,))
        return self.emit("add", [s, half], 1.0, 0.5)

    def rescale(self, v: Value) -> Value:
        """v * (1 / mag) when v may have outgrown MAX_MAG (a literal, like attention's scale)."""
        if v.mag <= MAX_MAG:
            return v
        c = self.literal(v.type, (_round_scale(1.0 / v.mag),))
        return self.emit("mul", [v, c], 1.0)


def _round_scale(x: float) -> float:
    """A scale exactly representable in every float dtype: a power of two."""
    return 2.0 ** round(math.log2(x))


def generate(seed: int, config: GenConfig = DEFAULT, replay: list[int] | None = None) -> Case:
    """A random well-typed program (deterministic in seed; or regenerated from `replay`)."""
    ch = Choices(seed, replay)
    case = build_case(Gen, ch, config)
    case.seed, case.choices = seed, list(ch.record)
    return case
