"""The server process ends when its client goes away: on stdin EOF, and when the
client process named in `initialize` (processId) dies while stdin stays open; on
SIGTERM it ends at once.  Every way out removes its private working directory."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
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


def _start(tmp_path, process_id=None) -> subprocess.Popen:
    """A stdio server whose temporary files go under tmp_path, after its `initialize`."""
    proc = subprocess.Popen(SERVER, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp_path)})
    proc.stdin.write(_frame({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                             "params": {"processId": process_id, "capabilities": {}, "rootUri": None}}))
    proc.stdin.flush()
    return proc


def _private_dirs(tmp_path) -> list[str]:
    return [p.name for p in tmp_path.glob("kina-lsp-cwd-*")]


def test_server_exits_on_stdin_eof(tmp_path):
    proc = _start(tmp_path)
    proc.stdin.close()
    assert _wait_exit(proc, 20) is not None
    assert _private_dirs(tmp_path) == []


def test_server_exits_when_its_client_process_dies(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", "pass"])
    parent.wait()  # a pid that no longer exists
    proc = _start(tmp_path, parent.pid)
    t0 = time.monotonic()
    assert _wait_exit(proc, 20) is not None   # stdin is still open: only the pid check ends it
    assert time.monotonic() - t0 < 20
    proc.stdin.close()
    assert _private_dirs(tmp_path) == []


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="POSIX signals")
def test_sigterm_ends_the_server_and_removes_its_directory(tmp_path):
    # An editor that gives up on a clean `exit` sends SIGTERM; the default action left
    # the private directory (and any validator child) behind.
    proc = _start(tmp_path)
    deadline = time.monotonic() + 20
    while not _private_dirs(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _private_dirs(tmp_path), "the server made no private directory"
    proc.terminate()
    assert _wait_exit(proc, 20) == 128 + signal.SIGTERM
    assert _private_dirs(tmp_path) == []
    proc.stdin.close()


class _Tcp:
    """A `kina-lsp --tcp --port 0` process: its port and token come from its stderr line."""

    def __init__(self, *args):
        self.proc = subprocess.Popen(SERVER + ["--tcp", "--port", "0", *args], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, cwd=ROOT)
        line = self.proc.stderr.readline()
        m = re.match(r"kina-lsp: listening on 127\.0\.0\.1:(\d+); token: (\S+)", line)
        assert m, f"unexpected first stderr line: {line!r}"
        self.port, self.token = int(m.group(1)), m.group(2)

    def connect(self):
        return socket.create_connection(("127.0.0.1", self.port), timeout=20)

    def close(self):
        self.proc.terminate()
        self.proc.wait(10)


def _reply(conn) -> dict | None:
    """One message from a socket; None when the server closed the connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = int(re.search(rb"Content-Length: (\d+)", head).group(1))
    while len(body) < length:
        body += conn.recv(65536)
    return json.loads(body[:length])


def _initialize(conn, token=None) -> dict:
    opts = {"token": token} if token is not None else {}
    caps = {"textDocument": {"rename": {"prepareSupport": True}}}
    conn.sendall(_frame({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                         "params": {"processId": None, "capabilities": caps, "rootUri": None,
                                    "initializationOptions": opts}}))
    return _reply(conn)


def test_tcp_needs_the_token_and_refusals_do_not_stop_it():
    srv = _Tcp()
    try:
        with srv.connect() as conn:             # no token: refused, connection closed
            reply = _initialize(conn)
            assert reply["error"]["code"] == -32600 and "token" in reply["error"]["message"]
            assert _reply(conn) is None
        with srv.connect() as conn:             # a wrong token, and requests before initialize
            conn.sendall(_frame({"jsonrpc": "2.0", "id": 5, "method": "workspace/executeCommand",
                                 "params": {"command": "kina.buildAndValidate", "arguments": ["file:///x"]}}))
            assert _reply(conn)["error"]["code"] == -32002
            assert _initialize(conn, "not-the-token-" + "x" * 20)["error"]["code"] == -32600
        with srv.connect() as conn:             # the right token: served
            reply = _initialize(conn, srv.token)
            caps = reply["result"]["capabilities"]
            assert caps["hoverProvider"] and caps["renameProvider"]["prepareProvider"]
            assert set(caps["executeCommandProvider"]["commands"]) >= {"kina.buildAndValidate", "kina.showMlir"}
            assert reply["result"]["serverInfo"]["name"] == "kina-lsp"
            with srv.connect() as second:       # one client at a time
                assert _initialize(second, srv.token)["error"]["code"] == -32600
            conn.sendall(_frame({"jsonrpc": "2.0", "id": 2, "method": "shutdown"}))
            assert _reply(conn)["result"] is None
            conn.sendall(_frame({"jsonrpc": "2.0", "method": "exit"}))
        assert srv.proc.wait(20) == 0
    finally:
        if srv.proc.poll() is None:
            srv.close()


def test_tcp_listens_on_loopback_only_and_checks_the_token_file(tmp_path):
    proc = subprocess.run(SERVER + ["--tcp", "--host", "0.0.0.0"], capture_output=True, text=True, cwd=ROOT,
                          timeout=60)
    assert proc.returncode == 2 and "loopback" in proc.stderr and "Traceback" not in proc.stderr
    token = tmp_path / "token"
    token.write_text("s3cret-" * 4)
    token.chmod(0o644)
    proc = subprocess.run(SERVER + ["--tcp", "--token-file", str(token)], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert proc.returncode == 2 and "chmod 600" in proc.stderr and "Traceback" not in proc.stderr
    token.chmod(0o600)
    srv = _Tcp("--token-file", str(token))
    try:
        assert srv.token == "from"              # the token itself is not printed
        with srv.connect() as conn:
            assert "result" in _initialize(conn, "s3cret-" * 4)
    finally:
        srv.close()
