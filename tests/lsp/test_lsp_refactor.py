"""The refactor code actions (kina_lsp/features/refactor*.py) through a real server: each is
listed without its edit, resolved with codeAction/resolve, refused where it would not
re-check, and its edited text checks clean with the same types (compiler.analysis)."""
from __future__ import annotations

from conftest import MODULE_LOOP, change, doc_id, open_doc, pos, published
from lsprotocol import types as lsp

from compiler.analysis import analyze

pytestmark = MODULE_LOOP

CHAIN = """\
// rows of exp, summed
fn f[M, N](x: Tensor[F32, [M, N]], s: Tensor[F32, [M, 1]]) -> Tensor[F32, [M, 1]] {
  let y = x.exp().reduce_keep(op=sum, axis=1) * s in   // keep this comment
  let z = y + s in
  z - s
}
"""

HANDLED = """\
fn loss(x: Tensor[F32, [2, 3]], s: Tensor[F32, [2, 3]]) -> Tensor[F32, [2, 3]] {
  let a = x * s in
  a
}

fn step(x: Tensor[F32, [2, 3]], s: Tensor[F32, [2, 3]]) -> (Tensor[F32, [2, 3]], Tensor[F32, [2, 3]], Tensor[F32, [2, 3]]) {
  let e = x.exp() in
  handle loss(e, s) with reverseMode
}
"""

SUM = """\
fn f(a: Tensor[F32, [2, 3]], b: Tensor[F32, [2, 3]], c: Tensor[F32, [2, 3]]) -> Tensor[F32, [2, 3]] {
  let s = a + b in
  let t = s.exp() in
  s * c + t
}
"""

SHAPES = """\
fn f[M, N](x: Tensor[F32, [M, N]], b: Tensor[F32, [N]]) -> Tensor[F32, [M, N]] {
  let y = x + b in
  y
}

fn g(x: Tensor[F32, [2, 3]], w: Tensor[F32, [6, 4]]) -> Tensor[F32, [2, 8]] {
  x @ w
}

fn h(x: Tensor[F32, [2, 3]], w: Tensor[F32, [6, 2]]) -> Tensor[F32, [2, 2]] {
  x @ w
}
"""


def offset(text: str, p: lsp.Position) -> int:
    lines = text.splitlines(keepends=True)
    return sum(len(line) for line in lines[:p.line]) + p.character     # ASCII test texts


def apply(text: str, edits: list[lsp.TextEdit]) -> str:
    for e in sorted(edits, key=lambda e: (offset(text, e.range.start), offset(text, e.range.end)), reverse=True):
        text = text[:offset(text, e.range.start)] + e.new_text + text[offset(text, e.range.end):]
    return text


def span_range(text: str, needle: str, length: int | None = None, delta: int = 0) -> lsp.Range:
    start = pos(text, needle, delta)
    return lsp.Range(start=start, end=pos(text, needle, delta + (len(needle) if length is None else length)))


async def actions_at(client, uri: str, rng: lsp.Range, diags: list[lsp.Diagnostic] | None = None,
                     only: list[str] | None = None) -> list[lsp.CodeAction]:
    got = await client.text_document_code_action_async(lsp.CodeActionParams(
        text_document=doc_id(uri), range=rng, context=lsp.CodeActionContext(diagnostics=diags or [], only=only)))
    return list(got or [])     # (the source actions, with a command and no edit, may come back as Commands)


async def resolved(client, uri: str, text: str, action: lsp.CodeAction) -> str:
    """The text after the action, which must come without its edit and get it on resolve."""
    assert action.edit is None and action.data["refactor"]
    full = await client.code_action_resolve_async(action)
    return apply(text, full.edit.changes[uri])


def bindings(text: str, function: str) -> dict[str, str]:
    """name -> type of the parameters and lets of function, from a fresh analysis (which
    must find no problem anywhere)."""
    snap = analyze(text)
    assert snap.diagnostics == [], [d.message for d in snap.diagnostics]
    fn = snap.function_named(function)
    return {f.name: str(f.type) for f in snap.types
            if f.kind in ("param", "let") and fn.span.start <= f.span.start < fn.span.end}


def titled(actions: list[lsp.CodeAction], kind: str) -> list[lsp.CodeAction]:
    return [a for a in actions if getattr(a, "kind", None) == kind]


async def test_extract_an_expression_into_a_let(client):
    uri = open_doc(client, CHAIN, "rf_extract.kina")
    await published(client, uri, 1)
    (action,) = titled(await actions_at(client, uri, span_range(CHAIN, "x.exp()")), "refactor.extract")
    assert action.title == "Extract `x.exp()` into `let x_exp`"
    new = await resolved(client, uri, CHAIN, action)
    assert new == CHAIN.replace("  let y = x.exp()", "  let x_exp = x.exp() in\n  let y = x_exp")
    assert bindings(new, "f") == {**bindings(CHAIN, "f"), "x_exp": "Tensor[F32, [M, N], @host]"}
    # the final expression: the let goes right before it; a second extraction picks another name
    (action,) = titled(await actions_at(client, uri, span_range(CHAIN, "z - s")), "refactor.extract")
    assert action.title == "Extract `z - s` into `let diff`"
    assert (await resolved(client, uri, CHAIN, action)).endswith("  let diff = z - s in\n  diff\n}\n")


async def test_extract_is_refused_where_it_is_not_one_expression_or_would_not_check(client):
    uri = open_doc(client, HANDLED, "rf_extract_no.kina")
    await published(client, uri, 1)
    for needle in ("x.exp() in", "loss(e, s)", "e", "x * s in\n  a"):   # a let's value; a handle's call; a name; two lets
        found = titled(await actions_at(client, uri, span_range(HANDLED, needle)), "refactor.extract")
        assert found == [], needle
    # half an expression
    assert titled(await actions_at(client, uri, span_range(HANDLED, "exp() in", 3)), "refactor.extract") == []


async def test_inline_a_let_parenthesises_where_precedence_needs_it(client):
    uri = open_doc(client, SUM, "rf_inline.kina")
    await published(client, uri, 1)
    actions = await actions_at(client, uri, span_range(SUM, "s = a", 1))
    (action,) = titled(actions, "refactor.inline")
    assert action.title == "Inline `let s` (2 uses)"
    new = await resolved(client, uri, SUM, action)
    assert new == SUM.replace("  let s = a + b in\n", "").replace("s.exp()", "(a + b).exp()").replace(
        "s * c", "(a + b) * c")
    assert bindings(new, "f") == {k: v for k, v in bindings(SUM, "f").items() if k != "s"}
    # from a use of the name too
    assert titled(await actions_at(client, uri, span_range(SUM, "t\n", 1)), "refactor.inline")


async def test_inline_is_refused_under_handle_and_where_reverse_mode_would_reject_it(client):
    uri = open_doc(client, HANDLED, "rf_inline_no.kina")
    await published(client, uri, 1)
    # `e` is an argument of a handle
    assert titled(await actions_at(client, uri, span_range(HANDLED, "e = x", 1)), "refactor.inline") == []
    # inlining `a` would leave `loss` ending in an expression, not a variable (§8 rule 1):
    # the re-check has an ad-structure diagnostic, so nothing is offered
    assert titled(await actions_at(client, uri, span_range(HANDLED, "a = x", 1)), "refactor.inline") == []


async def test_split_a_method_chain_and_join_it_back(client):
    text = CHAIN.replace(" * s in   // keep this comment", " in")
    uri = open_doc(client, text, "rf_chain.kina")
    await published(client, uri, 1)
    (split,) = titled(await actions_at(client, uri, span_range(text, "reduce_keep", 0)), "refactor.rewrite")
    assert split.title == "Split the method chain into one let per link"
    new = await resolved(client, uri, text, split)
    assert "  let y_exp = x.exp() in\n  let y = y_exp.reduce_keep(op=sum, axis=1) in\n" in new
    assert bindings(new, "f") == {**bindings(text, "f"), "y_exp": "Tensor[F32, [M, N], @host]"}
    # and back: `y_exp` is used once, by the next link
    change(client, uri, 2, new)
    await published(client, uri, 2)
    (join,) = titled(await actions_at(client, uri, span_range(new, "y_exp = x", 1)), "refactor.rewrite")
    assert join.title == "Join `let y_exp` into the method chain of the next let"
    assert await resolved(client, uri, new, join) == text


async def test_join_is_refused_when_the_let_is_used_again(client):
    uri = open_doc(client, SUM, "rf_join_no.kina")
    await published(client, uri, 1)
    # `s` heads the next let's chain (`s.exp()`) but is used again in `s * c`
    assert titled(await actions_at(client, uri, span_range(SUM, "s = a", 1)), "refactor.rewrite") == []


async def test_shape_quick_fixes_broadcast_and_reshape_and_recheck(client):
    uri = open_doc(client, SHAPES, "rf_shape.kina")
    diags = {d.range.start.line: d for d in await published(client, uri, 1) if d.code == "shape"}
    bcast = diags[pos(SHAPES, "x + b").line]
    (fix,) = titled(await actions_at(client, uri, bcast.range, [bcast]), "quickfix")
    assert fix.title == "Broadcast `b` to [M, N]" and list(fix.diagnostics) == [bcast]
    new = await resolved(client, uri, SHAPES, fix)
    assert "  let y = x + b.broadcast([M, N]) in\n" in new
    assert not [d for d in analyze(new).diagnostics if d.span.start < new.index("fn g")]
    mm = diags[pos(SHAPES, "x @ w").line]
    (fix,) = titled(await actions_at(client, uri, mm.range, [mm], only=["quickfix"]), "quickfix")
    assert fix.title == "Reshape `w` to [3, 8]"
    new = await resolved(client, uri, SHAPES, fix)
    assert "  x @ w.reshape([3, 8])\n" in new
    g_text = (new.index("fn g"), new.index("fn h"))
    left = analyze(new).diagnostics
    assert len(left) == 2 and not [d for d in left if g_text[0] <= d.span.start < g_text[1]]   # f's and h's stay


async def test_a_shape_fix_that_would_not_recheck_is_refused(client):
    uri = open_doc(client, SHAPES, "rf_shape_no.kina")
    diags = await published(client, uri, 1)
    (mm,) = [d for d in diags if d.range.start.line == SHAPES[:SHAPES.rindex("x @ w")].count("\n")]
    # reshaping w to [3, 4] makes x @ w a [2, 4]: h returns [2, 2], so that fix is not offered
    assert titled(await actions_at(client, uri, mm.range, [mm]), "quickfix") == []


async def test_a_stale_resolve_has_no_edit_and_other_actions_stay(client):
    uri = open_doc(client, SUM, "rf_stale.kina")
    await published(client, uri, 1)
    actions = await actions_at(client, uri, span_range(SUM, "s = a", 1))
    (action,) = titled(actions, "refactor.inline")
    # the source actions are still commands
    assert {"Kina: Build & validate", "Kina: Show MLIR"} <= {a.title for a in actions}
    change(client, uri, 2, SUM.replace("s * c", "c * s"))
    await published(client, uri, 2)
    assert (await client.code_action_resolve_async(action)).edit is None


async def test_split_is_refused_in_a_function_that_does_not_check(client):
    text = CHAIN.replace("axis=1", "axis=5")      # an `attr` error: the links have no types to keep
    uri = open_doc(client, text, "rf_split_no.kina")
    assert [d.code for d in await published(client, uri, 1)] == ["attr"]
    assert titled(await actions_at(client, uri, span_range(text, "reduce_keep", 0)), "refactor.rewrite") == []


async def test_extract_keeps_the_files_line_breaks(client):
    text = SUM.replace("\n", "\r\n")
    uri = open_doc(client, text, "rf_crlf.kina")
    await published(client, uri, 1)
    (action,) = titled(await actions_at(client, uri, span_range(text, "s * c")), "refactor.extract")
    full = await client.code_action_resolve_async(action)
    (insert, _replace) = sorted(full.edit.changes[uri], key=lambda e: e.range.start.character)
    assert insert.new_text == "let prod = s * c in\r\n  "


IMPORTS = """\
import nn

fn f(x: Tensor[F32, [4, 3]], w: Tensor[F32, [3, 5]], b: Tensor[F32, [5]]) -> Tensor[F32, [4, 5]] {
  let y = nn.linear(x, w, b).exp() in
  y
}
"""


async def test_extract_a_call_of_an_imported_function(client):
    uri = open_doc(client, IMPORTS, "rf_imports.kina")
    assert await published(client, uri, 1) == []
    (action,) = titled(await actions_at(client, uri, span_range(IMPORTS, "nn.linear(x, w, b)")), "refactor.extract")
    assert action.title == "Extract `nn.linear(x, w, b)` into `let nn_linear`"
    new = await resolved(client, uri, IMPORTS, action)
    assert "  let nn_linear = nn.linear(x, w, b) in\n  let y = nn_linear.exp() in\n" in new
    assert bindings(new, "f")["nn_linear"] == "Tensor[F32, [4, 5], @host]"


async def test_a_client_that_cannot_resolve_gets_the_edits_in_the_list():
    """In process: the same candidates, checked, as a client without codeAction.resolveSupport sees them."""
    from compiler.core.diagnostics import Span
    from kina_lsp.convert import index_of
    from kina_lsp.documents import View
    from kina_lsp.features import refactor
    view = View(analyze(SUM), SUM, index_of(SUM))
    at = SUM.index("s * c")
    found = refactor.verified(view, refactor.candidates(view, Span(at, at + 5), [], ["refactor.extract"]))
    (action,) = [refactor.to_action(view, "file:///x.kina", *c, lazy=False) for c in found]
    assert apply(SUM, action.edit.changes["file:///x.kina"]).endswith("  let prod = s * c in\n  prod + t\n}\n")


async def test_inline_may_duplicate_a_random_draw(client):
    """A random op is a pure function of its key: two copies draw what the one let drew."""
    text = """\
fn f(key: Tensor[I64, [2]]) -> Tensor[F32, [2, 3]] {
  let u = random_uniform(key, shape=[2, 3]) in
  u + u
}
"""
    uri = open_doc(client, text, "rf_random.kina")
    assert await published(client, uri, 1) == []
    (action,) = titled(await actions_at(client, uri, span_range(text, "u = r", 1)), "refactor.inline")
    new = await resolved(client, uri, text, action)
    assert "  random_uniform(key, shape=[2, 3]) + random_uniform(key, shape=[2, 3])\n" in new
    assert bindings(new, "f") == {"key": "Tensor[I64, [2], @host]"}


async def test_the_recheck_of_a_seeded_analysis_equals_a_fresh_one():
    """refactor_check re-analyses an edited copy reusing the results of the text before
    (Analysis(seed=...)): it must find what a from-scratch analysis finds."""
    from compiler.analysis import Analysis
    from kina_lsp.features.refactor_check import reanalyse
    before = analyze(SHAPES)
    for edited in (SHAPES.replace("x + b", "x + b.broadcast([M, N])"), SHAPES.replace("[6, 4]", "[3, 8]"), SUM):
        seeded, fresh = reanalyse(before, edited), Analysis().update(edited)
        assert [(d.code, d.message, d.span) for d in seeded.diagnostics] == \
            [(d.code, d.message, d.span) for d in fresh.diagnostics]
        assert [(f.span, str(f.type)) for f in seeded.types] == [(f.span, str(f.type)) for f in fresh.types]
