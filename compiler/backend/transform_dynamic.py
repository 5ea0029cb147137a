"""The -O2 transform-script parts for dynamic exports (issue 25): sizes known only at the
call, so the register tiles and 16 x 16 transpose tiles get remainder loops (`transform.loop.peel`:
the full tiles are static and vectorised, the partial last ones stay loops) and the big ops
are scf.forall loops that compiler/backend/parallel_if.py runs on threads only when the call's
sizes make them big enough.
compiler/backend/transform_library.py puts these parts into its script; compiler/backend/parallelize.py
tags the ops they match.  The tile sizes are transform_library's, passed in.
"""
from __future__ import annotations

# - a dynamic export's f32 matmul / batch_matmul (a `?` in M or N: its sizes are known at the
#   call only), tagged `kina.parallel_peeled = [peel_m, peel_n]` by `tag_vectorizable`: an
#   scf.forall over DYNAMIC_BLOCK blocks of the result (a batch_matmul: one batch item per
#   iteration), each block register-tiled (the host's tile) with its M and N loops peeled where the
#   block may not divide (`peel_m`, `peel_n`: a dynamic dim, or a static one the block does
#   not divide): the full tiles are static and vectorised like a static matmul's, the last
#   partial row and column tiles of a block stay loop nests.  Each result element adds its K
#   terms in order, as the serial peeled matmul does.  Whether the forall runs on every core
#   is decided at the call (compiler/backend/parallel_if.py: when the product is big enough).
#   With k_block > 0 the k loop is cut into steps of k_block (transform_library.K_BLOCK's
#   cache blocking); transform_library passes 0: the k steps made the scaled step's dynamic
#   build 7.1 s of CPU against 6.6 (each of the two peels per product then cost more script
#   time), for the one product of that step with K > 512.
DYNAMIC_BLOCK = (32, 128)


def tag(attr: str, values: tuple[int, ...]) -> str:
    """A tag's entry in a match's attribute dictionary: `attr` as the i64 array `values`."""
    return f"{attr} = array<i64: {', '.join(map(str, values))}>"


def foreach_tagged(name: str, op: str, attrs: str) -> list[str]:
    """Script lines opening a `transform.foreach` (bound to `name`) over the `op`s that carry
    the attributes `attrs` (dictionary entries: `tag`s, unit attributes), each one `%op` in
    it; the caller closes it with a `    }` line."""
    return [f"    {name} = transform.structured.match ops{{[\"{op}\"]}} attributes{{{attrs}}} in %root : "
            "(!transform.any_op) -> !transform.any_op",
            f"    transform.foreach {name} : !transform.any_op {{",
            "    ^bb0(%op: !transform.any_op):"]


def match_full_tiles(op: str, rows: str, full_type: str | None) -> list[str]:
    """Script lines binding `%tiles` to the `op`s in the loop `rows` over full row tiles, once
    canonicalised (peeling made their sizes constants, so the full tiles get static types):
    those of type `full_type`, or every one when None."""
    only = f" filter_result_type = {full_type}" if full_type else ""
    return [f"      transform.apply_patterns to {rows} {{",
            "        transform.apply_patterns.canonicalization",
            "      } : !transform.any_op",
            f"      %tiles = transform.structured.match ops{{[\"{op}\"]}}{only} in {rows} : "
            "(!transform.any_op) -> !transform.any_op"]


def vectorised_full_tiles(op: str, m: int, full_type: str, peel_m: int, tile_n: int) -> list[str]:
    """Script lines vectorising the full register tiles of the row loop `%l#<m>` (`%main<m>`
    when it was peeled: `peel_m`) and then the rows past them (`row_rest`, `%rest<m>`)."""
    rows = f"%main{m}" if peel_m else f"%l#{m}"
    lines = match_full_tiles(op, rows, full_type) + ["      transform.structured.vectorize %tiles : !transform.any_op"]
    if peel_m:
        lines += row_rest(op, f"%rest{m}", tile_n)
    return lines


def peel_loops(m: int, n: int, peel_m: int, peel_n: int) -> list[str]:
    """Transform-script lines peeling the tile loops %l#n then %l#m (each when asked) into
    %main<d> and %rest<d>: the N loop first, since peeling a loop invalidates the handles
    of the loops inside it."""
    return [line for d, peel in ((n, peel_n), (m, peel_m)) if peel for line in (
        f"      %for{d} = transform.cast %l#{d} : !transform.any_op to !transform.op<\"scf.for\">",
        f"      %main{d}, %rest{d} = transform.loop.peel %for{d} : "
        "(!transform.op<\"scf.for\">) -> (!transform.any_op, !transform.any_op)")]


def row_rest(op: str, rest: str, tile_n: int) -> list[str]:
    """Script lines for the peeled last row tile (`rest`: fewer rows than the register tile,
    e.g. all of a one-row product's): its matmuls cut into single rows, and those of a full
    column tile vectorised, [1, tile_n] at a time.  As a loop nest a [1, 2048] @ [2048, 2048]
    product ran at 0.9 GFLOP/s (the static build: 12.9)."""
    batch = int(op == "linalg.batch_matmul")
    rows = ", ".join(map(str, [0] * batch + [1, 0, 0]))
    return [f"      %rmm = transform.structured.match ops{{[\"{op}\"]}} in {rest} : "
            "(!transform.any_op) -> !transform.any_op",
            f"      %r1, %rl = transform.structured.tile_using_for %rmm tile_sizes [{rows}] : "
            "(!transform.any_op) -> (!transform.any_op, !transform.any_op)",
            f"      transform.apply_patterns to {rest} {{",
            "        transform.apply_patterns.canonicalization",
            "      } : !transform.any_op",
            f"      %rv = transform.structured.match ops{{[\"{op}\"]}} "
            f"filter_result_type = tensor<{'1x' * batch}1x{tile_n}xf32> in {rest} : "
            "(!transform.any_op) -> !transform.any_op",
            "      transform.structured.vectorize %rv : !transform.any_op"]


def dynamic_matmul(op: str, peel_m: int, peel_n: int, tile: tuple[int, int], k_block: int) -> str:
    """Script lines for the `op`s tagged `kina.parallel_peeled = [peel_m, peel_n]`."""
    batch = int(op == "linalg.batch_matmul")
    name = f"%dyn_{op[7:]}_{peel_m}{peel_n}"
    forall = "1, 0, 0, 0" if batch else f"{DYNAMIC_BLOCK[0]}, {DYNAMIC_BLOCK[1]}, 0"
    kblock = ", ".join(map(str, [0] * batch + [0, 0, k_block]))
    lines = foreach_tagged(name, op, tag("kina.parallel_peeled", (peel_m, peel_n))) + [
             f"      %b, %all = transform.structured.tile_using_forall %op tile_sizes [{forall}] : "
             "(!transform.any_op) -> (!transform.any_op, !transform.any_op)",
             (f"      %kb, %kl = transform.structured.tile_using_for %b tile_sizes [{kblock}] : "
              "(!transform.any_op) -> (!transform.any_op, !transform.any_op)") if k_block else
             "      %kb = transform.merge_handles %b : !transform.any_op"]
    if peel_m:
        return "\n".join(lines + _rows_first(op, batch, peel_n, tile) + ["    }"])
    tiles = ", ".join(map(str, [1] * batch + [tile[0], tile[1], 1]))
    loops = ", ".join(["!transform.any_op"] * (4 + batch))
    m, n = batch, batch + 1
    lines += [f"      %t, %l:{3 + batch} = transform.structured.tile_using_for %kb tile_sizes [{tiles}] : "
              f"(!transform.any_op) -> ({loops})"]
    lines += peel_loops(m, n, peel_m, peel_n)
    lines += vectorised_full_tiles(op, m, f"tensor<{'1x' * batch}{tile[0]}x{tile[1]}xf32>", peel_m, tile[1])
    return "\n".join(lines + ["    }"])


def _rows_first(op: str, batch: int, peel_n: int, tile: tuple[int, int]) -> list[str]:
    """Script lines for a dynamic product whose row count may not be a multiple of the
    register tile (`%kb`, a block of it): its row loop is tiled and peeled first.  The full
    row tiles are then tiled in N and K, N peeled when asked, and the full register tiles
    vectorised.  The rows past them (all of a one-row product's: a decode step) stay one
    op, which the script's last section makes a loop nest with its k loop outside the
    column loop, as a static product's rest rows are: LLVM vectorises it along the row and
    reads B a row of the block at a time.  Cut into [1, 32] vector pieces inside the
    register tile's own k loop (as `row_rest` still does in the packed body, whose panels
    are contiguous), each piece read 128 bytes of B per row of K, a page apart when N is
    1024 or more: dynamic / static was 3.0x for [1, 256] @ [256, 2048] and 1.3-1.5x for
    single rows of 2048 and 4096 columns (benchmarks/bench_small_rows.py; explicit [1, 32]
    pieces with k outermost were slower than LLVM's loop on the small products)."""
    m_tiles = ", ".join(map(str, [1] * batch + [tile[0], 0, 0]))
    nk_tiles = ", ".join(map(str, [0] * batch + [0, tile[1], 1]))
    m_loops = ", ".join(["!transform.any_op"] * (2 + batch))
    full = f"tensor<{'1x' * batch}{tile[0]}x{tile[1]}xf32>"
    lines = [f"      %tm, %lm:{1 + batch} = transform.structured.tile_using_for %kb tile_sizes [{m_tiles}] : "
             f"(!transform.any_op) -> ({m_loops})",
             f"      %form = transform.cast %lm#{batch} : !transform.any_op to !transform.op<\"scf.for\">",
             "      %mainm, %restm = transform.loop.peel %form : "
             "(!transform.op<\"scf.for\">) -> (!transform.any_op, !transform.any_op)",
             f"      %fm = transform.structured.match ops{{[\"{op}\"]}} in %mainm : "
             "(!transform.any_op) -> !transform.any_op",
             f"      %t, %l:2 = transform.structured.tile_using_for %fm tile_sizes [{nk_tiles}] : "
             "(!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op)"]
    lines += peel_loops(0, 0, 0, peel_n)     # the N loop, %l#0 (its M loop was peeled above)
    return lines + match_full_tiles(op, "%mainm", full) + [
        "      transform.structured.vectorize %tiles : !transform.any_op"]


DYNAMIC_PEELINGS = ((1, 1), (1, 0), (0, 1), (0, 0))


# - a dynamic export's f32 matmul specialised at the call for a wide or deep product
#   (compiler/backend/parallelize.py `_choose_at_call`: picked by the call's sizes), tagged
#   `kina.parallel_packed = [peel_m]`: the static `kina.pack_b` and `kina.k_block` forms with
#   dynamic sizes.  An scf.forall over panels of DYNAMIC_BLOCK[1] columns, each copying its
#   [K, panel] of B into a buffer of its own (`transform.structured.pad` to the panel's
#   static width: the last panel's missing columns are zeros, and C's panel is padded alike
#   and cut back), then a loop over blocks of DYNAMIC_BLOCK[0] rows, its k loop cut into
#   steps of k_block, register-tiled with only the row loop peeled (the panel's width is
#   static now).  B's rows are N floats apart: with N a power of two a tile's K rows fall on
#   a few cache sets and are reread from beyond L2, as A's rows are when K is large.  One
#   core, dynamic against static build (benchmarks/bench_dynamic.py's kernels):
#   [256, 256] @ [256, 2048] 68 -> 67-71 GFLOP/s (static 74-79), [256, 2048] @ [2048, 256]
#   37 -> 71 (static 62-64).  Each result element adds its K terms in order.
def dynamic_packed_matmul(peel_m: int, tile: tuple[int, int], k_block: int) -> str:
    """Script lines for the matmuls tagged `kina.parallel_packed = [peel_m]`."""
    name = f"%dpk_matmul_{peel_m}"
    lines = foreach_tagged(name, "linalg.matmul", tag("kina.parallel_packed", (peel_m,))) + [
             f"      %b, %all = transform.structured.tile_using_forall %op tile_sizes [0, {DYNAMIC_BLOCK[1]}, 0] : "
             "(!transform.any_op) -> (!transform.any_op, !transform.any_op)",
             "      %pb, %pad, %pcopy = transform.structured.pad %b pad_to_multiple_of [1] "
             "{padding_dimensions = [1], padding_values = [0.0 : f32, 0.0 : f32, 0.0 : f32], "
             "nofold_flags = [0, 1, 0], copy_back_op = \"none\"} : "
             "(!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op)",
             f"      %mb, %ml = transform.structured.tile_using_for %pb tile_sizes [{DYNAMIC_BLOCK[0]}, 0, 0] : "
             "(!transform.any_op) -> (!transform.any_op, !transform.any_op)",
             f"      %kb, %kl = transform.structured.tile_using_for %mb tile_sizes [0, 0, {k_block}] : "
             "(!transform.any_op) -> (!transform.any_op, !transform.any_op)",
             f"      %t, %l:3 = transform.structured.tile_using_for %kb tile_sizes [{tile[0]}, {tile[1]}, 1] : "
             "(!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)"]
    lines += peel_loops(0, 1, peel_m, 0)
    lines += vectorised_full_tiles("linalg.matmul", 0, f"tensor<{tile[0]}x{tile[1]}xf32>", peel_m, tile[1])
    return "\n".join(lines + ["    }"])


# - a dynamic export's f32 transpose that moves the input's innermost dim (tagged
#   `kina.transpose_peeled = [rank, j, peel_j, peel_last]` by loop_tags.tag_transposes, for
#   ranks up to DYNAMIC_TRANSPOSE_MAX_RANK): an scf.forall over output dim 0 (in blocks of
#   TRANSPOSE_BLOCK (`block`) when j = 0, else 1; threads when it is big enough at the call:
#   compiler/backend/parallel_if.py), then transform_library's 16 x 16 tiling with the loops over dims j
#   and rank - 1 peeled where 16 may not divide them: the full tiles are static and become
#   vector transposes, the partial ones stay loops.  Values are only moved.
DYNAMIC_TRANSPOSE_MAX_RANK = 4


def dynamic_transpose_block(j: int, block: int) -> int:
    return block if j == 0 else 1


def dynamic_transpose(rank: int, j: int, peel_j: int, peel_last: int, tiles: tuple[int, ...], block: int) -> str:
    name = f"%dtr_{rank}_{j}_{peel_j}{peel_last}"
    full = "tensor<" + "".join(f"{x}x" for x in tiles) + "f32>"
    forall = ", ".join(str(dynamic_transpose_block(j, block) if d == 0 else 0) for d in range(rank))
    loops = ", ".join(["!transform.any_op"] * (rank + 1))
    lines = foreach_tagged(name, "linalg.transpose", tag("kina.transpose_peeled", (rank, j, peel_j, peel_last))) + [
             f"      %b, %all = transform.structured.tile_using_forall %op tile_sizes [{forall}] : "
             "(!transform.any_op) -> (!transform.any_op, !transform.any_op)",
             f"      %t, %l:{rank} = transform.structured.tile_using_for %b tile_sizes [{', '.join(map(str, tiles))}] : "
             f"(!transform.any_op) -> ({loops})"]
    for d in [d for d, peel in ((rank - 1, peel_last), (j, peel_j)) if peel]:
        lines += [f"      %for{d} = transform.cast %l#{d} : !transform.any_op to !transform.op<\"scf.for\">",
                  f"      %main{d}, %rest{d} = transform.loop.peel %for{d} : "
                  "(!transform.op<\"scf.for\">) -> (!transform.any_op, !transform.any_op)"]
    lines += ["      transform.apply_patterns to %all {",
              "        transform.apply_patterns.canonicalization",
              "      } : !transform.any_op",
              f"      %tiles = transform.structured.match ops{{[\"linalg.transpose\"]}} filter_result_type = {full} "
              "in %all : (!transform.any_op) -> !transform.any_op",
              "      transform.structured.vectorize %tiles : !transform.any_op",
              "    }"]
    return "\n".join(lines)


DYNAMIC_TRANSPOSES = [(r, j, pj, pl) for r in range(2, DYNAMIC_TRANSPOSE_MAX_RANK + 1) for j in range(r - 1)
                      for pj in (0, 1) for pl in (0, 1)]


# - a dynamic export's inner reduction whose reduced extent the 16 lanes may not divide
#   (tagged `kina.reduce_peeled` = its row tiling by loop_tags.tag_inner_reductions):
#   transform_library's vectorised row reduction with the loop over the reduced dim peeled: the
#   full 16-lane chunks are static and vectorised, the last partial chunk adds into the
#   first lanes of the partial results as a loop, and the lanes are combined as before.
def dynamic_reduction(rank: int, rows: tuple[int, ...], lanes: tuple[int, ...]) -> str:
    name = f"%dred_{rank}"
    row_text, lane_text = (", ".join(map(str, x)) for x in (rows, lanes))
    loops = ", ".join(["!transform.any_op"] * rank)
    four = ", ".join(["!transform.any_op"] * 4)
    chunk = "tensor<" + "".join(f"{x or 1}x" for x in lanes) + "f32>"
    return "\n".join(foreach_tagged(name, "linalg.generic", tag("kina.reduce_peeled", rows)) + [
        f"      %row, %rl:{rank - 1} = transform.structured.tile_using_for %op tile_sizes [{row_text}] : "
        f"(!transform.any_op) -> ({loops})",
        f"      %fill, %part, %comb, %loop = transform.structured.tile_reduction_using_for %row "
        f"by tile_sizes = [{lane_text}] : (!transform.any_op) -> ({four})",
        "      %for = transform.cast %loop : !transform.any_op to !transform.op<\"scf.for\">",
        "      %main, %rest = transform.loop.peel %for : (!transform.op<\"scf.for\">) -> (!transform.any_op, !transform.any_op)",
        "      transform.apply_patterns to %main {",
        "        transform.apply_patterns.canonicalization",
        "      } : !transform.any_op",
        f"      %chunks = transform.structured.match ops{{[\"linalg.generic\"]}} filter_result_type = {chunk} in %main : "
        "(!transform.any_op) -> !transform.any_op",
        "      transform.structured.vectorize %fill : !transform.any_op",
        "      transform.structured.vectorize %chunks : !transform.any_op",
        "      transform.structured.vectorize %comb : !transform.any_op",
        "    }"])
