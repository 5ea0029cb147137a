"""One front end: `kinac check`, `kinac build` and the language server report exactly the
diagnostics of compiler.analysis, which the inline-expectation cases (tests/check_cases,
tests/ad_cases, read by tests/expectations.py) are checked against.

Every case file and every example goes through each path and must come back with the
same diagnostics, notes included.
"""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from compiler import analysis, build, cli
from compiler.core.diagnostics import SourceText
from kina_lsp.convert import index_of
from kina_lsp.diagnostics import to_lsp
from kina_lsp.documents import Documents

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted([*(ROOT / "tests" / "check_cases").glob("*.kina"), *(ROOT / "tests" / "ad_cases").glob("*.kina"),
                *(ROOT / "examples").glob("*.kina")])
IDS = [f"{p.parent.name}/{p.name}" for p in FILES]
GENERIC_SIZES = {"storylm": {"B": 1, "T": 4, "H": 2, "DH": 2, "V": 8}, "storylm0_sample": {"B": 1}}   # as scripts/regen_goldens.py


def reference(path: Path):
    text = path.read_text()
    return text, analysis.analyze(text, str(path)).diagnostics


def test_there_are_cases_with_diagnostics_and_notes():
    diags = [d for p in FILES for d in reference(p)[1]]
    assert len(diags) >= 100 and sum(len(d.notes) for d in diags) >= 20


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_kinac_check_prints_the_analysis(path, capsys):
    text, diags = reference(path)
    status = cli.main(["check", "--format", "json", str(path)])
    report = json.loads(capsys.readouterr().out)
    source = SourceText(text, str(path))
    assert report["diagnostics"] == [source.to_json(d) for d in diags]
    assert status == (1 if diags else 0)


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_kinac_build_front_end_reports_the_analysis(path):
    """The build reports the analysis's diagnostics (a generic example built at its sizes:
    without them, its unbound exports are the build's own errors)."""
    text, diags = reference(path)
    result = build.BuildResult(False, source=SourceText(text, str(path)))
    mlir = build.front_end(text, str(path), {}, result, sizes=GENERIC_SIZES.get(path.stem))
    assert result.diagnostics == diags
    assert (mlir is None) == bool(diags)


def _server_diagnostics(documents: Documents, uri: str):
    view = asyncio.run(documents.current(uri))
    return view.snapshot.diagnostics, [to_lsp(d, view.index, uri) for d in view.snapshot.diagnostics]


def test_the_language_server_reports_the_analysis():
    """One server document edited from file to file (its incremental analysis keeps the
    results of the previous texts) reports each file's analysis, converted for LSP with
    the same code, message, range and notes."""
    texts: dict[str, tuple[str, int]] = {}
    documents = Documents(lambda uri: texts.get(uri))
    uri = "file:///cases/case.kina"
    try:
        for version, path in enumerate(FILES, 1):
            text, diags = reference(path)
            texts[uri] = (text, version)
            got, converted = _server_diagnostics(documents, uri)
            assert got == diags, path.name
            index = index_of(text, "utf-16")
            for d, c in zip(diags, converted):
                assert (c.code, c.range, c.message.split("\nnote: ")[0]) == (d.code, index.range(d.span), d.message)
                spanned = [n for n in d.notes if n.span is not None]
                assert [r.message for r in c.related_information or []] == [n.message for n in spanned]
    finally:
        documents.shutdown()
