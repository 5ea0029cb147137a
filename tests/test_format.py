"""`kinac fmt` (compiler/format/formatter.py): never changes meaning, keeps every comment, is
idempotent, refuses broken files, and writes files safely.

The properties are checked on every example and on hypothesis-generated programs
whose tokens are separated by random blanks, newlines, redundant parentheses and
comments (own-line and trailing), at several widths so that every way of breaking
a line is exercised."""
from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from compiler.format.formatter import FormatError, ast_shape, comments_of, format_source
from compiler.format.imports import split_header
from compiler.syntax import nodes as syntax
from compiler.syntax.imports import scan as scan_imports
from compiler.syntax.items import split_items
from compiler.syntax.parse import parse_module

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(glob.glob(str(ROOT / "examples" / "*.kina")))


def _parse(src: str) -> tuple[list, syntax.Module, list]:
    """(its imports as (name, module, path), the module after them, diagnostics): the
    functions of a file that imports (examples/layers.kina) parse after its import header."""
    decls, _, _ = scan_imports(src, split_items(src))
    _, rest, _ = split_header(src)
    module, diags = parse_module(rest)
    return [(d.name, d.module, d.path) for d in decls], module, diags


def assert_formats_well(src: str, width: int = 100) -> str:
    header, module, diags = _parse(src)
    assert not diags, diags
    out = format_source(src, width)
    formatted_header, formatted, diags = _parse(out)
    assert not diags, (out, diags)
    assert formatted_header == header
    assert ast_shape(formatted.functions) == ast_shape(module.functions)
    assert comments_of(out) == comments_of(src)
    assert format_source(out, width) == out, out
    assert out.endswith("\n") or out == ""
    assert all(line == line.rstrip() for line in out.split("\n"))
    return out


# ---- the examples ---------------------------------------------------------------------------
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: Path(p).name)
@pytest.mark.parametrize("width", [100, 40])
def test_examples(path, width):
    out = assert_formats_well(Path(path).read_text(encoding="utf-8"), width)
    if width == 100:   # only comments (not reflowed) may be longer than the width
        assert all(len(line) <= 100 or line.lstrip().startswith("//") for line in out.splitlines())


def test_style():
    src = """// header

// about f
fn f(x: Tensor[F32,[2, 3]],   w: Tensor[F32, [3, 4], @host]) -> Tensor[F32, [2, 4]] { // brace
  let h = ((x @ w)).relu()   in   // relu
  let  g = -(h) * 2.0 +h in
  let (a,b,) = handle f2( h , w ) with reverseMode in


  // the end
  g
}
fn main() -> Tensor[F32, [2, 4]] {
  let x = Tensor[F32, [2, 3]] { 1.0, 2.0, 3.0, - 4.0, 5e-1, 6.0, } in
  f(x, Tensor[F32, [3, 4]] {})   // call
} // end main
// tail
"""
    assert assert_formats_well(src) == """// header

// about f
fn f(x: Tensor[F32, [2, 3]], w: Tensor[F32, [3, 4], @host]) -> Tensor[F32, [2, 4]] { // brace
  let h = (x @ w).relu() in // relu
  let g = -h * 2.0 + h in
  let (a, b) = handle f2(h, w) with reverseMode in

  // the end
  g
}

fn main() -> Tensor[F32, [2, 4]] {
  let x = Tensor[F32, [2, 3]] { 1.0, 2.0, 3.0, -4.0, 5e-1, 6.0 } in
  f(x, Tensor[F32, [3, 4]] {}) // call
} // end main
// tail
"""


def test_long_lines_break_lists_chains_and_operators():
    params = ", ".join(f"w{i}: Tensor[F32, [4, 4]]" for i in range(6))
    src = (f"fn layer({params}) -> Tensor[F32, [4, 4]] {{\n"
           "  let y = w0.reshape([16]).exp().reshape([4, 4]).transpose([1, 0]).tanh().softmax(axis=1) in\n"
           "  y + w1 @ w2 + w3 @ w4 - w5 * w0 + some_function(w1, w2, w3, w4, w5, reduce_op=sum) @ w3 + y.exp() * w4\n}\n")
    assert assert_formats_well(src) == """fn layer(
  w0: Tensor[F32, [4, 4]],
  w1: Tensor[F32, [4, 4]],
  w2: Tensor[F32, [4, 4]],
  w3: Tensor[F32, [4, 4]],
  w4: Tensor[F32, [4, 4]],
  w5: Tensor[F32, [4, 4]],
) -> Tensor[F32, [4, 4]] {
  let y = w0.reshape([16]).exp().reshape([4, 4]).transpose([1, 0]).tanh().softmax(axis=1) in
  y
    + w1 @ w2
    + w3 @ w4
    - w5 * w0
    + some_function(w1, w2, w3, w4, w5, reduce_op=sum) @ w3
    + y.exp() * w4
}
"""
    narrow = assert_formats_well(src, 40)
    assert "  let y = w0\n    .reshape([16])\n    .exp()\n" in narrow


def test_literal_values_fill_lines_and_keep_their_comments():
    values = ", ".join(f"{i}.25" for i in range(40))
    src = f"fn main() -> Tensor[F32, [41]] {{\n  Tensor[F32, [41]] {{ {values}, // last\n 1e3 }}\n}}\n"
    out = assert_formats_well(src)
    lines = out.splitlines()
    assert lines[1] == "  Tensor[F32, [41]] {"
    assert all(len(line) <= 100 for line in lines)
    assert "39.25, // last" in out and lines[-3].strip() == "1e3" and lines[-2] == "  }"


def test_parentheses_only_where_needed():
    src = ("fn f(a: Tensor[F32, [2]], b: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n"
           "  let c = (a - (b - a)) - ((a + b)) in\n  let d = (-a).exp() + -(a * b) + (a @ b) * a in\n"
           "  let e = (handle g(a) with reverseMode) in\n  (c * (d / e))\n}\n")
    out = assert_formats_well(src)
    assert "let c = a - (b - a) - (a + b) in" in out
    assert "let d = (-a).exp() + -(a * b) + a @ b * a in" in out
    assert "let e = handle g(a) with reverseMode in" in out and "\n  c * (d / e)\n" in out


def test_numbers_keep_their_spelling():
    src = "fn f() -> Tensor[F32, [3]] {\n  g(x, eps=1e-5, p=-0.50, axis=-1, shape=[-1, 007], big=10000000000000000000000)\n}\n"
    out = assert_formats_well(src)
    assert "eps=1e-5, p=-0.50, axis=-1, shape=[-1, 007], big=10000000000000000000000" in out


def test_infinities_and_nan_print_back():
    """`inf`, `-inf` and `nan` as bare numbers, literal values and attributes print as written
    (a NaN in the tree compares equal to itself, so the formatter's own check passes);
    `-nan` is `nan`."""
    src = ("fn f(x: Tensor[F32, [3]], m: Tensor[Bool, [3]]) -> Tensor[F32, [3]] {\n"
           "  where(m,x,-inf)*inf+Tensor[F32,[3]]{ -inf,nan,inf }+x.clamp(min=-inf,max=inf) - x * -nan\n}\n")
    out = assert_formats_well(src)
    assert out.split("\n")[1:5] == ["  where(m, x, -inf) * inf", "    + Tensor[F32, [3]] { -inf, nan, inf }",
                                    "    + x.clamp(min=-inf, max=inf)", "    - x * nan"]


def test_constant_expressions_of_bare_numbers_keep_their_meaning():
    """They fold to one number in the checker (compiler/check/fold.py); formatting must
    not change the number (a dropped parenthesis would: `-1.0.log()` vs `(-1.0).log()`)."""
    from compiler.check.fold import fold
    src = ("fn f(x: Tensor[F32, [4]]) -> Tensor[F32, [4]] {\n  let a = x*(1.0-1e-3*0.01) in\n"
           "  let b = a*0.9.log()+-(2*3)/4 in\n  let c = b*(-1.0).exp()*0.5.exp().minimum(sqrt(2.0)) in\n  c\n}\n")
    out = assert_formats_well(src)
    assert "let a = x * (1.0 - 1e-3 * 0.01) in" in out and "let b = a * 0.9.log() + -(2 * 3) / 4 in" in out
    assert "(-1.0).exp() * 0.5.exp().minimum(sqrt(2.0))" in out

    def constants(text: str) -> list[float]:
        (fn,) = parse_module(text)[0].functions
        found, let = [], fn.body
        while isinstance(let, syntax.Let):
            value = let.value
            while isinstance(value, syntax.BinOp):
                folded = fold(value.rhs)
                if folded is not None:
                    found.append(folded.value)
                value = value.lhs
            let = let.body
        return found
    assert constants(out) == constants(src) and len(constants(src)) == 5


def test_one_item_tuples_keep_their_comma():
    src = "fn f(a: Tensor[F32, [2]]) -> (Tensor[F32, [2]],) {\n  let (b) = (a,) in\n  (b ,)\n}\n"
    out = assert_formats_well(src)
    assert "-> (Tensor[F32, [2]],) {" in out and "let (b) = (a,) in" in out and "\n  (b,)\n" in out


def test_comments_everywhere_stay_where_they_were():
    src = """fn f( // params
  a: Tensor[F32, [2]], // first
  // own line before b
  b: Tensor[F32, [2]]
) -> Tensor[F32, [2]] {
  let c = g( // open
    a, // arg a
    // before b
    b
  ) in
  let d = a
    // before the operator
    + b in
  c // result
  // after the result
}
"""
    out = assert_formats_well(src)
    for comment in ("( // params", "a: Tensor[F32, [2]], // first", "g( // open", "a, // arg a", "c // result"):
        assert comment in out
    assert "\n  // own line before b\n  b: Tensor[F32, [2]],\n" in out
    assert "\n    // before the operator\n    + b in\n" in out
    assert out.endswith("  c // result\n  // after the result\n}\n")


def test_crlf_files_stay_crlf():
    src = "// c\r\nfn f(a: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\r\n  a+a // sum\r\n}\r\n"
    out = format_source(src)
    assert out == "// c\r\nfn f(a: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\r\n  a + a // sum\r\n}\r\n"
    assert format_source(out) == out


def test_empty_and_comment_only_files():
    assert format_source("") == "" and format_source("\n\n  \n") == ""
    assert format_source("\n\n// only\n\n\n// comments   \n\n") == "// only\n\n// comments\n"


def test_syntax_errors_are_refused_with_located_diagnostics():
    src = "fn f(a: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  let x = a +\n}\njunk\n"
    with pytest.raises(FormatError) as err:
        format_source(src)
    spans = [(d.code, d.span.start) for d in err.value.diagnostics]
    assert ("syntax", src.index("}")) in spans and ("syntax", src.index("junk")) in spans


def test_deep_nesting_and_long_chains():
    body = "f(" * 150 + "x" + ")" * 150
    assert_formats_well(f"fn f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {{\n  {body}\n}}\n")
    lets = "".join(f"  let x{i} = x{i - 1 if i else ''} + x in\n" for i in range(2000))
    out = assert_formats_well(f"fn f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {{\n{lets}  x1999\n}}\n")
    assert out.count("\n") == 2003


def test_issue13_syntax_scalars_underscores_negative_axes():
    """The syntax issue 13 adds: bare scalar operands, `_` in destructuring lets, negative
    axes, dtype-valued attributes; and a field access `x.T` once the parser has it."""
    src = """fn f(x: Tensor[F32, [2, 3]], w: Tensor[F32, [3]]) -> Tensor[F32, [2, 3]] {
  let (y, _, _) = handle g(x, w) with reverseMode in
  let s = y * 0.5 + 1e-5 - (2 * y) in
  let m = s.softmax(axis=-1).cast(dtype=F16).reduce_keep(op=max, axis=-2) in
  where(m.gt(0.0), m, -m)
}
"""
    out = assert_formats_well(src)
    assert "let (y, _, _) = handle g(x, w) with reverseMode in" in out
    assert "let s = y * 0.5 + 1e-5 - 2 * y in" in out
    assert "s.softmax(axis=-1).cast(dtype=F16).reduce_keep(op=max, axis=-2)" in out
    field = "fn f(x: Tensor[F32, [2, 3]]) -> Tensor[F32, [3, 2]] {\n  (x).T .exp()\n}\n"
    if hasattr(syntax, "Field"):   # the parser accepts `x.T` (for the checker's message)
        assert assert_formats_well(field) == "fn f(x: Tensor[F32, [2, 3]]) -> Tensor[F32, [3, 2]] {\n  x.T.exp()\n}\n"
    else:
        with pytest.raises(FormatError):
            format_source(field)


def test_a_signature_breaks_its_parameters_before_its_return_type():
    """`(params) -> Tensor[F32, [1, 1]] {` one column too long breaks the parameters, one per
    line, and keeps the return type whole (it used to break `[1, 1]` over four lines while the
    parameters stayed on one: compiler/std/losses.kina's cross_entropy)."""
    src = ("fn cross_entropy[N, V](logits: Tensor[F32, [N, V]], targets: Tensor[I64, [N, 1]]) -> "
           "Tensor[F32, [1, 1]] {\n  logits\n}\n")
    assert assert_formats_well(src) == """fn cross_entropy[N, V](
  logits: Tensor[F32, [N, V]],
  targets: Tensor[I64, [N, 1]],
) -> Tensor[F32, [1, 1]] {
  logits
}
"""
    short = "fn f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  x\n}\n"
    assert assert_formats_well(short) == short


def test_import_lines_after_a_blank_line_are_kept_once():
    """A blank line right before an import was taken for the import's line: `import nn`
    came out twice and the blank line was lost (examples/layers.kina under `kinac fmt`)."""
    src = "// a model\n\nimport nn\nimport losses\n\nfn f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  x\n}\n"
    assert assert_formats_well(src) == src
    indented = "// a model\n\n  import nn\nfn f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  x\n}\n"
    assert assert_formats_well(indented).count("import nn") == 1


def test_size_generic_functions():
    """Size parameters, size expressions in shapes, lists and attributes, and explicit
    instantiation: canonical spacing, parentheses only where the tree needs them (both
    operands of a left-associative operator), the source's others dropped."""
    src = """fn f[B,T , D,](x: Tensor[F32,[(B*T),D]], y: Tensor[F32, [(B)*((T+1)), (D-(1+1)) , T-(B-1)]]) -> Tensor[F32, [B, T, D]] {
  let a = x.reshape([B,T,D]) in // reshape
  let w = iota(shape=[T/(2*B)], axis= (0)) in
  let z = a.slice(axis=1, start=0, stop=T-1/1) in
  let s = a.slice(axis=1, start=0, stop=(T)) in
  let r = linear[ 8 , (B+1)*2 ]( a ) in
  let h = a.reshape([(B * D) / B, B * (T / B)]) in
  a * (1.0 / (B * T))
}
"""
    assert assert_formats_well(src) == """fn f[B, T, D](
  x: Tensor[F32, [B * T, D]],
  y: Tensor[F32, [B * (T + 1), D - (1 + 1), T - (B - 1)]],
) -> Tensor[F32, [B, T, D]] {
  let a = x.reshape([B, T, D]) in // reshape
  let w = iota(shape=[T / (2 * B)], axis=0) in
  let z = a.slice(axis=1, start=0, stop=T - 1 / 1) in
  let s = a.slice(axis=1, start=0, stop=T) in
  let r = linear[8, (B + 1) * 2](a) in
  let h = a.reshape([B * D / B, B * (T / B)]) in
  a * (1.0 / (B * T))
}
"""
    # comments inside size lists and expressions stay, and a second pass changes nothing
    src = "fn g[M, // rows\n  K](x: Tensor[F32, [M * // m\n K, (K\n// own\n)]]) -> Tensor[F32, [M]] {\n  x\n}\n"
    out = assert_formats_well(src, 40)
    assert "// rows" in out and "// m" in out and "// own" in out
    # a long list of sizes breaks one per line like any list
    sizes = ", ".join(f"S{i}" for i in range(30))
    out = assert_formats_well(f"fn g[{sizes}](x: Tensor[F32, [S0]]) -> Tensor[F32, [S0]] {{ f[{sizes}](x) }}\n")
    assert out.startswith("fn g[\n  S0,\n  S1,\n") and "  f[\n    S0,\n" in out


# ---- generated programs -------------------------------------------------------------------------
NAMES = st.sampled_from(["a", "b", "x", "w_1", "foo", "reverseMode", "sum", "_"])
SEPARATORS = st.sampled_from([" ", " ", " ", "", "\n", "\n\n", "   ", "\t", " // note\n", "// tight\n",
                              "\n  // own line\n  ", "\n\n// para\n\n", " //\n"])


class Tok(str):
    """A token; `word` says whether it needs a blank next to another word."""

    @property
    def word(self) -> bool:
        return self[:1].isalnum() or self[:1] == "_" or self[-1:].isalnum() or self[-1:] == "_"


@st.composite
def number(draw, signed=True):
    text = draw(st.sampled_from(["0", "1", "42", "007", "1.5", "0.25", "1e3", "2.5e-4", "3E+2"]))
    return ["-", text] if signed and draw(st.booleans()) else [text]


SIZE_NAMES = st.sampled_from(["B", "T", "d_model", "N"])


@st.composite
def size_expr(draw, depth=0):
    """(tokens, precedence) of a size expression: integers and size names with + - * /,
    operands parenthesised as needed and sometimes for no reason."""
    kind = draw(st.sampled_from(["int", "name"] + (["bin"] if depth < 3 else [])))
    if kind == "int":
        toks, prec = [t for t in draw(number()) if t == "-"] + [str(draw(st.integers(0, 64)))], 6
    elif kind == "name":
        toks, prec = [draw(SIZE_NAMES)], 6
    else:
        op = draw(st.sampled_from(["+", "-", "*", "/"]))
        level = {"+": 1, "-": 1, "*": 2, "/": 2}[op]
        lhs, lp = draw(size_expr(depth + 1))
        rhs, rp = draw(size_expr(depth + 1))
        toks = (["(", *lhs, ")"] if lp < level else lhs) + [op] + (["(", *rhs, ")"] if rp <= level else rhs)
        prec = level
    if draw(st.integers(0, 5)) == 0:
        toks, prec = ["(", *toks, ")"], 6
    return toks, prec


@st.composite
def int_list(draw):
    items = [draw(size_expr())[0] for _ in range(draw(st.integers(0, 4)))]
    return ["[", *_join(items, draw), "]"]


def _join(items, draw, trailing=True):
    out = []
    for i, item in enumerate(items):
        out += item
        if i + 1 < len(items) or (trailing and items and draw(st.booleans()) and draw(st.booleans())):
            out.append(",")
    return out


@st.composite
def tensor_type(draw):
    out = ["Tensor", "[", draw(st.sampled_from(["F32", "I64", "BF16"])), ","] + draw(int_list())
    if draw(st.booleans()):
        out += [",", "@", draw(st.sampled_from(["host", "device"]))]
    return out + ["]"]


@st.composite
def type_expr(draw, depth=0):
    if depth > 1 or draw(st.integers(0, 3)) > 0:
        return draw(tensor_type())
    items = [draw(type_expr(depth + 1)) for _ in range(draw(st.integers(1, 3)))]
    body = _join(items, draw, trailing=len(items) > 1)
    return ["(", *body, *([","] if len(items) == 1 else []), ")"]


@st.composite
def expr(draw, depth=0):
    """(tokens, precedence) of a random expression; operands are parenthesised as needed
    and sometimes for no reason."""
    kinds = ["name", "number", "list", "lit"] + (["bin", "neg", "method", "call", "handle", "tuple"] if depth < 3 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "name":
        toks, prec = [draw(NAMES)], 6
    elif kind == "number":
        toks = draw(number())
        prec = 4 if toks[0] == "-" else 6
    elif kind == "list":
        toks, prec = draw(int_list()), 6
    elif kind == "lit":
        values = [draw(number()) for _ in range(draw(st.integers(0, 5)))]
        toks, prec = draw(tensor_type()) + ["{", *_join(values, draw), "}"], 6
    elif kind == "bin":
        op = draw(st.sampled_from(["+", "-", "*", "/", "@"]))
        level = {"+": 1, "-": 1, "*": 2, "/": 2, "@": 3}[op]
        toks, prec = operand(draw, depth, level) + [op] + operand(draw, depth, level + 1), level
    elif kind == "neg":
        toks, prec = ["-"] + operand(draw, depth, 5), 4
    elif kind == "method":
        toks, prec = operand(draw, depth, 5) + [".", draw(NAMES)] + args(draw, depth), 5
    elif kind == "call":
        sizes = draw(int_list()) if draw(st.integers(0, 3)) == 0 else []     # `linear[8, B * 2](x)`
        toks, prec = [draw(NAMES)] + sizes + args(draw, depth), 6
    elif kind == "handle":
        toks, prec = ["handle", draw(NAMES)] + args(draw, depth) + ["with", "reverseMode"], 4
    else:
        items = [draw(expr(depth + 1))[0] for _ in range(draw(st.integers(1, 3)))]
        toks = ["(", *_join(items, draw, trailing=len(items) > 1), *([","] if len(items) == 1 else []), ")"]
        prec = 6
    if draw(st.integers(0, 5)) == 0:
        toks, prec = ["(", *toks, ")"], 6
    return toks, prec


def operand(draw, depth, need):
    toks, prec = draw(expr(depth + 1))
    return ["(", *toks, ")"] if prec < need else toks


def args(draw, depth):
    positional = [draw(expr(depth + 1))[0] for _ in range(draw(st.integers(0, 3)))]
    attrs = []
    for _ in range(draw(st.integers(0, 2))):
        value = draw(st.one_of(number(), int_list(), NAMES.map(lambda n: [n]), size_expr().map(lambda e: e[0])))
        attrs.append([draw(st.sampled_from(["axis", "op", "shape"])), "="] + value)
    return ["(", *_join(positional + attrs, draw), ")"]


@st.composite
def function(draw):
    params = [[draw(NAMES), ":"] + draw(type_expr()) for _ in range(draw(st.integers(0, 3)))]
    sizes = [[draw(SIZE_NAMES)] for _ in range(draw(st.integers(0, 3)))]    # `fn f[B, T](...)`
    toks = ["fn", draw(NAMES), *(["[", *_join(sizes, draw), "]"] if sizes else []), "(", *_join(params, draw), ")",
            "->"] + draw(type_expr()) + ["{"]
    for _ in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):
            names = [[draw(NAMES)] for _ in range(draw(st.integers(1, 3)))]
            pattern = ["(", *_join(names, draw), ")"]
        else:
            pattern = [draw(NAMES)]
        toks += ["let", *pattern, "="] + draw(expr())[0] + ["in"]
    return toks + draw(expr())[0] + ["}"]


@st.composite
def program(draw):
    toks = [t for _ in range(draw(st.integers(1, 3))) for t in draw(function())]
    out = [draw(SEPARATORS.filter(lambda s: "\n" in s or not s.strip()))]
    for prev, tok in zip([""] + toks, toks):
        sep = draw(SEPARATORS) if prev else ""
        if sep == "" and Tok(prev).word and Tok(tok).word:
            sep = " "
        if sep == "" and prev == "-" and tok.startswith("-"):
            sep = " "
        out += [sep, tok]
    return "".join(out) + draw(st.sampled_from(["", "\n", " // end\n", "\n// tail"]))


GENERATED = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@GENERATED
@given(program(), st.sampled_from([100, 60, 30, 12]))
def test_generated_programs(src, width):
    module, diags = parse_module(src)
    assume(not diags)      # e.g. a dtype name used as a binding: the parser's business, not fmt's
    assert_formats_well(src, width)


# ---- the command ---------------------------------------------------------------------------------
UGLY = "fn f(a:Tensor[F32,[2]])->Tensor[F32,[2]]{a+a}\n"
PRETTY = "fn f(a: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  a + a\n}\n"


def kinac(*args, stdin=None, cwd=ROOT):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "compiler.cli", *args], input=stdin, capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=120)


def test_fmt_rewrites_in_place_keeping_mode_and_symlinks(tmp_path):
    src = tmp_path / "a.kina"
    src.write_text(UGLY)
    os.chmod(src, 0o640)
    link = tmp_path / "link.kina"
    link.symlink_to(src)
    r = kinac("fmt", str(link))
    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and src.read_text() == PRETTY and (src.stat().st_mode & 0o777) == 0o640
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".kinac-fmt")] == []
    before = src.stat().st_mtime_ns
    assert kinac("fmt", str(src)).returncode == 0 and src.stat().st_mtime_ns == before   # unchanged: not rewritten


def test_fmt_check_and_diff_change_nothing(tmp_path):
    src = tmp_path / "a.kina"
    src.write_text(UGLY)
    r = kinac("fmt", "--check", str(src))
    assert r.returncode == 1 and "would be reformatted" in r.stderr and src.read_text() == UGLY
    r = kinac("fmt", "--diff", str(src))
    assert r.returncode == 0 and "-fn f(a:Tensor" in r.stdout and "+  a + a" in r.stdout and src.read_text() == UGLY
    src.write_text(PRETTY)
    assert kinac("fmt", "--check", str(src)).returncode == 0


def test_fmt_stdin_to_stdout():
    r = kinac("fmt", stdin=UGLY)
    assert r.returncode == 0 and r.stdout == PRETTY
    r = kinac("fmt", "-", "--check", stdin=UGLY)
    assert r.returncode == 1 and r.stdout == ""


def test_fmt_refuses_syntax_errors_and_writes_nothing(tmp_path):
    bad = tmp_path / "bad.kina"
    bad.write_text("fn f(a: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  let x = a +\n}\n")
    good = tmp_path / "good.kina"
    good.write_text(UGLY)
    r = kinac("fmt", str(tmp_path))      # a folder: every .kina file under it
    assert r.returncode == 1
    assert f"{bad}:3:1: error[syntax]" in r.stderr and "not formatted" in r.stderr
    assert bad.read_text().endswith("a +\n}\n") and good.read_text() == PRETTY
    r = kinac("fmt", stdin="fn (")
    assert r.returncode == 1 and r.stdout == "" and "<stdin>:1:4: error[syntax]" in r.stderr


def test_fmt_usage_errors(tmp_path):
    r = kinac("fmt", str(tmp_path / "missing.kina"))
    assert r.returncode == 2 and "cannot read" in r.stderr
    (tmp_path / "latin1.kina").write_bytes(b"// caf\xe9\n")
    r = kinac("fmt", str(tmp_path / "latin1.kina"))
    assert r.returncode == 2 and "not UTF-8" in r.stderr


def test_fmt_failed_write_leaves_the_file_and_no_temporary(tmp_path, monkeypatch, capsys):
    from compiler import cli
    src = tmp_path / "x.kina"
    src.write_text(UGLY)

    def refuse(a, b):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    assert cli.main(["fmt", str(src)]) == 2
    assert "cannot write" in capsys.readouterr().err
    assert src.read_text() == UGLY and sorted(p.name for p in tmp_path.iterdir()) == ["x.kina"]


def test_regression_blank_line_before_closing_brace_after_a_comment():
    """Found by a long fuzz run: a comment inside `-//\n1.5` ended up before a blank line
    that the second pass dropped (not idempotent)."""
    src = "fn f() -> Tensor[F32, []] {\n  let s = 2 in -//\n1.5\n\n}\n"
    assert assert_formats_well(src) == "fn f() -> Tensor[F32, []] {\n  let s = 2 in\n  -1.5 //\n}\n"
    src = "fn f() -> Tensor[F32, []] {\n  x\n\n  // end\n\n}\n"
    assert assert_formats_well(src) == "fn f() -> Tensor[F32, []] {\n  x\n\n  // end\n}\n"


def test_a_byte_order_mark_is_kept():
    """The formatter changes layout, not encoding: a file that opens with a BOM keeps it
    (docs/language.md, "Source files"); a syntax error's span is in the text as given."""
    assert format_source("\ufefffn  f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] { x+x }\n") == \
        "\ufefffn f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  x + x\n}\n"
    text = "\ufefffn f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] { x + }\n"
    with pytest.raises(FormatError) as err:
        format_source(text)
    assert text[err.value.diagnostics[0].span.start] == "}"


def test_kinac_fmt_keeps_a_byte_order_mark(tmp_path):
    src = tmp_path / "bom.kina"
    src.write_bytes(b"\xef\xbb\xbffn  f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] { x+x }\n")
    r = subprocess.run([sys.executable, "-m", "compiler.cli", "fmt", str(src)], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent)))
    assert r.returncode == 0, r.stderr
    assert src.read_bytes() == b"\xef\xbb\xbffn f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  x + x\n}\n"
