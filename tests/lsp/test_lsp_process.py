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
