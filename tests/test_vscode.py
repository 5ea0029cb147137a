"""The VS Code extension (editors/vscode): runs its Node-based checks from pytest.

- unit tests of the client's pure logic (server command resolution, settings payload,
  start-failure messages) with `node --test`;
- TextMate grammar assertions with vscode-tmgrammar-test (test/grammar/*.test.kina);
- the grammar's op and dtype lists against the compiler's own tables;
- packaging: `vsce package` builds a .vsix whose contents are checked.

Skips cleanly when `node`/`npm` are not installed.  The real-editor end-to-end test is
`bash editors/vscode/e2e/run.sh` (make vscode-e2e), not part of this file.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from compiler.core.types import DType
from compiler.ir.ops import SURFACE_OPS
from compiler.syntax import lex

EXT = Path(__file__).resolve().parent.parent / "editors" / "vscode"
GRAMMAR = EXT / "syntaxes" / "kina.tmLanguage.json"

needs_node = pytest.mark.skipif(shutil.which("node") is None or shutil.which("npm") is None,
                                reason="node and npm are needed for the VS Code extension checks")


def _npm(*args: str, timeout: int = 300) -> str:
    proc = subprocess.run(["npm", *args], cwd=EXT, capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"npm {' '.join(args)} failed:\n{out[-4000:]}"
    return out


@pytest.fixture(scope="module")
def node_modules() -> None:
    """`npm ci` from the committed lockfile, once, when node_modules is missing or stale.
    Under pytest-xdist each worker runs this fixture: a file lock makes the second wait for
    the first's install and then find it done (two `npm ci` at once failed with ENOTEMPTY,
    each removing the other's node_modules)."""
    marker = EXT / "node_modules" / ".package-lock.json"
    lock = EXT / "package-lock.json"
    key = hashlib.sha256(str(EXT).encode()).hexdigest()[:12]
    with open(Path(tempfile.gettempdir()) / f"kina-npm-ci-{key}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if not marker.exists() or marker.stat().st_mtime < lock.stat().st_mtime:
            _npm("ci", "--audit=false", "--fund=false")


def _node_test_counts(out: str) -> tuple[int, int]:
    passed = re.search(r"^# pass (\d+)", out, re.M)
    failed = re.search(r"^# fail (\d+)", out, re.M)
    assert passed and failed, out[-2000:]
    return int(passed.group(1)), int(failed.group(1))


@needs_node
def test_client_logic_unit_tests(node_modules) -> None:
    passed, failed = _node_test_counts(_npm("run", "test:unit"))
    assert failed == 0 and passed >= 20


@needs_node
def test_grammar_assertions(node_modules) -> None:
    out = _npm("run", "test:grammar")
    files = sorted(p.name for p in (EXT / "test" / "grammar").glob("*.test.kina"))
    assert files, "no grammar assertion files"
    for name in files:
        assert f"{name} run successfuly" in out, out[-2000:]


@needs_node
def test_vsix_package_contents(node_modules) -> None:
    _npm("run", "package")
    passed, failed = _node_test_counts(_npm("run", "test:package"))
    assert failed == 0 and passed >= 4


def _alternation(pattern: str) -> set[str]:
    """The words of the first `(?:a|b|c)` / `(a|b|c)` group in a grammar regex."""
    m = re.search(r"\((?:\?:)?([A-Za-z0-9_|]+)\)", pattern)
    assert m, pattern
    return set(m.group(1).split("|"))


def test_grammar_highlights_every_surface_op_and_dtype() -> None:
    """The grammar's built-in op and dtype lists match the compiler's op table and types
    (a new op in compiler/ir/ops.py must be added to the grammar too)."""
    repo = json.loads(GRAMMAR.read_text())["repository"]
    method_ops = _alternation(repo["method-call"]["patterns"][0]["match"])
    free_ops = _alternation(repo["function-call"]["patterns"][0]["match"])
    assert method_ops == set(SURFACE_OPS) == free_ops
    assert _alternation(repo["dtype"]["match"]) == {d.value for d in DType}


def _grammar_regexes(node) -> list[str]:
    """Every match/begin regex of the TextMate grammar."""
    if isinstance(node, dict):
        own = [node[k] for k in ("match", "begin") if isinstance(node.get(k), str)]
        return own + [r for v in node.values() for r in _grammar_regexes(v)]
    if isinstance(node, list):
        return [r for v in node for r in _grammar_regexes(v)]
    return []


def test_grammar_keywords_are_the_lexers_keywords() -> None:
    """The TextMate grammar highlights exactly the keywords of the compiler's lexer (the
    word-shaped terminals of grammar.lark): a keyword added to the language grammar must
    be added here too, and a word the language does not reserve must not look reserved."""
    words = set()
    for rx in _grammar_regexes(json.loads(GRAMMAR.read_text())):
        words |= set(re.findall(r"\\b\(?([A-Za-z]+)\)?\\[bs]", rx))
    assert words == set(lex.KEYWORDS)
