"""Requests rust-analyzer and pyright users expect (issue 31 part 4): declaration,
typeDefinition, parameter-name inlay hints and inlayHint/resolve."""
from __future__ import annotations

from conftest import MODULE_LOOP, doc_id, open_doc, pos, published
from lsprotocol import types as lsp

pytestmark = MODULE_LOOP

SRC = """fn attn[T](q: Tensor[F32, [T, 4]], k_t: Tensor[F32, [4, T]]) -> Tensor[F32, [T, T]] {
  q @ k_t
}

fn main() -> Tensor[F32, [2, 2]] {
  let a = Tensor[F32, [2, 4]] {1.0} in
  let k_t = Tensor[F32, [4, 2]] {1.0} in
  attn(a, k_t)
}
"""


def span_text(text: str, rng: lsp.Range) -> str:
    lines = text.split("\n")
    assert rng.start.line == rng.end.line
    return lines[rng.start.line][rng.start.character:rng.end.character]


async def test_declaration_and_type_definition(client):
    uri = open_doc(client, SRC, "requests_nav.kina")
    assert await published(client, uri, 1) == []
    decl = await client.text_document_declaration_async(lsp.DeclarationParams(
        text_document=doc_id(uri), position=pos(SRC, "attn(a", 5)))
    assert decl.range.start == pos(SRC, "a = Tensor") and span_text(SRC, decl.range) == "a"
    typ = await client.text_document_type_definition_async(lsp.TypeDefinitionParams(
        text_document=doc_id(uri), position=pos(SRC, "q @ k_t")))
    assert span_text(SRC, typ.range) == "Tensor[F32, [T, 4]]"
    size = await client.text_document_type_definition_async(lsp.TypeDefinitionParams(
        text_document=doc_id(uri), position=pos(SRC, "[T, T]", 1)))
    assert size.range.start == pos(SRC, "T](") and span_text(SRC, size.range) == "T"
    fn = await client.text_document_type_definition_async(lsp.TypeDefinitionParams(
        text_document=doc_id(uri), position=pos(SRC, "attn(a", 1)))
    assert span_text(SRC, fn.range) == "Tensor[F32, [T, T]]"
    let = await client.text_document_type_definition_async(lsp.TypeDefinitionParams(
        text_document=doc_id(uri), position=pos(SRC, "attn(a", 5)))
    assert let is None                       # a let's type is not written anywhere


async def test_parameter_name_hints_and_lazy_tooltips(client):
    uri = open_doc(client, SRC, "requests_hints.kina")
    assert await published(client, uri, 1) == []
    whole = lsp.Range(start=lsp.Position(line=0, character=0), end=lsp.Position(line=9, character=0))
    hints = await client.text_document_inlay_hint_async(lsp.InlayHintParams(text_document=doc_id(uri), range=whole))
    params = [(h.label, h.position) for h in hints if h.kind == lsp.InlayHintKind.Parameter]
    # `k_t` passed as `k_t` needs no hint; `a` passed as `q` gets one
    assert params == [("q:", pos(SRC, "a, k_t)"))]
    types = [h for h in hints if h.kind == lsp.InlayHintKind.Type]
    assert [h.label for h in types] == [": F32[2, 4]", ": F32[4, 2]"] and all(h.tooltip is None for h in types)
    resolved = await client.inlay_hint_resolve_async(types[0])
    assert resolved.tooltip == "Tensor[F32, [2, 4], @host]" and resolved.label == types[0].label


async def test_document_links_on_paths_and_urls_in_comments(client):
    text = ("// see docs/language.md and https://example.org/kina, not docs/missing.md\n"
            "fn f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  x // pyproject.toml\n}\n")
    uri = open_doc(client, text, "requests_links.kina")
    links = await client.text_document_document_link_async(lsp.DocumentLinkParams(text_document=doc_id(uri)))
    got = {span_text(text, link.range): link.target for link in links}
    assert set(got) == {"docs/language.md", "https://example.org/kina", "pyproject.toml"}
    assert got["docs/language.md"].endswith("/docs/language.md") and got["docs/language.md"].startswith("file://")
    assert got["pyproject.toml"].endswith("/pyproject.toml")
