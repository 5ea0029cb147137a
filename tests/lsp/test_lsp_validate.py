"""Build & validate through the server: $/progress begin/report/end, the result as
window/showMessage and as `validate` diagnostics; a failing (trapping) program
does not take the server down."""
from __future__ import annotations

from conftest import MODULE_LOOP, change, doc_id, open_doc, open_example, pos, published
from lsprotocol import types as lsp

TRAP = """fn embed(emb: Tensor[F32, [4, 2]], ids: Tensor[I64, [2]]) -> Tensor[F32, [2, 2]] {
  gather(emb, ids)
}

fn main() -> Tensor[F32, [2, 2]] {
  let emb = Tensor[F32, [4, 2]] { 1.0 } in
  let ids = Tensor[I64, [2]] { 1, 99 } in
  embed(emb, ids)
}
"""

pytestmark = MODULE_LOOP


async def validate(client, uri):
    """Run the command; returns its result and the progress values of its token."""
    before = set(client.progress_reports)
    result = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="kina.buildAndValidate", arguments=[uri]))
    (token,) = set(client.progress_reports) - before
    return result, client.progress_reports[token]


async def test_build_and_validate_reports_progress_and_passes(client):
    uri, _ = open_example(client, "ad_reduce_sum.kina")
    await published(client, uri, 1)
    result, reports = await validate(client, uri)
    assert result["ok"], result["message"]
    assert result["functions"] == {"row_sums": True, "step": True, "main": True, "row_sums (reverseMode)": True}
    assert isinstance(reports[0], lsp.WorkDoneProgressBegin) and reports[0].cancellable
    assert isinstance(reports[-1], lsp.WorkDoneProgressEnd) and "passed" in reports[-1].message
    steps = [r for r in reports if isinstance(r, lsp.WorkDoneProgressReport)]
    # "building..." first, then one report per validated function: k of n, in order
    assert steps[0].message == "building..." and steps[0].percentage == 0
    n = len(result["functions"])
    assert len(steps) == 1 + n and steps[-1].percentage == 100
    assert [s.message.rpartition(" ")[2] for s in steps[1:]] == [f"({k}/{n})" for k in range(1, n + 1)]
    assert all(s.message.startswith("validated ") for s in steps[1:])
    assert client.messages[-1].type == lsp.MessageType.Info and "passed" in client.messages[-1].message
    assert not [d for d in client.diagnostics[uri] if d.code == "validate"]


async def test_trap_in_main_is_reported_and_the_server_survives(client):
    uri = open_doc(client, TRAP, "trap.kina")
    assert await published(client, uri, 1) == []   # it type-checks: the index is only known at run time
    result, _ = await validate(client, uri)
    assert not result["ok"] and set(result["failing"]) == {"main"}
    # the compiled library itself stopped at its bounds check (cf.assert), which returns an error
    assert "library call raised KinaIndexError" in result["failing"]["main"]
    assert "gather index out of bounds" in result["failing"]["main"] and "index 99" in result["failing"]["main"]
    assert client.messages[-1].type == lsp.MessageType.Error and "main" in client.messages[-1].message
    (diag,) = [d for d in client.diagnostics[uri] if d.code == "validate"]
    assert diag.range.start == pos(TRAP, "main()")
    # the server still answers, and an edit clears the stale validation result
    hover = await client.text_document_hover_async(lsp.HoverParams(
        text_document=doc_id(uri), position=pos(TRAP, "let ids", 4)))
    assert "Tensor[I64, [2], @host]" in hover.contents.value
    change(client, uri, 2, TRAP.replace("99", "3"))
    assert await published(client, uri, 2) == []
    result, reports = await validate(client, uri)
    assert result["ok"] and isinstance(reports[-1], lsp.WorkDoneProgressEnd)


async def test_build_and_validate_can_be_cancelled(client):
    import asyncio
    uri, _ = open_example(client, "storylm0_train_step.kina")
    before = set(client.progress_reports)
    task = asyncio.ensure_future(client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="kina.buildAndValidate", arguments=[uri])))
    for _ in range(500):   # wait for the `begin` of the new progress token, then cancel it
        new = set(client.progress_reports) - before
        if new and client.progress_reports[next(iter(new))]:
            break
        await asyncio.sleep(0.01)
    (token,) = new
    client.window_work_done_progress_cancel(lsp.WorkDoneProgressCancelParams(token=token))
    result = await task
    assert result["cancelled"] and not result["ok"] and "cancelled" in result["message"]
    assert isinstance(client.progress_reports[token][-1], lsp.WorkDoneProgressEnd)


GENERIC = """fn scale[N, D](x: Tensor[F32, [N, D]], w: Tensor[F32, [D, D]]) -> Tensor[F32, [N, D]] {
  let y = x @ w in
  y * (1.0 / N)
}
"""


async def test_build_and_validate_checks_a_dynamic_function_at_several_sizes(client):
    """A generic function with nothing binding its sizes is one dynamic library (issue 25):
    validated at three size sets, which the message names."""
    uri = open_doc(client, GENERIC, "generic.kina")
    assert await published(client, uri, 1) == []
    result, _ = await validate(client, uri)
    assert result["ok"], result["message"]
    assert set(result["functions"]) >= {"scale[N=1, D=1]"} and len(result["functions"]) == 3
    assert "1 dynamic function(s), each at 3 sizes, e.g. scale at [N=1, D=1]" in result["message"]
