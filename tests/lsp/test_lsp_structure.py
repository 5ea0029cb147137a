"""Folding ranges, selection ranges, document highlight and call hierarchy through a
real server."""
from __future__ import annotations

from conftest import MODULE_LOOP, doc_id, open_doc, pos, published
from lsprotocol import types as lsp

pytestmark = MODULE_LOOP

PROGRAM = """// Two helpers
// and a caller.
fn inner(x: Tensor[F32, [2]], w: Tensor[F32, [2]]) -> Tensor[F32, [2]] {
  let y = x * w in
  let z = y.exp() in
  z + x
}

fn outer(x: Tensor[F32, [2]],
         w: Tensor[F32, [2]]) -> (Tensor[F32, [2]], Tensor[F32, [2]], Tensor[F32, [2]]) {
  let (r, g_x, g_w) = handle inner(x, w) with reverseMode in
  let c = Tensor[F32, [2]] {
    1.0, 2.0
  } in
  let s = inner(r, c) + inner(c, g_x) in
  (s, g_x, g_w)
}

fn main() -> Tensor[F32, [2]] {
  let a = Tensor[F32, [2]] { 1.0, 2.0 } in
  inner(a, a)
}
"""


def line_of(text: str, needle: str) -> int:
    return text[:text.index(needle)].count("\n")


async def opened(client, name: str, text: str = PROGRAM) -> str:
    uri = open_doc(client, text, name)
    await published(client, uri, 1)
    return uri


async def test_folding_ranges(client):
    uri = await opened(client, "fold.kina")
    ranges = await client.text_document_folding_range_async(lsp.FoldingRangeParams(text_document=doc_id(uri)))
    got = {(r.start_line, r.end_line, r.kind) for r in ranges}
    L = lambda s: line_of(PROGRAM, s)  # noqa: E731
    # functions: from `fn` to the line before `}`, so the brace stays visible
    assert (L("fn inner"), L("  z + x"), None) in got
    assert (L("fn outer"), L("  (s, g_x, g_w)"), None) in got
    # the let chain of outer, the multi-line literal, the multi-line parameter list, the comment block
    assert (L("  let (r, g_x"), L("  let s ="), None) in got
    assert (L("  let c ="), L("    1.0, 2.0"), None) in got
    assert (L("fn outer"), L("         w: Tensor"), None) in got
    assert (0, 1, lsp.FoldingRangeKind.Comment) in got
    # nothing folds a single line
    assert all(r.end_line > r.start_line for r in ranges)


async def test_folding_survives_a_syntax_error(client):
    broken = PROGRAM.replace("let z = y.exp() in", "let z = y.exp( in")
    uri = await opened(client, "fold_broken.kina", broken)
    ranges = await client.text_document_folding_range_async(lsp.FoldingRangeParams(text_document=doc_id(uri)))
    assert (line_of(broken, "fn inner"), line_of(broken, "  z + x")) in {(r.start_line, r.end_line) for r in ranges}


async def test_selection_ranges_expand_from_the_word_to_the_function(client):
    uri = await opened(client, "select.kina")
    at = pos(PROGRAM, "g_x) in", 1)   # inside `g_x` in `inner(c, g_x)`
    [sel] = await client.text_document_selection_range_async(lsp.SelectionRangeParams(
        text_document=doc_id(uri), positions=[at]))
    chain = []
    while sel is not None:
        chain.append(sel.range)
        sel = sel.parent
    lines = PROGRAM.split("\n")

    def text_of(r: lsp.Range) -> str:
        if r.start.line == r.end.line:
            return lines[r.start.line][r.start.character:r.end.character]
        return "\n".join([lines[r.start.line][r.start.character:], *lines[r.start.line + 1:r.end.line],
                          lines[r.end.line][:r.end.character]])

    texts = [text_of(r) for r in chain]
    assert texts[0] == "g_x"
    assert "inner(c, g_x)" in texts and "inner(r, c) + inner(c, g_x)" in texts
    assert "let s = inner(r, c) + inner(c, g_x) in" in texts
    assert texts[-1].startswith("fn outer(") and texts[-1].endswith("}")
    link = texts.index("let s = inner(r, c) + inner(c, g_x) in")
    assert texts[link + 1].startswith("let (r, g_x, g_w)") and texts[link + 1].endswith("inner(c, g_x) in")
    # strictly growing
    for inner, outer in zip(chain, chain[1:]):
        assert (outer.start.line, outer.start.character) <= (inner.start.line, inner.start.character)
        assert (outer.end.line, outer.end.character) >= (inner.end.line, inner.end.character)
        assert inner != outer
    # in a signature: the parameter's type, the parameter, the list, the function
    [sel] = await client.text_document_selection_range_async(lsp.SelectionRangeParams(
        text_document=doc_id(uri), positions=[pos(PROGRAM, "F32, [2]],\n         w", 1)]))
    texts = []
    while sel is not None:
        texts.append(text_of(sel.range))
        sel = sel.parent
    assert texts[:3] == ["F32", "Tensor[F32, [2]]", "x: Tensor[F32, [2]]"]


async def test_document_highlight_kinds(client):
    uri = await opened(client, "highlight.kina")

    async def at(needle, delta=0):
        hs = await client.text_document_document_highlight_async(lsp.DocumentHighlightParams(
            text_document=doc_id(uri), position=pos(PROGRAM, needle, delta)))
        return sorted(((h.range.start.line, h.range.start.character), h.kind) for h in hs)

    # a let: its binding is Write, its uses are Read; the other function's `y` is another name
    hs = await at("y.exp()")
    assert hs == [((line_of(PROGRAM, "  let y ="), 6), lsp.DocumentHighlightKind.Write),
                  ((line_of(PROGRAM, "  let z ="), 10), lsp.DocumentHighlightKind.Read)]
    # a parameter of outer: only outer's x
    hs = await at("handle inner(x", 13)
    assert [k for _, k in hs] == [lsp.DocumentHighlightKind.Write, lsp.DocumentHighlightKind.Read]
    assert hs[0][0] == (line_of(PROGRAM, "fn outer"), 9)
    # a function: its name is Write; every call, `handle inner(..)` included, is Read
    hs = await at("fn inner", 3)
    assert hs[0] == ((line_of(PROGRAM, "fn inner"), 3), lsp.DocumentHighlightKind.Write)
    assert len([k for _, k in hs if k == lsp.DocumentHighlightKind.Read]) == 4
    # an op or a keyword: nothing
    assert await at("exp()") == [] and await at("let y") == []


async def test_call_hierarchy(client):
    uri = await opened(client, "calls.kina")
    items = await client.text_document_prepare_call_hierarchy_async(lsp.CallHierarchyPrepareParams(
        text_document=doc_id(uri), position=pos(PROGRAM, "inner(a, a)")))
    assert [i.name for i in items] == ["inner"] and items[0].kind == lsp.SymbolKind.Function
    assert items[0].selection_range.start == pos(PROGRAM, "fn inner", 3)
    incoming = await client.call_hierarchy_incoming_calls_async(lsp.CallHierarchyIncomingCallsParams(item=items[0]))
    by_caller = {c.from_.name: [r.start for r in c.from_ranges] for c in incoming}
    assert set(by_caller) == {"outer", "main"}
    # the handle counts as a call: outer calls inner three times
    assert by_caller["outer"] == [pos(PROGRAM, "inner(x, w)"), pos(PROGRAM, "inner(r, c)"), pos(PROGRAM, "inner(c, g_x)")]
    [outer_item] = await client.text_document_prepare_call_hierarchy_async(lsp.CallHierarchyPrepareParams(
        text_document=doc_id(uri), position=pos(PROGRAM, "fn outer", 4)))
    outgoing = await client.call_hierarchy_outgoing_calls_async(lsp.CallHierarchyOutgoingCallsParams(item=outer_item))
    assert [(c.to.name, len(c.from_ranges)) for c in outgoing] == [("inner", 3)]
    # built-in ops are not user functions; inner calls nothing
    [inner_item] = items
    assert await client.call_hierarchy_outgoing_calls_async(
        lsp.CallHierarchyOutgoingCallsParams(item=inner_item)) in ([], ())
    assert await client.text_document_prepare_call_hierarchy_async(lsp.CallHierarchyPrepareParams(
        text_document=doc_id(uri), position=pos(PROGRAM, "exp()"))) is None
