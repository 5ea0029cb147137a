"""Regressions of issue 12's language-server findings, each with the minimal program
that broke, through a real server process (pytest-lsp): F3 (\\r line ends), F8 and
C1 (rename), C2 (stale hover), C3 (completion of the let being defined), F9 (a
30,000-term expression), completion on a never-opened file, pull diagnostics."""
from __future__ import annotations

import pytest
from conftest import MODULE_LOOP, change, doc_id, open_doc, pos, published
from lsprotocol import types as lsp

from compiler.analysis import analyze

pytestmark = MODULE_LOOP

TWO_LETS = """fn f(x: Tensor[F32, [2]], w: Tensor[F32, [2]]) -> Tensor[F32, [2]] {
  let a = x + w in
  let b = a * x in
  b
}

fn g(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {
  f(x, x)
}
"""


async def rename(client, uri, position, new_name):
    return await client.text_document_rename_async(lsp.RenameParams(
        text_document=doc_id(uri), position=position, new_name=new_name))


# ---- F8: an invalid new name is a clear error, not -32603 with a traceback --------------
@pytest.mark.parametrize("new_name, says", [("1x", "not a valid Kina name"), ("a b", "not a valid Kina name"),
                                            ("", "not a valid Kina name"), ("let", "is a keyword"),
                                            ("F32", "reserved"), ("exp", "built-in op")])
async def test_invalid_rename_names_are_request_failed_with_a_reason(client, new_name, says):
    uri = open_doc(client, TWO_LETS, "rename_bad.kina")
    with pytest.raises(Exception) as err:
        await rename(client, uri, pos(TWO_LETS, "let a", 4), new_name)
    assert says in str(err.value) and "Traceback" not in str(err.value)
    assert getattr(err.value, "code", None) == -32803


# ---- C1: rename refuses names that change what the program means --------------------------
@pytest.mark.parametrize("needle, delta, new_name, says", [
    ("let a", 4, "b", "`b` is already a let of `f` (line 3)"),
    ("let a", 4, "w", "`w` is already a parameter of `f` (line 1)"),
    ("let b", 4, "x", "`x` is already a parameter of `f`"),
    ("fn g", 3, "f", "a function named `f` already exists"),
    ("fn f", 3, "g", "a function named `g` already exists"),
])
async def test_rename_onto_an_existing_name_is_refused(client, needle, delta, new_name, says):
    uri = open_doc(client, TWO_LETS, "rename_clash.kina")
    with pytest.raises(Exception, match="cannot rename") as err:
        await rename(client, uri, pos(TWO_LETS, needle, delta), new_name)
    assert says in str(err.value)


async def test_rename_that_would_capture_an_unbound_name_is_refused(client):
    text = TWO_LETS.replace("  b\n}", "  b + c\n}").replace("f(x, x)", "f(x, x) + h(x)")
    uri = open_doc(client, text, "rename_capture.kina")
    with pytest.raises(Exception, match="unbound `c`"):
        await rename(client, uri, pos(text, "let a", 4), "c")
    with pytest.raises(Exception, match="calls an undefined `h`"):
        await rename(client, uri, pos(text, "fn g", 3), "h")


async def test_a_safe_rename_still_works(client):
    uri = open_doc(client, TWO_LETS, "rename_ok.kina")
    edit = await rename(client, uri, pos(TWO_LETS, "let a", 4), "s")
    new = apply(TWO_LETS, edit.changes[uri])
    assert "let s = x + w in" in new and "let b = s * x in" in new
    assert analyze(new).diagnostics == []


def apply(text: str, edits: list[lsp.TextEdit]) -> str:
    lines = text.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    off = lambda p: starts[p.line] + p.character  # noqa: E731  (ASCII text: columns are characters)
    for e in sorted(edits, key=lambda e: off(e.range.start), reverse=True):
        text = text[:off(e.range.start)] + e.new_text + text[off(e.range.end):]
    return text


# ---- C2: a broken function shows no stale type at a shifted position -----------------------
async def test_hover_in_a_broken_function_shows_no_type_past_the_edit(client):
    text = TWO_LETS
    uri = open_doc(client, text, "stale.kina")
    await published(client, uri, 1)
    h = await client.text_document_hover_async(lsp.HoverParams(text_document=doc_id(uri),
                                                               position=pos(text, "let b", 4)))
    assert "b: Tensor[F32, [2], @host]" in h.contents.value
    # insert a broken `let zz = (` line above `b`: the function no longer parses and every
    # later offset moved; the old type of `b` must not appear on whatever sits there now
    broken = text.replace("  let b", "  let zz = ( in\n  let b", 1)
    change(client, uri, 2, broken)
    assert any(d.code == "syntax" for d in await published(client, uri, 2))
    for needle, delta in [("let b", 4), ("a * x", 0), ("let zz", 4), ("  b\n", 2)]:
        h = await client.text_document_hover_async(lsp.HoverParams(
            text_document=doc_id(uri), position=pos(broken, needle, delta)))
        assert h is None, (needle, h)
    # in front of the edit the text (and so the type) is unchanged: still shown
    h = await client.text_document_hover_async(lsp.HoverParams(text_document=doc_id(uri),
                                                               position=pos(broken, "let a", 4)))
    assert "a: Tensor[F32, [2], @host]" in h.contents.value


# ---- C3: `let c = |` does not offer c ------------------------------------------------------
async def test_completion_does_not_offer_the_let_being_defined(client):
    text = "fn f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  let a = x in\n  let c = \n}\n"
    uri = open_doc(client, text, "complete_self.kina")
    res = await client.text_document_completion_async(lsp.CompletionParams(
        text_document=doc_id(uri), position=pos(text, "let c = ", 8)))
    labels = {i.label for i in res.items}
    assert {"x", "a"} <= labels and "c" not in labels


async def test_completion_on_a_never_opened_file_reads_nothing(client, tmp_path):
    secret = tmp_path / "secret.kina"
    secret.write_text("fn leaked_function_name(x: Tensor[F32, [1]]) -> Tensor[F32, [1]] { x }\n")
    res = await client.text_document_completion_async(lsp.CompletionParams(
        text_document=lsp.TextDocumentIdentifier(uri=secret.as_uri()), position=lsp.Position(line=0, character=0)))
    items = res.items if isinstance(res, lsp.CompletionList) else res
    assert "leaked_function_name" not in {i.label for i in items}


# ---- F3: \r-only and \r\n line ends ----------------------------------------------------------
@pytest.mark.parametrize("eol", ["\r", "\r\n"])
async def test_cr_line_ends_put_diagnostics_where_the_editor_shows_them(client, eol):
    text = ("// a comment" + eol + "fn f(a: Tensor[F32, [2, 3]], b: Tensor[F32, [3, 2]]) -> Tensor[F32, [2, 3]] {"
            + eol + "  let c = a + b in" + eol + "  c" + eol + "}" + eol)
    uri = open_doc(client, text, f"eol{len(eol)}.kina")
    (diag,) = await published(client, uri, 1)
    assert diag.code == "shape"
    snap = analyze(text)
    (cli,) = snap.diagnostics
    line, col = snap.source.line_col(cli.span.start)
    assert line == 3 and text.split(eol)[2][col - 1:].startswith("b in")   # the CLI: line 3, at `b`
    assert diag.range.start == lsp.Position(line=2, character=col - 1)    # the server: the same place
    assert diag.range.end == lsp.Position(line=2, character=col)


# ---- F9 / issue 31: a 30,000-term expression is a flat chain: it checks, and hover answers ------
async def test_a_30000_term_expression_checks_and_hover_answers(client):
    text = ("fn f(y: Tensor[F32, [4]]) -> Tensor[F32, [4]] {\n  " + " + ".join(["y"] * 30_000) + "\n}\n"
            "fn g(x: Tensor[F32, [4]]) -> Tensor[F32, [4]] {\n  let z = x.exp() in\n  z\n}\n")
    uri = open_doc(client, text, "huge_expr.kina")
    assert await published(client, uri, 1, timeout=60) == []
    h = await client.text_document_hover_async(lsp.HoverParams(text_document=doc_id(uri),
                                                               position=pos(text, "let z", 4)))
    assert "z: Tensor[F32, [4], @host]" in h.contents.value
    middle = lsp.Position(line=1, character=2 + 4 * 15_000)      # the 15,001st `y`
    h = await client.text_document_hover_async(lsp.HoverParams(text_document=doc_id(uri), position=middle))
    assert h is not None and "Tensor[F32, [4], @host]" in h.contents.value
    broken = text.replace("y + y", "y + q", 1)
    change(client, uri, 2, broken)                          # an error in the chain is reported at its place
    (diag,) = await published(client, uri, 2, timeout=60)
    assert diag.code == "unknown-name" and diag.range.start == lsp.Position(line=1, character=6)
    folds = await client.text_document_folding_range_async(lsp.FoldingRangeParams(text_document=doc_id(uri)))
    assert any(f.start_line == 0 for f in folds)
    sel = await client.text_document_selection_range_async(lsp.SelectionRangeParams(
        text_document=doc_id(uri), positions=[middle]))
    assert sel and sel[0].range.start.line == 1
