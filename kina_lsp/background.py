"""Whole-document work off the request loop, dropped as soon as it is stale.

Folding, selection ranges, semantic tokens and formatting each read the whole text; on a
huge or hostile document (a 128,000-character line of junk) that is seconds of work, and
on the event loop a hover sent meanwhile waited as long.  `run` does such work on one
worker thread of its own (the analysis has another: a fold never waits behind a check,
nor a hover behind a fold) and hands it a `checkpoint`, which the work calls between
bounded slices (a function, a chunk, a few hundred lines): once a newer version of the
document has arrived, or it was closed, `checkpoint` raises Stale and the work for the
replaced text stops there.  A job whose text is stale before it starts is skipped.  The
request then answers ContentModified (the client asks again, for the new text), as the
LSP specification says a server should when the content changed under a request.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

from pygls.exceptions import JsonRpcContentModified

if TYPE_CHECKING:
    from .base import Server

T = TypeVar("T")
Checkpoint = Callable[[], None]

_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kina-document")


class Stale(Exception):
    """The document changed (or closed) while work on its old text was running."""


def never() -> None:
    """A checkpoint that never stops the work (tests, the benchmark, the CLI)."""


def checkpoint_for(ls: Server, uri: str, text: str, version: int | None) -> Checkpoint:
    """A checkpoint that raises Stale once the buffer is no longer (text, version)."""
    def check() -> None:
        now = ls.buffer(uri)
        if now is None or now[1] != version or (version is None and now[0] is not text):
            raise Stale(uri)
    return check


async def run(ls: Server, uri: str, text: str, version: int | None,
              work: Callable[[Checkpoint], T]) -> T:
    """work(checkpoint) on the document worker, for the buffer (text, version); raises
    ContentModified when the document changed before the work finished."""
    check = checkpoint_for(ls, uri, text, version)

    def job() -> T:
        check()             # replaced while it waited in the queue: skip it at once
        return work(check)

    try:
        return await asyncio.get_running_loop().run_in_executor(_pool, job)
    except Stale:
        raise JsonRpcContentModified("the document changed while this was being computed; ask again") from None


def shutdown() -> None:
    _pool.shutdown(wait=False, cancel_futures=True)
