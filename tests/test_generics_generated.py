"""Size-generic functions in generated programs (compiler/oracle/progen/generic.py), checked
only (no build; scripts/fuzz_compile.py runs them at -O0 and -O2).

The property: an instantiation never reports an error in a body that the symbolic check
accepted (check/instances.py calls such an error a Kina bug).  Over a few hundred generated
generic programs the front end reports nothing, and every instance the calls request is
made without a diagnostic.  Ill-formed size programs (unknown sizes, sizes that can be
negative, inexact division, conflicting or unsolvable sizes at a call, zero, negative and
huge explicit sizes, random size expressions) always get diagnostics with a known code,
never an exception; those the symbolic check accepts instantiate cleanly too.
"""
import re
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler import analysis
from compiler.core.diagnostics import CODES
from compiler.oracle import shrink
from compiler.oracle.progen import generate as progen
from compiler.oracle.progen.base import CALL

N_PROGRAMS = 200


@pytest.fixture(scope="module")
def generic_cases():
    """(seed, case, snapshot, instance program, instance diagnostics) for N_PROGRAMS generic cases."""
    out = []
    seed = 0
    while len(out) < N_PROGRAMS:
        case = progen.generate(seed)
        if case.generics:
            snap = analysis.analyze(case.source("f"))
            program, diags = snap.program_for({}, want_dynamic=False)
            out.append((seed, case, snap, program, diags))
        seed += 1
    assert seed < 7 * N_PROGRAMS      # about 20% of the cases have generic helpers
    return out


def test_generated_generic_programs_check_and_instantiate_cleanly(generic_cases):
    for seed, case, snap, program, diags in generic_cases:
        src = case.source("f")
        assert list(snap.diagnostics) == [], f"seed {seed}:\n{src}\n" + "\n".join(
            f"[{d.code}] {d.message}" for d in snap.diagnostics)
        assert diags == [], f"seed {seed}: instance diagnostics\n{src}\n" + "\n".join(d.message for d in diags)
        wanted = {f"f_s{l.attrs['fn']}${'_'.join(map(str, l.attrs['sizes']))}" for l in case.lets if l.op == CALL}
        wanted |= set(case.handled("f")) - {"f"}
        instances = {n for n in program.functions if "$" in n}
        assert wanted <= instances, (seed, wanted, instances)
        assert not any(f"f_s{fn.index}" in program.functions for fn in case.generics)   # only instances
        assert set(case.functions("f")) <= set(program.functions)


def test_each_generic_program_calls_its_helper_at_two_sizes(generic_cases):
    for seed, case, _, program, _ in generic_cases:
        root = case.generics[-1].index
        sizes = {l.attrs["sizes"] for l in case.lets if l.op == CALL and l.attrs["fn"] == root}
        assert len(sizes) >= 2, (seed, sizes)
        assert len([n for n in program.functions if n.startswith(f"f_s{root}$")]) >= 2


def test_generic_programs_cover_the_feature(generic_cases):
    """Sizes in types, size attributes, bare numbers, explicit and inferred calls, generic
    calling generic, handles of generic helpers (inferred and explicit sizes)."""
    seen = Counter()
    for _, case, _, _, _ in generic_cases:
        src = case.source("f")
        generic_text = "\n".join(l for l in src.splitlines() if not l.startswith("fn f(") and "f_s" not in l
                                 or l.startswith("fn f_s"))
        checks = {
            "symbolic type": r"Tensor\[\w+, \[[^\]]*[A-C]",
            "size + 1": r"[A-C] \+ 1",
            "product reshape": r"reshape\(\[[^\]]*[A-C]\*[A-C]",
            "symbolic broadcast": r"broadcast\(\[[^\]]*[A-C]",
            "symbolic slice": r"slice\(axis=\d+, start=\S+, stop=[^)]*[A-C]",
            "symbolic iota": r"iota\(shape=\[[^\]]*[A-C]",
            "symbolic literal": r"Tensor\[\w+, \[[^\]]*[A-C][^\]]*\]\] \{",
            "bare number": r"\* \(1\.0 / \(?[A-C]",
            "explicit call in f": r"= f_s\d\[\d",
            "inferred call in f": r"= f_s\d\(",
            "generic calls generic": r"fn f_s1\[[^\n]*\n(  [^\n]*\n)*?  let \w+ = f_s0[\[(]",
            "explicit call with sizes": r"= f_s0\[[^\]]*[A-C]",
            "generic handle": r"handle f_s\d\(",
            "explicit generic handle": r"handle f_s\d\[\d",
        }
        for k, pattern in checks.items():
            if re.search(pattern, src if k != "symbolic type" else generic_text):
                seen[k] += 1
    assert all(seen[k] >= 3 for k in checks), seen


def test_programs_without_generics_are_those_of_the_generator_without_them():
    """The generic draw comes last: a case without helpers is, choice for choice, the case
    of a configuration without generics (the rest of the mix is unchanged)."""
    off = progen.GenConfig(generic_fraction=0.0)
    for s in range(60):
        case = progen.generate(s)
        if not case.generics:
            assert case.source("f") == progen.generate(s, off).source("f")


def test_generic_cases_replay_and_shrink_to_valid_programs(generic_cases):
    """A replayed record regenerates the same program; each shrinking candidate of a generic
    case (tested with a predicate that holds while the program calls a generic helper)
    checks, and the helpers no call reaches are not written."""
    tested = []

    def calls_generic(c):
        tested.append(c)
        assert shrink.well_typed(c), c.source("f")
        return any(l.op == CALL for l in c.lets)
    for seed, case, _, _, _ in generic_cases[:6]:
        assert progen.generate(seed, replay=case.choices).source("f") == case.source("f")
        small = shrink.shrink(case, calls_generic, max_tests=40)
        assert any(l.op == CALL for l in small.lets) and shrink.well_typed(small)
        assert len(small.lets) <= len(case.lets) and small.gh is None
    assert len(tested) > 20


# ---- ill-formed size programs ----------------------------------------------------------------
def _codes_ok(text: str, want_error: bool, code: str | None = None) -> None:
    snap = analysis.analyze(text)             # never raises
    program, idiags = snap.program_for({})
    diags = list(snap.diagnostics) + idiags
    assert all(d.code in CODES for d in diags), [(d.code, d.message) for d in diags]
    errors = [d for d in snap.diagnostics if d.severity == "error"]
    if want_error:
        assert errors, text
        if code is not None:
            assert code in {d.code for d in errors}, ([(d.code, d.message) for d in errors], text)
    if not errors:    # the symbolic check accepted it (and f calls g): every instantiation checks too
        assert idiags == [], ([(d.code, d.message) for d in idiags], text)


def _fn(sizes: str, params: str, ret: str, body: str) -> str:
    return f"fn g[{sizes}]({params}) -> {ret} {{\n{body}\n}}\n"


def _caller(ptypes: list[str], call: str, ret: str, result: str = "r") -> str:
    ps = ", ".join(f"p{i}: Tensor[F32, [{t}]]" for i, t in enumerate(ptypes))
    args = ", ".join(f"p{i}" for i in range(len(ptypes)))
    return f"fn f({ps}) -> Tensor[F32, [{ret}]] {{\n  let r = {call}({args}) in\n  {result}\n}}\n"


dims = st.integers(1, 9)
bad_explicit = st.sampled_from([0, -1, -7, 10 ** 30, 2 ** 63, 2 ** 62])


@st.composite
def ill_formed(draw):
    """(program, the code its error must have, or None: any known code)."""
    kind = draw(st.sampled_from(["unknown", "inexact", "negative", "conflict", "unsolvable", "explicit",
                                 "arity", "no-infer", "undecidable", "div-zero"]))
    n, m = draw(dims), draw(dims)
    ident = _fn("A", "x: Tensor[F32, [A]]", "Tensor[F32, [A]]", "  let y = x.tanh() in\n  y")
    if kind == "unknown":
        other = draw(st.sampled_from(["Z", "AB", "a"]))
        return _fn("A, B", "x: Tensor[F32, [A, B]]", f"Tensor[F32, [A, {other}]]", "  x"), "size"
    if kind == "inexact":
        k = draw(st.integers(2, 5))
        return _fn("A", "x: Tensor[F32, [A]]", f"Tensor[F32, [A / {k}, {k}]]",
                   f"  let y = x.reshape([A / {k}, {k}]) in\n  y"), "size"
    if kind == "negative":      # A - 1 >= 0 holds for every size; A - 2 does not
        k = draw(st.integers(2, 5))
        return _fn("A", f"x: Tensor[F32, [A - {k}]]", f"Tensor[F32, [A - {k}]]", "  x"), "size"
    if kind == "conflict":
        m = n + draw(st.integers(1, 5))
        two = _fn("A", "x: Tensor[F32, [A]], w: Tensor[F32, [A]]", "Tensor[F32, [A]]", "  let y = x + w in\n  y")
        return two + _caller([str(n), str(m)], "g", str(n)), "size"
    if kind == "unsolvable":
        k = draw(st.integers(n, n + 5))
        plus = _fn("A", f"x: Tensor[F32, [A + {k}]]", f"Tensor[F32, [A + {k}]]", "  x")
        return plus + _caller([str(n)], "g", str(n)), "size"
    if kind == "explicit":
        v = draw(bad_explicit)
        return ident + _caller([str(n)], f"g[{v}]", str(n)), None
    if kind == "arity":
        return ident + _caller([str(n)], f"g[{n}, {m}]", str(n)), "size"
    if kind == "no-infer":
        prod = _fn("A, B", "x: Tensor[F32, [A * B]]", "Tensor[F32, [A * B]]", "  x")
        return prod + _caller([str(n * m)], "g", str(n * m)), "size"
    if kind == "undecidable":
        k = draw(st.integers(2, 6))
        return _fn("A", "x: Tensor[F32, [A]]", f"Tensor[F32, [{k}]]",
                   f"  let y = x.slice(axis=0, start=0, stop={k}) in\n  y"), "size"
    return _fn("A", "x: Tensor[F32, [A]]", "Tensor[F32, [A]]", "  let y = x.reshape([A / 0]) in\n  y"), "size"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ill_formed())
def test_ill_formed_size_programs_get_diagnostics(program):
    text, code = program
    _codes_ok(text, want_error=True, code=code)


# Random size expressions in the places a generic body writes them: what the symbolic
# check accepts must instantiate without an error at every call.
def size_exprs():
    leaf = st.one_of(st.sampled_from(["A", "B", "A", "B", "Z"]), st.integers(0, 4).map(str),
                     st.sampled_from(["99999999999999999999", "-1"]))
    return st.recursive(leaf, lambda e: st.builds(lambda a, op, b: f"({a} {op} {b})", e,
                                                  st.sampled_from("+-*/"), e), max_leaves=4)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["reshape", "slice", "iota", "ret"]), size_exprs(), size_exprs(), dims, dims,
       st.booleans(), st.one_of(st.none(), st.tuples(st.integers(-2, 12), st.integers(-2, 12))))
def test_random_size_expressions_never_raise_and_accepted_ones_instantiate(where, e1, e2, n, m, use, explicit):
    params = "x: Tensor[F32, [A, B]]"
    if where == "reshape":
        body, ret = f"  let y = x.reshape([{e1}, {e2}]) in\n  y", f"Tensor[F32, [{e1}, {e2}]]"
    elif where == "slice":
        body, ret = f"  let y = x.slice(axis=1, start={e1}, stop={e2}) in\n  y", f"Tensor[F32, [A, {e2} - {e1}]]"
    elif where == "iota":
        body = f"  let i = iota(shape=[{e1}, B], axis=0) in\n  let y = i.cast(dtype=F32) in\n  y"
        ret = f"Tensor[F32, [{e1}, B]]"
    else:
        params, body, ret = f"x: Tensor[F32, [{e1}, B]]", "  x", f"Tensor[F32, [{e1}, B]]"
    call = f"g[{explicit[0]}, {explicit[1]}]" if explicit else "g"
    text = _fn("A, B", params, ret, body) + _caller([f"{n}, {m}"], call, f"{n}, {m}", "r" if use else "p0")
    _codes_ok(text, want_error=False)


def test_renaming_a_generic_program_for_a_shared_module_keeps_it_valid():
    """tests/regressions files share one module under prefixed names: definitions with size
    parameters and explicit instantiations are renamed too (the sizes are not)."""
    from compiler.oracle import differential
    case = next(c for c in map(progen.generate, range(500)) if c.generics and c.gh and c.gh.explicit)
    text = differential.rename_functions(case.source("f"), "r1_")
    assert "fn r1_f_s" in text and "handle r1_f_s" in text
    assert not re.search(r"(?<![\w.])f_s\d", text)
    snap = analysis.analyze(text)
    assert list(snap.diagnostics) == [] and any(n.startswith("r1_f_s") and "$" in n for n in snap.program.functions)


def test_whole_program_shrink_edits_of_generic_cases_check(generic_cases):
    """F32 (generic bodies and f_gh too), no reverseMode wrapper, no f_gh: still programs that check."""
    low = [c for _, c, _, _, _ in generic_cases if c.dtype.value != "F32"]
    assert len(low) >= 10
    for case in low:
        f32 = shrink._as_f32(case)
        assert shrink.well_typed(f32) and f"[{case.dtype.value}," not in f32.source("f"), f32.source("f")
        for edit in (shrink._drop_ad, shrink._drop_generic_handle):
            out = edit(case)
            assert out is None or shrink.well_typed(out)
