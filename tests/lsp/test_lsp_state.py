"""The server's state and its lifecycle (kina_lsp/documents.py): a request sees the
snapshot of the buffer as it is now, an edit makes the kept view stale (never wrong),
and closing a document drops everything the server kept about it."""
from __future__ import annotations

import asyncio

from kina_lsp.documents import Documents

OK = "fn f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] { x.exp() }\n"
BROKEN = "fn f(x: Tensor[F32, [2]]) -> Tensor[F32, [3]] { x.exp() }\n"


def run(coro):
    return asyncio.run(coro)


def test_a_request_sees_the_buffer_as_it_is_now():
    buffers = {"u": (OK, 1)}
    docs = Documents(buffers.get)

    async def go():
        first = await docs.current("u")
        assert first.text == OK and first.snapshot.diagnostics == []
        assert await docs.current("u") is first            # nothing changed: the same view
        buffers["u"] = (BROKEN, 2)                          # an edit: the kept view is stale
        second = await docs.current("u")
        assert second.text == BROKEN and [d.code for d in second.snapshot.diagnostics] == ["return-type"]
        buffers["u"] = (OK, 3)                              # an undo: the unchanged item is not re-parsed
        third = await docs.current("u")
        assert third.snapshot.diagnostics == [] and third.snapshot.items[0].res is first.snapshot.items[0].res
    try:
        run(go())
    finally:
        docs.shutdown()


def test_closing_a_document_drops_all_its_state():
    buffers = {"u": (OK, 1)}
    docs = Documents(buffers.get)

    async def go():
        await docs.current("u")
        st = docs.state("u")
        st.extra.append("validation result")
        st.symbols["k"] = "v"
        rid = docs.put_tokens("u", [0, 0, 2, 0, 0])
        assert docs.tokens("u", rid) == [0, 0, 2, 0, 0]
        assert docs.tokens("u", "stale") is None
        del buffers["u"]
        docs.close("u")
        assert docs.tokens("u", rid) is None
        assert await docs.current("u") is None             # not open: nothing is known
        fresh = docs.state("u")
        assert fresh.view is None and fresh.extra == [] and fresh.symbols == {} and fresh.tokens is None
    try:
        run(go())
    finally:
        docs.shutdown()


def test_an_obsolete_queued_analysis_is_skipped():
    buffers = {"u": (OK, 1)}
    docs = Documents(buffers.get)
    st = docs.state("u")
    try:
        buffers["u"] = (BROKEN, 2)
        assert docs._analyse(st, OK) is None                # the client has moved on: no work for OK
        assert docs._analyse(st, BROKEN).text == BROKEN
    finally:
        docs.shutdown()
