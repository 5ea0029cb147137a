"""Issue 11: an LLVM/MLIR abort during an -O2 build is a failed Build & validate with the
reason, and the language server lives on.  The server runs with KINA_OPT_LEVEL=2 and
KINA_BACKEND_FAULT=llvm, which makes the -O2 back end's worker process abort as LLVM does
(compiler/backend/worker.py)."""
from __future__ import annotations

import os

import pytest_lsp
from conftest import MODULE_LOOP, SERVER, doc_id, init_params, make_client, open_doc, pos, published
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient

SOURCE = """fn f(x: Tensor[F32, [4]]) -> Tensor[F32, [4]] {
  let y = x.exp() in
  y
}
"""

pytestmark = MODULE_LOOP
ENV = {**os.environ, "KINA_OPT_LEVEL": "2", "KINA_BACKEND_FAULT": "llvm"}


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=SERVER, client_factory=make_client,
                                                              server_env=ENV))
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(init_params())
    yield
    await lsp_client.shutdown_session()


async def test_a_back_end_abort_fails_the_build_and_the_server_answers(client):
    uri = open_doc(client, SOURCE, "abort.kina")
    assert await published(client, uri, 1) == []
    result = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="kina.buildAndValidate", arguments=[uri]))
    assert not result["ok"]
    assert "build failed" in result["message"] and "killed by signal 6" in result["message"]
    hover = await client.text_document_hover_async(lsp.HoverParams(
        text_document=doc_id(uri), position=pos(SOURCE, "let y", 4)))
    assert "Tensor[F32, [4], @host]" in hover.contents.value
