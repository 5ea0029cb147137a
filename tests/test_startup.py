"""What a start imports (issue 27: seconds, not minutes): `kinac check` and `kinac emit`
(a build's front end and emitter) of a program of F32 literals, and the language server's
start, import neither NumPy nor (check and the server) the oracles, the build or the back
end: each is imported where it is used.  (The times are in benchmarks/README.md; this
pins down only what is imported.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "tests" / "programs" / "gpt_block.kina"
HEAVY = ("numpy", "compiler.oracle", "compiler.build", "compiler.backend", "compiler.runtime")

# Run with (HEAVY as JSON, then a command line or "server") in a fresh interpreter: runs
# the command (or imports the server) and prints, at exit, which of HEAVY were imported.
PROBE = """
import atexit, json, runpy, sys
heavy = json.loads(sys.argv[1])
def report():
    print("IMPORTED", json.dumps([h for h in heavy if any(m == h or m.startswith(h + ".") for m in sys.modules)]))
atexit.register(report)
if sys.argv[2] == "server":
    import kina_lsp.server
else:
    sys.argv = ["kinac", *sys.argv[2:]]
    runpy.run_module("compiler.cli", run_name="__main__")
"""


def _imported(*args: str) -> set[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), KINA_CACHE="0")
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(HEAVY), *args], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=120)
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("IMPORTED ")]
    assert line, out.stdout + out.stderr
    return set(json.loads(line[-1].removeprefix("IMPORTED ")))


def test_kinac_check_imports_no_numpy_nor_back_end():
    assert _imported("check", str(PROGRAM)) == set()


def test_the_language_server_starts_without_numpy_nor_back_end():
    assert _imported("server") == set()


def test_kinac_emit_imports_no_numpy():
    """The front end and the MLIR emitter of `kinac build` (the rest of a build runs tools)."""
    assert "numpy" not in _imported("emit", str(PROGRAM))
