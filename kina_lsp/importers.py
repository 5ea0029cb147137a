"""Diagnostics of the files that import a changed file (issue 29).

When a file changes, in the editor (didChange of an open document) or on disk
(workspace/didChangeWatchedFiles), the open documents that import it, directly or not
(Workspace.importers_of), may have new diagnostics.  The edited document's own diagnostics
go out first (the publisher calls `changed` after it has published them); then one task
per changed file re-analyses its open importers *one at a time*, each one job of the
analysis worker, so that a new edit of the edited file waits behind at most one importer,
never behind all of them.  A newer change of the same file cancels the running refresh
(the new one does the importers again, for the newer text).

The re-analysis of an importer is the module loader's: only the files whose fingerprint
changed are analysed again, incrementally (compiler/modules/workspace.py).

The server asks the client to watch `**/*.kina` (dynamic registration, when the client
supports it), so that a file changed by another program (git checkout, a formatter) refreshes
its importers too.
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from .documents import path_of

if TYPE_CHECKING:
    from .server import KinaServer

log = logging.getLogger(__name__)
WATCH_ID = "kina-watch-files"
_tasks: dict[str, asyncio.Task[None]] = {}


def changed(ls: KinaServer, uri: str) -> None:
    """The text of `uri` changed and its own diagnostics are out: refresh its importers."""
    path = path_of(uri)
    if path is not None:
        _start(ls, path)


def _start(ls: KinaServer, path: str, deleted: bool = False) -> None:
    old = _tasks.pop(path, None)
    if old is not None:
        old.cancel()
    _tasks[path] = task = asyncio.get_running_loop().create_task(_refresh(ls, path, deleted))
    task.add_done_callback(lambda t: _tasks.pop(path, None) if _tasks.get(path) is t else None)


async def _refresh(ls: KinaServer, path: str, deleted: bool) -> None:
    docs = ls.documents
    try:
        def users(ws: object) -> list[str]:
            found = docs.workspace.importers_of(path)
            if deleted:
                docs.workspace.forget(path)
            return found
        importers = await docs.on_worker(users)
        # a created file may resolve an import that was missing: those documents too
        broken = [p for uri in docs.open_uris() if (p := path_of(uri)) is not None and docs.has_import_problem(uri)]
        uris = [u for p in dict.fromkeys(importers + broken) if (u := docs.open_uri(p)) is not None]
        for uri in uris:
            docs.invalidate(uri)
        for uri in uris:
            cur = ls.buffer(uri)
            if cur is None:
                continue
            view = await docs.current(uri)
            if view is not None and ls.buffer(uri) == cur:
                ls.publisher.publish(uri, view, cur[1], refresh=False)
        if uris and ls.publisher.pull:
            ls.workspace_diagnostic_refresh(None)
    except asyncio.CancelledError:
        pass
    except Exception:
        log.exception("refreshing the importers of %s failed", path)


def files_changed(ls: KinaServer, params: lsp.DidChangeWatchedFilesParams) -> None:
    """Files changed on disk: refresh the importers of each (an open document's buffer wins
    over its file, so a change of an open one's file changes nothing)."""
    for event in params.changes:
        path = path_of(event.uri)
        if path is None or ls.documents.open_uri(path) is not None:
            continue
        _start(ls, path, deleted=event.type == lsp.FileChangeType.Deleted)


async def register_watcher(ls: KinaServer) -> None:
    """Ask the client to send didChangeWatchedFiles for `**/*.kina`, if it can be asked."""
    caps = ls.client_capabilities.workspace
    watched = caps.did_change_watched_files if caps else None
    if not (watched and watched.dynamic_registration):
        return
    options = lsp.DidChangeWatchedFilesRegistrationOptions(watchers=[lsp.FileSystemWatcher(glob_pattern="**/*.kina")])
    try:
        await ls.client_register_capability_async(lsp.RegistrationParams(registrations=[lsp.Registration(
            id=WATCH_ID, method=lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES, register_options=options)]))
    except Exception:
        log.warning("the client did not register the file watcher", exc_info=True)
