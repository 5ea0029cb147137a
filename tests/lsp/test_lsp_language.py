"""Language-level editor features, driven directly (no server process): hover of
normalised axes and of scalar constants, the op table's new ops in hover, completion
and signature help, the quick fixes (split a nested operand under reverseMode, cast an
operand whose dtype differs), and user functions that shadow ops.  The end-to-end server tests (test_lsp_features.py) cover the protocol."""
from __future__ import annotations

import pytest
from lsprotocol import types as lsp

from compiler.analysis import analyze
from kina_lsp.convert import LineIndex
from kina_lsp.diagnostics import to_lsp
from kina_lsp.documents import View
from kina_lsp.features import actions, hover

URI = "file:///t.kina"


def view_of(text: str) -> View:
    return View(analyze(text), text, LineIndex(text))


def hover_md(view: View, needle: str, delta: int = 0) -> str:
    h = hover.hover(view, view.text.index(needle) + delta)
    return h.contents.value if h else ""


def apply(text: str, edit: lsp.WorkspaceEdit) -> str:
    index = LineIndex(text)
    spans = sorted(((index.span(e.range), e.new_text) for e in edit.changes[URI]), key=lambda x: -x[0].start)
    for span, new in spans:
        text = text[:span.start] + new + text[span.end:]
    return text


def test_hover_shows_the_normalised_axis():
    text = ("fn f(x: Tensor[F32, [2, 3, 4]]) -> Tensor[F32, [2, 3, 1]] {\n"
            "  x.softmax(axis=-1).reduce_keep(op=sum, axis=-1)\n}\n")
    v = view_of(text)
    md = hover_md(v, "axis=-1")
    assert "attribute `axis` of **softmax**" in md and "here: `axis=2` of `Tensor[F32, [2, 3, 4], @host]`" in md
    h = hover.hover(v, text.rindex("axis=-1"))
    md = h.contents.value
    assert "**reduce_keep**" in md and "`axis=2`" in md


def test_hover_on_a_scalar_constant_shows_its_splat_type():
    v = view_of("fn f(x: Tensor[F16, [2, 3]]) -> Tensor[F16, [2, 3]] {\n  x * 0.5\n}\n")
    assert "Tensor[F16, [2, 3], @host]" in hover_md(v, "0.5")


AD = """\
fn f(x: Tensor[F32, [2, 3]]) -> Tensor[F32, [2, 3]] {
  let y = x * x.exp() in
  y
}

fn g(x: Tensor[F32, [2, 3]]) -> (Tensor[F32, [2, 3]], Tensor[F32, [2, 3]]) {
  handle f(x) with reverseMode
}
"""


def _quick_fixes(text: str):
    v = view_of(text)
    diags = [to_lsp(d, v.index, URI) for d in v.snapshot.diagnostics]
    params = lsp.CodeActionParams(text_document=lsp.TextDocumentIdentifier(uri=URI),
                                  range=diags[0].range if diags else lsp.Range(lsp.Position(0, 0), lsp.Position(0, 0)),
                                  context=lsp.CodeActionContext(diagnostics=diags))
    return diags, [a for a in actions.code_actions(v, URI, params) if a.kind == lsp.CodeActionKind.QuickFix]


def test_a_constant_under_reverse_mode_needs_no_let_of_its_own():
    """It receives no cotangent, so it may nest (docs/language.md §8 rule 2)."""
    assert analyze(AD.replace("x * x.exp()", "x * 1e-5")).diagnostics == []


def test_a_nested_operand_under_reverse_mode_gets_a_quick_fix_that_checks_clean():
    diags, fixes = _quick_fixes(AD)
    assert [d.code for d in diags] == ["ad-structure"]
    assert "`let t = x.exp(..) in ...`" in diags[0].message
    (fix,) = fixes
    assert fix.title == "Split the nested expression into its own let"
    fixed = apply(AD, fix.edit)
    assert "  let y_exp = x.exp() in\n  let y = x * y_exp in\n" in fixed
    assert analyze(fixed).diagnostics == []


def test_quick_fix_name_does_not_capture_an_existing_name():
    text = AD.replace("fn f(x:", "fn f(y_exp: Tensor[F32, [2, 3]], x:").replace("handle f(x)", "handle f(x, x)")
    text = text.replace("-> (Tensor[F32, [2, 3]], Tensor[F32, [2, 3]])",
                        "-> (Tensor[F32, [2, 3]], Tensor[F32, [2, 3]], Tensor[F32, [2, 3]])")
    diags, (fix,) = _quick_fixes(text)
    fixed = apply(text, fix.edit)
    assert "let y_exp2 = x.exp() in" in fixed and "x * y_exp2" in fixed
    assert analyze(fixed).diagnostics == []


def test_new_ops_have_hover_completion_and_signature_help_from_the_table():
    from compiler.ir.ops import SURFACE_OPS
    from kina_lsp.features import completion
    text = "fn f(x: Tensor[F32, [2, 3]]) -> Tensor[F32, [2, 3]] {\n  x.gelu(approximate=tanh).clamp(min=0.0)\n}\n"
    v = view_of(text)
    md = hover_md(v, "gelu")
    assert SURFACE_OPS["gelu"].rule in md and "approximate: none|tanh" in md and "Tensor[F32, [2, 3], @host]" in md
    methods = {i.label for i in completion.complete(text, text.index("gelu"), [])}
    assert {"gelu", "clamp", "maximum", "argmax", "cast", "tril", "pow"} <= methods
    assert "iota" not in methods                        # a builder has no receiver
    free = {i.label for i in completion.complete(text, text.index("x.gelu"), [])}
    assert "iota" in free
    enum = [i.label for i in completion.complete(text, text.index("tanh") + 2, [])]
    assert enum == ["none", "tanh"]
    help_ = completion.signature_help(text, text.index("min=") + 2, {})
    assert help_.signatures[0].label == "x.clamp(min=float, max=float)"
    iota = "fn f() -> Tensor[I64, [4]] {\n  iota(shape=[4], axis=0)\n}\n"
    help_ = completion.signature_help(iota, iota.index("axis"), {})
    assert help_.signatures[0].label == "iota(shape=ints, axis=int)" and help_.active_parameter == 1
    partial = "fn f(x: Tensor[F32, [2]]) -> Tensor[F16, [2]] {\n  x.cast(dtype="
    casts = [i.label for i in completion.complete(partial, len(partial), [])]
    assert "F16" in casts and "BF16" in casts and "F64" in casts


def test_a_bare_number_where_a_type_is_known_gets_the_literal_as_a_quick_fix():
    text = ("fn f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  x\n}\n"
            "fn g(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  f(0.5)\n}\n")
    diags, fixes = _quick_fixes(text)
    assert [d.code for d in diags] == ["literal"]
    (fix,) = fixes
    assert fix.title == "Write Tensor[F32, [2]] { 0.5 }"
    fixed = apply(text, fix.edit)
    assert "f(Tensor[F32, [2]] { 0.5 })" in fixed and analyze(fixed).diagnostics == []


CASTS = [  # (body, what the quick fix writes): the diagnostic's operand gets `.cast(..)`
    ("x + y", "x + y.cast(dtype=F16)"),
    ("x + y.exp()", "x + y.exp().cast(dtype=F16)"),
    ("x + (y - y)", "x + (y - y).cast(dtype=F16)"),
    ("x + -y", "x + (-y).cast(dtype=F16)"),
    ("x.maximum(y * y)", "x.maximum((y * y).cast(dtype=F16))"),
    ("where(x.gt(0.0), x, y)", "where(x.gt(0.0), x, y.cast(dtype=F16))"),
    ("concat(x, y, axis=0).slice(axis=0, start=0, stop=4)",
     "concat(x, y.cast(dtype=F16), axis=0).slice(axis=0, start=0, stop=4)"),
    ("(x.reshape([1, 4]) @ y.reshape([4, 1])).reshape([1]).broadcast([4])",
     "(x.reshape([1, 4]) @ y.reshape([4, 1]).cast(dtype=F16)).reshape([1]).broadcast([4])"),
]


@pytest.mark.parametrize("body, fixed_body", CASTS)
def test_operand_dtypes_that_differ_get_the_cast_as_a_note_and_a_quick_fix(body, fixed_body):
    text = f"fn f(x: Tensor[F16, [4]], y: Tensor[F32, [4]]) -> Tensor[F16, [4]] {{\n  {body}\n}}\n"
    (diag,) = analyze(text).diagnostics
    assert diag.code == "dtype" and diag.fix is not None and diag.fix.kind == "cast"
    assert "cast operand" in diag.notes[0].message and "`.cast(dtype=F16)`" in diag.notes[0].message
    _, (fix,) = _quick_fixes(text)
    assert fix.title == "Cast to F16"
    fixed = apply(text, fix.edit)
    assert fixed.splitlines()[1].strip() == fixed_body
    assert analyze(fixed).diagnostics == []


def test_the_cast_goes_to_the_operand_that_cast_can_convert():
    text = "fn f(i: Tensor[I64, [4]], y: Tensor[F32, [4]]) -> Tensor[F32, [4]] {\n  i * y\n}\n"
    (diag,) = analyze(text).diagnostics
    assert text[diag.span.start:diag.span.end] == "i" and diag.fix.text == "F32"   # no cast goes F32 -> I64
    _, (fix,) = _quick_fixes(text)
    assert analyze(apply(text, fix.edit)).diagnostics == []


LINEAR = ("fn f(x: Tensor[F32, [2, 3]], w: Tensor[F32, [3, 4]], b: Tensor[F32, [4]]) -> Tensor[F32, [2, 4]] {\n"
          "  let y = nn.linear(x, w, b) in\n  y\n}\n")


@pytest.mark.parametrize("head, fixed_head", [
    ("", "import nn\n\n"),                                                         # first line
    ("// A layer.\n//\n// More.\n\n", "// A layer.\n//\n// More.\n\nimport nn\n\n"),    # after the header
    ("// y = x @ w + b\n", "import nn\n\n// y = x @ w + b\n"),                  # a function's own comment
    ("// A layer.\n\nimport losses\n\n", "// A layer.\n\nimport losses\nimport nn\n\n"),   # after the imports
])
def test_a_standard_module_without_its_import_gets_the_import_as_a_quick_fix(head, fixed_head):
    text = head + LINEAR
    (diag,) = analyze(text).diagnostics
    assert diag.code == "unknown-name" and diag.fix is not None and (diag.fix.kind, diag.fix.text) == ("import", "nn")
    _, (fix,) = _quick_fixes(text)
    assert fix.title == "Add `import nn`"
    fixed = apply(text, fix.edit)
    assert fixed == fixed_head + LINEAR
    assert analyze(fixed).diagnostics == []


def test_every_fix_kind_has_a_quick_fix():
    from compiler.core.diagnostics import FIXES
    assert set(actions.QUICK_FIXES) == set(FIXES)


def test_quick_fixes_are_chosen_by_the_fix_in_data_not_by_the_message():
    """The message is for people: rewording it keeps the fix; a diagnostic without the
    Fix in its data (another tool's, or a client that drops data) gets none."""
    diags, _ = _quick_fixes(AD)
    v = view_of(AD)
    (diag,) = diags
    reworded = lsp.Diagnostic(range=diag.range, message="reworded", code=diag.code, data=diag.data)
    plain = lsp.Diagnostic(range=diag.range, message=diag.message, code=diag.code)
    params = lambda d: lsp.CodeActionParams(text_document=lsp.TextDocumentIdentifier(uri=URI), range=d.range,  # noqa: E731
                                            context=lsp.CodeActionContext(diagnostics=[d], only=["quickfix"]))
    (fix,) = actions.code_actions(v, URI, params(reworded))
    assert fix.title == "Split the nested expression into its own let"
    assert actions.code_actions(v, URI, params(plain)) == []
    assert diag.data == {"fix": "split-let", "text": None}


# ---- a user function named like an op shadows its free form (docs/language.md §4) --------
SHADOW = """\
fn gelu(x: Tensor[F32, [4]]) -> Tensor[F32, [4]] {
  x * 3.0
}

fn f(x: Tensor[F32, [4]]) -> Tensor[F32, [4]] {
  gelu(x) + x.gelu()
}
"""


def _token_kinds(text: str) -> dict[tuple[int, str], tuple[str, list[str]]]:
    """(start, word) -> (token type, modifiers) of the server's semantic tokens."""
    from kina_lsp.features import semantic_lex as semantic
    fns, params = semantic.declared(semantic.compact(text))
    return {(start, text[start:end]): (semantic.TOKEN_TYPES[kind],
                                       [m for i, m in enumerate(semantic.TOKEN_MODIFIERS) if mods >> i & 1])
            for start, end, kind, mods in semantic.token_rows(text, set(fns), set(params))}


def test_a_shadowing_function_is_colored_as_a_function_and_the_method_form_as_the_op():
    kinds = _token_kinds(SHADOW)
    assert kinds[(SHADOW.index("gelu(x) +"), "gelu")] == ("function", [])     # not defaultLibrary
    assert kinds[(SHADOW.index("gelu(x:"), "gelu")] == ("function", ["declaration"])
    assert kinds[(SHADOW.index("gelu()"), "gelu")] == ("method", ["defaultLibrary"])


def test_hover_and_definition_of_a_shadowing_call():
    from kina_lsp.features import navigation
    v = view_of(SHADOW)
    assert "fn gelu(x: Tensor[F32, [4]" in hover_md(v, "gelu(x) +")
    assert "**gelu** (built-in)" in hover_md(v, "gelu()")
    loc = navigation.definition(v, URI, SHADOW.index("gelu(x) +"))
    assert loc is not None and loc.range.start == lsp.Position(line=0, character=3)
    assert navigation.definition(v, URI, SHADOW.index("gelu()")) is None
    assert navigation.prepare_rename(v, SHADOW.index("gelu(x) +")) is not None
    assert navigation.prepare_rename(v, SHADOW.index("gelu()")) is None


def test_the_shadow_warning_reaches_the_editor_as_a_warning():
    v = view_of(SHADOW)
    (diag,) = [to_lsp(d, v.index, URI) for d in v.snapshot.diagnostics]
    assert diag.severity == lsp.DiagnosticSeverity.Warning and diag.code == "shadow"


def test_completion_and_signature_help_of_a_shadowing_call():
    from kina_lsp.features import completion
    at = SHADOW.index("gelu(x) +") + len("gelu(")
    help_ = completion.signature_help(SHADOW, at, {"gelu": ("gelu(x: Tensor[F32, [4]])", ["x"])})
    assert help_ is not None and help_.signatures[0].label == "gelu(x: Tensor[F32, [4]])"
    items = completion.complete(SHADOW, at, ["gelu", "f"])
    assert "approximate" not in {i.label for i in items}          # no attribute of the op
    assert [i.kind for i in items if i.label == "gelu"] == [lsp.CompletionItemKind.Function]
    method = SHADOW.index("gelu()") + len("gelu(")
    assert completion.signature_help(SHADOW, method, {"gelu": ("gelu(x)", ["x"])}).signatures[0].label != "gelu(x)"
