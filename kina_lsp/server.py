"""kina-lsp: the Kina language server (pygls), over stdio or --tcp.

It reuses the compiler's incremental front end (compiler.analysis) for every
answer; the feature modules only translate between compiler objects and LSP:

  diagnostics.py  publish (debounced, off the event loop, stale results dropped)
  hover.py        types, op rules, signatures, reverseMode result tuples
  inlay.py        the type of every let binding
  navigation.py   definition, references, rename, document symbols
  completion.py   completion and signature help
  semantic.py     semantic tokens (ops, functions, dtypes, reverseMode): full, range, delta
  folding.py      folding ranges          selection.py  selection ranges
  highlight.py    document highlight      workspace_symbols.py  functions of the workspace
  call_hierarchy.py  incoming/outgoing calls    formatting.py  formatting (compiler.format)
  lenses.py       code lenses: Build & validate, Gradient check (kina.validateFunction)
  actions.py      quick fix for reverseMode method chains; source actions
  commands.py     kina.buildAndValidate, kina.showMlir / kina/mlir
  convert.py      Span (code points) <-> Range (UTF-16)

Every handler is wrapped: an exception is logged and the request still gets an
answer (an empty one), so junk text or a compiler bug never reaches the client
as an error.  The server exits on stdin EOF and when the client process named
in `initialize` (processId) disappears.
"""
from __future__ import annotations

import argparse
import functools
import inspect
import logging
import os
import sys
import threading
import time

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer

from . import actions, astutil, commands, completion, hover, inlay, navigation, semantic
from . import call_hierarchy, folding, formatting, highlight, lenses, selection, workspace_symbols
from .convert import LineIndex
from .diagnostics import Publisher
from .documents import Documents
from .settings import Settings

log = logging.getLogger("kina_lsp")
VERSION = "0.1.0"
MLIR_REQUEST = "kina/mlir"


class KinaServer(LanguageServer):
    def __init__(self):
        super().__init__("kina-lsp", VERSION, text_document_sync_kind=lsp.TextDocumentSyncKind.Incremental)
        self.settings = Settings()
        self.documents = Documents(self.buffer, self.position_encoding)
        self.publisher = Publisher(self, self.documents, self.settings)

    def buffer(self, uri: str):
        """(text, version) of an open document, or None."""
        doc = self.workspace.text_documents.get(uri)
        return None if doc is None else (doc.source, doc.version)

    def position_encoding(self):
        try:
            return self.workspace.position_encoding
        except Exception:  # before initialize
            return "utf-16"

    async def view(self, uri: str):
        return await self.documents.current(uri)

    async def set_validation_diagnostics(self, uri: str, text: str, failing: dict) -> None:
        """Attach `validate` diagnostics for the text that was validated (dropped if it was edited since)."""
        view = await self.documents.current(uri)
        cur = self.buffer(uri)
        if view is None or cur is None or view.text != text:
            return
        self.documents.state(uri).extra = commands.validation_diagnostics(view, failing)
        self.publisher.publish(uri, view, cur[1])


server = KinaServer()


def safe(default=None):
    """Wrap a handler: log any exception and answer `default` instead."""
    def wrap(fn):
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def run_async(*args, **kwargs):
                try:
                    return await fn(*args, **kwargs)
                except Exception:
                    log.exception("%s failed", fn.__name__)
                    return default() if callable(default) else default
            return run_async

        @functools.wraps(fn)
        def run(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception:
                log.exception("%s failed", fn.__name__)
                return default() if callable(default) else default
        return run
    return wrap


async def _offset_view(ls: KinaServer, uri: str, position: lsp.Position):
    view = await ls.view(uri)
    return (view, view.index.offset(position)) if view is not None else (None, 0)


# ---- lifecycle and settings ---------------------------------------------------------------
@server.feature(lsp.INITIALIZE)
@safe()
def initialize(ls: KinaServer, params: lsp.InitializeParams):
    ls.settings.update(params.initialization_options)
    if params.process_id:
        _watch_parent(params.process_id)


@server.feature(lsp.INITIALIZED)
@safe()
async def initialized(ls: KinaServer, params: lsp.InitializedParams):
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
async def did_change_configuration(ls: KinaServer, params: lsp.DidChangeConfigurationParams):
    ls.settings.update(params.settings)
    await _pull_configuration(ls)
    for uri in list(ls.workspace.text_documents):
        ls.publisher.schedule(uri)


def _watch_parent(pid: int) -> None:
    """Exit when the editor dies without closing our stdin (LSP processId)."""
    def watch():
        while True:
            time.sleep(3)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                log.info("client process %d is gone; exiting", pid)
                os._exit(0)
            except PermissionError:
                pass  # it exists, owned by someone else
    threading.Thread(target=watch, name="kina-parent-watch", daemon=True).start()


# ---- document sync -> diagnostics -----------------------------------------------------------
@server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
@safe()
def did_open(ls: KinaServer, params: lsp.DidOpenTextDocumentParams):
    ls.publisher.schedule(params.text_document.uri, immediate=True)


@server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
@safe()
def did_change(ls: KinaServer, params: lsp.DidChangeTextDocumentParams):
    ls.documents.state(params.text_document.uri).extra = []  # validation results are for the old text
    ls.publisher.schedule(params.text_document.uri)


@server.feature(lsp.TEXT_DOCUMENT_DID_SAVE)
@safe()
def did_save(ls: KinaServer, params: lsp.DidSaveTextDocumentParams):
    ls.publisher.schedule(params.text_document.uri, immediate=True)


@server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
@safe()
def did_close(ls: KinaServer, params: lsp.DidCloseTextDocumentParams):
    ls.documents.close(params.text_document.uri)
    ls.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=params.text_document.uri,
                                                                      diagnostics=[]))


# ---- features -----------------------------------------------------------------------------
@server.feature(lsp.TEXT_DOCUMENT_HOVER)
@safe()
async def on_hover(ls: KinaServer, params: lsp.HoverParams):
    view, offset = await _offset_view(ls, params.text_document.uri, params.position)
    return hover.hover(view, offset) if view else None


@server.feature(lsp.TEXT_DOCUMENT_INLAY_HINT, lsp.InlayHintOptions(resolve_provider=False))
@safe(default=list)
async def on_inlay_hint(ls: KinaServer, params: lsp.InlayHintParams):
    if not ls.settings.inlay_hints:
        return []
    view = await ls.view(params.text_document.uri)
    return inlay.inlay_hints(view, view.index.span(params.range)) if view else []


@server.feature(lsp.TEXT_DOCUMENT_DEFINITION)
@safe()
async def on_definition(ls: KinaServer, params: lsp.DefinitionParams):
    view, offset = await _offset_view(ls, params.text_document.uri, params.position)
    return navigation.definition(view, params.text_document.uri, offset) if view else None


@server.feature(lsp.TEXT_DOCUMENT_REFERENCES)
@safe(default=list)
async def on_references(ls: KinaServer, params: lsp.ReferenceParams):
    view, offset = await _offset_view(ls, params.text_document.uri, params.position)
    return navigation.references(view, params.text_document.uri, offset,
                                 params.context.include_declaration) if view else []


@server.feature(lsp.TEXT_DOCUMENT_PREPARE_RENAME)
@safe()
async def on_prepare_rename(ls: KinaServer, params: lsp.PrepareRenameParams):
    view, offset = await _offset_view(ls, params.text_document.uri, params.position)
    return navigation.prepare_rename(view, offset) if view else None


@server.feature(lsp.TEXT_DOCUMENT_RENAME, lsp.RenameOptions(prepare_provider=True))
async def on_rename(ls: KinaServer, params: lsp.RenameParams):
    # not @safe: an invalid new name must reach the user as an error response
    view, offset = await _offset_view(ls, params.text_document.uri, params.position)
    return navigation.rename(view, params.text_document.uri, offset, params.new_name) if view else None


@server.feature(lsp.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
@safe(default=list)
async def on_document_symbol(ls: KinaServer, params: lsp.DocumentSymbolParams):
    view = await ls.view(params.text_document.uri)
    return navigation.document_symbols(view) if view else []


@server.feature(lsp.TEXT_DOCUMENT_COMPLETION, lsp.CompletionOptions(trigger_characters=[".", "(", ",", "=", "["]))
@safe(default=list)
def on_completion(ls: KinaServer, params: lsp.CompletionParams):
    # lexical on the live buffer: no analysis needed, so it never waits for one
    doc = ls.workspace.get_text_document(params.text_document.uri)
    text = doc.source
    offset = LineIndex(text, ls.position_encoding()).offset(params.position)
    return lsp.CompletionList(is_incomplete=False,
                              items=completion.complete(text, offset, completion.function_names(text)))


@server.feature(lsp.TEXT_DOCUMENT_SIGNATURE_HELP,
                lsp.SignatureHelpOptions(trigger_characters=["(", ","], retrigger_characters=["="]))
@safe()
async def on_signature_help(ls: KinaServer, params: lsp.SignatureHelpParams):
    view, offset = await _offset_view(ls, params.text_document.uri, params.position)
    if view is None:
        return None
    sigs = {}
    for fn in (view.snapshot.module.functions if view.snapshot.module else ()):
        ps = [f"{p.name}: {astutil.type_text(p.type)}" for p in fn.params]
        sigs[fn.name] = (f"{fn.name}({', '.join(ps)}) -> {astutil.type_text(fn.ret)}", ps)
    return completion.signature_help(view.text, offset, sigs)


@server.feature(lsp.TEXT_DOCUMENT_CODE_ACTION,
                lsp.CodeActionOptions(code_action_kinds=[lsp.CodeActionKind.QuickFix, lsp.CodeActionKind.Source]))
@safe(default=list)
async def on_code_action(ls: KinaServer, params: lsp.CodeActionParams):
    view = await ls.view(params.text_document.uri)
    return actions.code_actions(view, params.text_document.uri, params) if view else []


@server.command(actions.CMD_VALIDATE)
@safe(default=lambda: {"ok": False, "message": "Kina: build & validate failed (see the server log)"})
async def cmd_validate(ls: KinaServer, uri: str):
    return await commands.build_and_validate(ls, uri)


@server.command(actions.CMD_MLIR)
@safe(default=lambda: {"language": "text", "content": "internal error (see the server log)", "ok": False})
async def cmd_show_mlir(ls: KinaServer, uri: str):
    return await commands.show_mlir(ls, uri)


@server.feature(MLIR_REQUEST)
@safe(default=lambda: {"language": "text", "content": "internal error (see the server log)", "ok": False})
async def mlir_request(ls: KinaServer, params):
    """Custom request: {"textDocument": {"uri": ...}} -> {"language", "content", "ok", "title"}."""
    doc = params.get("textDocument") if isinstance(params, dict) else getattr(params, "textDocument", None)
    uri = doc.get("uri") if isinstance(doc, dict) else getattr(doc, "uri", None)
    return await commands.show_mlir(ls, uri)


# ---- feature modules that register their own handlers ---------------------------------------
for _feature in (semantic, folding, selection, highlight, workspace_symbols, call_hierarchy, formatting, lenses):
    _feature.register(server, safe)


# ---- entry point ----------------------------------------------------------------------------
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="kina-lsp", description="The Kina language server (stdio by default).")
    parser.add_argument("--tcp", action="store_true", help="serve over TCP instead of stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=2087)
    parser.add_argument("--log-level", default="WARNING", help="stderr log level (DEBUG, INFO, ...)")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper(),
                        format="kina-lsp %(levelname)s %(name)s: %(message)s")
    try:
        if args.tcp:
            server.start_tcp(args.host, args.port)
        else:
            server.start_io()
    finally:
        server.documents.shutdown()
    # worker threads (a running validation) must not keep a server without a client alive
    os._exit(0)
