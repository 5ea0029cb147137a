"""The -O2 transform-dialect script (`TRANSFORM_LIBRARY`): loop orders, register tiles,
vector code and parallel loops for the ops compiler/backend/parallelize.py tags, run at the
"@transforms" slot of compiler/backend/pipelines.py (entry `TRANSFORM_ENTRY`), and the kernel
outlining of the "@outline" slot (`OUTLINE_LIBRARY`, entry `OUTLINE_ENTRY`).
"""
from __future__ import annotations

from pathlib import Path

from compiler.backend.host import host_cpu
from compiler.backend.transform_dynamic import (
    DYNAMIC_PEELINGS,
    DYNAMIC_TRANSPOSES,
    dynamic_matmul,
    dynamic_packed_matmul,
    dynamic_reduction,
    dynamic_transpose,
    foreach_tagged,
    match_full_tiles,
    peel_loops,
    tag,
)

# Transform-dialect script run at the "@transforms" slot: loop orders and vector code
# for LLVM (a linalg op's loops nest in the order of its dims).
# - matmul / batch_matmul tagged `kina.vectorize` (by `tag_vectorizable`: static shapes
#   whose M and N are multiples of the 8 x 32 tile): tiled to 8 x 32 x 1, vectorised,
#   lowered to vector.fma outer products; hoisting the C tile out of the k loop keeps
#   it in registers (16 AVX-512 registers), about 90% of one core's FMA peak at 512.
#   FMA rounds once where -O0 rounds twice: results agree to float tolerance.
# - other matmuls: (i, j, k) -> (i, k, j).  The innermost k loop reduced into one C
#   element and did not vectorise; the innermost j loop reads a row of B and updates a
#   row of C with unit stride, which LLVM's loop vectoriser turns into FMA vectors.
# - a rank-3 generic with two inputs and dims (parallel, parallel, reduction), i.e. the
#   scatter_along_axis lowering (and scatter_add where rewrite_scatters does not apply) out[v, d] += (idx[n] == v) ? upd[n, d] : 0:
#   (v, d, n) -> (v, n, d), so the innermost loop runs along the rows of out and upd.
#   Interchange only renests loops: each output element sums the same terms in order.
MATMUL_TILE = (8, 32)   # (M, N) of the tiles the tagging reasons in (parallelize.py)


def _host_has_avx512() -> bool:
    """Whether the CPU the libraries are compiled for (llc's -mcpu=native) has AVX-512F."""
    return host_cpu().has_avx512f


# The register tile the script tiles and vectorises with.  8 x 32 is 16 AVX-512 registers
# of C; with AVX2's 16 registers of 8 floats it is 32 registers, and the kernels spill: on
# a Zen 3 host the scaled StoryLM's train step took 24.0 ms with 8 x 32 tiles and 13.0
# with 4 x 16 (8 registers of C; 8 x 16 spilled too: 24.4 ms), against jax.jit's 14.9.
# The tagging keeps reasoning in MATMUL_TILE: 4 x 16 divides 8 x 32, so a tile the tags
# call full is a whole number of register tiles.  It serves the matmuls the tags call
# divisible (`kina.vectorize`), the parallel ones and a dynamic export's (`kina.parallel_peeled`,
# whose peelings the tagging reasons in this tile: on the Zen 3 host the dynamic scaled
# StoryLM step took 1.60x the static one with 8 x 32 tiles, 1.34x with 4 x 16); the static
# peeled ones (`kina.vectorize_peeled`) are tiled and peeled in MATMUL_TILE, since their
# peelings are MATMUL_TILE's and `transform.loop.peel` fails on a loop the smaller tile
# divides (a [B * H, 4, 2] @ [B * H, 2, 4] product: its static 4-row loop), and their full
# tiles then cut into register tiles (`_register_tiles`).
# 4 x 16's 8 chains of FMAs saturate a core whose FMA latency is 4 cycles, but reach 80% of
# the peak of a Zen 2's (5 cycles: benchmarks/c/fma_chains.c); a 12-vector tile (6 x 16,
# OpenBLAS's) would not divide MATMUL_TILE (benchmarks/README.md, "On a Zen 2").
# KINA_REGISTER_TILE=MxN overrides it.
def _register_tile() -> tuple[int, int]:
    import os
    setting = os.environ.get("KINA_REGISTER_TILE", "").strip().lower()
    if setting:
        m, _, n = setting.partition("x")
        if m.isdigit() and n.isdigit() and MATMUL_TILE[0] % int(m) == 0 and MATMUL_TILE[1] % int(n) == 0:
            return int(m), int(n)
    return MATMUL_TILE if _host_has_avx512() else (4, 16)


REGISTER_TILE = _register_tile()


# - the parallel matmuls (compiler/backend/parallelize.py tags them with their blocks): one
#   script part per block shape `parallelize.parallel_blocks` can choose.
# - a parallel matmul with K >= K_BLOCK_MIN (tagged `kina.k_block` too) runs the k loop of
#   each block in steps of K_BLOCK: the block's [K_BLOCK, 128] slice of B (32 KiB) is
#   read by its four 8-row register tiles while it is in L1, where a [2048, 128] slice
#   (1 MiB, with the 8 KiB row stride of A: a page per row) came from L2 or beyond each
#   time (256 x 2048 x 2048 products, one thread: 67-87 -> 93-107 GFLOP/s).  Each result
#   element still adds its K terms in order: the results are unchanged.
K_BLOCK = 64
K_BLOCK_MIN = 512
PARALLEL_MATMUL_BLOCKS = ([("linalg.matmul", (bm, bn)) for bm in (8, 16, 32) for bn in (32, 64, 128)]
                          + [("linalg.batch_matmul", (1, 0, 0))])
# - a static f32 matmul of fewer rows than the register tile (a decode step's [1, D] @ [D, V])
#   that does at least parallelize.PARALLEL_MIN_FLOPS (tagged `kina.parallel_columns`): an
#   scf.forall over blocks of FEW_ROWS_BLOCK columns, each the loop nest of the script's last
#   section (k outside the column loop, which LLVM vectorises): the rows' loop ran on one
#   core.  Each element adds its K terms in order: results are bit-identical.
FEW_ROWS_BLOCK = 128
# - a transpose that moves the input's innermost dim (it lands on output dim j < rank - 1)
#   read the input with a stride of a whole row per element: a [256, 2048] transpose took
#   1.5 ms, a cache (and TLB) miss per element.  `tag_transposes` tags those whose dims
#   j and rank - 1 are multiples of TRANSPOSE_BLOCK with their tile sizes (TRANSPOSE_BLOCK at
#   j and rank - 1, 1 elsewhere); the script tiles them, so each tile moves a block that
#   stays in L1, then vectorises the tile: a vector.transpose, lowered to AVX-512 shuffles
#   (`shuffle_16x16`), 1.5 ms -> 0.24 ms at [256, 2048].  Transposes only move values:
#   results are bit-identical.  One tiling per (rank, j) for ranks 2..TRANSPOSE_MAX_RANK.
TRANSPOSE_BLOCK = 16
TRANSPOSE_MAX_RANK = 6


def transpose_tiles(rank: int, j: int) -> tuple[int, ...]:
    return tuple(TRANSPOSE_BLOCK if d in (j, rank - 1) else 1 for d in range(rank))


# - a generic reducing its innermost loop (tagged `kina.reduce_inner` by
#   loop_tags.tag_inner_reductions, which says why): each row alone (its other loops tiled
#   by 1), reduced REDUCE_LANES elements at a time into a vector of partial results
#   (`tile_reduction_using_for`), which one vector.multi_reduction combines with the
#   initial value at the end of the row; both vectorised.
REDUCE_LANES = 16
REDUCE_MAX_RANK = 6


def reduce_tiles(rank: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the row tiling, the reduction tiling) of a rank-`rank` inner reduction."""
    return (1,) * (rank - 1) + (0,), (0,) * (rank - 1) + (REDUCE_LANES,)


def _reduce_inner(rank: int) -> str:
    """Script lines vectorising the inner reductions of this rank (`reduce_tiles`)."""
    row_tiles, lane_tiles = reduce_tiles(rank)
    rows, lanes = (", ".join(map(str, t)) for t in (row_tiles, lane_tiles))
    name = f"%red_{rank}"
    loops = ", ".join(["!transform.any_op"] * rank)
    four = ", ".join(["!transform.any_op"] * 4)
    return ("\n".join(foreach_tagged(name, "linalg.generic", tag("kina.reduce_inner", row_tiles))) + "\n"
            f"      %row, %rl:{rank - 1} = transform.structured.tile_using_for %op tile_sizes [{rows}] : "
            f"(!transform.any_op) -> ({loops})\n"
            f"      %fill, %part, %comb, %loop = transform.structured.tile_reduction_using_for %row "
            f"by tile_sizes = [{lanes}] : (!transform.any_op) -> ({four})\n"
            f"      transform.structured.vectorize %fill : !transform.any_op\n"
            f"      transform.structured.vectorize %part : !transform.any_op\n"
            f"      transform.structured.vectorize %comb : !transform.any_op\n"
            f"    }}")


# - a transpose of at least loop_tags.PARALLEL_TRANSPOSE_MIN elements (tagged
#   `kina.parallel_transpose = [t]`): first an scf.forall over its output dim 0 in blocks of
#   t (TRANSPOSE_BLOCK when that dim is one the 16 x 16 tiling cuts, else 1), then tiled as
#   above inside each block.  Values are only moved: results are bit-identical.
PARALLEL_TRANSPOSE_BLOCKS = (1, TRANSPOSE_BLOCK)


def _parallel_transpose(block: int) -> str:
    name = f"%ptr_{block}"
    return ("\n".join(foreach_tagged(name, "linalg.transpose", tag("kina.parallel_transpose", (block,)))) + "\n"
            f"      %t, %all = transform.structured.tile_using_forall %op tile_sizes [{block}] : "
            f"(!transform.any_op) -> (!transform.any_op, !transform.any_op)\n"
            f"    }}")


# - an f32 matmul or batch_matmul whose M or N is not a multiple of the 8 x 32 tile (tagged
#   `kina.vectorize_peeled = [peel_m, peel_n, odd_rest, tile_n]` by `tag_vectorizable`: 1
#   for each dim the tile does not divide, odd_rest and tile_n below): tiled the same way, then the loop over
#   each such dim is peeled (`transform.loop.peel`: its last, partial tile becomes a loop
#   of its own).  The full tiles are then static 8 x 32 matmuls, vectorised like the ones
#   above, and so is the partial column tile; the partial row tile stays a loop nest (the
#   interchange below).  One core, before -> after (NumPy): 100 x 300 x 1000 32 -> 92
#   (100), 250 x 250 x 250 28 -> 74 (98), 13 x 50 x 70 11 -> 34 (45) GFLOP/s.  Each result
#   element adds its K terms in the same order.
# One row per tag: (peel_m, peel_n, odd_rest, tile_n).  A matmul narrower than 32 columns
# (a 10- or 20-class head) takes NARROW_TILE_N-column tiles instead: [1000, 300] @
# [300, 10] was an interchanged loop at 7 GFLOP/s.
NARROW_TILE_N = 8
PEELINGS = ((1, 0, 0, 32), (0, 1, 0, 32), (1, 1, 0, 32), (0, 1, 1, 32), (1, 1, 1, 32),
            (0, 0, 0, NARROW_TILE_N), (1, 0, 0, NARROW_TILE_N), (0, 1, 0, NARROW_TILE_N), (1, 1, 0, NARROW_TILE_N))
# odd_rest: a partial column tile of 9 to 31 columns that ODD_REST_COLUMNS does not
# divide stays a loop nest: as one [8, 26] vector tile it ran at a few GFLOP/s (250 x
# 250 x 250: 34 GFLOP/s in all, 62 with that tile a loop nest); [8, 8], [8, 16] or
# [8, 4] tiles vectorise well (100 x 300 x 1000: 84 against 55 as a loop nest).
ODD_REST_COLUMNS = 8


def _peeled_matmul(op: str, peel_m: int, peel_n: int, odd_rest: int, tile_n: int) -> str:
    """Script lines for the `op`s (matmul or batch_matmul) tagged
    `kina.vectorize_peeled = [peel_m, peel_n, odd_rest, tile_n]`."""
    batch = int(op == "linalg.batch_matmul")
    name = f"%peel_{op[7:]}_{peel_m}{peel_n}{odd_rest}_{tile_n}"
    # The loops are tiled and peeled in MATMUL_TILE, not REGISTER_TILE: the tag's peelings
    # are MATMUL_TILE's, and peeling a loop that the smaller register tile divides fails
    # (`transform.loop.peel`).  With a smaller register tile the 8 x 32 tiles are cut into
    # register tiles after the peeling (`_register_tiles`).
    reg_m, reg_n = MATMUL_TILE[0], tile_n
    two_level = tile_n == MATMUL_TILE[1] and REGISTER_TILE != MATMUL_TILE
    tiles = ", ".join(map(str, [1] * batch + [reg_m, reg_n, 0 if two_level else 1]))
    n_loops = 2 + batch + (not two_level)
    loops = ", ".join(["!transform.any_op"] * (n_loops + 1))
    m, n = batch, batch + 1        # the M and N loops among the tile loops %l
    lines = foreach_tagged(name, op, tag("kina.vectorize_peeled", (peel_m, peel_n, odd_rest, tile_n))) + [
             f"      %t, %l:{n_loops} = transform.structured.tile_using_for %op tile_sizes [{tiles}] : "
             f"(!transform.any_op) -> ({loops})"]
    lines += peel_loops(m, n, peel_m, peel_n)
    # In the loop over the full row tiles (the M loop's main part, or the whole M loop
    # when M divides), peeling made the tile sizes constants: canonicalised, the matmuls
    # in it (the full tiles and the last partial column tile) get static types and
    # vectorise, but for an odd_rest partial column tile only the full tiles do.  The
    # last partial row tile stays a loop nest (the interchange below).
    rows = f"%main{m}" if peel_m else f"%l#{m}"
    only_full = f"tensor<{'1x' * batch}{reg_m}x{reg_n}xf32>" if odd_rest or two_level else None
    lines += match_full_tiles(op, rows, only_full)
    if two_level:
        lines += _register_tiles("%tiles", "full", [1] * batch + [*REGISTER_TILE, 1])
        if not odd_rest:
            lines += [f"      %rest_cols = transform.structured.match ops{{[\"{op}\"]}} in {rows} : "
                      "(!transform.any_op) -> !transform.any_op"]
            lines += _register_tiles("%rest_cols", "cols", [1] * batch + [REGISTER_TILE[0], 0, 1])
    else:
        lines += ["      transform.structured.vectorize %tiles : !transform.any_op"]
    return "\n".join(lines + ["    }"])


def _register_tiles(handle: str, tag: str, sizes: list[int]) -> list[str]:
    """Script lines cutting the static 8 x 32 tiles (or the partial column tile, 8 x at most
    24) of `handle` into register tiles of `sizes` (k by 1) and vectorising them: with
    AVX2's 16 registers an 8 x 32 tile of C is 32 of them and spilled (a static [31, 2048]
    @ [2048, 2048] 31.6 ms, the dynamic build's 4 x 16 tiles 6.9 ms)."""
    n = sum(1 for s in sizes if s)
    loops = ", ".join(["!transform.any_op"] * (n + 1))
    return [f"      %rt_{tag}, %rl_{tag}:{n} = transform.structured.tile_using_for {handle} "
            f"tile_sizes [{', '.join(map(str, sizes))}] : (!transform.any_op) -> ({loops})",
            f"      transform.structured.vectorize %rt_{tag} : !transform.any_op"]


TRANSPOSE_TILINGS = [transpose_tiles(r, j) for r in range(2, TRANSPOSE_MAX_RANK + 1) for j in range(r - 1)]
TRANSFORM_LIBRARY = """\
module attributes {transform.with_named_sequence} {
  transform.named_sequence @match_scatter(%op: !transform.any_op {transform.readonly}) -> !transform.any_op {
    transform.match.operation_name %op ["linalg.generic"] : !transform.any_op
    %m = transform.match.structured failures(propagate) %op : (!transform.any_op) -> !transform.any_op {
    ^bb0(%s: !transform.any_op):
      %rank = transform.match.structured.rank %s : (!transform.any_op) -> !transform.param<i64>
      %c3 = transform.param.constant 3 : i64 -> !transform.param<i64>
      transform.match.param.cmpi eq %rank, %c3 : !transform.param<i64>
      transform.match.structured.dim %s[0, 1] {parallel} : !transform.any_op
      transform.match.structured.dim %s[2] {reduction} : !transform.any_op
      %n = transform.match.structured.num_inputs %s : (!transform.any_op) -> !transform.param<i64>
      %c2 = transform.param.constant 2 : i64 -> !transform.param<i64>
      transform.match.param.cmpi eq %n, %c2 : !transform.param<i64>
      transform.match.structured.yield %s : !transform.any_op
    }
    transform.yield %m : !transform.any_op
  }
  transform.named_sequence @interchange_scatter(%op: !transform.any_op {transform.consumed}) {
    %i = transform.structured.interchange %op iterator_interchange = [0, 2, 1] : (!transform.any_op) -> !transform.any_op
    transform.yield
  }
  transform.named_sequence @kina_o2(%root: !transform.any_op {transform.consumed}) {
@PARALLEL_TRANSPOSES@
@TRANSPOSES@
@DYNAMIC_TRANSPOSES@
@PARALLEL_MATMULS@
    %prow = transform.structured.match ops{["linalg.generic", "linalg.fill"]} attributes{kina.parallel_rows} in %root : (!transform.any_op) -> !transform.any_op
    transform.foreach %prow : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %g, %all = transform.structured.tile_using_forall %op tile_sizes [1] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    }
@VECTOR_ROWS@
    %pcol = transform.structured.match ops{["linalg.matmul"]} attributes{kina.parallel_columns} in %root : (!transform.any_op) -> !transform.any_op
    transform.foreach %pcol : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %c, %all = transform.structured.tile_using_forall %op tile_sizes [0, @FEW_ROWS_BLOCK@, 0] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    }
@REDUCTIONS@
@DYNAMIC_MATMULS@
@PEELED_MATMULS@
    %vm = transform.structured.match ops{["linalg.matmul"]} attributes{kina.vectorize} in %root : (!transform.any_op) -> !transform.any_op
    transform.foreach %vm : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %t, %l:3 = transform.structured.tile_using_for %op tile_sizes [@TILE_M@, @TILE_N@, 1] : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      transform.structured.vectorize %t : !transform.any_op
    }
    %vb = transform.structured.match ops{["linalg.batch_matmul"]} attributes{kina.vectorize} in %root : (!transform.any_op) -> !transform.any_op
    transform.foreach %vb : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %t, %l:4 = transform.structured.tile_using_for %op tile_sizes [1, @TILE_M@, @TILE_N@, 1] : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      transform.structured.vectorize %t : !transform.any_op
    }
    %f = transform.structured.match ops{["func.func"]} in %root : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %f {
      transform.apply_patterns.vector.reduction_to_contract
      transform.apply_patterns.vector.transfer_permutation_patterns
      transform.apply_patterns.canonicalization
    } : !transform.any_op
    transform.apply_patterns to %f {
      transform.apply_patterns.vector.lower_contraction lowering_strategy = "outerproduct"
      transform.apply_patterns.vector.lower_outerproduct
      transform.apply_patterns.vector.lower_transpose lowering_strategy = "shuffle_16x16"
      transform.apply_patterns.vector.lower_multi_reduction lowering_strategy = "innerreduction"
      transform.apply_patterns.canonicalization
    } : !transform.any_op
    %mm = transform.structured.match ops{["linalg.matmul"]} in %root : (!transform.any_op) -> !transform.any_op
    transform.foreach %mm : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %g = transform.structured.generalize %op : (!transform.any_op) -> !transform.any_op
      %i = transform.structured.interchange %g iterator_interchange = [0, 2, 1] : (!transform.any_op) -> !transform.any_op
    }
    %bmm = transform.structured.match ops{["linalg.batch_matmul"]} in %root : (!transform.any_op) -> !transform.any_op
    transform.foreach %bmm : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %g = transform.structured.generalize %op : (!transform.any_op) -> !transform.any_op
      %i = transform.structured.interchange %g iterator_interchange = [0, 1, 3, 2] : (!transform.any_op) -> !transform.any_op
    }
    %r = transform.foreach_match in %root @match_scatter -> @interchange_scatter : (!transform.any_op) -> !transform.any_op
    transform.yield
  }
}
"""
TRANSFORM_ENTRY = "kina_o2"
# Kernel outlining (the "@outline" slot, once the loops exist): every loop nest at the top
# level of a function body moves into an internal, never-inlined function of its own
# (`transform.loop.outline`; constants are cloned into it; "passthrough" and
# "llvm.linkage" are the attributes the LLVM lowering keeps).  LLVM's -O2 cost more than
# linear time in the size of one function (IndVarSimplify alone took 81% of `opt -O2` on
# the scaled train step: its scalar-evolution work grows with every loop of the function),
# so N kernels in one function took ~N^1.8 to optimise; N small functions take ~N.  The
# call per kernel costs nanoseconds.  The loops of an scf.forall's body are outlined too:
# the OpenMP lowering then outlines a body that only calls its kernel, and kernel merging
# (compiler/backend/llvm_stage.py) compiles one copy of a matmul block shared by every function
# that has it (the scaled step: opt + llc 3.1 -> 1.9 s of CPU).  `rewrites.tag_outlined_loops` (a
# hook) picks the loops: every nest of at least OUTLINE_MIN_ITERATIONS iterations, and the
# small ones too in a function of more than OUTLINE_SMALL_LIMIT small nests.  A small nest
# left inline costs no call and LLVM may fuse it with its neighbours (StoryLM-0's step:
# 8.9 us with every nest outlined, 6.9 us without); a function of thousands of them is
# what made LLVM's time superlinear.
# Hoisting (the "@hoist" slot, right after the script): the subset pairs that the register
# tiles and vectorised reductions read and write on every iteration of their innermost
# loop (a C tile's transfer_read/transfer_write across the k loop, a reduction's lane
# accumulator) become iter_args of that loop, i.e. registers.  Only loops tagged
# `kina.hoist` are visited: `rewrites.tag_innermost_loops` tags the innermost ones, the only
# loops of the script's nests whose body holds such a pair (an outer loop's iter_arg reaches
# its subsets only through the loop nested in it).  Visiting every loop, as this script
# once did, cost 0.55 of the GPT block's 0.98 s of script time (820 loops, 330 innermost)
# and 1.5 of the scaled StoryLM's 3.0 s, for a byte-identical module on the examples,
# the GPT block and the dynamic-op programs.
HOIST_ENTRY = "kina_hoist"
HOIST_LIBRARY = """\
  transform.named_sequence @kina_hoist(%root: !transform.any_op {transform.readonly}) {
    %loops = transform.structured.match ops{["scf.for"]} attributes{kina.hoist} in %root : (!transform.any_op) -> !transform.any_op
    transform.foreach %loops : !transform.any_op {
    ^bb0(%lp: !transform.any_op):
      transform.loop.hoist_loop_invariant_subsets %lp : !transform.any_op
    }
    transform.yield
  }
"""
OUTLINE_ENTRY = "kina_outline"
OUTLINE_MIN_ITERATIONS = 4096
OUTLINE_SMALL_LIMIT = 256
OUTLINE_LIBRARY = """\
  transform.named_sequence @kina_outline(%root: !transform.any_op {transform.consumed}) {
    %loops = transform.structured.match ops{["scf.for"]} attributes{kina.outline} in %root : (!transform.any_op) -> !transform.any_op
    %fn, %call = transform.loop.outline %loops {func_name = "kina.kernel"} : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %private = transform.param.constant "private" -> !transform.any_param
    transform.annotate %fn "sym_visibility" = %private : !transform.any_op, !transform.any_param
    %internal = transform.param.constant #llvm.linkage<internal> -> !transform.any_param
    transform.annotate %fn "llvm.linkage" = %internal : !transform.any_op, !transform.any_param
    %noinline = transform.param.constant ["noinline"] -> !transform.any_param
    transform.annotate %fn "passthrough" = %noinline : !transform.any_op, !transform.any_param
    transform.yield
  }
"""


def _transpose_tiling(tiles: tuple[int, ...]) -> str:
    """Script lines tiling the transposes tagged `kina.transpose_tile = tiles`."""
    name = "%tt_" + "_".join(map(str, tiles))
    sizes = ", ".join(map(str, tiles))
    n = len(tiles)
    loops = ", ".join(["!transform.any_op"] * (n + 1))
    return ("\n".join(foreach_tagged(name, "linalg.transpose", tag("kina.transpose_tile", tiles))) + "\n"
            f"      %t, %l:{n} = transform.structured.tile_using_for %op tile_sizes [{sizes}] : "
            f"(!transform.any_op) -> ({loops})\n"
            f"      transform.structured.vectorize %t : !transform.any_op\n"
            f"    }}")


def _pack_b(blocks: tuple[int, ...]) -> str:
    """Script lines of a `kina.pack_b` matmul after its forall over the column panels
    (%b): B's panel copied into a buffer of its own (a `tensor.pad` by nothing, kept by
    nofold), then a loop over the blocks of M (%mb) that all read that copy."""
    return ("      %pb, %pad, %pcopy = transform.structured.pad %b pad_to_multiple_of [1, 1, 1] "
            "{padding_dimensions = [0, 1, 2], padding_values = [0.0 : f32, 0.0 : f32, 0.0 : f32], "
            "nofold_flags = [0, 1, 0], copy_back_op = \"none\"} : "
            "(!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op)\n"
            f"      %mb, %ml = transform.structured.tile_using_for %pb tile_sizes [{blocks[0]}, 0, 0] : "
            "(!transform.any_op) -> (!transform.any_op, !transform.any_op)\n")


def _pack_b_transposed(blocks: tuple[int, ...]) -> str:
    """Script lines of a `kina.pack_b_t` matmul after its forall over the column panels (%b,
    %all; %tp: the transpose that makes B, transposed_operands.tag_packed_transposed_rhs):
    the transpose fused into the forall, where its [K, bn] tile is written into a fresh
    buffer (the tensor.empty it slices, folded to the tile's size), tiled and vectorised like
    a transpose of its own; then the loop over the blocks of M (%mb)."""
    tiles = ", ".join(map(str, transpose_tiles(2, 0)))
    return ("      %ft, %all2 = transform.structured.fuse_into_containing_op %tp into %all : "
            "(!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)\n"
            "      transform.apply_patterns to %all2 {\n"
            "        transform.apply_patterns.tensor.fold_tensor_empty\n"
            "      } : !transform.any_op\n"
            f"      %ftt, %ftl:2 = transform.structured.tile_using_for %ft tile_sizes [{tiles}] : "
            "(!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op)\n"
            "      transform.structured.vectorize %ftt : !transform.any_op\n"
            f"      %mb, %ml = transform.structured.tile_using_for %b tile_sizes [{blocks[0]}, 0, 0] : "
            "(!transform.any_op) -> (!transform.any_op, !transform.any_op)\n")


def _parallel_matmul(op: str, blocks: tuple[int, ...], k_blocked: bool = False, packed: bool = False,
                     transposed: bool = False) -> str:
    """Script lines for the `op`s tagged `kina.parallel = blocks` (and `kina.k_block` when
    k_blocked, `kina.pack_b` when packed: the forall then runs over the column panels and
    each packs its panel of B, `_pack_b`): an scf.forall over blocks of the result (its
    fill moves into the forall after the script: block_fills.fuse_fills_into_foralls), the k loop of
    a block cut into K_BLOCK steps when k_blocked, each block register-tiled and
    vectorised like a serial matmul."""
    name = f"%par_{op[7:]}_" + "_".join(map(str, blocks))
    forall = ", ".join(map(str, blocks)) + ", 0"
    tiles = ", ".join(map(str, ([1] if op == "linalg.batch_matmul" else []) + [*REGISTER_TILE, 1]))
    n = len(blocks) + 1
    loops = ", ".join(["!transform.any_op"] * (n + 1))
    match = tag("kina.parallel", blocks)
    name += "_k" * k_blocked + "_p" * packed + "_t" * transposed
    match += ", kina.k_block" * k_blocked + (", kina.pack_b_t" if transposed else ", kina.pack_b" * packed)
    block, pack = ("%mb", _pack_b(blocks)) if packed else ("%b", "")   # what the k loop and tiles take
    if transposed:
        block, pack = "%mb", _pack_b_transposed(blocks)
    if packed or transposed:
        forall = f"0, {blocks[1]}, 0"
    kblock = f"      %kb = transform.merge_handles {block} : !transform.any_op\n"
    if k_blocked:
        kblock = (f"      %kb, %kl = transform.structured.tile_using_for {block} tile_sizes [0, 0, {K_BLOCK}] : "
                  f"(!transform.any_op) -> (!transform.any_op, !transform.any_op)\n")
    producer = ("      %tp = transform.get_producer_of_operand %op[1] : (!transform.any_op) -> !transform.any_op\n"
                if transposed else "")
    return ("\n".join(foreach_tagged(name, op, match)) + "\n" + producer +
            f"      %b, %all = transform.structured.tile_using_forall %op tile_sizes [{forall}] : "
            f"(!transform.any_op) -> (!transform.any_op, !transform.any_op)\n"
            + pack + kblock +
            f"      %t, %l:{n} = transform.structured.tile_using_for %kb tile_sizes [{tiles}] : "
            f"(!transform.any_op) -> ({loops})\n"
            f"      transform.structured.vectorize %t : !transform.any_op\n"
            f"    }}")


# - a row-parallel elementwise generic tagged `kina.vector_rows = [rank]` (parallelize.py says
#   which): after its forall over rows, each row cut into VECTOR_ROWS_LANES-wide tiles,
#   vectorised (one vector op per scalar op of the body).
VECTOR_ROWS_LANES = 16
VECTOR_ROWS_MAX_RANK = 4


def _vector_rows(rank: int) -> str:
    name = f"%vrow_{rank}"
    tiles = ", ".join(["1"] * (rank - 1) + [str(VECTOR_ROWS_LANES)])
    loops = ", ".join(["!transform.any_op"] * (rank + 1))
    return ("\n".join(foreach_tagged(name, "linalg.generic", tag("kina.vector_rows", (rank,)))) + "\n"
            f"      %t, %l:{rank} = transform.structured.tile_using_for %op tile_sizes [{tiles}] : "
            f"(!transform.any_op) -> ({loops})\n"
            f"      transform.structured.vectorize %t : !transform.any_op\n"
            f"    }}")


TRANSFORM_LIBRARY = TRANSFORM_LIBRARY.replace(
    "  transform.named_sequence @kina_o2(", OUTLINE_LIBRARY + HOIST_LIBRARY + "  transform.named_sequence @kina_o2(").replace(
    "@TRANSPOSES@", "\n".join(_transpose_tiling(t) for t in TRANSPOSE_TILINGS)).replace(
    "@PARALLEL_TRANSPOSES@", "\n".join(_parallel_transpose(b) for b in PARALLEL_TRANSPOSE_BLOCKS)).replace(
    "@REDUCTIONS@", "\n".join([_reduce_inner(r) for r in range(2, REDUCE_MAX_RANK + 1)]
                               + [dynamic_reduction(r, *reduce_tiles(r)) for r in range(2, REDUCE_MAX_RANK + 1)])).replace(
    "@DYNAMIC_TRANSPOSES@", "\n".join(dynamic_transpose(*d, transpose_tiles(*d[:2]), TRANSPOSE_BLOCK)
                                       for d in DYNAMIC_TRANSPOSES)).replace(
    "@DYNAMIC_MATMULS@", "\n".join([dynamic_packed_matmul(peel_m, REGISTER_TILE, K_BLOCK) for peel_m in (1, 0)]
                                    + [dynamic_matmul(op, *peel, REGISTER_TILE, k_block=0)
                                       for op in ("linalg.matmul", "linalg.batch_matmul")
                                       for peel in DYNAMIC_PEELINGS])).replace(
    "@PEELED_MATMULS@", "\n".join(_peeled_matmul(op, *peel) for op in ("linalg.matmul", "linalg.batch_matmul")
                                    for peel in PEELINGS)).replace(
    "@VECTOR_ROWS@", "\n".join(_vector_rows(r) for r in range(2, VECTOR_ROWS_MAX_RANK + 1))).replace(
    "@TILE_M@", str(REGISTER_TILE[0])).replace("@TILE_N@", str(REGISTER_TILE[1])).replace(
    "@FEW_ROWS_BLOCK@", str(FEW_ROWS_BLOCK)).replace(
    # The most specific matches first (packed, then k-blocked): a plain match takes them too.
    "@PARALLEL_MATMULS@", "\n".join([_parallel_matmul(op, b, k, True, True) for op, b in PARALLEL_MATMUL_BLOCKS
                                     for k in (True, False) if op == "linalg.matmul"]
                                    + [_parallel_matmul(op, b, k, True) for op, b in PARALLEL_MATMUL_BLOCKS
                                     for k in (True, False) if op == "linalg.matmul"]
                                    + [_parallel_matmul(op, b, True) for op, b in PARALLEL_MATMUL_BLOCKS
                                       if op == "linalg.matmul"]
                                    + [_parallel_matmul(op, b) for op, b in PARALLEL_MATMUL_BLOCKS]))


def transform_flags(library: Path) -> list[str]:
    """The flags of the "@transforms" slot, with TRANSFORM_LIBRARY written at `library`."""
    return [f"--transform-preload-library=transform-library-paths={library}",
            f"--transform-interpreter=entry-point={TRANSFORM_ENTRY}"]
