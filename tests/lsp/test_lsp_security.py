"""A hostile workspace runs nothing (issue 12, Security): a folder with its own
`kina_lsp/`, `compiler/`, `numpy.py`, `lsprotocol/`, `pygls/` and `runpy.py`, each of
which would leave a marker file if imported, is the server's working directory.

- Launched as the VS Code extension launches it (PYTHONSAFEPATH=1; the extension also
  picks a neutral working directory, this test does not, to show the flag alone holds),
  none of them runs, for the server or for Build & validate's child process.
- Launched without the flag (a user's own `python -m kina_lsp`), the server's entry still
  drops the working directory from sys.path before importing anything, and moves to a
  private one, so a folder's `compiler/`, `numpy.py`, `lsprotocol/` and `pygls/` do not
  run either (a folder's `kina_lsp/` or `runpy.py` can only be stopped at launch).

The editor side (trusted and Restricted Mode) is editors/vscode/e2e/run.sh."""
from __future__ import annotations

import os

import pytest
from rawlsp import ROOT, RawServer

HOSTILE = ["kina_lsp/__init__.py", "kina_lsp/__main__.py", "compiler/__init__.py", "compiler/oracle/validate.py",
           "compiler/oracle/child.py", "compiler/backend/worker_main.py",
           "numpy.py", "lsprotocol/__init__.py", "pygls/__init__.py", "runpy.py"]
PROGRAM = (ROOT / "examples" / "ad_reduce_sum.kina").read_text(encoding="utf-8")


def plant(folder, markers, names=HOSTILE) -> None:
    for name in names:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        tag = name.replace("/", "_")
        path.write_text(f"open({str(markers / tag)!r}, 'w').write('ran')\n"
                        "raise SystemExit('hostile module imported')\n")


def ran(markers) -> list[str]:
    return sorted(p.name for p in markers.iterdir())


def exercise(s: RawServer, folder) -> None:
    """Start-up, analysis, hover, Show MLIR and Build & validate of a file in the folder."""
    uri = (folder / "model.kina").as_uri()
    (folder / "model.kina").write_text(PROGRAM, encoding="utf-8")
    assert "capabilities" in s.initialize()["result"]
    s.open(uri, PROGRAM)
    assert s.diagnostics(uri, 1) == []
    hover = s.request("textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": 2, "character": 7}})
    assert "error" not in hover
    mlir = s.request("workspace/executeCommand", {"command": "kina.showMlir", "arguments": [uri]})
    assert mlir["result"]["ok"] and "func.func" in mlir["result"]["content"]
    built = s.request("workspace/executeCommand", {"command": "kina.buildAndValidate", "arguments": [uri]},
                      timeout=300)
    assert built["result"]["ok"], built["result"]["message"]


@pytest.fixture
def hostile(tmp_path):
    folder, markers = tmp_path / "workspace", tmp_path / "markers"
    folder.mkdir()
    markers.mkdir()
    return folder, markers


def test_the_extensions_launch_runs_nothing_from_the_workspace(hostile):
    folder, markers = hostile
    plant(folder, markers)
    env = dict(os.environ, PYTHONSAFEPATH="1")
    with RawServer(cwd=folder, env=env) as s:
        exercise(s, folder)
        s.request("shutdown")
        s.notify("exit")
        assert s.wait() == 0
    assert ran(markers) == []


def test_the_entry_drops_the_working_directory_without_the_flag(hostile):
    folder, markers = hostile
    plant(folder, markers, [n for n in HOSTILE if not n.startswith("kina_lsp/") and n != "runpy.py"])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    with RawServer(cwd=folder, env=env) as s:
        exercise(s, folder)
    assert ran(markers) == []
