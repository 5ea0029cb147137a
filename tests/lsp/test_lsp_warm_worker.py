"""Between two Build & validate runs at -O1..-O3 the server keeps the next build's back-end
worker loaded (compiler.build.keep_backend_warm): its import of the MLIR bindings is then off
the next build's critical path.  The worker ends with the server, and so does its directory."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from rawlsp import RawServer

pytest.importorskip("mlir.ir", reason="the -O2 back end needs the MLIR Python bindings")

SRC = "fn f(x: Tensor[F32, [4]]) -> Tensor[F32, [4]] {\n  let y = x * x in\n  y\n}\n"


def _workers(parent: int) -> list[int]:
    """The server's children that are back-end workers waiting for a request."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == parent and fields[0] != "Z" and b"compiler.backend.worker_main" in cmd and b"--serve" in cmd:
            found.append(int(d.name))
    return found


def _settled_workers(parent: int, want: int, timeout: float = 10.0) -> list[int]:
    """_workers once it shows `want` of them (a worker just started may not have exec'd yet:
    its command line is still the server's), or what it shows at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        found = _workers(parent)
        if len(found) == want or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def _gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) == "Z":
                return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("level", [2, 0])
def test_the_next_builds_worker_is_kept_warm_and_ends_with_the_server(tmp_path, level):
    server = RawServer(env={**os.environ, "TMPDIR": str(tmp_path), "KINA_CACHE": "0"})
    try:
        server.initialize(options={"validate": {"optLevel": level}})
        uri = (tmp_path / "f.kina").as_uri()
        server.open(uri, SRC)
        server.diagnostics(uri, 1)
        for _ in range(2):    # the second run takes the worker the first left, and leaves one
            reply = server.request("workspace/executeCommand", {"command": "kina.buildAndValidate",
                                                                "arguments": [uri]}, timeout=120)
            assert reply["result"]["ok"], reply
            assert reply["result"]["message"].endswith(f"at -O{level})")
            workers = _settled_workers(server.proc.pid, 1 if level else 0)
            assert len(workers) == (1 if level else 0), workers     # -O0 runs no worker
        server.request("shutdown")
        server.notify("exit")
        code = server.wait()
    finally:
        server.close()
    assert code == 0
    assert all(_gone(pid) for pid in workers)
    assert not list(tmp_path.glob("kina-worker-*"))
