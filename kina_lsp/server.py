"""The language server: the KinaServer class (a pygls LanguageServer), the registration
of every handler, and `main`, the `kina-lsp` command (stdio or --tcp, see cli.py).

The package's layout (core and features, and what each module does) is in
kina_lsp/__init__.py.  This module imports the feature modules (kina_lsp/features/)
and registers their handlers; they never import it (they see the server as
base.Server).

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
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, BinaryIO, cast

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcInvalidParams
from pygls.io_ import StdoutWriter
from pygls.lsp.server import LanguageServer

from compiler.syntax import parse

from . import background, cli, diagnostics, importers, tcp, transport
from .base import safe
from .convert import index_of
from .diagnostics import Publisher
from .documents import Buffer, Documents, View
from .features import (
    actions,
    astutil,
    call_hierarchy,
    commands,
    completion,
    crossrefs,
    folding,
    formatting,
    highlight,
    hover,
    inlay,
    lenses,
    links,
    modules,
    navigation,
    selection,
    semantic,
    workspace_symbols,
)
from .features.commands import MlirText, Summary
from .protocol import KinaProtocol, KinaWorkspace, RawResult
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
        processes), then stop the analysis worker."""
        commands.stop_all()
        self.documents.shutdown()
        background.shutdown()


server = KinaServer()


async def _offset_view(ls: KinaServer, uri: str, position: lsp.Position,
                       wait: bool = False) -> tuple[View | None, int]:
    view = await ls.view(uri, wait)
    return (view, view.index.offset(position)) if view is not None else (None, 0)


# ---- lifecycle and settings ---------------------------------------------------------------
@server.feature(lsp.INITIALIZE)
@safe()
def initialize(ls: KinaServer, params: lsp.InitializeParams) -> None:
    ls.settings.update(params.initialization_options)
    ls.publisher.configure(params.capabilities)
    if params.process_id and params.process_id > 0:
        _watch_parent(params.process_id)


@server.feature(lsp.INITIALIZED)
@safe()
async def initialized(ls: KinaServer, params: lsp.InitializedParams) -> None:
    _background.add(task := asyncio.ensure_future(importers.register_watcher(ls)))
    task.add_done_callback(_background.discard)
    await _pull_configuration(ls)


async def _pull_configuration(ls: KinaServer) -> None:
    caps = ls.client_capabilities.workspace
    if not (caps and caps.configuration):
        return
    result = await ls.workspace_configuration_async(
        lsp.ConfigurationParams(items=[lsp.ConfigurationItem(section="kina")]))
    if result:
        ls.settings.update({"kina": result[0]} if isinstance(result[0], dict) else None)


@server.feature(lsp.WORKSPACE_DID_CHANGE_CONFIGURATION)
@safe()
async def did_change_configuration(ls: KinaServer, params: lsp.DidChangeConfigurationParams) -> None:
    ls.settings.update(params.settings)
    await _pull_configuration(ls)
    for uri in list(ls.workspace.text_documents):
        ls.publisher.schedule(uri)


def _watch_parent(pid: int) -> None:
    """Exit when the editor dies without closing our stdin (LSP processId)."""
    def watch() -> None:
        while True:
            time.sleep(3)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                log.info("client process %d is gone; exiting", pid)
                # through the SIGTERM handler (cli), which cleans up in the main thread
                os.kill(os.getpid(), signal.SIGTERM)
                return
            except PermissionError:
                pass  # it exists, owned by someone else
    threading.Thread(target=watch, name="kina-parent-watch", daemon=True).start()


# ---- document sync -> diagnostics -----------------------------------------------------------
_background: set[asyncio.Future[None]] = set()    # running cache fills (a task needs a reference)


@server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
@safe()
def did_open(ls: KinaServer, params: lsp.DidOpenTextDocumentParams) -> None:
    ls.documents.opened(params.text_document.uri)
    ls.publisher.schedule(params.text_document.uri, immediate=True)
    _background.add(task := asyncio.ensure_future(semantic.warm(ls, params.text_document.uri)))
    task.add_done_callback(_background.discard)


@server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
@safe()
def did_change(ls: KinaServer, params: lsp.DidChangeTextDocumentParams) -> None:
    ls.publisher.edited(params.text_document.uri)  # validation results are for the old text
    ls.publisher.schedule(params.text_document.uri)
    if ls.publisher.pull:   # (a push refreshes the importers after the document's own push)
        _background.add(task := asyncio.ensure_future(_refresh_after_pull(ls, params.text_document.uri)))
        task.add_done_callback(_background.discard)


async def _refresh_after_pull(ls: KinaServer, uri: str) -> None:
    await asyncio.sleep(ls.settings.debounce_ms / 1000.0)
    cur = ls.buffer(uri)
    if cur is not None and await ls.documents.current(uri) is not None and ls.buffer(uri) == cur:
        importers.changed(ls, uri)


@server.feature(lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES)
@safe()
def did_change_watched_files(ls: KinaServer, params: lsp.DidChangeWatchedFilesParams) -> None:
    importers.files_changed(ls, params)


@server.feature(lsp.TEXT_DOCUMENT_DID_SAVE)
@safe()
def did_save(ls: KinaServer, params: lsp.DidSaveTextDocumentParams) -> None:
    ls.publisher.schedule(params.text_document.uri, immediate=True)


@server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
@safe()
def did_close(ls: KinaServer, params: lsp.DidCloseTextDocumentParams) -> None:
    ls.documents.close(params.text_document.uri)
    ls.publisher.clear(params.text_document.uri)
    importers.changed(ls, params.text_document.uri)   # they read its file again, not the closed buffer


@server.feature(lsp.TEXT_DOCUMENT_DIAGNOSTIC, diagnostics.OPTIONS)
async def on_diagnostic(ls: KinaServer, params: lsp.DocumentDiagnosticParams) -> lsp.DocumentDiagnosticReport:
    # not @safe: an empty report would wipe the client's diagnostics; a failure is an error
    return await ls.publisher.report(params)


# ---- features -----------------------------------------------------------------------------
@server.feature(lsp.TEXT_DOCUMENT_HOVER)
@safe()
async def on_hover(ls: KinaServer, params: lsp.HoverParams) -> lsp.Hover | None:
    uri = params.text_document.uri
    view, offset = await _offset_view(ls, uri, params.position)
    if view is not None:
        return modules.hover(view, offset) or hover.hover(view, offset)
    # over the budget (an edit is being analysed): answer from the last analysis when the
    # function under the cursor is unchanged since, else wait for the analysis; never null
    cur = ls.buffer(uri)
    if cur is None:
        return None
    text = cur[0]
    index = index_of(text, ls.position_encoding())
    offset = index.offset(params.position)
    found = ls.documents.last_good(uri, text, offset)
    if found is None:
        view = await ls.documents.current(uri)
        return hover.hover(view, view.index.offset(params.position)) if view else None
    old, old_offset = found
    answer = hover.hover(old, old_offset)
    if answer is not None and answer.range is not None:   # the range, in the new text's positions
        span = old.index.span(answer.range)
        delta = offset - old_offset
        answer.range = index.range(type(span)(span.start + delta, span.end + delta))
    return answer


@server.feature(lsp.TEXT_DOCUMENT_INLAY_HINT, lsp.InlayHintOptions(resolve_provider=True))
@safe(default=list)
async def on_inlay_hint(ls: KinaServer, params: lsp.InlayHintParams) -> list[lsp.InlayHint]:
    if not ls.settings.inlay_hints:
        return []
    uri = params.text_document.uri
    view = await ls.view(uri)
    if view is None:
        return []
    caps = ls.client_capabilities.text_document
    support = caps.inlay_hint.resolve_support if caps and caps.inlay_hint else None
    lazy = support is not None and "tooltip" in support.properties
    return inlay.inlay_hints(view, view.index.span(params.range), uri, ls.settings.parameter_hints, lazy)


@server.feature(lsp.INLAY_HINT_RESOLVE)
@safe(default=lambda: None)
async def on_inlay_hint_resolve(ls: KinaServer, hint: lsp.InlayHint) -> lsp.InlayHint:
    uri = hint.data.get("uri") if isinstance(hint.data, dict) else None
    view = await ls.view(uri) if isinstance(uri, str) else None
    return inlay.resolve(view, hint)


@server.feature(lsp.TEXT_DOCUMENT_DEFINITION)
@safe()
async def on_definition(ls: KinaServer, params: lsp.DefinitionParams) -> lsp.Location | None:
    return await _definition(ls, params.text_document.uri, params.position)


async def _definition(ls: KinaServer, uri: str, position: lsp.Position) -> lsp.Location | None:
    """In this document, else in the imported file (a qualified name)."""
    view, offset = await _offset_view(ls, uri, position, wait=True)
    if view is None:
        return None
    return navigation.definition(view, uri, offset) or modules.definition(view, offset, ls.documents.uri_of)


@server.feature(lsp.TEXT_DOCUMENT_DECLARATION)
@safe()
async def on_declaration(ls: KinaServer, params: lsp.DeclarationParams) -> lsp.Location | None:
    """Kina declares and defines in one place (a parameter, a let, a function)."""
    return await _definition(ls, params.text_document.uri, params.position)


@server.feature(lsp.TEXT_DOCUMENT_TYPE_DEFINITION)
@safe()
async def on_type_definition(ls: KinaServer, params: lsp.TypeDefinitionParams) -> lsp.Location | None:
    view, offset = await _offset_view(ls, params.text_document.uri, params.position, wait=True)
    return navigation.type_definition(view, params.text_document.uri, offset) if view else None


@server.feature(lsp.TEXT_DOCUMENT_REFERENCES)
@safe(default=list)
async def on_references(ls: KinaServer, params: lsp.ReferenceParams) -> list[lsp.Location]:
    uri = params.text_document.uri
    view, offset = await _offset_view(ls, uri, params.position, wait=True)
    if view is None:
        return []
    uses = await crossrefs.uses_at(ls, uri, view, offset)     # a function: in every file
    if uses is not None:
        return crossrefs.locations(uses, ls.documents.uri_of, view.index.encoding,
                                   params.context.include_declaration)
    return navigation.references(view, uri, offset, params.context.include_declaration)


@server.feature(lsp.TEXT_DOCUMENT_PREPARE_RENAME)
@safe()
async def on_prepare_rename(ls: KinaServer, params: lsp.PrepareRenameParams) -> lsp.PrepareRenamePlaceholder | None:
    view, offset = await _offset_view(ls, params.text_document.uri, params.position, wait=True)
    return (navigation.prepare_rename(view, offset) or crossrefs.prepare(view, offset)) if view else None


@server.feature(lsp.TEXT_DOCUMENT_RENAME, lsp.RenameOptions(prepare_provider=True))
@safe()
async def on_rename(ls: KinaServer, params: lsp.RenameParams) -> lsp.WorkspaceEdit | None:
    navigation.check_new_name(params.new_name)   # a refusal is an error response that says why
    uri = params.text_document.uri
    view, offset = await _offset_view(ls, uri, params.position, wait=True)
    if view is None:
        return None
    uses = await crossrefs.uses_at(ls, uri, view, offset, params.new_name)   # a function: in every file
    if uses is None:
        return navigation.rename(view, uri, offset, params.new_name)
    if uses.conflict is not None:
        raise navigation.RenameRefused(f"cannot rename to `{params.new_name}`: {uses.conflict}")
    return crossrefs.workspace_edit(uses, ls.documents.uri_of, view.index.encoding, params.new_name)


@server.feature(lsp.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
@safe(default=list)
async def on_document_symbol(ls: KinaServer, params: lsp.DocumentSymbolParams) -> RawResult | list[lsp.DocumentSymbol]:
    view = await ls.view(params.text_document.uri)
    if view is None:
        return []
    return RawResult(navigation.document_symbols(view, ls.documents.state(params.text_document.uri).symbols))


@server.feature(lsp.TEXT_DOCUMENT_COMPLETION, lsp.CompletionOptions(trigger_characters=[".", "(", ",", "=", "["]))
@safe(default=list)
async def on_completion(ls: KinaServer, params: lsp.CompletionParams) -> lsp.CompletionList | list[lsp.CompletionItem]:
    # lexical on the live buffer: no analysis needed, so it never waits for one ...
    cur = ls.buffer(params.text_document.uri)
    if cur is None:   # not open: never read (and list the identifiers of) a file from disk
        return []
    text = cur[0]
    offset = index_of(text, ls.position_encoding()).offset(params.position)
    module = modules.module_before(text, offset)
    if module is not None:   # ... except after `m.`: an import's functions (its imports need not be analysed again)
        view = ls.documents.state(params.text_document.uri).view or await ls.view(params.text_document.uri)
        found = modules.completions(view.snapshot, module) if view is not None else None
        if found is not None:
            return lsp.CompletionList(is_incomplete=False, items=found)
    return lsp.CompletionList(is_incomplete=False,
                              items=completion.complete(text, offset, completion.function_names(text)))


@server.feature(lsp.TEXT_DOCUMENT_SIGNATURE_HELP,
                lsp.SignatureHelpOptions(trigger_characters=["(", ","], retrigger_characters=["="]))
@safe()
async def on_signature_help(ls: KinaServer, params: lsp.SignatureHelpParams) -> lsp.SignatureHelp | None:
    view, offset = await _offset_view(ls, params.text_document.uri, params.position)
    if view is None:
        return None
    sigs: dict[str, tuple[str, list[str]]] = {}
    sizes: dict[str, list[str]] = {}
    for _offset, fn in view.snapshot.local_functions():   # signatures only: no spans needed
        ps = [f"{p.name}: {astutil.type_text(p.type)}" for p in fn.params]
        sigs.setdefault(fn.name, (f"{astutil.generic_name(fn)}({', '.join(ps)}) -> {astutil.type_text(fn.ret)}", ps))
        sizes.setdefault(fn.name, [s.name for s in fn.sizes])
    return completion.signature_help(view.text, offset, sigs, sizes)


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


# ---- feature modules that register their own handlers ---------------------------------------
for _feature in (semantic, folding, selection, highlight, workspace_symbols, call_hierarchy, formatting, lenses,
                 links, actions):
    _feature.register(server, safe)


# ---- entry point ----------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    """The `kina-lsp` command (see cli.py)."""
    return cli.run(server, argv)
