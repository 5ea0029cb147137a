"""The language server: the KinaServer class (a pygls LanguageServer), the registration
of every handler, the commands and custom requests, and `main`, the `kina-lsp` command
(stdio or --tcp, see cli.py).

The package's layout (core and features, and what each module does) is in
kina_lsp/__init__.py.  Every handler module has a `register(server, safe)`, which this
module calls once (REGISTERED, below): lifecycle.py (initialize, settings, document sync,
diagnostics), handlers.py (hover, navigation, completion ...) and the
feature modules (kina_lsp/features/) that register their own handlers.  None of them
imports this module (the features see the server as base.Server).  The commands stay
here: pygls reads a command handler's annotations (KinaServer) when it runs.

Every handler is wrapped: an exception is logged and the request still gets an
answer (an empty one), so junk text or a compiler bug never reaches the client
as an error; only deliberate errors (JsonRpcException: a refused rename, bad
command arguments) do, with a message that says why.  The server exits on
`exit` (code 0 after `shutdown`, else 1), on end of input, and when the client
process named in `initialize` (processId) disappears.
"""
from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable
from typing import Any, BinaryIO, cast

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcInvalidParams
from pygls.io_ import StdoutWriter
from pygls.lsp.server import LanguageServer

from compiler.syntax import parse

from . import background, cli, handlers, lifecycle, tcp, transport
from .base import safe
from .diagnostics import Publisher
from .documents import Buffer, Documents, View
from .features import (
    actions,
    call_hierarchy,
    commands,
    folding,
    formatting,
    highlight,
    lenses,
    links,
    selection,
    semantic,
    workspace_symbols,
)
from .features.commands import MlirText, Summary
from .protocol import KinaProtocol, KinaWorkspace
from .settings import Settings

log = logging.getLogger("kina_lsp")
VERSION = "0.1.0"
MLIR_REQUEST = "kina/mlir"
VIEW_FILE_TEXT = "kina/viewFileText"
SERVER_STATS = "kina/serverStats"


class KinaServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("kina-lsp", VERSION, text_document_sync_kind=lsp.TextDocumentSyncKind.Incremental,
                         protocol_cls=KinaProtocol)
        self.settings = Settings()
        self.documents = Documents(self.buffer, self.position_encoding)
        self.publisher = Publisher(self, self.documents, self.settings)

    @property
    def kina_protocol(self) -> KinaProtocol:
        return cast(KinaProtocol, self.protocol)          # protocol_cls=KinaProtocol

    @property
    def kina_workspace(self) -> KinaWorkspace:
        return cast(KinaWorkspace, self.workspace)        # KinaProtocol.lsp_initialize makes it

    def buffer(self, uri: str) -> Buffer | None:
        """(text, version) of an open document, or None (never a file read from disk)."""
        try:
            doc = self.kina_workspace.open_document(uri) if isinstance(uri, str) else None
        except RuntimeError:  # before initialize
            return None
        return None if doc is None else (doc.source, doc.version)

    # ---- transports (ours: see transport.py for what pygls' reader got wrong)
    def start_io(self, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> int:
        writer = StdoutWriter(stdout or sys.stdout.buffer)
        self.protocol.set_writer(writer)
        dispatcher = transport.Dispatcher(self.protocol, writer.write)
        source = transport.ThreadedFileSource((stdin or sys.stdin.buffer).fileno())
        try:
            return asyncio.run(transport.serve(source, dispatcher))
        except BrokenPipeError:
            log.error("the client closed the connection")
            return 1

    # (an exit code, and the connection token: not pygls' signature, which this replaces)
    def start_tcp(self, host: str, port: int, token: str = "",  # type: ignore[override]
                  announce: Callable[[int], None] = lambda port: None) -> int:
        return asyncio.run(tcp.serve_tcp(self.protocol, host, port, token, announce))

    def position_encoding(self) -> str:
        try:
            return self.workspace.position_encoding or "utf-16"
        except Exception:  # before initialize
            return "utf-16"

    async def view(self, uri: str, wait: bool = False) -> View | None:
        """The analysis of the buffer as it is now, within the request budget (else None).
        Requests the editor sends by itself, all the time (hover, inlay hints, symbols,
        code actions ...), keep to the budget; ones the user asked for and waits on
        (definition, references, rename) `wait` for the analysis, and get ContentModified
        (an error the editor does not show) when the text changed meanwhile."""
        return await self.documents.current(uri, budget=None if wait else self.settings.budget, modified=wait)

    async def set_validation_diagnostics(self, uri: str, text: str, failing: dict[str, str]) -> None:
        """Attach `validate` diagnostics for the text that was validated (dropped if it was edited since)."""
        view = await self.documents.current(uri)
        cur = self.buffer(uri)
        if view is None or cur is None or view.text != text:
            return
        self.publisher.set_extra(uri, commands.validation_diagnostics(view, failing), view, cur[1])

    def stop_work(self) -> None:
        """At exit: cancel every validation (giving their workers a moment to kill their child
        processes), then stop the analysis worker and the -O2 worker kept warm."""
        commands.stop_all()
        self.documents.shutdown()
        background.shutdown()
        from compiler.build import release_backend
        release_backend()      # the -O2 worker kept warm for the next build, if any


server = KinaServer()


# ---- commands and custom requests ---------------------------------------------------------
@server.command(actions.CMD_VALIDATE)
@safe(default=lambda: {"ok": False, "message": "Kina: build & validate failed (see the server log)"})
async def cmd_validate(ls: KinaServer, uri: Any) -> Summary:
    ls.kina_protocol.track()   # $/cancelRequest (and shutdown) cancel the build, not just the answer
    return await commands.build_and_validate(ls, _command_uri(uri, actions.CMD_VALIDATE))


@server.command(actions.CMD_MLIR)
@safe(default=lambda: {"language": "text", "content": "internal error (see the server log)", "ok": False})
async def cmd_show_mlir(ls: KinaServer, uri: Any) -> MlirText:
    return await commands.show_mlir(ls, _command_uri(uri, actions.CMD_MLIR))


@server.command(lenses.CMD_VALIDATE_FUNCTION)
@safe(default=lambda: lenses.refusal("build & validate failed (see the server log)"))
async def cmd_validate_function(ls: KinaServer, *args: object) -> Summary:
    """The code lenses' command [uri, function, "function" | "gradient"] (lenses.py)."""
    return await lenses.validate_function(ls, list(args))


def _command_uri(uri: object, command: str) -> str:
    # The handlers' `uri: Any`, not str: pygls structures a command's arguments by their
    # annotations, and would turn a number into a string and run the command on it (object
    # has no cattrs hook; Any passes the value through, and this check rejects it).
    if not isinstance(uri, str):
        raise JsonRpcInvalidParams(f"{command} takes one argument, the URI of an open .kina document")
    return uri


@server.feature(MLIR_REQUEST)
@safe(default=lambda: {"language": "text", "content": "internal error (see the server log)", "ok": False})
async def mlir_request(ls: KinaServer, params: object) -> MlirText:
    """Custom request: {"textDocument": {"uri": ...}} -> {"language", "content", "ok", "title"}."""
    return await commands.show_mlir(ls, _uri_param(params, MLIR_REQUEST))


@server.feature(VIEW_FILE_TEXT)
@safe()
def view_file_text(ls: KinaServer, params: object) -> dict[str, str | int | None] | None:
    """Custom request (as rust-analyzer's viewFileText): {"textDocument": {"uri"}} ->
    {"text", "version"} of the server's copy of an open document, or null.  For finding
    sync bugs: the client compares it with its own buffer."""
    uri = _uri_param(params, VIEW_FILE_TEXT)
    cur = ls.buffer(uri)
    return None if cur is None else {"text": cur[0], "version": cur[1]}


@server.feature(SERVER_STATS)
@safe()
def server_stats(ls: KinaServer, params: object) -> dict[str, object]:
    """Custom request: what the server's caches and bookkeeping hold now, so that a test (and
    a user who sees the memory grow) can check that each is bounded by the open texts."""
    entries, chars = parse.parse_local.cache_size()
    return {"documents": ls.documents.stats(), "futures": ls.kina_protocol.futures(),
            "inFlight": ls.kina_protocol.in_flight(),
            "openRequests": ls.kina_protocol.unanswered() - 1,    # (not counting this one)
            "parseCache": {"entries": entries, "chars": chars},
            "semanticCacheChars": semantic.cache_chars()}


def _uri_param(params: object, method: str) -> str:
    doc = params.get("textDocument") if isinstance(params, dict) else getattr(params, "textDocument", None)
    uri = doc.get("uri") if isinstance(doc, dict) else getattr(doc, "uri", None)
    if not isinstance(uri, str):
        raise JsonRpcInvalidParams(f'{method} takes {{"textDocument": {{"uri": "<uri of an open document>"}}}}')
    return uri


# ---- every other handler: each module registers its own ------------------------------------
REGISTERED = (lifecycle, handlers, semantic, folding, selection, highlight, workspace_symbols, call_hierarchy,
              formatting, lenses, links, actions)
for _module in REGISTERED:
    _module.register(server, safe)


# ---- entry point ----------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    """The `kina-lsp` command (see cli.py)."""
    return cli.run(server, argv)
