"""Parser: grammar coverage, spans in document offsets, precedence, error messages and recovery."""
import math

import pytest

from compiler.core.diagnostics import SourceText, Span
from compiler.syntax import lex
from compiler.syntax import nodes as ast
from compiler.syntax.builder import MAX_DEPTH
from compiler.syntax.items import split_items
from compiler.syntax.parse import parse_item, parse_module
from compiler.syntax.recovery import MAX_ERRORS_PER_ITEM

T = "Tensor[F32, [1, 4]]"


def fn(body: str, params: str = f"a: {T}, b: {T}", ret: str = T) -> str:
    return f"fn f({params}) -> {ret} {{\n  {body}\n}}\n"


def body_of(text: str):
    module, diags = parse_module(text)
    assert diags == [], diags
    return module.functions[0].body


def src(text, node) -> str:
    return text[node.span.start:node.span.end]


def test_example_parses_with_document_spans():
    text = open("tests/fixtures/storylm0_forward.kina", encoding="utf-8").read()
    module, diags = parse_module(text)
    assert diags == []
    names = [f.name for f in module.functions]
    assert names[:2] == ["attn", "storylm0_forward"]
    for f in module.functions:
        assert text[f.span.start:f.span.start + 3] == "fn " and text[f.span.end - 1] == "}"
        assert text[f.name_span.start:f.name_span.end] == f.name
        for p in f.params:
            assert text[p.name_span.start:p.name_span.end] == p.name


def test_precedence_and_associativity():
    text = fn("a + b * -a @ b.exp() - b / a")
    e = body_of(text)
    # ((a + (b * ((-a) @ b.exp()))) - (b / a))
    assert isinstance(e, ast.BinOp) and e.op == "-"
    assert e.lhs.op == "+" and e.rhs.op == "/"
    mul = e.lhs.rhs
    assert mul.op == "*" and mul.rhs.op == "@"
    assert isinstance(mul.rhs.lhs, ast.Neg) and isinstance(mul.rhs.rhs, ast.MethodCall)
    assert src(text, mul.rhs) == "-a @ b.exp()"
    assert text[e.op_span.start:e.op_span.end] == "-"


def test_method_calls_attrs_and_free_calls():
    text = fn("concat(a.reduce_keep(op=sum, axis=-1), a.reshape([1, 4]), axis=2).take_along_axis(b, axis=1)")
    e = body_of(text)
    assert isinstance(e, ast.MethodCall) and e.method == "take_along_axis"
    assert [x.id for x in e.args] == ["b"] and e.attrs[0].name == "axis" and e.attrs[0].value == 1
    cat = e.receiver
    assert isinstance(cat, ast.Call) and cat.func == "concat" and cat.attrs[0].value == 2
    red, resh = cat.args
    assert [(a.name, a.value) for a in red.attrs] == [("op", "sum"), ("axis", -1)]
    assert text[red.attrs[1].value_span.start:red.attrs[1].value_span.end] == "-1"
    assert isinstance(resh.args[0], ast.IntList) and resh.args[0].values == (1, 4)
    assert src(text, cat).startswith("concat(") and src(text, cat).endswith("axis=2)")


def test_lets_destructuring_handle_tuples_literals():
    text = fn("let (g, da) = handle f(a, b) with reverseMode in\n"
              "  let z = Tensor[F32, [2, 2]] { 1.0, -2, 3e2, 4.5 } in\n"
              "  let e = Tensor[I64, [1], @device] {} in\n  (g, (z), da)")
    e = body_of(text)
    assert isinstance(e, ast.Let) and e.destructure and [n.id for n in e.names] == ["g", "da"]
    h = e.value
    assert isinstance(h, ast.Handle) and h.call.func == "f" and h.handler == "reverseMode"
    assert text[h.handler_span.start:h.handler_span.end] == "reverseMode"
    lit = e.body.value
    assert lit.values == (1.0, -2, 300.0, 4.5) and lit.type.shape == (2, 2) and lit.type.placement is None
    empty = e.body.body.value
    assert empty.values == () and empty.type.dtype == "I64" and empty.type.placement == "device"
    tup = e.body.body.body
    assert isinstance(tup, ast.TupleExpr) and [x.id for x in tup.items] == ["g", "z", "da"]
    assert src(text, e).startswith("let (g, da)") and src(text, e).endswith("(g, (z), da)")


def test_tuple_return_type_and_parenthesised_receiver_span():
    text = fn("(a + b).exp()", ret=f"({T}, Tensor[F32, [2], @host])")
    module, diags = parse_module(text)
    assert diags == []
    f = module.functions[0]
    assert isinstance(f.ret, ast.TupleTypeExpr) and len(f.ret.items) == 2
    assert src(text, f.body) == "(a + b).exp()"


def test_split_items_and_parse_item_offsets():
    one, two = fn("a"), fn("b").replace("fn f", "fn g")
    text = "// head\n" + one + "\n" + two
    items = split_items(text)
    assert [(i.name, text[i.start:i.end]) for i in items] == [("f", one.strip()), ("g", two.strip())]
    f, diags = parse_item(text[items[1].start:items[1].end], items[1].start)
    assert diags == [] and text[f.body.span.start:f.body.span.end] == "b"


def test_error_messages_say_expected_and_found():
    text = fn("let x = a + b\n")
    _, diags = parse_module(text)
    assert len(diags) == 1 and diags[0].code == "syntax"
    assert diags[0].message == "expected `in` after the let value, found `}`"
    assert text[diags[0].span.start:diags[0].span.end] == "}"
    _, diags = parse_module(fn("let x = a in"))
    assert "after `in`" in diags[0].message
    _, diags = parse_module(fn("handle f(a) using reverseMode"))
    assert diags[0].message == "expected `with`, found `using`"


def test_three_broken_functions_three_errors_at_their_lines():
    text = ("fn a(x: Tensor[F32, [1]]) -> Tensor[F32, [1]] {\n  let y = x\n}\n"
            "fn ok(x: Tensor[F32, [1]]) -> Tensor[F32, [1]] {\n  x\n}\n"
            "fn b(x: Tensor[F32, [1]]) -> Tensor[F32, [1]] {\n  x $ x\n}\n"
            "fn c(x: Tensor[F32, [1]]) -> Tensor[F32, [1]] {\n  x.exp(\n}\n")
    module, diags = parse_module(text)
    assert [f.name for f in module.functions] == ["ok"]
    src_ = SourceText(text)
    assert [src_.line_col(d.span.start) for d in diags] == [(3, 1), (8, 5), (12, 1)]
    assert "found `}`" in diags[2].message


def test_missing_brace_costs_one_function():
    text = ("fn a(x: Tensor[F32, [1]]) -> Tensor[F32, [1]] {\n  x\n\n"
            "fn b(x: Tensor[F32, [1]]) -> Tensor[F32, [1]] {\n  x\n}\n")
    module, diags = parse_module(text)
    assert [f.name for f in module.functions] == ["b"] and len(diags) == 1
    assert "`}` missing" in diags[0].message


def test_text_outside_items_and_reserved_words():
    _, diags = parse_module("let x = 1\n" + fn("a"))
    assert diags[0].code == "syntax" and "top-level function" in diags[0].message and diags[0].span.start == 0
    _, diags = parse_module(fn("let F32 = a in F32"))
    assert "reserved word" in diags[0].message


def test_positional_after_attr_and_deep_nesting_are_diagnostics():
    _, diags = parse_module(fn("a.slice(axis=1, b)"))
    assert "positional argument after a keyword attribute" in diags[0].message
    deep = fn("(" * (MAX_DEPTH + 5) + "a" + ")" * (MAX_DEPTH + 5))
    _, diags = parse_module(deep)
    assert len(diags) == 1 and "nested" in diags[0].message
    nested_calls = fn("a" + ".exp(a" * (MAX_DEPTH + 5) + ")" * (MAX_DEPTH + 5))   # arguments nest
    _, diags = parse_module(nested_calls)
    assert len(diags) == 1 and "nested" in diags[0].message


def test_flat_chains_of_any_length_parse():
    """Depth limits apply to nesting: a left operand and a receiver continue a flat chain
    at the same depth (issue 31)."""
    for body in (" + ".join(["a"] * 10_000), "a" + ".exp()" * 5_000, " - ".join(["a * a @ a"] * 3_000),
                 "a" + ".exp()" * 300 + " + " + " * ".join(["a.abs()"] * 2_000)):
        module, diags = parse_module(fn(body))
        assert diags == [] and len(module.functions) == 1
    # a chain inside an argument is one level of nesting, however long
    module, diags = parse_module(fn("a.maximum(" + " + ".join(["a"] * 5_000) + ")"))
    assert diags == []


def test_a_long_let_chain_is_not_too_deep():
    """Nesting limits are for expressions; a body may have any number of lets."""
    lines = ["fn f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {", "  let a0 = x in"]
    lines += [f"  let a{i} = a{i - 1} + x in" for i in range(1, 1500)]
    lines += ["  a1499", "}"]
    text = "\n\n" + "\n".join(lines)          # a leading gap: spans are shifted
    module, diags = parse_module(text)
    assert diags == []
    (fn,) = module.functions
    from compiler.analysis import analyze
    snap = analyze(text)
    assert snap.diagnostics == [] and len(snap.program.functions["f"].lets) == 1500
    last = snap.program.functions["f"].lets[-1]
    assert text[last.span.start:].startswith("let a1499")


# ---- recovery: every independent syntax error of a function ------------------------------
def errors_at(text: str) -> list[tuple[int, int, str]]:
    """(line, col, message) of every diagnostic; the broken function yields no AST."""
    module, diags = parse_module(text)
    assert module.functions == () and all(d.code == "syntax" for d in diags)
    lines = SourceText(text)
    spans = [(d.span.start, d.span.end) for d in diags]
    assert len(set(spans)) == len(spans) and spans == sorted(spans)
    assert all(0 <= d.span.start <= d.span.end <= len(text) for d in diags)
    return [(*lines.line_col(d.span.start), d.message) for d in diags]


def test_two_broken_lets_two_errors():
    text = fn("let x = a + in\n  let y = x * * b in\n  y")
    assert errors_at(text) == [(2, 15, "expected an expression, found `in`"),
                               (3, 15, "expected an expression, found `*`")]


def test_error_in_the_last_expression_after_a_broken_let():
    text = fn("let x = (a + ) in\n  let y = x in\n  y.exp(axis=)")
    assert errors_at(text) == [(2, 16, "expected an expression, found `)`"),
                               (4, 14, "expected an attribute value (a number, a word, a size expression or a list) after `=`, found `)`")]
    # the last expression cut short: the closing brace is what is found
    text = fn("let x = a $ b in\n  x +")
    assert errors_at(text) == [(2, 13, "unexpected character `$`"),
                               (4, 1, "expected an expression, found `}`")]


def test_broken_let_with_brackets_and_junk_skips_to_its_in():
    # the `in` inside the unbalanced brackets is not a chain boundary; the one after them is
    text = fn("let x = f(a, [1, (2 in ] junk 3) in\n  let y = x + + b in\n  y")
    assert errors_at(text) == [(2, 23, "expected `)`, `*`, `+`, `-` or `/`, found `in`"),
                               (3, 15, "expected an expression, found `+`")]
    # a run of junk characters is one diagnostic, the next let still gets checked
    text = fn("let x = a $$ \x01 $ in\n  let y = x # b in\n  y")
    assert errors_at(text) == [(2, 13, "unexpected character `$`"), (3, 13, "unexpected character `#`")]


def test_missing_in_or_bracket_resyncs_at_the_next_let():
    # a missing `in` is one error, not a cascade over the lets that follow
    text = fn("let x = a + b\n  let y = x in\n  let z = y in\n  z")
    assert errors_at(text) == [(3, 3, "expected `in` after the let value, found `let`")]
    # a let never sits inside brackets: it ends an unclosed call
    text = fn("let y = a.exp(\n  let z = y - in\n  z")
    assert errors_at(text) == [(3, 3, "expected an expression or `)`, found `let`"),
                               (3, 15, "expected an expression, found `in`")]


def test_recovery_keeps_the_transformer_offset_and_other_functions():
    good = fn("a").replace("fn f", "fn g")
    broken = fn("let F32 = a in\n  let y = b - in\n  y")
    text = good + "\n" + broken + "\n" + good.replace("fn g", "fn h")
    module, diags = parse_module(text)
    assert [f.name for f in module.functions] == ["g", "h"]
    assert [text[d.span.start:d.span.end] for d in diags] == ["F32", "in"]
    assert "reserved word" in diags[0].message and diags[1].message == "expected an expression, found `in`"
    h = module.functions[1]
    assert text[h.span.start:h.span.end] == good.replace("fn g", "fn h").strip()
    # parse_item with an item offset: every recovered span is in document offsets
    start = text.index("fn f")
    item = split_items(text)[1]
    fn_, item_diags = parse_item(text[item.start:item.end], start)
    assert fn_ is None and item_diags == diags


def test_errors_per_item_are_capped():
    lets = "\n  ".join(f"let x{i} = a + * b in" for i in range(MAX_ERRORS_PER_ITEM + 15))
    diags = parse_module(fn(lets + "\n  a"))[1]
    assert len(diags) == MAX_ERRORS_PER_ITEM
    assert all(d.message == "expected an expression, found `*`" for d in diags)


# ---- the lexer (compiler.syntax.lex: shared by the parser's recovery and the language server) ----
def test_lexer_keywords_are_the_grammars_word_terminals():
    assert lex.KEYWORDS == {"fn", "let", "in", "handle", "with", "Tensor", "inf", "nan"}
    assert [t.type for t in lex.tokens("fn let in handle with Tensor fnx inf nan info nanx")] == [
        "FN", "LET", "IN", "HANDLE", "WITH", "TENSOR", "NAME", "INF", "NAN", "NAME", "NAME"]


def _body(text: str) -> ast.Expr:
    m, diags = parse_module(fn(text))
    assert not diags, diags
    return m.functions[0].body


def test_inf_and_nan_are_numbers_everywhere_a_number_is():
    """The number words: a bare number (negated: `-inf` is one number, as `-1` is), a
    tensor-literal value with its own span, and a float attribute; `-nan` is `nan`."""
    e = _body("x * -inf + nan")
    assert isinstance(e, ast.BinOp) and isinstance(e.rhs, ast.Number) and math.isnan(e.rhs.value)
    neg = e.lhs.rhs
    assert isinstance(neg, ast.Number) and neg.value == -math.inf
    text = fn("Tensor[F32, [3]] { -inf, nan, 1.0 } + x.clamp(min=-inf, max=inf) * -nan")
    m, diags = parse_module(text)
    assert not diags
    body = m.functions[0].body
    lit, clamp = body.lhs, body.rhs.lhs
    assert lit.values[0] == -math.inf and math.isnan(lit.values[1]) and lit.values[2] == 1.0
    assert [text[s.start:s.end] for s in (ast.value_span(lit, i) for i in range(3))] == ["-inf", "nan", "1.0"]
    assert [(a.name, a.value) for a in clamp.attrs] == [("min", -math.inf), ("max", math.inf)]
    assert math.copysign(1.0, body.rhs.rhs.value) == 1.0     # -nan is nan


@pytest.mark.parametrize("word, what", [("inf", "infinity"), ("nan", "not a number")])
def test_inf_and_nan_are_reserved(word: str, what: str):
    text = f"fn f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {{\n  let {word} = x in\n  x\n}}\n"
    diags = parse_module(text)[1]
    assert [(d.code, d.message, text[d.span.start:d.span.end]) for d in diags] == [
        ("syntax", f"`{word}` is a number ({what}), a reserved word; choose another name", word)]


def test_lexer_never_fails_and_keeps_document_offsets():
    text = "x = 1.5e3 \x00\x01\x02 // note\n  y.exp(2)"
    toks = lex.tokens(text, comments=True)
    assert [(t.type, str(t)) for t in toks] == [
        ("NAME", "x"), ("EQUAL", "="), ("FLOAT", "1.5e3"), (lex.BAD, "\x00"), ("COMMENT", "// note"),
        ("NAME", "y"), ("DOT", "."), ("NAME", "exp"), ("LPAR", "("), ("INT", "2"), ("RPAR", ")")]
    assert all(text[t.start_pos:t.end_pos] == str(t) for t in toks)
    assert [str(t) for t in lex.tokens(text, text.index("y"), text.index("("))] == ["y", ".", "exp"]
    assert "COMMENT" not in {t.type for t in lex.tokens(text)}


def test_word_at_reads_one_line():
    text = "let ab = 12\nin cd"
    assert str(lex.word_at(text, 5)) == "ab" and str(lex.word_at(text, 6)) == "ab"
    assert lex.word_at(text, 10) is None and str(lex.word_at(text, 10, numbers=True)) == "12"
    assert str(lex.word_at(text, len(text))) == "cd"
    assert lex.is_word("abc_1") and not lex.is_word("1abc") and not lex.is_word("a b") and not lex.is_word("")


def test_ast_nodes_are_frozen_so_the_shared_parse_cache_is_safe():
    """parse_local caches one AST per item text for the whole process (every analysis and
    every server snapshot shares it): a node cannot be changed in place."""
    import dataclasses

    import pytest

    from compiler.syntax.parse import parse_local
    text = "fn f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] { let y = x.exp() in y.reshape([2]) }"
    fn, _ = parse_local(text)
    assert parse_local(text)[0] is fn
    with pytest.raises(dataclasses.FrozenInstanceError):
        fn.body = fn.body   # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        fn.params[0].type.span = Span(0, 0)   # type: ignore[misc]
    # every sequence in the tree is a tuple: no list to append to either
    def sequences(node):
        for f in dataclasses.fields(node):
            v = getattr(node, f.name)
            assert not isinstance(v, (list, dict, set)), (type(node).__name__, f.name)
            for x in v if isinstance(v, tuple) else (v,):
                if dataclasses.is_dataclass(x):
                    sequences(x)
    sequences(fn)


def test_a_byte_order_mark_opening_the_text_is_skipped():
    """U+FEFF at offset 0 (a UTF-8 BOM) is accepted like Python and rustc do; spans stay
    offsets in the text as given (the server's documents keep the mark)."""
    body = "fn f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  x + x\n}\n"
    module, diags = parse_module("\ufeff" + body)
    assert diags == [] and module.functions[0].span.start == 1
    assert [str(t) for t in lex.tokens("\ufeff" + body)][:2] == ["fn", "f"]
    # anywhere else it is still a character no token starts with
    _, diags = parse_module(body + "\ufeff")
    assert [d.code for d in diags] == ["syntax"]
