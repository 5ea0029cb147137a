"""The in-process back end, run in a child process: MLIR's verifiers and passes abort the
process on some inputs (an assertion on a rank-0 linalg.transpose, ...), and the process
that calls `kinac build` may be the language server.

    python -m compiler.backend.worker_main REQUEST.json
    python -m compiler.backend.worker_main --serve      (REQUEST.json's path on stdin: `Worker`)

REQUEST.json: {"mode": "engine" | "rewrite", "input": MLIR file, ...}; the worker writes
REQUEST.result.json: {"ok": true, "timings": {..}} or {"ok": false, "tool", "message"}.
Before LLVM runs it writes REQUEST.externals.json (each external symbol of the lowered
module -> the Kina functions calling it), so that when the link finds a symbol nothing
provides (compiler/backend/toolchain.py links with --no-undefined) the parent can say which
function needed it (`missing_symbols`).

The parent side is `run(request, work_dir)` (used by compiler/backend/engine.py), or a `Worker`
started ahead of its request (compiler/build.py starts one before the front end, so the
worker's import of the MLIR bindings overlaps the parse, check and emit); a worker that
dies by a signal or exits without a result becomes a StageFailed naming the stage.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compiler.backend.errors import StageFailed

if TYPE_CHECKING:

    pass

TIMEOUT = float(os.environ.get("KINA_TOOL_TIMEOUT", "900"))
# Fault injection for the tests of this containment: KINA_BACKEND_FAULT=<phase> makes the
# worker abort (as LLVM does) when that phase ("mlir-verify", "mlir-opt", "llvm") starts.
FAULT_ENV = "KINA_BACKEND_FAULT"
SERVE = "--serve"   # the worker reads its request's path from stdin (see Worker)


# ---- the parent side -------------------------------------------------------------------------
class Worker:
    """A worker process that starts before its request is known: it loads the MLIR bindings
    (0.25 s) while the caller runs the front end, then runs the one request it is given.
    `close()` ends it if it was never used (a front-end error, a cache hit)."""

    def __init__(self) -> None:
        # Like validate's child, the worker imports this very `compiler` package and nothing
        # from the caller's working directory (a workspace's ./compiler/ must never run): -P
        # and PYTHONSAFEPATH keep the cwd off sys.path, and the cwd is a private directory.
        self.cwd = tempfile.mkdtemp(prefix="kina-worker-")
        env = dict(os.environ, LLVM_DISABLE_SYMBOLIZATION="1", PYTHONSAFEPATH="1",
                   PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                            os.environ.get("PYTHONPATH")])))
        self.proc = subprocess.Popen([sys.executable, "-P", "-m", "compiler.backend.worker_main", SERVE],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env, cwd=self.cwd)

    def run(self, request: dict[str, Any], work_dir: Path) -> dict[str, Any]:
        """Run one request in the worker; returns its result (raises StageFailed)."""
        req = Path(work_dir) / "backend_request.json"
        req.write_text(json.dumps(request))
        for suffix in (".result.json", ".externals.json", ".phase"):
            req.with_suffix(suffix).unlink(missing_ok=True)
        try:
            _, stderr = self.proc.communicate(str(req.resolve()) + "\n", timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.close()
            raise StageFailed("llvm", f"the -O2 back end did not finish within {TIMEOUT:.0f} s "
                                      "(set KINA_TOOL_TIMEOUT to wait longer)") from None
        finally:
            self.close()
        result_path = req.with_suffix(".result.json")
        if self.proc.returncode == 0 and result_path.exists():
            result: dict[str, Any] = json.loads(result_path.read_text())
            if not result["ok"]:
                raise StageFailed(result["tool"], result["message"])
            return result
        phase = req.with_suffix(".phase")
        stage = phase.read_text() if phase.exists() else "kinac"
        raise StageFailed(stage, _death(self.proc.returncode, stderr))

    def close(self) -> None:
        """End the process (if it still runs) and remove its directory."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        shutil.rmtree(self.cwd, ignore_errors=True)


# A worker started by `prestart` before the caller's own imports (`kinac build -O2`: its
# imports and front end take 0.3 s, the worker's start 0.3 s); the next build takes it.
# The language server keeps one between its builds (compiler/build.py `keep_backend_warm`),
# taken and made from its build threads: hence the lock.
_spare: Worker | None = None
_spare_lock = threading.Lock()


def prestart() -> None:
    """Start a worker now for the next `take_spare()`.  The caller ends one left unclaimed
    (a cache hit, a front-end error) with `drop_spare()`: compiler/cli.py does, when its
    command returns, so a spare never serves a later build with another environment."""
    global _spare
    with _spare_lock:
        if _spare is None:
            _spare = Worker()


def take_spare() -> Worker | None:
    """The prestarted worker, if one is alive (it then belongs to the caller)."""
    global _spare
    with _spare_lock:
        worker, _spare = _spare, None
    if worker is not None and worker.proc.poll() is not None:
        worker.close()
        return None
    return worker


def drop_spare() -> None:
    """End the prestarted worker if nothing took it."""
    worker = take_spare()
    if worker is not None:
        worker.close()


def run(request: dict[str, Any], work_dir: Path, worker: Worker | None = None) -> dict[str, Any]:
    """Run one request in a worker process (`worker`, when one was started ahead)."""
    return (worker or Worker()).run(request, work_dir)


def _death(returncode: int, stderr: str | None) -> str:
    """What to say when the worker died: the signal and the message it printed."""
    how = f"was killed by signal {-returncode}" if returncode < 0 else f"exited with {returncode}"
    lines = [l for l in (stderr or "").splitlines() if l.strip() and not l.startswith(("Stack dump", " #", "#"))]
    msg = f"the -O2 back end {how}: a compiler bug, please report it with the program"
    return "\n".join([msg, *lines[:6]])


def missing_symbols(symbols: list[str], externals: Path) -> list[str]:
    """One line per symbol nothing provides, naming the Kina functions that call it (from
    the worker's REQUEST.externals.json, when there is one)."""
    callers = json.loads(externals.read_text()) if externals.exists() else {}
    out = []
    for sym in dict.fromkeys(s.strip() for s in symbols):
        who = ", ".join(f"`{f}`" for f in callers.get(sym, [])) or "the module"
        out.append(f"{who} calls `{sym}`, which the library does not provide")
    return out


def externals_path(work_dir: Path) -> Path:
    return (Path(work_dir) / "backend_request.json").with_suffix(".externals.json")
