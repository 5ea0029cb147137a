"""The examples that import the standard library (examples/*.kina with `import nn`, `losses`,
`optim`, `random`) open in the language server without a diagnostic, and a qualified call
of a std layer resolves: hover shows std's signature and doc, definition goes to
compiler/std.  One server for the module; builds nothing."""
from __future__ import annotations

import pytest
from conftest import EXAMPLES, MODULE_LOOP, ROOT, doc_id, open_example, pos, published
from lsprotocol import types as lsp

pytestmark = [MODULE_LOOP, pytest.mark.once]

STD_USERS = sorted(p.name for p in EXAMPLES.glob("*.kina") if "\nimport " in p.read_text(encoding="utf-8"))


async def test_the_std_users_are_the_adopting_examples():
    assert {"adamw_step.kina", "decoder_block.kina", "layers.kina", "mlp_classifier.kina",
            "storylm.kina"} <= set(STD_USERS)


@pytest.mark.parametrize("name", STD_USERS)
async def test_example_opens_without_diagnostics(client, name):
    uri, _ = open_example(client, name)
    diags = await published(client, uri, 1, timeout=30.0)
    assert [(d.range.start.line + 1, d.message) for d in diags] == []


async def test_hover_and_definition_of_a_std_layer(client):
    uri, text = open_example(client, "decoder_block.kina")
    await published(client, uri, 1, timeout=30.0)
    at = pos(text, "nn.layer_norm(xr", len("nn.layer"))
    hov = await client.text_document_hover_async(lsp.HoverParams(text_document=doc_id(uri), position=at))
    assert "fn layer_norm[M, D](x: Tensor[F32, [M, D]" in hov.contents.value
    assert "eps 1e-5" in hov.contents.value
    loc = await client.text_document_definition_async(lsp.DefinitionParams(text_document=doc_id(uri), position=at))
    std_nn = ROOT / "compiler" / "std" / "nn.kina"
    assert loc.uri == std_nn.as_uri()
    line = std_nn.read_text(encoding="utf-8").splitlines()[loc.range.start.line]
    assert line.startswith("fn layer_norm[")
