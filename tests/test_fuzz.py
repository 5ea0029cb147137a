"""Fuzzing the front end: any text gives diagnostics (never an exception), and every
span lies inside the text.  Two generators: programs built from the grammar, and
random mutations of the examples."""
import glob

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler.analysis import analyze
from compiler.syntax.parse import parse_module

EXAMPLES = [open(p, encoding="utf-8").read() for p in sorted(glob.glob("examples/*.kina"))]
FAST = settings(max_examples=1200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def spans_of(obj, out):
    """Every Span reachable in an AST (iterative)."""
    stack = [obj]
    while stack:
        o = stack.pop()
        if hasattr(o, "start") and hasattr(o, "end") and type(o).__name__ == "Span":
            out.append(o)
        elif isinstance(o, list):
            stack.extend(o)
        elif hasattr(o, "__dataclass_fields__"):
            stack.extend(getattr(o, f) for f in o.__dataclass_fields__)
    return out


def assert_sane(text: str, full: bool = False) -> None:
    module, diags = parse_module(text)
    spans = spans_of(module.functions, []) + [d.span for d in diags]
    for s in spans:
        assert 0 <= s.start <= s.end <= len(text), (s, len(text))
    if full:  # the whole front end, checker included
        snap = analyze(text)
        for d in snap.diagnostics:
            assert 0 <= d.span.start <= d.span.end <= len(text), d


# ---- grammar-based generator -------------------------------------------------------
names = st.sampled_from(["a", "b", "x", "w", "f", "g", "exp", "F32", "fn", "let"])
ints = st.integers(-3, 9).map(str)
int_list = st.lists(ints, max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]")
dtype = st.sampled_from(["F32", "I64", "F16", "BF16", "F99"])
ttype = st.builds(lambda d, s, p: f"Tensor[{d}, {s}{p}]", dtype, int_list, st.sampled_from(["", ", @host", ", @device", ", @gpu"]))
attr = st.builds(lambda n, v: f"{n}={v}", st.sampled_from(["axis", "op", "perm", "start"]),
                 st.one_of(ints, int_list, st.sampled_from(["sum", "mean", "max", "1.5"])))


def exprs():
    leaf = st.one_of(names, ints, int_list, st.builds(lambda t: t + " { 1.0, 2 }", ttype))

    def extend(inner):
        args = st.lists(st.one_of(inner, attr), max_size=3).map(", ".join)
        return st.one_of(
            st.builds(lambda a, op, b: f"{a} {op} {b}", inner, st.sampled_from("+-*/@"), inner),
            inner.map(lambda a: f"-{a}"), inner.map(lambda a: f"({a})"),
            st.builds(lambda r, m, a: f"{r}.{m}({a})", inner, names, args),
            st.builds(lambda f, a: f"{f}({a})", names, args),
            st.builds(lambda f, a: f"handle {f}({a}) with reverseMode", names, args),
            st.lists(inner, min_size=2, max_size=3).map(lambda xs: "(" + ", ".join(xs) + ")"),
        )
    return st.recursive(leaf, extend, max_leaves=8)


lets = st.lists(st.builds(lambda p, e: f"let {p} = {e} in", st.one_of(names, st.lists(names, min_size=1, max_size=3)
                          .map(lambda xs: "(" + ", ".join(xs) + ")")), exprs()), max_size=3)
functions = st.builds(
    lambda n, ps, r, ls, e: f"fn {n}({', '.join(f'{p}: {t}' for p, t in ps)}) -> {r} {{\n  " + "\n  ".join(ls + [e]) + "\n}",
    names, st.lists(st.tuples(names, ttype), max_size=3), st.one_of(ttype, st.lists(ttype, min_size=2, max_size=2)
    .map(lambda ts: "(" + ", ".join(ts) + ")")), lets, exprs())


@FAST
@given(st.lists(functions, min_size=1, max_size=3).map("\n".join))
def test_grammar_generated_programs(text):
    assert_sane(text)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(functions, min_size=1, max_size=2).map("\n".join))
def test_grammar_generated_programs_whole_front_end(text):
    assert_sane(text, full=True)


# ---- mutations of the examples -----------------------------------------------------
PIECES = ["{", "}", "(", ")", "[", "]", ",", "let", "in", "fn", "@", "-", ".", "//", "\n", "=", "\x00", "é", "\ud7ff"]


@st.composite
def mutated(draw):
    text = draw(st.sampled_from(EXAMPLES))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        j = min(len(text), i + draw(st.integers(0, 12)))
        new = draw(st.one_of(st.sampled_from(PIECES), st.text(max_size=4)))
        text = text[:i] + new + text[j:]
    return text


@settings(max_examples=700, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_examples(text):
    assert_sane(text)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_examples_whole_front_end(text):
    assert_sane(text, full=True)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_binary_junk(data):
    assert_sane(data.decode("utf-8", errors="replace"), full=True)
