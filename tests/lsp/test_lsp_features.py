"""Hover, inlay hints, navigation, rename, symbols, completion, signature help and
code actions, through a real server process."""
from __future__ import annotations

import pytest
from conftest import MODULE_LOOP, change, doc_id, example_path, open_doc, open_example, pos, published
from lsprotocol import types as lsp

from kina_lsp.features.semantic import TOKEN_TYPES

FORWARD = "storylm0_forward.kina"

CHAIN = """fn f(w: Tensor[F32, [4, 4]]) -> Tensor[F32, [2, 8]] {
  let y = w.reshape([2, 8]).exp() in
  y
}

fn g(w: Tensor[F32, [4, 4]]) -> (Tensor[F32, [2, 8]], Tensor[F32, [4, 4]]) {
  let (y, g_w) = handle f(w) with reverseMode in
  (y, g_w)
}
"""

pytestmark = MODULE_LOOP


async def hover_text(client, uri, position) -> str | None:
    h = await client.text_document_hover_async(lsp.HoverParams(text_document=doc_id(uri), position=position))
    return None if h is None else h.contents.value


async def test_hover_let_shows_inferred_type(client):
    uri, text = open_example(client, FORWARD)
    assert "x: Tensor[F32, [1, 4, 4], @host]" in await hover_text(client, uri, pos(text, "let x =", 4))
    # a use of the name has the same type
    assert "Tensor[F32, [1, 4, 4], @host]" in await hover_text(client, uri, pos(text, "x + merged"))
    assert "Tensor[F32, [1, 2, 4, 2], @host]" in await hover_text(client, uri, pos(text, "let heads", 5))


async def test_hover_builtin_user_function_and_reverse_mode(client):
    uri, text = open_example(client, FORWARD)
    md = await hover_text(client, uri, pos(text, "softmax(axis=3)", 2))
    assert "x.softmax(axis=i) : T" in md and "max-subtracted" in md and "Tensor[F32, [1, 2, 4, 4], @host]" in md
    md = await hover_text(client, uri, pos(text, "attn(q, k_t", 1))
    assert "fn attn(q: Tensor[F32, [1, 2, 4, 2], @host]" in md and "-> Tensor[F32, [1, 2, 4, 2], @host]" in md

    uri2 = open_doc(client, CHAIN.replace("w.reshape([2, 8]).exp()", "w.reshape([2, 8])"), "hover_rm.kina")
    md = await hover_text(client, uri2, pos(CHAIN, "reverseMode", 2))
    assert "R: Tensor[F32, [2, 8], @host]" in md and "g_w: Tensor[F32, [4, 4], @host]" in md


async def test_hover_answers_nothing_on_whitespace_and_comments(client):
    uri, text = open_example(client, FORWARD)
    assert await hover_text(client, uri, lsp.Position(line=0, character=3)) is None
    assert await hover_text(client, uri, lsp.Position(line=400, character=0)) is None


async def test_inlay_hints_show_let_types(client):
    uri, text = open_example(client, FORWARD)
    end = lsp.Position(line=text.count("\n") + 1, character=0)
    hints = await client.text_document_inlay_hint_async(lsp.InlayHintParams(
        text_document=doc_id(uri), range=lsp.Range(start=lsp.Position(line=0, character=0), end=end)))
    by_pos = {(h.position.line, h.position.character): h for h in hints}
    x = by_pos[(pos(text, "let x =", 5).line, pos(text, "let x =", 5).character)]
    assert x.tooltip is None      # the client resolves tooltips (inlayHint/resolve): lazy
    x = await client.inlay_hint_resolve_async(x)
    assert x.label == ": F32[1, 4, 4]" and x.tooltip == "Tensor[F32, [1, 4, 4], @host]"
    assert x.kind == lsp.InlayHintKind.Type
    lets = text.count("let ")
    assert len([h for h in hints if h.kind == lsp.InlayHintKind.Type]) == lets


async def test_definition_and_references(client):
    uri, text = open_example(client, FORWARD)
    loc = await client.text_document_definition_async(lsp.DefinitionParams(
        text_document=doc_id(uri), position=pos(text, "x @ wq")))
    assert loc.range.start == pos(text, "let x =", 4)
    loc = await client.text_document_definition_async(lsp.DefinitionParams(
        text_document=doc_id(uri), position=pos(text, "attn(q, k_t")))
    assert loc.range.start == pos(text, "fn attn", 3)
    refs = await client.text_document_references_async(lsp.ReferenceParams(
        text_document=doc_id(uri), position=pos(text, "let x =", 4),
        context=lsp.ReferenceContext(include_declaration=True)))
    fwd = text.index("fn storylm0_forward")
    assert len(refs) == text[fwd:].count("x @ ") + text[fwd:].count("x + ") + 1
    assert all(text.splitlines()[r.range.start.line][r.range.start.character] == "x" for r in refs)


async def test_rename_let_and_function(client):
    uri, text = open_example(client, FORWARD)
    prep = await client.text_document_prepare_rename_async(lsp.PrepareRenameParams(
        text_document=doc_id(uri), position=pos(text, "let scores", 5)))
    assert prep.placeholder == "scores"
    assert await client.text_document_prepare_rename_async(lsp.PrepareRenameParams(
        text_document=doc_id(uri), position=pos(text, "softmax", 1))) is None
    edit = await client.text_document_rename_async(lsp.RenameParams(
        text_document=doc_id(uri), position=pos(text, "attn(q, k_t"), new_name="attention"))
    edits = edit.changes[uri]
    assert len(edits) == 2 and all(e.new_text == "attention" for e in edits)
    with pytest.raises(Exception, match="`softmax` is a built-in op"):
        await client.text_document_rename_async(lsp.RenameParams(
            text_document=doc_id(uri), position=pos(text, "attn(q, k_t"), new_name="softmax"))


async def test_document_symbols(client):
    uri, text = open_example(client, FORWARD)
    syms = await client.text_document_document_symbol_async(lsp.DocumentSymbolParams(text_document=doc_id(uri)))
    assert [s.name for s in syms][:2] == ["attn", "storylm0_forward"]
    assert syms[0].detail.startswith("fn attn(q: Tensor[F32, [1, 2, 4, 2], @host]")
    assert {"q", "scores", "probs"} <= {c.name for c in syms[0].children}


async def test_document_symbol_ranges_follow_edits(client):
    """Symbols are cached per function; moved functions (and a function that starts
    mid-line, after a non-ASCII comment) must still get exact ranges."""
    text = example_path(FORWARD).read_text(encoding="utf-8")
    uri = open_doc(client, text, "symbols_move.kina")

    async def check(text, version):
        await published(client, uri, version)
        syms = await client.text_document_document_symbol_async(lsp.DocumentSymbolParams(text_document=doc_id(uri)))
        fwd = next(s for s in syms if s.name == "storylm0_forward")
        assert fwd.selection_range.start == pos(text, "storylm0_forward(token_ids")
        x = next(c for c in fwd.children if c.name == "x")
        assert x.range == lsp.Range(start=pos(text, "let x", 4), end=pos(text, "let x", 5))

    await check(text, 1)
    text = "// é🙂\n\n" + text                  # every function moves down two lines
    change(client, uri, 2, text)
    await check(text, 2)
    assert "}\n\nfn storylm0_forward" in text
    text = text.replace("}\n\nfn storylm0_forward", "}  fn storylm0_forward", 1)   # now mid-line
    change(client, uri, 3, text)
    await check(text, 3)


async def complete(client, uri, text, needle, delta):
    res = await client.text_document_completion_async(lsp.CompletionParams(
        text_document=doc_id(uri), position=pos(text, needle, delta)))
    items = res.items if isinstance(res, lsp.CompletionList) else res
    return {i.label: i for i in items}


async def test_completion_contexts(client):
    text = """fn f(w: Tensor[F32, [4, 4]], ids: Tensor[I64, [2]]) -> Tensor[F32, [4, 1]] {
  let h = w.exp() in
  let s = h.reduce_keep(op=me, axis=1) in
  let t = h.
  s
}
fn k(a: Tensor[F
"""
    uri = open_doc(client, text, "complete.kina")
    methods = await complete(client, uri, text, "h.\n", 2)
    assert {"reduce_keep", "softmax", "reshape", "transpose"} <= set(methods)
    assert "add" not in methods and "x.softmax(axis=i)" in methods["softmax"].detail
    enum = await complete(client, uri, text, "op=me", 5)
    assert set(enum) == {"sum", "mean", "max", "min"}
    attrs = await complete(client, uri, text, "op=me, ", 7)
    assert "axis" in attrs and "op" not in attrs and "w" in attrs
    names = await complete(client, uri, text, "  s\n", 3)
    assert {"w", "ids", "h", "s", "f", "k", "gather", "let"} <= set(names)
    assert "t" not in names    # the cursor is still in `t`'s value (no `in` yet): t is not bound there
    dtypes = await complete(client, uri, text, "Tensor[F\n", 8)
    assert set(dtypes) == {"F16", "BF16", "F32", "F64", "F8E4M3", "F8E5M2", "I64", "Bool"}


async def test_signature_help_for_builtins(client):
    text = "fn f(w: Tensor[F32, [4, 4]]) -> Tensor[F32, [4, 1]] {\n  w.reduce_keep(op=sum, axis=1)\n}\n"
    uri = open_doc(client, text, "sig.kina")
    await published(client, uri, 1)
    help_ = await client.text_document_signature_help_async(lsp.SignatureHelpParams(
        text_document=doc_id(uri), position=pos(text, "axis=1", 5)))
    sig = help_.signatures[0]
    assert sig.label == "x.reduce_keep(op=sum|mean|max|min, axis=int)"
    assert sig.parameters[help_.active_parameter].label == "axis=int"


async def test_quick_fix_splits_a_method_chain(client):
    uri = open_doc(client, CHAIN, "chain.kina")
    diags = await published(client, uri, 1)
    (diag,) = [d for d in diags if d.code == "ad-structure"]
    assert diag.range.start == pos(CHAIN, "w.reshape")
    actions = await client.text_document_code_action_async(lsp.CodeActionParams(
        text_document=doc_id(uri), range=diag.range, context=lsp.CodeActionContext(diagnostics=[diag])))
    fix = next(a for a in actions if isinstance(a, lsp.CodeAction) and a.kind == lsp.CodeActionKind.QuickFix)
    assert fix.edit is None     # listed without its edit: the client resolves it
    fix = await client.code_action_resolve_async(fix)
    new = apply(CHAIN, fix.edit.changes[uri])
    assert "  let y_reshape = w.reshape([2, 8]) in\n  let y = y_reshape.exp() in\n" in new
    # the fixed text passes the reverseMode restrictions
    from compiler.analysis import analyze
    assert analyze(new).diagnostics == []
    titles = {a.title for a in actions}
    assert {"Kina: Build & validate", "Kina: Show MLIR"} <= titles
    # a client asking only for quick fixes (VS Code sends kinds as plain strings) gets the fix alone
    only = await client.text_document_code_action_async(lsp.CodeActionParams(
        text_document=doc_id(uri), range=diag.range,
        context=lsp.CodeActionContext(diagnostics=[diag], only=["quickfix"])))
    assert [a.title for a in only] == [fix.title]


def apply(text: str, edits: list[lsp.TextEdit]) -> str:
    lines = text.splitlines(keepends=True)

    def off(p):
        return sum(len(line) for line in lines[:p.line]) + p.character   # ASCII test text
    for e in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        text = text[:off(e.range.start)] + e.new_text + text[off(e.range.end):]
    return text


async def test_show_mlir_command_and_request(client):
    uri, _ = open_example(client, "ad_reduce_sum.kina")
    res = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="kina.showMlir", arguments=[uri]))
    assert res["ok"] and res["language"] == "mlir" and "func.func" in res["content"]
    res2 = await client.protocol.send_request_async("kina/mlir", {"textDocument": {"uri": uri}})
    assert res2.content == res["content"]
    bad = open_doc(client, CHAIN.replace("a", "a", 1).replace("[2, 8]]", "[2, 9]]", 1), "bad_mlir.kina")
    res = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="kina.showMlir", arguments=[bad]))
    assert not res["ok"] and "error[" in res["content"]


async def test_semantic_tokens_classify_ops_functions_and_dtypes(client):
    uri, text = open_example(client, FORWARD)
    res = await client.text_document_semantic_tokens_full_async(lsp.SemanticTokensParams(text_document=doc_id(uri)))
    legend = TOKEN_TYPES   # the legend the server announces in its capabilities
    lines, line, col, found = text.splitlines(), 0, 0, {}
    for i in range(0, len(res.data), 5):
        dl, dc, n, kind, _ = res.data[i:i + 5]
        line, col = line + dl, (col + dc if dl == 0 else dc)
        found.setdefault(lines[line][col:col + n], set()).add(legend[kind])
    assert found["softmax"] == {"method"} and found["gather"] == {"function"}
    assert found["attn"] == {"function"} and found["F32"] == {"type"} and "keyword" in found["let"]


async def test_a_byte_order_mark_at_the_start_is_no_syntax_error(client):
    """An editor may send U+FEFF at offset 0: no diagnostic, the features see the code
    after it, and whole-document formatting keeps it."""
    text = "\ufefffn  f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] { x + x }\n"
    uri = open_doc(client, text, "bom.kina")
    assert await published(client, uri, 1) == []
    assert await hover_text(client, uri, pos(text, "x + x")) is not None
    edits = await client.text_document_formatting_async(lsp.DocumentFormattingParams(
        text_document=doc_id(uri), options=lsp.FormattingOptions(tab_size=2, insert_spaces=True)))
    assert edits, "the document is not in the Kina style: formatting changes it"
    assert not any(e.new_text.startswith("\ufeff\ufeff") for e in edits)
    res = await client.text_document_semantic_tokens_full_async(lsp.SemanticTokensParams(text_document=doc_id(uri)))
    assert res is not None and list(res.data[:2]) == [0, 1]    # the first token (`fn`) is at column 1, after the mark
