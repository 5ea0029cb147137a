"""Diagnostics through a real server process: the CLI's (compiler.analysis)
diagnostics, converted exactly; updated after incremental edits; stale versions
never published last."""
from __future__ import annotations

from conftest import MODULE_LOOP, change, open_doc, open_example, pos, published
from lsprotocol import types as lsp

from compiler.analysis import analyze

BROKEN = """fn f(a: Tensor[F32, [2, 3]], b: Tensor[F32, [3, 2]]) -> Tensor[F32, [2, 3]] {
  let c = a + b in
  c
}
"""

pytestmark = MODULE_LOOP


def expected(text: str):
    """What `kinac check` reports, as (code, message, (line, col), (end_line, end_col)) (0-based)."""
    snap = analyze(text)
    out = []
    for d in snap.diagnostics:
        (l0, c0), (l1, c1) = snap.source.line_col(d.span.start), snap.source.line_col(d.span.end)
        out.append((d.code, d.message, (l0 - 1, c0 - 1), (l1 - 1, c1 - 1)))
    return out


def got(diags):
    return [(d.code, d.message.split("\nnote: ")[0], (d.range.start.line, d.range.start.character),
             (d.range.end.line, d.range.end.character)) for d in diags]


async def test_open_publishes_the_cli_diagnostics(client):
    uri = open_doc(client, BROKEN, "broken.kina")
    diags = await published(client, uri, 1)
    assert diags and got(diags) == expected(BROKEN)
    assert all(d.source == "kina" and d.severity == lsp.DiagnosticSeverity.Error for d in diags)
    assert diags[0].code == "shape"


async def test_reduce_mean_under_reverse_mode_points_at_reduce_keep(client):
    uri, text = open_example(client, "invalid_reduce_mean_ad.kina")
    diags = await published(client, uri, 1)
    ad = [d for d in diags if d.code == "ad-unsupported"]
    assert len(ad) == 1
    start = pos(text, "x.reduce_keep(op=mean")
    end = pos(text, "x.reduce_keep(op=mean, axis=1)", len("x.reduce_keep(op=mean, axis=1)"))
    assert ad[0].range == lsp.Range(start=start, end=end)
    assert "reduce_keep(op=mean)" in ad[0].message
    assert got(diags) == expected(text)


async def test_edits_update_the_diagnostics(client):
    uri = open_doc(client, BROKEN, "edit.kina")
    assert await published(client, uri, 1)
    # fix the error with an incremental edit: `b` -> `a`
    at = pos(BROKEN, "a + b", 4)
    change(client, uri, 2, "a", lsp.Range(start=at, end=lsp.Position(line=at.line, character=at.character + 1)))
    assert await published(client, uri, 2) == []
    # break it differently: an unknown name
    at = pos(BROKEN, "  c\n", 2)
    change(client, uri, 3, "d", lsp.Range(start=at, end=lsp.Position(line=at.line, character=at.character + 1)))
    diags = await published(client, uri, 3)
    assert [d.code for d in diags] == ["unknown-name"]
    assert diags[0].range.start == at


async def test_notes_become_related_information(client):
    text = BROKEN + BROKEN.replace("let c = a + b", "let c = a")
    uri = open_doc(client, text, "dup.kina")
    diags = await published(client, uri, 1)
    dup = next(d for d in diags if d.code == "duplicate")
    assert dup.related_information and dup.related_information[0].message == "first defined here"
    assert dup.related_information[0].location.range.start == pos(text, "f(")


async def test_utf16_columns_after_astral_characters(client):
    # 🙂 is one code point for the compiler but two UTF-16 units for LSP
    text = BROKEN.replace("a + b", "a 🙂 + b").replace("fn f(", "// 🙂 ü comment\nfn f(")
    uri = open_doc(client, text, "utf16.kina")
    (diag,) = await published(client, uri, 1)
    assert diag.code == "syntax"
    start = pos(text, "🙂 + b")
    assert diag.range == lsp.Range(start=start, end=lsp.Position(line=start.line, character=start.character + 2))
    # delete the emoji with an incremental edit given in UTF-16 units
    change(client, uri, 2, "", diag.range)
    (diag,) = await published(client, uri, 2)
    fixed = text.replace("a 🙂 + b", "a  + b")
    assert diag.code == "shape" and diag.range.start == pos(fixed, "a  + b", 5)
    assert got([diag]) == expected(fixed)


async def test_rapid_edits_publish_the_last_version(client):
    uri = open_doc(client, BROKEN, "rapid.kina")
    await published(client, uri, 1)
    for v in range(2, 12):
        change(client, uri, v, BROKEN.replace("a + b", "a" if v % 2 else "a + b"))
    final = await published(client, uri, 11)
    assert final == []
    versions = [p.version for p in client.published if p.uri == uri]
    assert versions == sorted(versions) and versions[-1] == 11
