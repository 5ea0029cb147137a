"""The language server across files (issue 29): a copy of the three-file workspace of
tests/fixtures/imports (model imports layers and optim) as the server's workspace folder;
definition, hover and completion on qualified names, document links on import lines,
workspace symbols, references and rename across files (and a refused rename), and an
importer's diagnostics refreshed after an edit of an open imported file and after a change
on disk (workspace/didChangeWatchedFiles)."""
from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import pytest
import pytest_lsp
from conftest import FIXTURES, MODULE_LOOP, SERVER, change, doc_id, init_params, make_client, pos, published
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient
from rawlsp import RawServer

pytestmark = MODULE_LOOP


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("modules")
    for name in ("model.kina", "layers.kina", "optim.kina"):
        shutil.copy(FIXTURES / "imports" / name, root / name)
    (root / "lib").mkdir()
    (root / "lib" / "extra.kina").write_text(
        "// doubles its input\nfn twice[N](x: Tensor[F32, [N]]) -> Tensor[F32, [N]] {\n  x + x\n}\n")
    return root


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=SERVER, client_factory=make_client))
async def client(lsp_client: LanguageClient, workspace):
    params = init_params()
    params.root_uri = workspace.as_uri()
    params.workspace_folders = [lsp.WorkspaceFolder(uri=workspace.as_uri(), name="modules")]
    lsp_client.init_result = await lsp_client.initialize_session(params)   # (its capabilities: a test reads them)
    yield
    await lsp_client.shutdown_session()


def open_file(client, path: Path) -> tuple[str, str]:
    text = path.read_text(encoding="utf-8")
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(
        text_document=lsp.TextDocumentItem(uri=path.as_uri(), language_id="kina", version=1, text=text)))
    return path.as_uri(), text


async def opened(client, workspace, name: str) -> tuple[str, str]:
    uri, text = open_file(client, workspace / name)
    await published(client, uri, 1)
    return uri, text


async def next_diagnostics(client, uri: str, after: int, check, timeout: float = 20.0) -> list[lsp.Diagnostic]:
    """The first diagnostics published for uri after client.published[after] that pass check."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in client.published[after:]:
            if p.uri == uri and check(list(p.diagnostics)):
                return list(p.diagnostics)
        await asyncio.sleep(0.02)
    raise AssertionError(f"no matching diagnostics for {uri}: {[(p.uri, p.diagnostics) for p in client.published[after:]]}")


def name_range(text: str, needle: str, word: str) -> lsp.Range:
    start = pos(text, needle, needle.index(word))
    return lsp.Range(start=start, end=lsp.Position(line=start.line, character=start.character + len(word)))


async def test_definition_hover_and_completion_of_qualified_names(client, workspace):
    uri, text = await opened(client, workspace, "model.kina")
    layers = (workspace / "layers.kina")
    ltext = layers.read_text(encoding="utf-8")
    loc = await client.text_document_definition_async(lsp.DefinitionParams(
        text_document=doc_id(uri), position=pos(text, "layers.linear[4", len("layers.li"))))
    assert loc.uri == layers.as_uri() and loc.range == name_range(ltext, "fn linear[", "linear")
    hov = await client.text_document_hover_async(lsp.HoverParams(
        text_document=doc_id(uri), position=pos(text, "layers.mlp(x", len("layers.m"))))
    assert "fn mlp[M, D, H, N](x: Tensor[F32, [M, D]" in hov.contents.value
    assert hov.range == name_range(text, "layers.mlp(x", "layers.mlp")
    # completion after `layers.`: its public functions (not `_relu`), with signatures
    change(client, uri, 2, text.replace("  layers.mlp(x, w1, w2)", "  layers."))
    edited = text.replace("  layers.mlp(x, w1, w2)", "  layers.")
    res = await client.text_document_completion_async(lsp.CompletionParams(
        text_document=doc_id(uri), position=pos(edited, "  layers.\n", len("  layers."))))
    items = {i.label: i for i in res.items}
    assert sorted(items) == ["linear", "mlp", "mlp_loss", "sse"]
    assert items["sse"].detail.startswith("fn sse[M, N](y: Tensor[F32, [M, N]")
    assert "half the sum of squared errors" in items["sse"].documentation.value
    change(client, uri, 3, text)


async def test_hover_shows_the_doc_comment(client, workspace):
    uri, text = await opened(client, workspace, "model.kina")
    src = text.replace("  layers.mlp(x, w1, w2)", "  layers.sse(layers.mlp(x, w1, w2), layers.mlp(x, w1, w2))")
    change(client, uri, 4, src)
    hov = await client.text_document_hover_async(lsp.HoverParams(
        text_document=doc_id(uri), position=pos(src, "layers.sse", len("layers.ss"))))
    assert "fn sse[M, N]" in hov.contents.value and "half the sum of squared errors" in hov.contents.value
    change(client, uri, 5, text)


async def test_document_links_on_import_lines(client, workspace):
    uri, text = await opened(client, workspace, "model.kina")
    links = await client.text_document_document_link_async(lsp.DocumentLinkParams(text_document=doc_id(uri)))
    got = {(lk.range.start.line, lk.target) for lk in links}
    assert (1, (workspace / "layers.kina").as_uri()) in got and (2, (workspace / "optim.kina").as_uri()) in got
    first = next(lk for lk in links if lk.target.endswith("layers.kina"))
    assert first.range == name_range(text, "import layers", "layers")


async def test_workspace_symbols_cover_every_file(client, workspace):
    res = await client.workspace_symbol_async(lsp.WorkspaceSymbolParams(query="sgd"))
    assert [(s.name, s.location.uri) for s in res] == [("sgd[R, C]", (workspace / "optim.kina").as_uri())]


async def test_references_and_rename_across_files(client, workspace):
    uri, text = await opened(client, workspace, "model.kina")
    layers = workspace / "layers.kina"
    ltext = layers.read_text(encoding="utf-8")
    # from model's qualified call (layers.kina is not open: read from disk): the definition,
    # mlp's two calls, model's call
    refs = await client.text_document_references_async(lsp.ReferenceParams(
        text_document=doc_id(uri), position=pos(text, "layers.linear[4", len("layers.l")),
        context=lsp.ReferenceContext(include_declaration=True)))
    by_file: dict[str, int] = {}
    for r in refs:
        by_file[r.uri] = by_file.get(r.uri, 0) + 1
    assert by_file == {layers.as_uri(): 3, uri: 1}
    # rename `mlp` from its qualified call: the definition, the call in mlp_loss, model's calls
    edit = await client.text_document_rename_async(lsp.RenameParams(
        text_document=doc_id(uri), position=pos(text, "layers.mlp(x", len("layers.m")), new_name="perceptron"))
    changes = {u: sorted((e.range.start.line, e.range.start.character) for e in es)
               for u, es in edit.changes.items()}
    assert len(changes[uri]) == 1 and len(changes[layers.as_uri()]) == 2
    for u, es in edit.changes.items():
        src = text if u == uri else ltext
        for e in es:
            assert all(e.new_text == "perceptron" for e in es)
            line = src.splitlines()[e.range.start.line]
            assert line[e.range.start.character:e.range.end.character] == "mlp"
    # refused: `linear` would clash with `sse`, a function of layers.kina
    with pytest.raises(Exception, match="cannot rename to `sse`"):
        await client.text_document_rename_async(lsp.RenameParams(
            text_document=doc_id(uri), position=pos(text, "layers.linear[4", len("layers.l")), new_name="sse"))


STD_USER = """import nn

fn dense(x: Tensor[F32, [2, 3]], w: Tensor[F32, [3, 4]], b: Tensor[F32, [4]]) -> Tensor[F32, [2, 4]] {
  nn.linear[2, 3, 4](x, w, b)
}
"""


async def test_the_standard_library_is_read_only(client, workspace):
    """Issue 29: std files open read-only in the editor (the server says where std lives),
    and the server offers no edit of them: a rename of a std function from an importer,
    or inside std, is refused with a message that says so; std gets no formatting."""
    from compiler.core.stdlib import STD_DIR
    assert client.init_result.capabilities.experimental == {"kina": {"stdPath": STD_DIR}}
    path = workspace / "uses_std.kina"
    path.write_text(STD_USER, encoding="utf-8")
    uri, text = await opened(client, workspace, "uses_std.kina")
    at = pos(text, "nn.linear[", len("nn.li"))
    # Go to Definition still opens std's nn.kina
    found = await client.text_document_definition_async(lsp.DefinitionParams(text_document=doc_id(uri), position=at))
    found = found[0] if isinstance(found, list) else found
    std_uri = Path(STD_DIR, "nn.kina").as_uri()
    assert found.uri == std_uri
    for ask in (client.text_document_prepare_rename_async(lsp.PrepareRenameParams(text_document=doc_id(uri),
                                                                                  position=at)),
                client.text_document_rename_async(lsp.RenameParams(text_document=doc_id(uri), position=at,
                                                                   new_name="affine"))):
        with pytest.raises(Exception, match=r"`linear` is defined in Kina's standard library \(nn.kina\), "
                                            "which is read-only"):
            await ask
    # inside std itself: no rename, no formatting
    # (badly spaced: formatting would have an edit to offer in a file of the user's)
    std_text = Path(STD_DIR, "nn.kina").read_text(encoding="utf-8").replace("let y = x @ w", "let   y = x @ w")
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(
        text_document=lsp.TextDocumentItem(uri=std_uri, language_id="kina", version=1, text=std_text)))
    with pytest.raises(Exception, match="standard library .compiler/std., which is read-only"):
        await client.text_document_rename_async(lsp.RenameParams(
            text_document=doc_id(std_uri), position=pos(std_text, "fn linear", 4), new_name="affine"))
    assert not await client.text_document_formatting_async(lsp.DocumentFormattingParams(
        text_document=doc_id(std_uri), options=lsp.FormattingOptions(tab_size=2, insert_spaces=True)))
    client.text_document_did_close(lsp.DidCloseTextDocumentParams(text_document=doc_id(std_uri)))
    # a function of the user's own file still renames
    edit = await client.text_document_rename_async(lsp.RenameParams(
        text_document=doc_id(uri), position=pos(text, "fn dense", 4), new_name="dense2"))
    assert edit is not None and list(edit.changes) == [uri]


async def test_importer_diagnostics_follow_an_open_imported_file(client, workspace):
    uri, text = await opened(client, workspace, "model.kina")
    luri, ltext = await opened(client, workspace, "layers.kina")
    # references from the definition in the open file, without the declaration
    refs = await client.text_document_references_async(lsp.ReferenceParams(
        text_document=doc_id(luri), position=pos(ltext, "fn linear", 4),
        context=lsp.ReferenceContext(include_declaration=False)))
    assert sorted((r.uri, r.range.start.line) for r in refs) == sorted(
        [(luri, ltext[:ltext.index("linear(x, w1)")].count("\n")),
         (luri, ltext[:ltext.index("linear(h, w2)")].count("\n")),
         (uri, text[:text.index("layers.linear[4")].count("\n"))])
    n = len(client.published)
    change(client, luri, 2, ltext.replace("fn mlp_loss[", "fn mlp_loss2["))
    assert await published(client, luri, 2) == []
    diags = await next_diagnostics(client, uri, n, lambda ds: any(d.code == "unknown-name" for d in ds))
    assert "mlp_loss" in diags[0].message
    n = len(client.published)
    change(client, luri, 3, ltext)
    await next_diagnostics(client, uri, n, lambda ds: ds == [])
    # closed with an unsaved edit: model.kina reads layers.kina from disk again
    change(client, luri, 4, ltext.replace("fn mlp_loss[", "fn mlp_loss2["))
    await next_diagnostics(client, uri, n, lambda ds: any(d.code == "unknown-name" for d in ds))
    n = len(client.published)
    client.text_document_did_close(lsp.DidCloseTextDocumentParams(text_document=doc_id(luri)))
    await next_diagnostics(client, uri, n, lambda ds: ds == [])


async def test_importer_diagnostics_follow_a_change_on_disk(client, workspace):
    uri, _ = await opened(client, workspace, "model.kina")
    optim = workspace / "optim.kina"
    original = optim.read_text(encoding="utf-8")
    n = len(client.published)
    optim.write_text(original.replace("fn sgd[", "fn sgd_momentum["), encoding="utf-8")
    client.workspace_did_change_watched_files(lsp.DidChangeWatchedFilesParams(
        changes=[lsp.FileEvent(uri=optim.as_uri(), type=lsp.FileChangeType.Changed)]))
    diags = await next_diagnostics(client, uri, n, lambda ds: any(d.code == "unknown-name" for d in ds))
    assert "sgd" in diags[0].message
    n = len(client.published)
    optim.write_text(original, encoding="utf-8")
    client.workspace_did_change_watched_files(lsp.DidChangeWatchedFilesParams(
        changes=[lsp.FileEvent(uri=optim.as_uri(), type=lsp.FileChangeType.Changed)]))
    await next_diagnostics(client, uri, n, lambda ds: ds == [])


async def test_a_quoted_path_import(client, workspace):
    path = workspace / "quoted.kina"
    text = ('import "lib/extra.kina" as ex\n\n'
            "fn four(x: Tensor[F32, [3]]) -> Tensor[F32, [3]] {\n  ex.twice(ex.twice(x))\n}\n")
    path.write_text(text)
    uri, _ = await opened(client, workspace, "quoted.kina")
    assert await published(client, uri, 1) == []
    extra = workspace / "lib" / "extra.kina"
    links = await client.text_document_document_link_async(lsp.DocumentLinkParams(text_document=doc_id(uri)))
    assert [(lk.range, lk.target) for lk in links] == [(name_range(text, '"lib/extra.kina"', '"lib/extra.kina"'),
                                                        extra.as_uri())]
    loc = await client.text_document_definition_async(lsp.DefinitionParams(
        text_document=doc_id(uri), position=pos(text, "ex.twice(x", len("ex.t"))))
    assert loc.uri == extra.as_uri() and loc.range.start.line == 1
    loc = await client.text_document_definition_async(lsp.DefinitionParams(
        text_document=doc_id(uri), position=pos(text, "ex.twice(x", 1)))
    assert loc.uri == extra.as_uri() and loc.range.start == lsp.Position(line=0, character=0)
    hov = await client.text_document_hover_async(lsp.HoverParams(
        text_document=doc_id(uri), position=pos(text, "ex.twice(x", len("ex.t"))))
    assert "fn twice[N]" in hov.contents.value and "doubles its input" in hov.contents.value


def _registrations(caps: dict, expect: bool) -> list[dict]:
    """The registrations the server asks for after initialize (the raw client answers each):
    waits up to 10 s for one when `expect`, else gives the server a second to send one."""
    with RawServer() as s:
        s.initialize(capabilities=caps)
        deadline = time.monotonic() + (10.0 if expect else 1.0)
        while True:
            s.request("kina/serverStats", None)
            regs = [r for m in s.seen if m.get("method") == "client/registerCapability"
                    for r in m["params"]["registrations"]]
            if regs or time.monotonic() > deadline:
                return regs
            time.sleep(0.1)


async def test_the_file_watcher_is_registered_when_the_client_can():
    regs = _registrations({"workspace": {"didChangeWatchedFiles": {"dynamicRegistration": True}}}, True)
    assert [(r["method"], r["registerOptions"]["watchers"]) for r in regs] == [
        ("workspace/didChangeWatchedFiles", [{"globPattern": "**/*.kina"}])]
    assert _registrations({}, False) == []
