"""Every request gets exactly one answer (protocol.KinaProtocol keeps a ledger of the
requests it has not answered yet):

- a request still being worked on when the session ends (`exit`, with or without
  `shutdown`, or the end of input) gets ServerCancelled with a message.  A
  workspace/executeCommand (pygls runs it as a generator) used to get nothing: the
  loop's end cancelled the command's task, and pygls' callback let the CancelledError
  through without answering;
- a request whose text the client edited while the server waited for its analysis
  gets ContentModified (it used to get `null`, "nothing here", about a text the
  client no longer has);
- a second request under an id still in use is refused (-32600), and the first one
  is still answered once.

A server of its own per test (randomsession.Client): these end the session."""
from __future__ import annotations

import asyncio

import pytest
import randomsession as rs
from conftest import MODULE_LOOP

pytestmark = MODULE_LOOP

SERVER_CANCELLED, CONTENT_MODIFIED, INVALID_REQUEST = -32802, -32801, -32600


def _error(client: rs.Client, msg_id: object) -> dict | None:
    (answer,) = client.answers[msg_id]
    return answer.get("error")


async def _ended(client: rs.Client, how: str) -> int:
    """End the session as `how` says, without waiting for the open requests."""
    if how == "shutdown":
        client.send({"id": "shutdown", "method": "shutdown"})
    if how in ("exit", "shutdown"):
        client.write({"method": "exit"})
    assert client.proc.stdin is not None
    client.proc.stdin.close()
    code = await asyncio.wait_for(client.proc.wait(), 60)
    await asyncio.wait_for(client.reader, 10)          # every answer read
    return code


@pytest.mark.parametrize("how", ["exit", "shutdown", "end of input"])
async def test_requests_open_when_the_session_ends_are_answered(how):
    client = await rs.Client.start()
    session = rs.Session("file:///tmp/kina-lsp-test/ending.kina", 1, rs.Scale(base_functions=200))
    client.send(session.open())
    # a command (a generator in pygls), a custom request and requests waiting on an analysis
    client.send({"id": "validate", "method": "workspace/executeCommand",
                 "params": {"command": "kina.buildAndValidate", "arguments": [session.uri]}})
    client.send({"id": "mlir", "method": "kina/mlir", "params": {"textDocument": {"uri": session.uri}}})
    for method in ["textDocument/definition", "textDocument/references", "textDocument/hover"]:
        client.send(session.edit())
        client.send(session.request(method))
    await asyncio.sleep(0.3)
    await _ended(client, how)
    assert rs.check_answers(client.sent, client.answers) == []
    # the command's work was under way: it was cancelled, with a message that says so
    err = _error(client, "validate")
    assert err is not None and err["code"] in (SERVER_CANCELLED, -32800) and err["message"]


def _change(client: rs.Client, session: rs.Session, start: int, end: int, text: str) -> None:
    session.version += 1
    client.send({"method": "textDocument/didChange", "params": {
        "textDocument": {"uri": session.uri, "version": session.version},
        "contentChanges": [session.model.edit(start, end, text)]}})


async def test_a_request_on_a_text_edited_while_it_waited_gets_content_modified():
    client = await rs.Client.start()
    try:
        session = rs.Session("file:///tmp/kina-lsp-test/modified.kina", 2, rs.Scale(base_functions=400))
        client.send(session.open())
        await client.call("textDocument/foldingRange", {"textDocument": {"uri": session.uri}}, "opened")
        # a whole new text keeps the analysis busy for a while (a completion answers after
        # its push has been scheduled) ...
        _change(client, session, 0, len(session.model.text), rs.make_source(400).replace("layer", "block"))
        await client.call("textDocument/completion", session.request("textDocument/completion")["params"],
                          "barrier1")
        # ... the definition asks about the next version (the completion after it answers
        # once the definition is waiting: completion never waits for an analysis, while a
        # hover in a function the edit changed now waits for it, issue 31), which the
        # client edits again before the analysis gets to it
        _change(client, session, 0, 0, " ")
        definition = session.request("textDocument/definition")
        client.send(definition)
        await client.call("textDocument/completion", session.request("textDocument/completion")["params"],
                          "barrier2")
        _change(client, session, 0, 0, " ")
        await client.wait_answers(list(client.sent), 60)
        assert rs.check_answers(client.sent, client.answers) == []
        err = _error(client, definition["id"])
        assert err is not None and err["code"] == CONTENT_MODIFIED and "changed" in err["message"]
    finally:
        await client.stop()


async def test_a_second_request_under_an_id_in_use_is_refused():
    client = await rs.Client.start()
    try:
        session = rs.Session("file:///tmp/kina-lsp-test/dup.kina", 3, rs.Scale(base_functions=150))
        client.send(session.open())
        refs = {"textDocument": {"uri": session.uri}, "position": {"line": 1, "character": 7},
                "context": {"includeDeclaration": True}}
        client.send({"id": 7, "method": "textDocument/references", "params": refs})   # waits for the analysis
        client.write({"id": 7, "method": "textDocument/hover", "params": {
            "textDocument": {"uri": session.uri}, "position": {"line": 1, "character": 7}}})
        for _ in range(600):   # both answers (the refusal comes at once, the references later)
            if len(client.answers.get(7, [])) >= 2:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.3)          # (and no third)
        answers = client.answers[7]
        assert len(answers) == 2
        refused = [a for a in answers if "error" in a]
        assert len(refused) == 1 and refused[0]["error"]["code"] == INVALID_REQUEST
        assert "already in use" in refused[0]["error"]["message"]
        assert [a for a in answers if "result" in a][0]["result"]     # the references, once
    finally:
        await client.stop()
