"""A hostile client, at the byte level (tests/lsp/rawlsp.py): malformed frames, broken
envelopes, bad params, requests before `initialize` and after `shutdown`, exit codes.
Every request gets exactly one answer with the JSON-RPC / LSP error code, no
traceback, and the server keeps serving.  (Issue 12, findings F4-F6.)"""
from __future__ import annotations

import json
import os
import time

import pytest
from rawlsp import ROOT, RawServer, frame

URI = "file:///tmp/kina-hostile/a.kina"
GOOD = """fn f(x: Tensor[F32, [2, 3]]) -> Tensor[F32, [2, 3]] {
  let y = x.exp() in
  y
}
"""
HOVER_Y = {"textDocument": {"uri": URI}, "position": {"line": 2, "character": 2}}


@pytest.fixture(scope="module")
def server():
    """One server for the module: every test leaves it answering, which is the point."""
    with RawServer() as s:
        s.initialize()
        s.open(URI, GOOD)
        s.diagnostics(URI, 1)
        yield s


def hover_works(s: RawServer) -> None:
    """The server still answers a plain request correctly."""
    reply = s.request("textDocument/hover", HOVER_Y)
    assert "Tensor[F32, [2, 3], @host]" in reply["result"]["contents"]["value"]


def no_traceback(reply: dict) -> None:
    text = json.dumps(reply)
    assert "Traceback" not in text and "traceback" not in text and 'File "' not in text


# ---- F4: framing ----------------------------------------------------------------------------
@pytest.mark.parametrize("header", [
    b"content-length: %d\r\n\r\n",                      # lower case
    b"Content-Length:  %d\r\n\r\n",                     # two spaces after the colon
    b"CONTENT-LENGTH:%d\r\n\r\n",                       # upper case, no space
    b"Content-Length: %d\n\n",                          # bare \n line ends
    b"Content-Length: %d \t\r\n\r\n",                   # trailing blanks
    b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\nContent-Length: %d\r\n\r\n",
    b"\r\n\r\nContent-Length: %d\r\n\r\n",              # blank lines before the header
])
def test_header_spellings_are_read_and_later_frames_still_served(server, header):
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "textDocument/hover", "params": HOVER_Y}).encode()
    server.send(frame(body, header % len(body)))
    assert "Tensor[F32" in server.response(7)["result"]["contents"]["value"]
    hover_works(server)


def test_a_header_block_without_content_length_is_skipped(server):
    server.send(b"Content-Type: text/plain\r\n\r\n")
    server.send(b"Content-Length: banana\r\n\r\n")
    hover_works(server)


def test_junk_before_a_header_and_a_too_short_length(server):
    body = json.dumps({"jsonrpc": "2.0", "id": 8, "method": "textDocument/hover", "params": HOVER_Y}).encode()
    # a Content-Length 5 bytes too short: the body is cut (a parse error), and the 5 bytes
    # left over are junk in front of the next header, which must still be found
    server.send(frame(body, b"Content-Length: %d\r\n\r\n" % (len(body) - 5)))
    reply = server.response(None)
    assert reply["error"]["code"] == -32700
    server.send(b"garbage that is no header\r\n")
    hover_works(server)


def test_truncated_and_invalid_bodies_are_parse_errors(server):
    for body in [b'{"jsonrpc": "2.0", "id": 9, "method": "textDocument/hov', b"\xff\xfe{}", b"not json"]:
        server.send(frame(body))
        reply = server.response(None)
        assert reply["error"]["code"] == -32700 and reply["id"] is None
        no_traceback(reply)
    hover_works(server)


# ---- F5: envelopes and params -----------------------------------------------------------------
@pytest.mark.parametrize("msg, code, answered_id", [
    ({"id": 11, "method": "textDocument/hover", "params": HOVER_Y}, -32600, 11),             # no jsonrpc
    ({"jsonrpc": "1.0", "id": 12, "method": "textDocument/hover", "params": HOVER_Y}, -32600, 12),
    ({"jsonrpc": "2.0", "id": {"x": 1}, "method": "textDocument/hover", "params": HOVER_Y}, -32600, None),
    ({"jsonrpc": "2.0", "id": 13, "method": 5}, -32600, 13),
    ({"jsonrpc": "2.0", "id": 14}, -32600, 14),                                            # nothing to do
    ([{"jsonrpc": "2.0", "id": 15, "method": "shutdown"}], -32600, None),                  # a batch
    (42, -32600, None),
    ({"jsonrpc": "2.0", "id": 16, "method": "textDocument/hover", "params": None}, -32602, 16),
    ({"jsonrpc": "2.0", "id": 17, "method": "textDocument/hover", "params": "abc"}, -32602, 17),
    ({"jsonrpc": "2.0", "id": 18, "method": "textDocument/hover", "params": [1, 2]}, -32602, 18),
    ({"jsonrpc": "2.0", "id": 19, "method": "textDocument/hover",
      "params": {"textDocument": {"uri": URI}, "position": {"line": -1, "character": 0}}}, -32602, 19),
    ({"jsonrpc": "2.0", "id": 20, "method": "textDocument/rename",
      "params": {"textDocument": {"uri": URI}, "position": {"line": 1, "character": 6}}}, -32602, 20),
    ({"jsonrpc": "2.0", "id": 21, "method": "workspace/executeCommand",
      "params": {"command": "kina.buildAndValidate", "arguments": [5]}}, -32602, 21),
    ({"jsonrpc": "2.0", "id": 22, "method": "workspace/executeCommand",
      "params": {"command": "kina.nope", "arguments": []}}, -32602, 22),
    ({"jsonrpc": "2.0", "id": 23, "method": "kina/mlir", "params": {"textDocument": 3}}, -32602, 23),
    ({"jsonrpc": "2.0", "id": 24, "method": "no/suchMethod", "params": {}}, -32601, 24),
    ({"jsonrpc": "2.0", "id": 25, "method": "$/unknownRequest", "params": {}}, -32601, 25),
])
def test_bad_envelopes_and_params_get_the_right_error(server, msg, code, answered_id):
    server.send(frame(json.dumps(msg).encode()))
    reply = server.response(answered_id)
    assert reply["error"]["code"] == code, reply
    assert reply["error"]["message"]
    no_traceback(reply)
    hover_works(server)


def test_bad_notifications_are_dropped_and_the_server_goes_on(server):
    server.notify("textDocument/didChange", None)
    server.notify("textDocument/didChange", {"textDocument": {"uri": "file:///never/opened.kina", "version": 2},
                                             "contentChanges": [{"text": "x"}]})
    server.notify("textDocument/didOpen", "abc")
    server.notify("no/suchNotification", {})
    server.send(frame({"method": "textDocument/didClose", "params": {}}))      # no jsonrpc, no id
    hover_works(server)


def test_a_huge_line_and_nul_bytes_in_params(server):
    text = "fn g(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] { x }\n// " + "é\u2028\x00" * 150_000 + "\n"
    server.open("file:///tmp/kina-hostile/long.kina", text)
    assert server.diagnostics("file:///tmp/kina-hostile/long.kina", 1) == []
    reply = server.request("textDocument/hover", {"textDocument": {"uri": "file:///tmp/kina-hostile/long.kina"},
                                                  "position": {"line": 1, "character": 400_000}})
    assert reply["result"] is None
    hover_works(server)


# ---- F6: lifecycle ------------------------------------------------------------------------------
def test_requests_before_initialize_are_server_not_initialized():
    with RawServer() as s:
        for method, params in [("textDocument/hover", HOVER_Y), ("shutdown", None),
                               ("workspace/executeCommand", {"command": "kina.showMlir", "arguments": [URI]})]:
            reply = s.request(method, params)
            assert reply["error"]["code"] == -32002, reply
        s.open(URI, GOOD)                                  # a notification before initialize: dropped
        bad = s.request("initialize", {"processId": "me", "capabilities": 5})
        assert bad["error"]["code"] == -32602              # and the server still waits for a good one
        assert s.request("textDocument/hover", HOVER_Y)["error"]["code"] == -32002
        assert "capabilities" in s.initialize()["result"]
        assert s.request("initialize", {"capabilities": {}})["error"]["code"] == -32600   # only once
        reply = s.request("textDocument/hover", HOVER_Y)
        assert reply["result"] is None                     # the early didOpen was not applied
        s.open(URI, GOOD)
        s.diagnostics(URI, 1)
        hover_works(s)


def test_everything_after_shutdown_is_invalid_request_and_exit_is_zero():
    with RawServer() as s:
        s.initialize()
        assert s.request("shutdown")["result"] is None
        for method, params in [("textDocument/hover", HOVER_Y), ("shutdown", None), ("initialize", {}),
                               ("no/suchMethod", {})]:
            reply = s.request(method, params)
            assert reply["error"]["code"] == -32600 and "shutdown" in reply["error"]["message"], reply
        s.notify("exit")
        assert s.wait() == 0


def test_exit_without_shutdown_exits_one():
    with RawServer() as s:
        s.initialize()
        s.notify("exit")
        assert s.wait() == 1


def test_end_of_input_without_shutdown_exits_one_and_after_shutdown_zero():
    with RawServer() as s:
        s.initialize()
        assert s.close() == 1
    with RawServer() as s:
        s.initialize()
        s.request("shutdown")
        assert s.close() == 0


def test_a_flood_of_frames_is_answered_in_order(server):
    ids = list(range(100, 160))
    server.send(b"".join(frame({"jsonrpc": "2.0", "id": i, "method": "textDocument/hover", "params": HOVER_Y})
                         for i in ids))
    answered = [server.response(i)["id"] for i in ids]
    assert answered == ids


# ---- F7: $/cancelRequest stops a build ------------------------------------------------------------
def _children(pid: int) -> list[str]:
    """Command lines of the live descendants of pid (from /proc)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            kids = open(f"/proc/{p}/task/{p}/children").read().split()
        except OSError:
            continue
        for k in kids:
            try:
                out.append(open(f"/proc/{k}/cmdline", "rb").read().replace(b"\0", b" ").decode())
            except OSError:
                pass
            todo.append(int(k))
    return out


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="reads child processes from /proc")
def test_cancel_request_stops_build_and_validate():
    text = (ROOT / "tests" / "fixtures" / "storylm0_train_step.kina").read_text(encoding="utf-8")
    uri = "file:///tmp/kina-hostile/train_step.kina"
    with RawServer(args=["--log-level", "INFO"]) as s:
        s.initialize(capabilities={"window": {"workDoneProgress": True}})
        s.open(uri, text)
        s.diagnostics(uri, 1)
        s.send({"jsonrpc": "2.0", "id": "build-1", "method": "workspace/executeCommand",
                "params": {"command": "kina.buildAndValidate", "arguments": [uri]}})
        s.notification("$/progress", where=lambda p: p["value"]["kind"] == "begin")
        s.notify("$/cancelRequest", {"id": "build-1"})
        reply = s.response("build-1")
        assert reply["error"]["code"] == -32800
        s.notification("$/progress", where=lambda p: p["value"]["kind"] == "end" and "cancelled" in p["value"]["message"])
        deadline = time.monotonic() + 120          # the worker notices at its next check and stops
        while b"build & validate of" not in s.stderr:
            assert time.monotonic() < deadline, s.stderr.decode()[-2000:]
            time.sleep(0.1)
        assert b"stopped: cancelled" in s.stderr
        assert not [c for c in _children(s.proc.pid) if "compiler.oracle.child" in c]
        hover = s.request("textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": 0, "character": 0}})
        assert "error" not in hover
        messages = [m["params"]["message"] for m in s.seen if m.get("method") == "window/showMessage"]
        assert not [m for m in messages if "passed" in m]


# ---- the request budget ---------------------------------------------------------------------------
def test_a_request_during_a_long_analysis_is_answered_within_its_budget():
    """A function of 200,000 tokens takes seconds to parse after each edit; a hover in
    another function meanwhile is answered at once, not after the analysis: from the last
    analysis, since the function under the cursor did not change (issue 31)."""
    big = "fn big() -> Tensor[F32, [100000]] {\n  Tensor[F32, [100000]] { " + ", ".join(["1.0"] * 100_000) + " }\n}\n"
    text = GOOD + big
    uri = "file:///tmp/kina-hostile/big.kina"
    with RawServer() as s:
        s.initialize(options={"requests": {"budgetMs": 100}})
        s.open(uri, text)
        s.diagnostics(uri, 1, timeout=120)
        edited = text.replace("1.0, 1.0", "2.0, 1.0", 1)
        s.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                            "contentChanges": [{"text": edited}]})
        reply = s.request("textDocument/hover", {"textDocument": {"uri": uri},
                                                 "position": {"line": 2, "character": 2}})
        assert "Tensor[F32, [2, 3], @host]" in reply["result"]["contents"]["value"]
        published = [m for m in s.seen if m.get("method") == "textDocument/publishDiagnostics"
                     and m["params"].get("version") == 2]
        assert not published          # the answer came before the analysis it did not wait for
        s.diagnostics(uri, 2, timeout=120)
        hover_works_on(s, uri)        # once the analysis is done, requests get it


def hover_works_on(s: RawServer, uri: str) -> None:
    reply = s.request("textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": 2, "character": 2}})
    assert "Tensor[F32, [2, 3], @host]" in reply["result"]["contents"]["value"]
