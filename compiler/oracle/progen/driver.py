"""`build_case`, the driver behind progen.generate: one case's random decisions, drawn in a
fixed order (reverseMode or not, dtype, big or not, then the lets from makers.MAKERS and
motifs.MOTIFS, the results, a split, the wrapper, size-generic helpers last), so a change to
one kind of case leaves the others' draws as they were.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from compiler.core.types import TensorType
from compiler.oracle.progen.case import Case
from compiler.oracle.progen.generic_calls import add_generics
from compiler.oracle.progen.makers import MAKERS
from compiler.oracle.progen.motifs import MOTIFS, _wide_head

if TYPE_CHECKING:
    from compiler.oracle.progen.generate import Choices, Gen, GenConfig


# ---- the driver ---------------------------------------------------------------------------
def build_case(gen_cls: type[Gen], ch: Choices, cfg: GenConfig) -> Case:
    ad = ch.coin(cfg.ad_fraction)
    dtype = ch.weighted([d for d, _ in cfg.dtypes], [w for _, w in cfg.dtypes])
    big = ch.coin(cfg.big_fraction)
    g = gen_cls(ch, cfg, ad, dtype, cfg.big_elements if big else cfg.max_elements)
    if big and cfg.ops is None and ch.coin(cfg.wide_fraction):   # a draw of big cases only
        _wide_head(g)
    ops = [op for op in (cfg.ops or MAKERS) if not ad or MAKERS[op].ad]
    n = ch.between(1, 4 if big else cfg.max_lets)
    for _ in range(4 * n):
        if len(g.lets) >= n:
            break
        if ch.coin(cfg.motif_fraction) and cfg.ops is None:
            MOTIFS[ch.pick(sorted(MOTIFS))](g)
        else:
            row = MAKERS[ch.pick(ops)]
            (row.ad_make if ad and row.ad_make else row.make)(g)
        if ch.coin(0.05) and g.pool:
            g.alias(g.pool[-1])
    results = _results(g, ch, ad)
    case = Case(g.params, g.lets, results, dtype, ad)
    _drop_unused_params(case)
    if len(case.lets) >= 3 and ch.coin(0.15):
        case.split = ch.between(1, len(case.lets) - 1)
    if ad:
        case.wrapper = ch.pick(("tuple", "destructure", "sgd"))
        n_out = 1 + len(case.float_params())
        case.picks = [ch.below(n_out) for _ in range(ch.between(1, min(4, n_out + 1)))]
    if cfg.ops is None and ch.coin(cfg.generic_fraction):   # drawn last: the other cases stay as they were
        add_generics(g, case)
    return case


def _results(g: Gen, ch: Choices, ad: bool) -> list[str]:
    if not g.pool:
        g.param(TensorType(g.dtype, g.shape()))
    floats = [v for v in g.pool]
    last = floats[-1].name
    if ad or not ch.coin(0.25):
        return [last]
    extra = [ch.pick(floats + g.index_pool).name for _ in range(ch.between(1, 2))]
    if ch.coin(0.3):
        extra[0] = last                      # (y, y): one value, two results
    return [last, *extra]


def _drop_unused_params(case: Case) -> None:
    """Parameters no let or result mentions are dropped (the programs stay readable);
    under reverseMode one unused float parameter is kept: its cotangent is zeros."""
    used = {a for l in case.lets for a in l.args} | set(case.results)
    keep = [p for p in case.params if p.name in used]
    unused = [p for p in case.params if p.name not in used and p.type.is_float]
    if case.ad and unused:
        keep.append(unused[0])
    case.params = keep
