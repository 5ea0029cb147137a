"""The server process ends when its client goes away: on stdin EOF, and when the
client process named in `initialize` (processId) dies while stdin stays open."""
from __future__ import annotations

import json
import subprocess
import sys
import time

from conftest import ROOT, SERVER


def _frame(msg: dict) -> bytes:
    body = json.dumps(msg).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def _wait_exit(proc: subprocess.Popen, timeout: float) -> int | None:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None


def test_server_exits_on_stdin_eof():
    proc = subprocess.Popen(SERVER, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=ROOT)
    proc.stdin.write(_frame({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                             "params": {"processId": None, "capabilities": {}, "rootUri": None}}))
    proc.stdin.close()
    assert _wait_exit(proc, 20) is not None


def test_server_exits_when_its_client_process_dies():
    parent = subprocess.Popen([sys.executable, "-c", "pass"])
    parent.wait()  # a pid that no longer exists
    proc = subprocess.Popen(SERVER, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=ROOT)
    proc.stdin.write(_frame({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                             "params": {"processId": parent.pid, "capabilities": {}, "rootUri": None}}))
    proc.stdin.flush()
    t0 = time.monotonic()
    assert _wait_exit(proc, 20) is not None   # stdin is still open: only the pid check ends it
    assert time.monotonic() - t0 < 20
    proc.stdin.close()


def test_tcp_mode_answers_initialize():
    import socket
    with socket.socket() as s:  # a free port
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(SERVER + ["--tcp", "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                conn = socket.create_connection(("127.0.0.1", port), timeout=10)
                break
            except OSError:
                assert time.monotonic() < deadline, "the TCP server did not start"
                time.sleep(0.1)
        with conn:
            caps = {"textDocument": {"rename": {"prepareSupport": True}}}
            conn.sendall(_frame({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                 "params": {"processId": None, "capabilities": caps, "rootUri": None}}))
            data = b""
            while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < int(
                    data.split(b"Content-Length: ")[1].split(b"\r\n")[0]):
                data += conn.recv(65536)
            reply = json.loads(data.split(b"\r\n\r\n", 1)[1])
        caps = reply["result"]["capabilities"]
        assert caps["hoverProvider"] and caps["inlayHintProvider"] and caps["renameProvider"]["prepareProvider"]
        assert set(caps["executeCommandProvider"]["commands"]) >= {"kina.buildAndValidate", "kina.showMlir"}
        assert reply["result"]["serverInfo"]["name"] == "kina-lsp"
    finally:
        proc.terminate()
        proc.wait(10)
