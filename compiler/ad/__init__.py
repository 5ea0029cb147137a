"""Stage 3, AD: typed IR -> typed IR, reverse mode written as an effect handler.

Takes a checked program; gives it with every `handle f(args) with reverseMode` replaced by
a call of a generated function `f.rev` computing (R, g0, .., gk-1), and the diagnostics
of what reverseMode refuses.  The VJP of each op is one row of vjp.VJPS.

Public entry points (other packages import only these):
  transform_ad(program, fn) -> (ir Function "fn.rev" | None, diagnostics)
  lower_handles(program) -> (program without handles, diagnostics)
  check_differentiable(program, fn) -> diagnostics (the reverseMode restrictions)
  VJPS            the VJP table (one row per op of compiler.ir.ops.OPS)
  add_vjp_exports(program, names) -> (program with `f_vjp` exported for each f, diagnostics)
  transform_vjp(program, fn) -> (ir Function "fn_vjp" | None, diagnostics): the VJP with an
    incoming cotangent g_y (`kinac build --vjp f`); vjp_name(fn) -> "fn_vjp"

Inside: transform (the pass: inlining, the backward sweep, ScatterAdd), vjp (the rows),
vjp_elementwise / vjp_layout / vjp_scan (their rules by op family), builder (the Builder
that emits the backward graph's single-op lets, and the VJP row type), vjp_export (the
sweep seeded with a cotangent parameter).
"""
from compiler.ad.transform import check_differentiable, lower_handles, transform_ad
from compiler.ad.vjp import VJPS
from compiler.ad.vjp_export import add_vjp_exports, transform_vjp, vjp_name

__all__ = ["VJPS", "add_vjp_exports", "check_differentiable", "lower_handles", "transform_ad", "transform_vjp",
           "vjp_name"]
