"""Size-generic functions in the editor (issue 24: "a feature the editor does not
understand is half done"), through a real server process: hover of a generic call
(its instantiation and the signature at those sizes) and of a generic function,
inlay hints of symbolic shapes, signature help and completion of size parameters,
definition / references / rename of sizes, semantic tokens, document symbols and
the diagnostics of a generic body that nothing calls.  Workspace symbols and code
lenses are in test_lsp_workspace.py (they need its workspace folder)."""
from __future__ import annotations

import re

import pytest
from conftest import MODULE_LOOP, doc_id, open_doc, pos, published
from lsprotocol import types as lsp

from compiler.analysis import analyze
from kina_lsp.features.semantic import TOKEN_MODIFIERS, TOKEN_TYPES

GENERIC = """fn linear[M, K, N](x: Tensor[F32, [M, K]], w: Tensor[F32, [K, N]]) -> Tensor[F32, [M, N]] {
  let y = x @ w in
  let flat = y.reshape([M * N]) in
  let scaled = flat * (1.0 / (M * K)) in
  scaled.reshape([M, N])
}

fn window[B, T](x: Tensor[F32, [B, T + 1]]) -> Tensor[F32, [B * T]] {
  let s = x.slice(axis=1, start=0, stop=T) in
  s.reshape([B * T])
}

fn main() -> Tensor[F32, [8, 16]] {
  let a = Tensor[F32, [8, 4]] { 1.0 } in
  let r = linear[8, 4, 16](a, Tensor[F32, [4, 16]] { 0.5 }) in
  let q = linear(a, Tensor[F32, [4, 16]] { 0.25 }) in
  let v = window(Tensor[F32, [2, 5]] { 1.0 }) in
  r + q
}
"""

pytestmark = MODULE_LOOP


async def test_the_program_checks_clean():
    """The tests below read a program without errors (a guard: the features of a broken
    program are tested elsewhere)."""
    assert analyze(GENERIC).diagnostics == []


async def opened(client, name: str, text: str = GENERIC) -> str:
    uri = open_doc(client, text, name)
    await published(client, uri, 1)
    return uri


async def hover_text(client, uri, position) -> str:
    h = await client.text_document_hover_async(lsp.HoverParams(text_document=doc_id(uri), position=position))
    return "" if h is None else h.contents.value


async def test_hover_of_a_generic_call_shows_its_instantiation(client):
    uri = await opened(client, "gen_hover.kina")
    at_8_4_16 = ("fn linear[M=8, K=4, N=16](x: Tensor[F32, [8, 4], @host], w: Tensor[F32, [4, 16], @host]) "
                 "-> Tensor[F32, [8, 16], @host]")
    generic = ("fn linear[M, K, N](x: Tensor[F32, [M, K], @host], w: Tensor[F32, [K, N], @host]) "
               "-> Tensor[F32, [M, N], @host]")
    written = await hover_text(client, uri, pos(GENERIC, "linear[8", 1))
    inferred = await hover_text(client, uri, pos(GENERIC, "linear(a", 1))
    for md in (written, inferred):
        assert at_8_4_16 in md and generic in md, md
        assert md.index(at_8_4_16) < md.index(generic)        # the instantiation first
    window = await hover_text(client, uri, pos(GENERIC, "window(Tensor", 1))
    assert "fn window[B=2, T=4](x: Tensor[F32, [2, 5], @host]) -> Tensor[F32, [8], @host]" in window
    # the definition shows the generic signature with its size parameters
    md = await hover_text(client, uri, pos(GENERIC, "fn linear", 4))
    assert generic in md and "M=" not in md
    assert "fn window[B, T](x: Tensor[F32, [B, T + 1], @host]) -> Tensor[F32, [B * T], @host]" in \
        await hover_text(client, uri, pos(GENERIC, "fn window", 4))


async def test_hover_of_a_size_parameter(client):
    uri = await opened(client, "gen_hover_size.kina")
    for needle, delta in (("[M, K, N]", 4), ("[M * N]", 5), ("(M * K)", 5), ("stop=T", 5), ("[B * T]]", 1)):
        md = await hover_text(client, uri, pos(GENERIC, needle, delta))
        name = GENERIC[GENERIC.index(needle) + delta]
        assert md.startswith(f"size parameter `{name}` of `"), (needle, md)
    assert "size parameter `K` of `linear[M, K, N]`" in await hover_text(client, uri, pos(GENERIC, "(M * K)", 5))
    assert "size parameter `T` of `window[B, T]`" in await hover_text(client, uri, pos(GENERIC, "stop=T", 5))


async def test_inlay_hints_in_a_generic_body_show_symbolic_shapes(client):
    uri = await opened(client, "gen_inlay.kina")
    end = lsp.Position(line=GENERIC.count("\n") + 1, character=0)
    hints = await client.text_document_inlay_hint_async(lsp.InlayHintParams(
        text_document=doc_id(uri), range=lsp.Range(start=lsp.Position(line=0, character=0), end=end)))
    by_pos = {(h.position.line, h.position.character): h for h in hints}

    def hint(needle):
        p = pos(GENERIC, needle, len(needle))
        return by_pos[(p.line, p.character)]
    resolved = await client.inlay_hint_resolve_async(hint("let y"))   # tooltips are lazy
    assert hint("let y").label == ": F32[M, N]" and resolved.tooltip == "Tensor[F32, [M, N], @host]"
    assert hint("let flat").label == ": F32[M*N]" and hint("let scaled").label == ": F32[M*N]"
    p = pos(GENERIC, "let s =", len("let s"))
    assert by_pos[(p.line, p.character)].label == ": F32[B, T]"
    assert hint("let r").label == ": F32[8, 16]" and hint("let v").label == ": F32[8]"


async def test_signature_help_shows_size_parameters(client):
    uri = await opened(client, "gen_sig.kina")

    async def help_at(needle, delta):
        h = await client.text_document_signature_help_async(lsp.SignatureHelpParams(
            text_document=doc_id(uri), position=pos(GENERIC, needle, delta)))
        sig = h.signatures[0]
        labels = [sig.label[a:b] for a, b in (p.label for p in sig.parameters)]
        return sig.label, labels, labels[h.active_parameter]
    label, params, active = await help_at("linear[8, 4", len("linear[8, "))
    assert label.startswith("linear[M, K, N](x: Tensor[F32, [M, K], @host], w: ")
    assert params == ["M", "K", "N", "x: Tensor[F32, [M, K], @host]", "w: Tensor[F32, [K, N], @host]"]
    assert active == "K"
    assert (await help_at("linear(a, ", len("linear(a, ")))[2] == "w: Tensor[F32, [K, N], @host]"
    assert (await help_at("16](a,", len("16](")))[2] == "x: Tensor[F32, [M, K], @host]"   # after written sizes


async def completion_labels(client, uri, text, needle, delta) -> dict[str, lsp.CompletionItem]:
    res = await client.text_document_completion_async(lsp.CompletionParams(
        text_document=doc_id(uri), position=pos(text, needle, delta)))
    items = res.items if isinstance(res, lsp.CompletionList) else res
    return {i.label: i for i in items}


async def test_completion_offers_sizes_where_sizes_are_written(client):
    uri = await opened(client, "gen_complete.kina")
    for needle, delta in (("[B, T + 1]", 1), ("[B, T + 1]", 4), ("stop=T", 5), ("[B * T])\n", 1)):
        items = await completion_labels(client, uri, GENERIC, needle, delta)
        assert set(items) == {"B", "T"}, (needle, set(items))
        assert items["T"].kind == lsp.CompletionItemKind.TypeParameter
    assert set(await completion_labels(client, uri, GENERIC, "[M * N]", 1)) == {"M", "K", "N"}
    # in an expression a size is a bare number: offered with the other names
    names = await completion_labels(client, uri, GENERIC, "(M * K)", 1)
    assert {"M", "K", "N", "x", "w", "y", "flat", "linear", "exp"} <= set(names)
    # a function without sizes offers none, and the other functions' sizes are never offered
    names = await completion_labels(client, uri, GENERIC, "r + q", 0)
    assert {"a", "r", "q"} <= set(names) and not {"M", "K", "N", "B", "T"} & set(names)
    # where the sizes are declared, nothing is offered (a new name is being written)
    text = GENERIC.replace("fn window[B, T]", "fn window[B, ")
    uri2 = open_doc(client, text, "gen_complete_decl.kina")
    assert await completion_labels(client, uri2, text, "fn window[B, ", len("fn window[B, ")) == {}


async def test_definition_and_references_of_a_size_parameter(client):
    uri = await opened(client, "gen_nav.kina")
    decl_t = pos(GENERIC, "window[B, T]", len("window[B, "))
    for needle, delta in (("T + 1", 0), ("stop=T", 5), ("B * T])\n", 4)):
        loc = await client.text_document_definition_async(lsp.DefinitionParams(
            text_document=doc_id(uri), position=pos(GENERIC, needle, delta)))
        assert loc.range.start == decl_t, needle
    refs = await client.text_document_references_async(lsp.ReferenceParams(
        text_document=doc_id(uri), position=pos(GENERIC, "(M * K)", 5),
        context=lsp.ReferenceContext(include_declaration=True)))
    lines = GENERIC.splitlines()
    assert all(lines[r.range.start.line][r.range.start.character] == "K" for r in refs)
    linear = GENERIC[:GENERIC.index("fn window")]
    assert len(refs) == len(re.findall(r"\bK\b", linear))     # [M, K, N], [M, K], [K, N], (M * K); none outside linear
    # highlight: the declaration (Write) and every use in its own function only
    high = await client.text_document_document_highlight_async(lsp.DocumentHighlightParams(
        text_document=doc_id(uri), position=decl_t))
    assert len(high) == len(re.findall(r"\bT\b", GENERIC[GENERIC.index("fn window"):GENERIC.index("fn main")]))
    assert [h.kind for h in high].count(lsp.DocumentHighlightKind.Write) == 1


async def test_rename_a_size_parameter_and_its_conflicts(client):
    uri = await opened(client, "gen_rename.kina")
    edit = await client.text_document_rename_async(lsp.RenameParams(
        text_document=doc_id(uri), position=pos(GENERIC, "stop=T", 5), new_name="L"))
    lines = GENERIC.split("\n")
    for e in sorted(edit.changes[uri], key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        line = lines[e.range.start.line]
        assert line[e.range.start.character:e.range.end.character] == "T"
        lines[e.range.start.line] = line[:e.range.start.character] + e.new_text + line[e.range.end.character:]
    renamed = "\n".join(lines)
    window = renamed[renamed.index("fn window"):renamed.index("fn main")]
    assert window.startswith("fn window[B, L](x: Tensor[F32, [B, L + 1]]) -> Tensor[F32, [B * L]] {")
    assert "stop=L" in window and not re.search(r"\bT\b", window)
    assert analyze(renamed).diagnostics == []          # the renamed program still checks clean
    with pytest.raises(Exception, match="`x` is already a parameter of `window`"):
        await client.text_document_rename_async(lsp.RenameParams(
            text_document=doc_id(uri), position=pos(GENERIC, "stop=T", 5), new_name="x"))
    with pytest.raises(Exception, match="`B` is already a size parameter of `window`"):
        await client.text_document_rename_async(lsp.RenameParams(
            text_document=doc_id(uri), position=pos(GENERIC, "let s =", 4), new_name="B"))


async def test_semantic_tokens_mark_size_parameters(client):
    uri = await opened(client, "gen_tokens.kina")
    res = await client.text_document_semantic_tokens_full_async(lsp.SemanticTokensParams(text_document=doc_id(uri)))
    assert "typeParameter" in TOKEN_TYPES
    lines, line, col, found = GENERIC.splitlines(), 0, 0, {}
    for i in range(0, len(res.data), 5):
        dl, dc, n, kind, mods = res.data[i:i + 5]
        line, col = line + dl, (col + dc if dl == 0 else dc)
        found[(line, col)] = (lines[line][col:col + n], TOKEN_TYPES[kind],
                              [m for j, m in enumerate(TOKEN_MODIFIERS) if mods >> j & 1])

    def at(needle, delta=0):
        p = pos(GENERIC, needle, delta)
        return found[(p.line, p.character)]
    assert at("[M, K, N]", 4) == ("K", "typeParameter", ["declaration"])
    for needle, delta in (("[M * N]", 1), ("(M * K)", 5), ("T + 1", 0), ("stop=T", 5), ("[B * T])\n", 1)):
        assert at(needle, delta)[1:] == ("typeParameter", []), needle
    assert at("linear[8")[:2] == ("linear", "function")          # a call with written sizes
    assert at("fn window", 3)[1:] == ("function", ["declaration"])


async def test_document_symbols_name_generic_functions_with_their_sizes(client):
    uri = await opened(client, "gen_symbols.kina")
    syms = await client.text_document_document_symbol_async(lsp.DocumentSymbolParams(text_document=doc_id(uri)))
    assert [s.name for s in syms] == ["linear[M, K, N]", "window[B, T]", "main"]
    assert syms[0].detail.startswith("fn linear[M, K, N](x: Tensor[F32, [M, K], @host]")
    kids = [(c.name, c.kind) for c in syms[0].children]
    assert kids[:4] == [("M", lsp.SymbolKind.TypeParameter), ("K", lsp.SymbolKind.TypeParameter),
                        ("N", lsp.SymbolKind.TypeParameter), ("x", lsp.SymbolKind.Variable)]
    assert syms[0].selection_range.start == pos(GENERIC, "linear", 0)


async def test_diagnostics_of_a_generic_body_with_no_call(client):
    """The generic check runs at the definition: an error that holds for every size is
    reported there, with no call of the function anywhere."""
    text = "fn bad[M, N](x: Tensor[F32, [M, N]], y: Tensor[F32, [N, M]]) -> Tensor[F32, [M, N]] { x + y }\n"
    uri = open_doc(client, text, "gen_bad.kina")
    diags = await published(client, uri, 1)
    (d,) = diags
    assert d.code == "shape" and d.range == lsp.Range(start=pos(text, "+ y", 2), end=pos(text, "+ y", 3))
    assert "dimension 0 is M vs N" in d.message


async def test_a_word_attribute_is_a_size_only_where_the_op_takes_an_integer():
    """As the checker reads it (check/expr.py _size_attrs): `stop=T` names the size, an
    enum word that happens to equal a size name (`op=sum`) does not."""
    text = ("fn f[sum, T](x: Tensor[F32, [sum, T]]) -> Tensor[F32, [sum, 1]] {\n"
            "  x.slice(axis=1, start=0, stop=T).reduce_keep(op=sum, axis=1)\n}\n")
    snap = analyze(text)
    decl_t, decl_sum = text.index("T]("), text.index("sum,")
    assert snap.definition(text.index("stop=T") + 5).start == decl_t
    assert snap.definition(text.index("op=sum") + 3) is None
    assert [r.start for r in snap.references(decl_sum)] == [decl_sum, text.index("[sum, T]]") + 1,
                                                            text.index("[sum, 1]") + 1]


HEADS = """fn heads[B, H, DH](x: Tensor[F32, [B, H * DH]]) -> Tensor[F32, [B, H, DH]] {
  x.reshape([B, H, DH])
}
"""


async def test_hover_of_a_generic_function_says_how_its_dynamic_export_is_called(client):
    """Built without --size, a generic function is one dynamic export (issue 25): the hover
    says which sizes the runtime reads from the shapes and which are keywords."""
    uri = await opened(client, "gen_dynamic.kina")
    text = await hover_text(client, uri, pos(GENERIC, "window["))
    assert "one compiled function for every size" in text
    assert "the runtime reads B, T from the arrays' shapes: `window(...)`" in text
    uri = await opened(client, "gen_heads.kina", HEADS)
    text = await hover_text(client, uri, pos(HEADS, "heads["))
    assert "the runtime reads B, DH from the arrays' shapes; H (in no shape alone) as keyword: " \
           "`heads(..., H=...)`" in text
