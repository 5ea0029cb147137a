"""Pull diagnostics (textDocument/diagnostic, LSP 3.17) with a client that can pull:
the same diagnostics as the CLI, result ids that let the client skip unchanged
reports, no pushes at all, and Build & validate results announced with
workspace/diagnostic/refresh."""
from __future__ import annotations

import asyncio

import pytest_lsp
from conftest import MODULE_LOOP, SERVER, change, doc_id, init_params, make_client, open_doc
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient

from compiler.analysis import analyze

pytestmark = MODULE_LOOP

BROKEN = """fn f(a: Tensor[F32, [2, 3]], b: Tensor[F32, [3, 2]]) -> Tensor[F32, [2, 3]] {
  let c = a + b in
  c
}
"""


def pull_params(refresh: bool) -> lsp.InitializeParams:
    params = init_params(pull=True)
    params.capabilities.workspace.diagnostics = lsp.DiagnosticWorkspaceClientCapabilities(refresh_support=refresh)
    return params


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=SERVER, client_factory=make_client))
async def puller(lsp_client: LanguageClient):
    result = await lsp_client.initialize_session(pull_params(refresh=True))
    assert result.capabilities.diagnostic_provider.identifier == "kina"
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=SERVER, client_factory=make_client))
async def puller_without_refresh(lsp_client: LanguageClient):
    await lsp_client.initialize_session(pull_params(refresh=False))
    yield
    await lsp_client.shutdown_session()


async def pull(client, uri, previous=None):
    return await client.text_document_diagnostic_async(lsp.DocumentDiagnosticParams(
        text_document=doc_id(uri), previous_result_id=previous))


async def test_pull_reports_the_cli_diagnostics_and_result_ids(puller):
    client = puller
    uri = open_doc(client, BROKEN, "pull.kina")
    report = await pull(client, uri)
    assert report.kind == "full" and [d.code for d in report.items] == [d.code for d in analyze(BROKEN).diagnostics]
    assert report.items[0].code == "shape" and report.items[0].range.start.line == 1
    again = await pull(client, uri, report.result_id)
    assert again.kind == "unchanged" and again.result_id == report.result_id
    fixed = BROKEN.replace("a + b", "a + a")
    change(client, uri, 2, fixed)
    report2 = await pull(client, uri, report.result_id)
    assert report2.kind == "full" and not report2.items and report2.result_id != report.result_id
    await asyncio.sleep(0.2)
    assert client.published == []          # a pulling client is never pushed to


async def test_pull_of_a_document_that_is_not_open_is_empty(puller):
    report = await pull(puller, "file:///tmp/kina-lsp-test/never-opened.kina")
    assert report.kind == "full" and not report.items


# The literal goes through a call: the checker range-checks a literal that a gather reads
# itself (error[index]), so only the library's own bounds check sees this one.
TRAP = """fn embed(emb: Tensor[F32, [4, 2]], ids: Tensor[I64, [2]]) -> Tensor[F32, [2, 2]] {
  gather(emb, ids)
}

fn main() -> Tensor[F32, [2, 2]] {
  let emb = Tensor[F32, [4, 2]] { 1.0 } in
  let ids = Tensor[I64, [2]] { 1, 99 } in
  embed(emb, ids)
}
"""


async def test_validation_results_are_announced_with_a_refresh(puller):
    client, trap = puller, TRAP
    uri = open_doc(client, trap, "pull_trap.kina")
    assert not (await pull(client, uri)).items
    before = client.diagnostic_refresh_count
    result = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="kina.buildAndValidate", arguments=[uri]))
    assert not result["ok"]
    for _ in range(200):
        if client.diagnostic_refresh_count > before:
            break
        await asyncio.sleep(0.02)
    assert client.diagnostic_refresh_count > before
    (diag,) = (await pull(client, uri)).items
    assert diag.code == "validate" and diag.range.start.line == 4   # at `fn main`


async def test_without_refresh_validation_results_are_pushed_on_their_own(puller_without_refresh):
    client = puller_without_refresh
    uri = open_doc(client, TRAP, "pull_trap2.kina")
    assert not (await pull(client, uri)).items
    result = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="kina.buildAndValidate", arguments=[uri]))
    assert not result["ok"]
    (pushed,) = [p for p in client.published if p.uri == uri]
    assert [d.code for d in pushed.diagnostics] == ["validate"]
    assert not (await pull(client, uri)).items          # never in a pull as well
    change(client, uri, 2, TRAP.replace("99", "3"))      # an edit withdraws the pushed result
    for _ in range(200):
        if len([p for p in client.published if p.uri == uri]) == 2:
            break
        await asyncio.sleep(0.02)
    assert not [p for p in client.published if p.uri == uri][-1].diagnostics
