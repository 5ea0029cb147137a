"""The incremental front end: after any sequence of edits, Analysis().update gives exactly
the diagnostics and types of a from-scratch analysis; unchanged items are not re-parsed
or re-checked; definitions and references."""
import glob

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler import check  # the package: compiler.analysis calls check.check_function through it
from compiler.analysis import Analysis, analyze

EXAMPLES = [open(p, encoding="utf-8").read() for p in sorted(glob.glob("examples/*.kina"))]
FWD = open("tests/fixtures/storylm0_forward.kina", encoding="utf-8").read()


def facts(snap):
    return [(f.span, str(f.type), f.kind, f.name) for f in snap.types]


def same_as_scratch(snap, text):
    scratch = analyze(text)
    assert snap.diagnostics == scratch.diagnostics
    assert facts(snap) == facts(scratch)
    assert sorted(snap.program.functions) == sorted(scratch.program.functions)


EDITS = ["", " ", "\n", "x", "}", "{", "let ", " in ", "fn ", "1", "(", ")", ".exp()", "// c\n", "v", "@"]


@st.composite
def edit_sequences(draw):
    text = draw(st.sampled_from(EXAMPLES))
    steps = []
    for _ in range(draw(st.integers(1, 5))):
        i = draw(st.integers(0, len(text)))
        j = min(len(text), i + draw(st.integers(0, 6)))
        text = text[:i] + draw(st.sampled_from(EDITS)) + text[j:]
        steps.append(text)
    return steps


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edit_sequences())
def test_random_edits_match_from_scratch(steps):
    a = Analysis()
    a.update(EXAMPLES[0])
    for text in steps:
        snap = a.update(text)
    same_as_scratch(snap, steps[-1])


def count_checks(monkeypatch):
    calls = []
    real = check.check_function

    def counting(fn, signatures, **kw):
        calls.append(fn.name)
        return real(fn, signatures, **kw)
    monkeypatch.setattr(check, "check_function", counting)
    return calls


def test_moving_an_item_rechecks_nothing(monkeypatch):
    a = Analysis()
    a.update(FWD)
    calls = count_checks(monkeypatch)
    snap = a.update("// a new first line shifts every item\n" + FWD)
    assert calls == []
    same_as_scratch(snap, "// a new first line shifts every item\n" + FWD)


def test_body_edit_rechecks_only_that_function(monkeypatch):
    a = Analysis()
    a.update(FWD)
    calls = count_checks(monkeypatch)
    edited = FWD.replace("let residual = x + merged", "let residual = merged + x")
    snap = a.update(edited)
    assert calls == ["storylm0_forward"]
    same_as_scratch(snap, edited)


def test_signature_change_rechecks_callers(monkeypatch):
    a = Analysis()
    a.update(FWD)
    calls = count_checks(monkeypatch)
    edited = FWD.replace("-> Tensor[F32, [1, 2, 4, 2]] {", "-> Tensor[F32, [1, 2, 4, 3]] {", 1)
    snap = a.update(edited)
    assert sorted(calls) == ["attn", "storylm0_forward"]
    codes = {d.code for d in snap.diagnostics}
    assert "return-type" in codes and len(codes) > 1   # the caller now sees [1, 2, 4, 3] heads
    same_as_scratch(snap, edited)


def test_broken_function_keeps_others_and_last_good():
    a = Analysis()
    a.update(FWD)
    broken = FWD.replace("probs @ v\n}", "probs @ \n}")
    snap = a.update(broken)
    assert [d.code for d in snap.diagnostics] == ["syntax"]   # the call of attn is not reported too
    assert "attn" not in snap.program.functions
    assert {"attn", "storylm0_forward"} <= set(snap.last_good)
    off = broken.index("let probs") + 5
    hover = snap.type_at(off)      # from the last good check of attn
    assert hover is not None and hover.name == "probs" and hover.type.shape == (1, 2, 4, 4)


def test_type_definition_references():
    snap = analyze(FWD)
    use = FWD.index("attn(q, k_t")
    assert snap.type_at(use + 1).kind == "call"
    decl = snap.definition(use + 1)
    assert FWD[decl.start:decl.end] == "attn" and FWD[decl.start - 3:decl.start] == "fn "
    refs = snap.references(use)
    assert [FWD[r.start:r.end] for r in refs] == ["attn"] * len(refs) and len(refs) == 2
    q_use = FWD.index("q, k_t, v, mask")
    q_def = snap.definition(q_use)
    assert FWD[q_def.start:q_def.end + 4] == "q = (" and q_def.start > FWD.index("fn storylm0_forward")
    assert len(snap.references(q_def.start)) == 2
    assert snap.type_at(q_use).type.shape == (1, 2, 4, 2)
    assert snap.definition(0) is None and snap.references(0) == []


def test_duplicates_and_recursion_are_module_level():
    one = "fn f(a: Tensor[F32, [1]]) -> Tensor[F32, [1]] {\n  g(a)\n}\n"
    two = "fn g(a: Tensor[F32, [1]]) -> Tensor[F32, [1]] {\n  f(a)\n}\n"
    a = Analysis()
    snap = a.update(one + two)
    assert [d.code for d in snap.diagnostics] == ["recursion", "recursion"]
    assert snap.program.functions == {}
    snap = a.update(one + two.replace("f(a)", "a") + one)
    assert [d.code for d in snap.diagnostics] == ["duplicate"]
    same_as_scratch(snap, one + two.replace("f(a)", "a") + one)


# ---- F10: the first request after an edit copies only what changed --------------------------
def _layers(n: int) -> str:
    return "".join(f"fn f{i}(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {{\n  let y = x.exp() in\n  y\n}}\n\n"
                   for i in range(n))


def test_unchanged_functions_keep_their_document_copies_across_edits():
    text = _layers(5)
    a = Analysis()
    s1 = a.update(text)
    offsets = [it.offset for it in s1.items]
    before = {o: (s1.function_at(o), s1.ir_function_at(o)) for o in offsets}
    # same-length edit inside f2: nothing moves; only f2's copies are new
    at = text.index("x.exp()", offsets[2])
    s2 = a.update(text[:at] + "x.log()" + text[at + len("x.exp()"):])
    for i, o in enumerate(offsets):
        fn, ir = s2.function_at(o), s2.ir_function_at(o)
        assert (fn is before[o][0]) == (i != 2) and (ir is before[o][1]) == (i != 2)
    assert s2.ir_function_at(offsets[2]).lets[0].value.op == "log"
    # a longer edit in f1 moves f2..f4: f0 keeps its copies, the moved ones are re-made
    # at their new offsets (and are right there)
    text3 = s2.text.replace("f1(x", "f1(xx", 1).replace("let y = x.exp() in\n  y\n}\n\nfn f2", "let y = xx.exp() in\n  y\n}\n\nfn f2", 1)
    s3 = a.update(text3)
    assert s3.function_at(offsets[0]) is before[offsets[0]][0]
    f3 = s3.function_at(text3.index("fn f3"))
    assert f3.name == "f3" and text3[f3.name_span.start:f3.name_span.end] == "f3"
    same_as_scratch(s3, text3)


def test_whole_document_views_reuse_the_per_function_copies():
    text = _layers(4)
    a = Analysis()
    s1 = a.update(text)
    m1, p1 = s1.module, s1.program
    s2 = a.update(text + "\n// a comment at the end\n")
    assert all(f2 is f1 for f1, f2 in zip(m1.functions, s2.module.functions))
    assert all(s2.program.functions[n] is p1.functions[n] for n in p1.functions)


def test_a_reverted_text_reuses_the_checked_results_of_its_functions():
    text = _layers(6)
    a = Analysis()
    s1 = a.update(text)
    results = [it.res.result for it in s1.items]
    a.update(text.replace("x.exp()", "x.log()"))          # every function changes
    s3 = a.update(text)                                   # and back (an undo, a revert)
    assert [it.res.result for it in s3.items] == results
    assert all(r3 is r1 for r3, r1 in zip((it.res.result for it in s3.items), results))


def _many(n, suffix=""):
    return "".join(f"fn f{i}(x: Tensor[F32, [2, 3]]) -> Tensor[F32, [2, 3]] {{\n  let y = x.exp(){suffix} in\n  y\n}}\n"
                   for i in range(n))


def test_an_update_given_up_keeps_its_work_and_the_next_matches_scratch(monkeypatch):
    """issue 31: the language server stops the analysis of a replaced text (stop() true);
    the parsing and checking done by then is reused, and the analysis stays correct.
    200 functions, stop() asked every 32 items: 6 times while parsing, then every 32 checks."""
    from compiler.analysis import Superseded
    from compiler.syntax import parse
    text = _many(200)
    # (stop on the n-th question) -> (functions parsed, checked again by the next update)
    for nth, parsed_again, checked_again in ((3, 200 - 95, 200), (9, 0, 200 - 95)):
        a = Analysis()
        questions = iter(range(1, 1000))
        with pytest.raises(Superseded):
            a.update(text, lambda n=nth, q=questions: next(q) >= n)
        calls = count_checks(monkeypatch)
        parses = []
        real_parse = parse.parse_local
        monkeypatch.setattr(parse, "parse_local", lambda t, p=parses, r=real_parse: p.append(1) or r(t))
        snap = a.update(text)
        assert (len(parses), len(calls)) == (parsed_again, checked_again)
        monkeypatch.undo()
        same_as_scratch(snap, text)


def test_an_update_whose_stop_stays_false_is_an_ordinary_update():
    a = Analysis()
    text = _many(100, suffix=".tanh()")
    snap = a.update(text, lambda: False)
    same_as_scratch(snap, text)
