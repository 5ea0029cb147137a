"""The program generator (compiler/progen.py): every program it makes is well-typed
(parse + check + the reverseMode restrictions + ir.verify after lowering), it covers
every op of ops.OPS, the dims, ranks and dtypes the differential tests promise, it is
deterministic in its seed, and a replayed (edited) choice record regenerates a valid
program.  A new op in ops.OPS fails test_every_op_has_a_generator_row until the
generator knows how to make it."""
from collections import Counter

import pytest

from compiler import analysis, autodiff, ir, ops, progen, progen_ops, progen_render
from compiler.types import DType

SEEDS = range(400)


@pytest.fixture(scope="module")
def generated():
    """(case, checked program, lowered program) for every seed."""
    out = []
    for s in SEEDS:
        case = progen.generate(s)
        snap = analysis.analyze(case.source("f"))
        errors = [d for d in snap.diagnostics if d.severity == "error"]
        assert not errors, f"seed {s}:\n{case.source('f')}\n" + "\n".join(d.message for d in errors)
        lowered, diags = autodiff.lower_handles(snap.program)
        assert not diags, f"seed {s}: {diags}"
        out.append((case, snap.program, lowered))
    return out


def _ops_in(program) -> Counter:
    return Counter(e.op for fn in program.functions.values()
                   for root in [b.value for b in fn.lets] + [fn.result]
                   for e in ir.walk(root) if isinstance(e, ir.OpApp))


def test_every_op_has_a_generator_row():
    surface = {n for n, op in ops.OPS.items() if not op.internal}
    internal = {n for n, op in ops.OPS.items() if op.internal}
    assert set(progen_ops.MAKERS) == surface, "progen_ops.MAKERS needs one row per surface op of ops.OPS"
    assert set(progen_ops.VIA_AD) == internal, "progen_ops.VIA_AD names the VJP that emits each internal op"
    assert all(progen_ops.MAKERS[src].ad for src in progen_ops.VIA_AD.values())
    missing = sorted(surface - set(progen_render.SURFACE))
    assert not missing, f"compiler.progen_render.SURFACE (how a generated op is written) has no row for: {', '.join(missing)}"


def test_every_op_of_the_table_is_generated(generated):
    """Internal ops count when the lowered (differentiated) programs contain them."""
    seen = Counter()
    for _, _, lowered in generated:
        seen += _ops_in(lowered)
    missing = set(ops.OPS) - set(seen)
    assert not missing, f"never generated in {len(SEEDS)} programs: {sorted(missing)}"
    reduce_kinds = {e.attrs["op"] for _, program, _ in generated for fn in program.functions.values()
                    for b in fn.lets for e in ir.walk(b.value) if isinstance(e, ir.OpApp) and e.op == "reduce_keep"}
    assert reduce_kinds == {"sum", "mean", "max"}


def test_programs_verify_after_lowering(generated):
    for case, _, lowered in generated:
        assert ir.verify(lowered, "lower_handles") == [], case.source("f")


def test_shapes_dtypes_and_reverse_mode_share(generated):
    dims, ranks, dtypes = Counter(), Counter(), Counter()
    for case, _program, _ in generated:
        dtypes[case.dtype] += 1
        for t in case.types().values():
            ranks[t.rank] += 1
            dims.update(t.shape)
    assert set(ranks) >= {0, 1, 2, 3, 4, 5}
    assert {1, 3, 4, 7, 8, 16, 17, 32, 33} <= set(dims)     # dividing and not dividing the -O2 tiles
    assert max(dims) >= 64                                   # the occasional parallel-sized program
    assert set(dtypes) == {DType.F32, DType.F16, DType.BF16, DType.F8E4M3, DType.F8E5M2}
    ad = sum(case.ad for case, _, _ in generated)
    assert 0.4 * len(SEEDS) <= ad <= 0.6 * len(SEEDS)


def test_reverse_mode_programs_differentiate_the_forward_function(generated):
    for case, program, lowered in generated:
        if case.ad:
            assert autodiff.check_differentiable(program, "f") == []
            assert "f.rev" in lowered.functions


def test_model_like_chains_appear(generated):
    """Head split/merge (reshape + transpose), transposed weights feeding a matmul, slices of
    one matmul (fused QKV), concats, repeated results."""
    motifs = Counter()
    for case, _, _ in generated:
        by_name = {l.name: l for l in case.lets}
        for l in case.lets:
            src = [by_name.get(a) for a in l.args]
            if l.op == "matmul" and any(s and s.op == "transpose" for s in src):
                motifs["transposed operand"] += 1
            if l.op == "transpose" and any(s and s.op == "reshape" for s in src):
                motifs["reshape then transpose"] += 1
            if l.op == "slice" and any(s and s.op == "matmul" for s in src):
                motifs["slice of a matmul"] += 1
            if l.op == "concat":
                motifs["concat"] += 1
        if len(case.results) != len(set(case.results)):
            motifs["repeated result"] += 1
        if "fn f_h(" in case.source("f"):
            motifs["helper call"] += 1
    assert all(motifs[k] >= 5 for k in ("transposed operand", "reshape then transpose", "slice of a matmul",
                                        "concat", "repeated result", "helper call")), motifs


def test_generation_is_deterministic_and_replayable():
    a, b = progen.generate(7), progen.generate(7)
    assert a.source("f") == b.source("f")
    assert progen.generate(7, replay=a.choices).source("f") == a.source("f")
    assert progen.generate(8).source("f") != a.source("f")


@pytest.mark.parametrize("edit", ["zeros", "truncated", "halved"])
def test_edited_choice_records_still_make_valid_programs(edit):
    for s in range(30):
        rec = progen.generate(s).choices
        replay = {"zeros": [0] * len(rec), "truncated": rec[:len(rec) // 3],
                  "halved": [c // 2 for c in rec]}[edit]
        case = progen.generate(s, replay=replay)
        snap = analysis.analyze(case.source("f"))
        assert not [d for d in snap.diagnostics if d.severity == "error"], case.source("f")


def test_config_restricts_ops():
    cfg = progen.GenConfig(ops=("matmul", "transpose"), ad_fraction=0.0)
    used = set()
    for s in range(20):
        used |= progen.generate(s, cfg).ops_used
    assert used <= {"matmul", "transpose", "mul"}   # mul: the literal rescaling of a large product


def test_module_of_many_cases_type_checks():
    named = [(f"c{s}", progen.generate(s)) for s in range(20)]
    snap = analysis.analyze(progen.module_source(named))
    assert not [d for d in snap.diagnostics if d.severity == "error"]
    assert {f"c{s}" for s in range(20)} <= set(snap.program.functions)
