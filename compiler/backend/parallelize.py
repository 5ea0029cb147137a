"""Tagging for the -O2 transform script (compiler/backend/transform_library.py): which matmuls it
vectorises (`kina.vectorize`) and splits into parallel blocks (`kina.parallel`), which
generics run row-parallel (`kina.parallel_rows`); the transposes and inner reductions are
tagged in compiler/backend/loop_tags.py, and `tag_for_script` runs every tagging.  The tags are attributes set through the MLIR Python bindings
(`mlir_ir`, the bindings' `ir` module) before the pass pipeline runs; the parallel loops
the script makes become OpenMP loops in compiler/backend/threads.py.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from compiler.backend import parallel_if
from compiler.backend.accumulate import accumulate_updates
from compiler.backend.bindings import walk_ops
from compiler.backend.fusion import math_call
from compiler.backend.loop_tags import tag_inner_reductions, tag_transposes
from compiler.backend.shared_products import share_dynamic_products
from compiler.backend.transform_dynamic import DYNAMIC_BLOCK
from compiler.backend.transform_library import (
    FEW_ROWS_BLOCK,
    K_BLOCK_MIN,
    MATMUL_TILE,
    NARROW_TILE_N,
    ODD_REST_COLUMNS,
    REGISTER_TILE,
    VECTOR_ROWS_LANES,
    VECTOR_ROWS_MAX_RANK,
)
from compiler.backend.transposed_operands import packable_transposed_rhs, tag_packed_transposed_rhs

if TYPE_CHECKING:
    from types import ModuleType

    from mlir.ir import Module, OpView, RankedTensorType, Value, WalkResult

# - f32 matmul / batch_matmul results whose M and N are multiples of MATMUL_TILE, with
#   operands of these element types, are tagged `kina.vectorize` (`tag_vectorizable`);
#   those with M >= 8 and N >= 8 (8-column tiles below 32) that the tile does not divide
#   are tagged `kina.vectorize_peeled` = [peel M, peel N, odd partial column tile, tile N]
#   when they do at least PEEL_MIN_FLOPS
#   (serial: their partial tiles peeled off, transform_library.PEELINGS).
VECTOR_ELEMENTS = {"f32", "f16", "bf16"}   # operand element types the vectorised matmul takes
# - the same matmuls, when they do at least PARALLEL_MIN_FLOPS, are first tiled into an
#   scf.forall over blocks of the result (tagged `kina.parallel = blocks` by
#   `tag_vectorizable`), which the OpenMP loop shares among the threads.  Blocks of up to 32 x 128 (one per batch item for batch_matmul): a block's
#   rows of A and columns of B stay in one core's L2 while it runs, where splitting M
#   alone made both cores stream all of B through L3 (K = 2048: 142 -> 216 GFLOP/s on
#   2 cores).  Smaller matmuls stay serial: a parallel loop costs a few microseconds.
PARALLEL_MIN_FLOPS = 4_000_000
# - a static f32 matmul of fewer rows than the tile that does PARALLEL_MIN_FLOPS, is not
#   packed (one row, or neither wide nor deep) and has two column blocks or more, is tagged
#   `kina.parallel_columns`: threads over blocks of transform_library.FEW_ROWS_BLOCK columns,
#   each the interchanged loop nest (k outside the column loop) on one core.
# - below PEEL_MIN_FLOPS a matmul the tile does not divide stays a loop nest: its vector
#   code cost more build time than it saved (a 1,000-let chain of 152 [8, 16] @ [16, 16]
#   products: +0.3-0.5 s of build for well under a microsecond a call).
PEEL_MIN_FLOPS = 16_384
PARALLEL_BLOCK = (32, 128)
# - a parallel f32 matmul whose B rows are at least PACK_B_MIN_N floats (8 KiB) apart, with
#   at least PACK_B_MIN_PANELS column panels, is tagged `kina.pack_b` too: its forall runs
#   over the panels of N only, each copies its [K, bn] panel of B into a contiguous buffer
#   once and runs the M blocks on it.  A power-of-two row stride puts a panel's K rows on
#   a few cache sets, so the register tiles reread them from beyond L2: the scaled
#   lm_head [256, 256] @ [256, 2048] 128-151 -> 156-190 GFLOP/s, the large one's
#   [512, 512] @ [512, 8192] 74-79 -> 168-173 (two cores); the large config's forward 70.4
#   -> 33.5 ms.  At 512 columns (2 KiB rows) it gained nothing, and a [256, 256] product
#   (two panels: one per thread) lost 10-40%.
PACK_B_MIN_N = 2048
PACK_B_MIN_PANELS = 8
# - so is one whose [K, bn] panel of B is larger than an L2 (PACK_B_DEEP_BYTES), with a panel
#   for each thread: the k-blocked register tiles read [K_BLOCK, bn] slices of it, whose rows
#   (2 KiB apart at N = 512) fall on a quarter of L1's sets, and which come from L3 when the
#   panel is not in L2.  The large config's logits VJP [512, 8192] @ [8192, 512] (a 4 MiB
#   panel): 17.9 -> 11.5 ms on two cores of a Zen 5 (240 -> 373 GFLOP/s), its train step
#   62.6 -> 52.8 ms.  (Both logits VJPs now run over strips instead: STRIP_MIN_K below.)
PACK_B_DEEP_BYTES = 1 << 20
# - a packed product of K <= PACKED_WHOLE_K_MAX runs the k loop of each register tile whole
#   (no `kina.k_block`): since "@zero-tiles" (compiler/backend/zero_tiles.py) its tiles start
#   from registers, and a whole k loop then reads and writes each C tile once where K_BLOCK
#   steps wrote it back every 64 (the large StoryLM's [512, 512] @ [512, 8192] 295 -> 308
#   GFLOP/s alone, its train step 64.8 -> 64.0 ms; benchmarks/README.md).  An unpacked
#   product keeps its k blocks: its B rows are a whole row of B apart, and only a k block of
#   them stays in L1 ([512, 512]^2 unchanged; K_BLOCK = 512 for every product lost 30% at
#   [512, 1024] @ [1024, 1024]).
PACKED_WHOLE_K_MAX = 512


# - a parallel f32 matmul with STRIP_MIN_K <= K <= STRIP_MAX_K and two column strips or more runs
#   over strips of B as wide as the register tile (blocks (bm, MATMUL_TILE[1]), `kina.pack_b`,
#   no `kina.k_block`): each task packs its [K, 32] strip into a contiguous buffer (a transposed
#   B is transposed into it, `kina.pack_b_t`), then runs every block of M on it, the whole k
#   loop of each register tile at once.  The strip (256 KiB at K = 2048, 1 MiB at 8192) stays
#   in L2 and is read in order, 128 bytes a step, where the [K, 128] panels' k blocks read rows
#   1-2 KiB apart and wrote the C tile back every K_BLOCK steps.  On an Intel Xeon (Sapphire /
#   Emerald Rapids, 2 cores; benchmarks/README.md): the large StoryLM's logits VJP
#   [512, 8192] @ [8192, 512] 21.6 -> 16.2 ms in the step (200 -> 265 GFLOP/s), its train step
#   78.8 -> 75.3 ms, the scaled one's 6.91 -> 6.44 ms.  Strips for the K = 256 and 512 products
#   lost 2-5% (their panels fit anyway), except where B is a transpose that only the product
#   reads (`transposed_operands.packable_transposed_rhs`: a weight's input gradient
#   g @ transpose(w)): the strips' packing then does the transpose, and its pass over B is
#   saved (the scaled step 6.44 -> 6.27 ms, the large one unchanged; alone, [M, 2048] @
#   transpose([256, 2048]) 2-2.6x faster from M = 8 to 128).  A B that is not a transpose
#   takes strips from STRIP_MIN_M rows: its strips were copied by a scalar loop (the
#   `tensor.pad` lowering; alone, [M, 2048] @ [2048, 256]: M = 8 0.078 -> 0.19 ms, 64 0.28 ->
#   0.40, 128 0.63 -> 0.68, 256 1.30 -> 1.08).  Since that copy is vector moves
#   (row_copies.py), blocks against strips: 64 rows 0.285 against 0.286 ms, 128 0.527 against
#   0.510, 8 0.059 against 0.091; level at best below 256 rows, so the bound stays.  Each
#   element adds its K products in order, as before.
STRIP_MIN_K = 2048
STRIP_MAX_K = 8192
STRIP_MIN_M = 256


def _strips(m: int, k: int, n: int, transposed_b: bool = False) -> bool:
    """Whether a parallel f32 matmul [m, k] @ [k, n] (B a transpose it alone reads:
    transposed_b) runs over packed strips of B."""
    return (k <= STRIP_MAX_K and n // MATMUL_TILE[1] >= 2
            and (transposed_b or (k >= STRIP_MIN_K and m >= STRIP_MIN_M)))


def _packs_b(k: int, n: int, bn: int) -> bool:
    """Whether a parallel f32 matmul [M, k] @ [k, n] in column blocks of bn packs B's panels."""
    panels = n // bn
    return (n >= PACK_B_MIN_N and panels >= PACK_B_MIN_PANELS) or (k * bn * 4 > PACK_B_DEEP_BYTES and panels >= 2)

# - a dynamic export's matmul takes packed panels when the call's N >= PACK_B_MIN_N, or its
#   K >= K_BLOCK_MIN with N >= PACK_DEEP_MIN_N (two of transform_dynamic's panels or more).
PACK_DEEP_MIN_N = 256
# A single row (a decode step's product) is not packed, static or dynamic: each panel would
# be copied for one row of work.  The dynamic blocked body reads B a row of a block at a
# time (transform_dynamic `_rows_first`), the static product takes threads over blocks of
# columns (`kina.parallel_columns` below).  Two cores, [1, 2048] @ [2048, 2048]: dynamic
# 1.27-1.88 -> 0.62-0.67 ms, static 0.38-0.44 -> 0.16-0.18 ms.  From two rows on, the
# packed body (whose rows past the register tile keep their C in registers across k) was
# as fast or faster: [4, 2048] @ [2048, 2048] 0.62-0.75 ms packed against 0.73-0.87
# unpacked (dynamic), 0.95-1.06 either way (static).
PACK_MIN_ROWS = 2


def parallel_blocks(batch: bool, m: int, n: int) -> tuple[int, ...]:
    """The forall block of an (m x n) result that tiles into MATMUL_TILE: the largest
    divisors of m and n up to PARALLEL_BLOCK that are multiples of the register tile."""
    if batch:
        return (1, 0, 0)   # one batch item per iteration (0: the dim is not tiled)
    return tuple(math.gcd(x, limit) for x, limit in zip((m, n), PARALLEL_BLOCK))


# - a linalg.generic whose dim 0 is parallel and that touches at least PARALLEL_MIN_ELEMENTS
#   elements (its largest operand) becomes an scf.forall over dim 0 (tagged
#   `kina.parallel_rows` by `tag_parallel_generics`): elementwise ops, row-wise softmax /
#   log-softmax pieces and their VJPs over [B * T, V] run on every core.  Each row does
#   the same operations in the same order: results are bit-identical.  65,536 elements
#   (256 KiB of f32).  Alone, a [256, 256] add took 8.6 us serial and 13.1 us as a parallel
#   loop, so this was 131,072 while loops were schedule(dynamic); with the static schedule
#   (threads.py) a row-parallel op leaves each half of its rows in the cache of the core
#   that reads them next (the matmul blocks of those rows, the next row-parallel op), and
#   the scaled StoryLM step ran 2-4% faster at 65,536 than at 131,072 (32,768: no further
#   change; benchmarks/ab_step.py).
# - so does a linalg.fill of at least PARALLEL_MIN_ELEMENTS that no tagged forall zeroes
#   block by block (`tag_parallel_fills`): the embedding's [V, D] gradient was zeroed by one
#   core, and the other core's half of the SGD update that reads it came from the first
#   core's cache (scaled step 3.54 -> 3.45 ms; the fill itself 0.054 -> 0.025 ms).
PARALLEL_MIN_ELEMENTS = 65536


def _dim0_extent(mlir_ir: ModuleType, op: OpView) -> int | None:
    """The trip count of a linalg op's loop d0: the size of an operand dim indexed by d0."""
    for m, v in zip(mlir_ir.ArrayAttr(op.attributes["indexing_maps"]), op.operands):
        t = v.type
        if not isinstance(t, mlir_ir.RankedTensorType):
            continue
        for k, e in enumerate(mlir_ir.AffineMapAttr(m).value.results):
            if isinstance(e, mlir_ir.AffineDimExpr) and e.position == 0:
                extent: int = mlir_ir.RankedTensorType(t).shape[k]
                return extent
    return None


# - a row-parallel elementwise generic (static, rank 2..VECTOR_ROWS_MAX_RANK, its last dim a
#   multiple of VECTOR_ROWS_LANES) of f32 / integer values, whose body reads no tensor and
#   calls no math function, is also tagged `kina.vector_rows = [rank]`: the script cuts each
#   row into VECTOR_ROWS_LANES-wide tiles and vectorises them.  LLVM's loop vectoriser had
#   left the log_softmax VJP's loop (the one-hot select, the exp polynomial) scalar, or 8
#   wide: [256, 2048] 0.119 -> 0.071 ms on two Zen 5 cores.  Each lane does the element's
#   scalar ops (no reassociation, a math.fma stays one): results are bit-identical.
_VECTOR_ELEMENTS = {"f32", "i64", "i32", "i1"}


def _vector_rows(op: OpView, iterators: list[str], types: list[RankedTensorType]) -> bool:
    """Whether a static row-parallel generic (its iterator types, its operands' and results'
    types) is one the script vectorises row by row (`kina.vector_rows`)."""
    if not (2 <= len(iterators) <= VECTOR_ROWS_MAX_RANK and all("parallel" in i for i in iterators)):
        return False
    if not all(str(t.element_type) in _VECTOR_ELEMENTS for t in types):
        return False
    if types[-1].shape[-1] % VECTOR_ROWS_LANES:     # the result's rows
        return False
    ops = list(op.regions[0].blocks[0].operations)
    return not any(o.name == "tensor.extract" or math_call(o) or len(o.regions) for o in ops)


def tag_parallel_generics(mlir_ir: ModuleType, module: Module) -> int:
    """Mark with `kina.parallel_rows` every static linalg.generic whose loop d0 is parallel,
    runs at least twice, and whose largest operand has PARALLEL_MIN_ELEMENTS elements
    (TRANSFORM_LIBRARY makes those scf.forall loops); returns the count."""
    tagged = 0

    def visit(op: OpView) -> WalkResult:
        nonlocal tagged
        if op.name != "linalg.generic" or len(op.results) < 1:
            return mlir_ir.WalkResult.ADVANCE
        iterators = mlir_ir.ArrayAttr(op.attributes["iterator_types"])
        if len(iterators) == 0:          # a rank-0 generic has no loop to split
            return mlir_ir.WalkResult.ADVANCE
        first = str(iterators[0])
        types = [mlir_ir.RankedTensorType(v.type) for v in [*op.operands, *op.results]
                 if isinstance(v.type, mlir_ir.RankedTensorType)]
        if "parallel" not in first:
            return mlir_ir.WalkResult.ADVANCE
        if not all(t.has_static_shape for t in types):
            # A dynamic export's stay serial: as forall loops (threads chosen at the call,
            # compiler/backend/parallel_if.py) the scaled StoryLM step's 49 made its lowered LLVM
            # IR 27,860 lines against 19,343, for no step time measured (bench_dynamic.py at
            # load 3.5: 0.93x the static step with them, 0.91x without).  Tried again with the
            # static schedule (2026-12-04): the dynamic step 4.63 -> 4.17 ms, but the GPT
            # block's -O2 build (its exports are dynamic) 1.9 -> 2.55 s, against issue 27's 3 s.
            return mlir_ir.WalkResult.ADVANCE
        size = max(math.prod(t.shape) for t in types)
        extent = _dim0_extent(mlir_ir, op)
        if size >= PARALLEL_MIN_ELEMENTS and extent is not None and extent >= 2:
            op.attributes["kina.parallel_rows"] = mlir_ir.UnitAttr.get()
            if _vector_rows(op, [str(i) for i in iterators], types):
                op.attributes["kina.vector_rows"] = mlir_ir.DenseI64ArrayAttr.get([len(iterators)])
            tagged += 1
        return mlir_ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return tagged


_FORALL_TAGS = ("kina.parallel", "kina.parallel_rows")


def tag_parallel_fills(mlir_ir: ModuleType, module: Module) -> int:
    """Mark with `kina.parallel_rows` every static linalg.fill of at least PARALLEL_MIN_ELEMENTS
    elements whose dim 0 runs at least twice and that no user the script makes a forall takes
    as its result (those zero each block in the forall: block_fills); run after the other
    tags.  Returns the count."""
    def wanted(op: OpView) -> bool:
        if op.name != "linalg.fill" or len(op.results) != 1:
            return False
        t = op.results[0].type
        if not isinstance(t, mlir_ir.RankedTensorType) or not t.has_static_shape or t.rank == 0:
            return False
        users = [u.owner for u in op.results[0].uses]
        return (t.shape[0] >= 2 and math.prod(t.shape) >= PARALLEL_MIN_ELEMENTS
                and not any(k in u.attributes for u in users for k in _FORALL_TAGS))

    found = walk_ops(mlir_ir, module, wanted)
    for op in found:
        op.attributes["kina.parallel_rows"] = mlir_ir.UnitAttr.get()
    return len(found)


def _filled(op: OpView) -> bool:
    """Whether the matmul's accumulator is a linalg.fill (the script fuses it into the forall)."""
    owner = op.operands[2].owner
    return getattr(owner, "name", None) == "linalg.fill"


def _depth(mlir_ir: ModuleType, op: OpView) -> int:
    """K of a static matmul / batch_matmul: B's dim -2 (A may be read transposed,
    compiler/backend/transposed_operands.py, B never is)."""
    k: int = mlir_ir.RankedTensorType(op.operands[1].type).shape[-2]
    return k


def _matmul_flops(mlir_ir: ModuleType, op: OpView) -> int:
    c = mlir_ir.RankedTensorType(op.results[0].type).shape
    n = 1
    for d in c:
        n *= d
    flops: int = 2 * n * _depth(mlir_ir, op)
    return flops


def tag_vectorizable(mlir_ir: ModuleType, module: Module) -> int:
    """Mark with `kina.vectorize` every f32 matmul / batch_matmul whose result tiles
    exactly into MATMUL_TILE (TRANSFORM_LIBRARY vectorises those), and with
    `kina.vectorize_peeled = [peel M, peel N, odd rest, tile N]` the others of at least
    8 x 8 (transform_library.PEELINGS); returns the count of both."""
    tm, tn = MATMUL_TILE
    tagged = 0

    def visit(op: OpView) -> WalkResult:
        nonlocal tagged
        if op.name in ("linalg.matmul", "linalg.batch_matmul") and len(op.results) == 1:
            t = mlir_ir.RankedTensorType(op.results[0].type)
            # F8 operands excluded: an F8 matmul accumulates in f32 too, but vectors of F8 do
            # not lower (the APFloat conversions are scalar), so it stays a loop nest.
            inputs = {str(mlir_ir.RankedTensorType(v.type).element_type) for v in op.operands[:2]}
            vectorizable = t.has_static_shape and str(t.element_type) == "f32" and inputs <= VECTOR_ELEMENTS
            if vectorizable and t.shape[-2] % tm == 0 and t.shape[-1] % tn == 0:
                op.attributes["kina.vectorize"] = mlir_ir.UnitAttr.get()
                if _matmul_flops(mlir_ir, op) >= PARALLEL_MIN_FLOPS and _filled(op):
                    blocks = parallel_blocks(op.name == "linalg.batch_matmul", *t.shape[-2:])
                    k, n = _depth(mlir_ir, op), t.shape[-1]
                    strips = (op.name == "linalg.matmul" and inputs == {"f32"}
                              and _strips(t.shape[-2], k, n, packable_transposed_rhs(mlir_ir, op)))
                    if strips:
                        blocks = (blocks[0], tn)
                    op.attributes["kina.parallel"] = mlir_ir.DenseI64ArrayAttr.get(list(blocks))
                    packed = strips or (op.name == "linalg.matmul" and inputs == {"f32"} and _packs_b(k, n, blocks[1]))
                    if (op.name == "linalg.matmul" and k >= K_BLOCK_MIN and not strips
                            and not (packed and k <= PACKED_WHOLE_K_MAX)):
                        op.attributes["kina.k_block"] = mlir_ir.UnitAttr.get()
                    if packed:
                        op.attributes["kina.pack_b"] = mlir_ir.UnitAttr.get()
                tagged += 1
            elif not t.has_static_shape and str(t.element_type) == "f32" and inputs <= VECTOR_ELEMENTS:
                # a dynamic export's matmul: whether the tile divides a dynamic M or N is known
                # only at run time, so it is split into blocks (a forall: threads when the call's
                # sizes make it big enough) whose M and N loops are peeled, and only the full
                # (static) tiles are vectorised; a static dim the block divides is not peeled
                # (transform.loop.peel fails on a loop with no partial last tile)
                # (the loops peeled are those over one block; a batch_matmul's block is a whole
                # item, so its loops are the register tile's: REGISTER_TILE, the one it is tiled with)
                units = REGISTER_TILE if op.name == "linalg.batch_matmul" else DYNAMIC_BLOCK
                peel = [int(t.is_dynamic_dim(d) or t.shape[d] % unit != 0)
                        for d, unit in ((t.rank - 2, units[0]), (t.rank - 1, units[1]))]
                op.attributes["kina.parallel_peeled"] = mlir_ir.DenseI64ArrayAttr.get(peel)
                dynamic.append((op, inputs))
                tagged += 1
            elif vectorizable and _packs_static(mlir_ir, op, inputs):
                # a big one the tile does not divide: the dynamic exports' packed body (the
                # peeled serial path streamed a wide B from beyond L2 for each tile: [25, 2048]
                # @ [2048, 2048] 28.7-32.7 ms on one core, [24, 2048] @ [2048, 2048] 5.9)
                op.attributes["kina.parallel_packed"] = mlir_ir.DenseI64ArrayAttr.get(
                    [int(t.shape[0] % DYNAMIC_BLOCK[0] != 0)])
                tagged += 1
            elif (vectorizable and op.name == "linalg.matmul" and t.shape[-2] < tm
                    and t.shape[-1] >= 2 * FEW_ROWS_BLOCK and _filled(op)
                    and _matmul_flops(mlir_ir, op) >= PARALLEL_MIN_FLOPS):
                # fewer rows than the tile (a decode step): threads over blocks of columns
                op.attributes["kina.parallel_columns"] = mlir_ir.UnitAttr.get()
                tagged += 1
            elif (vectorizable and t.shape[-2] >= tm and t.shape[-1] >= NARROW_TILE_N
                    and _matmul_flops(mlir_ir, op) >= PEEL_MIN_FLOPS):
                # the tile does not divide M or N, or N is narrower than the tile: the loops'
                # partial last tiles are peeled off
                tile_n = tn if t.shape[-1] >= tn else NARROW_TILE_N
                rest = t.shape[-1] % tile_n
                odd_rest = tile_n == tn and rest > ODD_REST_COLUMNS and rest % ODD_REST_COLUMNS != 0
                peel = [int(t.shape[-2] % tm != 0), int(rest != 0), int(odd_rest), tile_n]
                op.attributes["kina.vectorize_peeled"] = mlir_ir.DenseI64ArrayAttr.get(peel)
                tagged += 1
        return mlir_ir.WalkResult.ADVANCE

    dynamic: list[tuple[OpView, set[str]]] = []
    module.operation.walk(visit)
    for op, inputs in dynamic:     # after the walk: specialise moves the op into an scf.if
        _choose_at_call(mlir_ir, module, op, inputs)
    return tagged


def _may_pack(mlir_ir: ModuleType, op: OpView, inputs: set[str]) -> bool:
    """Whether an f32 matmul is, or at some call may be, wide or deep (`_pack_test`'s size
    rule, a dynamic N or K counting as large enough)."""
    t = mlir_ir.RankedTensorType(op.results[0].type)
    a = mlir_ir.RankedTensorType(op.operands[0].type)

    def at_least(dims: RankedTensorType, bound: int) -> bool:
        return bool(dims.is_dynamic_dim(dims.rank - 1) or dims.shape[-1] >= bound)

    return (op.name == "linalg.matmul" and inputs == {"f32"}
            and (at_least(t, PACK_B_MIN_N) or (at_least(a, K_BLOCK_MIN) and at_least(t, PACK_DEEP_MIN_N))))


def _packs_static(mlir_ir: ModuleType, op: OpView, inputs: set[str]) -> bool:
    """A static f32 matmul (M or N not whole tiles) that `_pack_test` would pack at the call."""
    return (_may_pack(mlir_ir, op, inputs) and _filled(op)
            and mlir_ir.RankedTensorType(op.results[0].type).shape[0] >= PACK_MIN_ROWS
            and _matmul_flops(mlir_ir, op) >= PARALLEL_MIN_FLOPS)


def _choose_at_call(mlir_ir: ModuleType, module: Module, op: OpView, inputs: set[str]) -> None:
    """A dynamic export's matmul: threads when the call's sizes make it big enough, and an f32
    matmul that may be wide or deep (`_pack_test`) a second body, with packed panels of B and
    its k loop blocked (transform_dynamic.dynamic_packed_matmul), for the calls that are."""
    if _may_pack(mlir_ir, op, inputs):
        packed = parallel_if.specialise(mlir_ir, op, lambda: _pack_test(mlir_ir, op))
        del packed.attributes["kina.parallel_peeled"]
        peel_m = list(mlir_ir.DenseI64ArrayAttr(op.attributes["kina.parallel_peeled"]))[0]
        packed.attributes["kina.parallel_packed"] = mlir_ir.DenseI64ArrayAttr.get([peel_m])
    parallel_if.mark(mlir_ir, module, op, lambda: parallel_if.matmul_test(mlir_ir, op, PARALLEL_MIN_FLOPS))


def _pack_test(mlir_ir: ModuleType, op: OpView) -> Value:
    """At the call: a parallel product (PARALLEL_MIN_FLOPS) of PACK_MIN_ROWS rows or more whose
    B is wide (N >= PACK_B_MIN_N, the static `kina.pack_b` rule) or whose K is deep (K >=
    K_BLOCK_MIN, the static `kina.k_block` rule) with N >= PACK_DEEP_MIN_N (the panels' zero
    padding then costs at most a third of the work)."""
    n = parallel_if.dim(mlir_ir, op.operands[2], 1)
    k = parallel_if.dim(mlir_ir, op.operands[0], 1)
    wide = parallel_if.at_least(mlir_ir, n, PACK_B_MIN_N)
    deep = parallel_if.both(mlir_ir, parallel_if.at_least(mlir_ir, k, K_BLOCK_MIN),
                            parallel_if.at_least(mlir_ir, n, PACK_DEEP_MIN_N))
    rows = parallel_if.at_least(mlir_ir, parallel_if.dim(mlir_ir, op.operands[0], 0), PACK_MIN_ROWS)
    return parallel_if.both(mlir_ir, parallel_if.both(mlir_ir, parallel_if.either(mlir_ir, wide, deep), rows),
                            parallel_if.matmul_test(mlir_ir, op, PARALLEL_MIN_FLOPS))


def tag_for_script(mlir_ir: ModuleType, module: Module) -> int:
    """Every tag above (the "@tag-for-script" slot, right after --inline: the inliner's
    canonicalisation rebuilds some ops without their attributes, and a tag set before it
    was lost on 3 of the scaled train step's 17 tiled transposes), and the SGD updates
    that compiler/backend/accumulate.py accumulates into their weights; returns the count of
    products moved, updates rewritten and ops tagged (0: the module is unchanged)."""
    moved = share_dynamic_products(mlir_ir, module)
    tagged = tag_vectorizable(mlir_ir, module)
    # after the matmuls' tags (it takes the threaded products), before the generics' (its
    # scaled operands are generics to thread)
    moved += accumulate_updates(mlir_ir, module, PARALLEL_MIN_ELEMENTS)
    return moved + tagged + sum(tag(mlir_ir, module) for tag in (tag_transposes, tag_parallel_generics,
                                                                 tag_inner_reductions, tag_packed_transposed_rhs,
                                                                 tag_parallel_fills))
