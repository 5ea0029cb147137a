"""The handlers of the requests the editor sends about a position or a document: hover,
inlay hints, definition / declaration / type definition, references, rename, document
symbols, completion and signature help (code actions register themselves in
features/actions.py).  Each asks the server for the
analysis of the buffer (`ls.view`) and hands it to its feature module
(kina_lsp/features/); server.py registers them (`register`), as it registers the
features that register themselves.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from compiler.modules.search import is_std

from .convert import index_of
from .documents import View, path_of, read_only
from .features import (
    astutil,
    completion,
    crossrefs,
    hover,
    inlay,
    modules,
    navigation,
)
from .protocol import RawResult

if TYPE_CHECKING:
    from .base import Safe
    from .server import KinaServer


async def _offset_view(ls: KinaServer, uri: str, position: lsp.Position,
                       wait: bool = False) -> tuple[View | None, int]:
    view = await ls.view(uri, wait)
    return (view, view.index.offset(position)) if view is not None else (None, 0)


async def _definition(ls: KinaServer, uri: str, position: lsp.Position) -> lsp.Location | None:
    """In this document, else in the imported file (a qualified name)."""
    view, offset = await _offset_view(ls, uri, position, wait=True)
    if view is None:
        return None
    return navigation.definition(view, uri, offset) or modules.definition(view, offset, ls.documents.uri_of)


def _refuse_std(uri: str, view: View, offset: int) -> None:
    """A rename in a standard-library file, or of a std function from an importer, is
    refused with a message that says why: std is read-only (it ships with the compiler)."""
    if read_only(uri):
        raise navigation.RenameRefused("this file is Kina's standard library (compiler/std), which is read-only")
    target = crossrefs.target_at(view.snapshot, view.text, offset, path_of(uri))
    if target is not None and is_std(target.path):
        raise navigation.RenameRefused(
            f"`{target.name}` is defined in Kina's standard library ({os.path.basename(target.path)}), "
            "which is read-only")


def register(server: KinaServer, safe: Safe) -> None:
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
        if view is None:
            return None
        _refuse_std(params.text_document.uri, view, offset)
        return navigation.prepare_rename(view, offset) or crossrefs.prepare(view, offset)

    @server.feature(lsp.TEXT_DOCUMENT_RENAME, lsp.RenameOptions(prepare_provider=True))
    @safe()
    async def on_rename(ls: KinaServer, params: lsp.RenameParams) -> lsp.WorkspaceEdit | None:
        navigation.check_new_name(params.new_name)   # a refusal is an error response that says why
        uri = params.text_document.uri
        view, offset = await _offset_view(ls, uri, params.position, wait=True)
        if view is None:
            return None
        _refuse_std(uri, view, offset)
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
