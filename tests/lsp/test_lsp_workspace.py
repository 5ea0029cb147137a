"""Workspace symbols (open documents and the workspace folders' .kina files, never
anything outside them), formatting and range formatting, and code lenses through a
real server whose workspace is a temporary folder."""
from __future__ import annotations

from pathlib import Path

import pytest
import pytest_lsp
from conftest import MODULE_LOOP, SERVER, doc_id, init_params, make_client, published
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient

pytestmark = MODULE_LOOP

FN = "fn {name}(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {{\n  x.exp()\n}}\n"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ws")
    outside = tmp_path_factory.mktemp("outside")
    (outside / "secret.kina").write_text(FN.format(name="secret_outside"))
    (root / "a.kina").write_text(FN.format(name="alpha_layer") + FN.format(name="beta"))
    (root / "sub").mkdir()
    (root / "sub" / "b.kina").write_text(FN.format(name="gamma_layer") + "fn broken( {\n")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "h.kina").write_text(FN.format(name="hidden_layer"))
    (root / "big.kina").write_text(FN.format(name="big_layer") + "// " + "x" * (1 << 20) + "\n")
    (root / "link.kina").symlink_to(outside / "secret.kina")           # a file outside: not read
    (root / "linked_dir").symlink_to(outside, target_is_directory=True)  # a folder outside: not walked
    (root / "notes.txt").write_text(FN.format(name="text_layer"))
    return root


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=SERVER, client_factory=make_client))
async def client(lsp_client: LanguageClient, workspace):
    params = init_params()
    params.root_uri = workspace.as_uri()
    params.workspace_folders = [lsp.WorkspaceFolder(uri=workspace.as_uri(), name="ws")]
    await lsp_client.initialize_session(params)
    yield
    await lsp_client.shutdown_session()


def open_at(client, path: Path, text: str) -> str:
    uri = path.as_uri()
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(
        text_document=lsp.TextDocumentItem(uri=uri, language_id="kina", version=1, text=text)))
    return uri


async def symbols(client, query: str) -> dict[str, str]:
    res = await client.workspace_symbol_async(lsp.WorkspaceSymbolParams(query=query))
    return {s.name: s.location.uri for s in res}


async def test_workspace_symbols_cover_folders_and_open_documents(client, workspace):
    got = await symbols(client, "layer")
    assert got == {"alpha_layer": (workspace / "a.kina").as_uri(),
                   "gamma_layer": (workspace / "sub" / "b.kina").as_uri()}
    # fuzzy: the query's letters in order
    assert set(await symbols(client, "gmly")) == {"gamma_layer"}
    assert {"alpha_layer", "beta", "gamma_layer", "broken"} <= set(await symbols(client, ""))
    # an open buffer wins over its file, and an open document outside the folders is listed
    open_at(client, workspace / "a.kina", FN.format(name="alpha_renamed_layer"))
    scratch = open_at(client, Path("/tmp/kina-lsp-test/scratch_ws.kina"), FN.format(name="delta_layer"))
    got = await symbols(client, "layer")
    assert "alpha_layer" not in got and got["alpha_renamed_layer"] == (workspace / "a.kina").as_uri()
    assert got["delta_layer"] == scratch


async def test_workspace_symbols_never_read_outside_the_folders(client):
    got = set(await symbols(client, ""))
    assert not got & {"secret_outside", "hidden_layer", "big_layer", "text_layer"}


async def test_workspace_symbol_location(client, workspace):
    res = await client.workspace_symbol_async(lsp.WorkspaceSymbolParams(query="gamma"))
    [sym] = res
    assert sym.kind == lsp.SymbolKind.Function and sym.container_name == "b.kina"
    assert sym.location.range == lsp.Range(start=lsp.Position(line=0, character=3),
                                           end=lsp.Position(line=0, character=14))


UGLY = ("// leading\nfn f(x:Tensor[F32,[2]])->Tensor[F32,[2]]{let y=x.exp() in // keep me\ny+x}\n"
        "fn g(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  x\n}\n"
        "fn h(x:Tensor[F32,[2]])->Tensor[F32,[2]]{x*x}\n")
PRETTY = ("// leading\nfn f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  let y = x.exp() in // keep me\n  y + x\n}\n\n"
          "fn g(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  x\n}\n\n"
          "fn h(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  x * x\n}\n")


def apply(text: str, edits) -> str:
    lines = text.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    spans = sorted(((starts[e.range.start.line] + e.range.start.character,
                     starts[e.range.end.line] + e.range.end.character, e.new_text) for e in edits), reverse=True)
    for s, e, new in spans:
        text = text[:s] + new + text[e:]
    return text


async def test_formatting_gives_minimal_edits(client, workspace):
    uri = open_at(client, workspace / "fmt.kina", UGLY)
    await published(client, uri, 1)
    opts = lsp.FormattingOptions(tab_size=8, insert_spaces=False)
    edits = await client.text_document_formatting_async(lsp.DocumentFormattingParams(
        text_document=doc_id(uri), options=opts))
    assert apply(UGLY, edits) == PRETTY
    assert all(e.range.start.line != 3 for e in edits)       # g's lines are untouched
    # range formatting: only h
    h_line = UGLY.split("\n").index("fn h(x:Tensor[F32,[2]])->Tensor[F32,[2]]{x*x}")
    edits = await client.text_document_range_formatting_async(lsp.DocumentRangeFormattingParams(
        text_document=doc_id(uri), options=opts,
        range=lsp.Range(start=lsp.Position(line=h_line, character=0), end=lsp.Position(line=h_line, character=5))))
    out = apply(UGLY, edits)
    assert out.endswith("fn h(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  x * x\n}\n")
    assert out.startswith("// leading\nfn f(x:Tensor[F32,[2]])")


async def test_formatting_leaves_broken_text_alone(client, workspace):
    uri = open_at(client, workspace / "fmt_broken.kina", "fn f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  x +\n}\n")
    await published(client, uri, 1)
    edits = await client.text_document_formatting_async(lsp.DocumentFormattingParams(
        text_document=doc_id(uri), options=lsp.FormattingOptions(tab_size=2, insert_spaces=True)))
    assert not edits
    assert any("not formatted" in m.message for m in client.log_messages)


LENSED = """fn layer(x: Tensor[F32, [2]], w: Tensor[F32, [2]]) -> Tensor[F32, [2]] {
  let y = x * w in
  let z = y.tanh() in
  z
}

fn step(x: Tensor[F32, [2]], w: Tensor[F32, [2]]) -> (Tensor[F32, [2]], Tensor[F32, [2]], Tensor[F32, [2]]) {
  handle layer(x, w) with reverseMode
}
"""


async def test_code_lenses_above_each_function(client, workspace):
    uri = open_at(client, workspace / "lens.kina", LENSED)
    await published(client, uri, 1)
    lenses = await client.text_document_code_lens_async(lsp.CodeLensParams(text_document=doc_id(uri)))
    got = [(lens.range.start.line, lens.command.title, lens.command.command, list(lens.command.arguments))
           for lens in lenses]
    assert got == [(0, "Build & validate", "kina.validateFunction", [uri, "layer", "function"]),
                   (0, "Gradient check", "kina.validateFunction", [uri, "layer", "gradient"]),
                   (6, "Build & validate", "kina.validateFunction", [uri, "step", "function"])]


async def test_lens_command_refuses_bad_arguments_without_building(client, workspace):
    uri = open_at(client, workspace / "lens_bad.kina", LENSED)
    await published(client, uri, 1)
    for args in ([], [uri], [uri, "layer", "everything"], [uri, 3, "function"], [uri, "nope", "function"],
                 [uri, "step", "gradient"], ["file:///not/open.kina", "layer", "function"]):
        res = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="kina.validateFunction", arguments=args))
        assert res["ok"] is False and res["message"].startswith("Kina: "), (args, res)


async def test_lens_commands_validate_one_function_and_one_gradient(client, workspace):
    uri = open_at(client, workspace / "lens_run.kina", LENSED)
    await published(client, uri, 1)
    res = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="kina.validateFunction", arguments=[uri, "layer", "gradient"]))
    assert res["ok"] is True and res["functions"] == {"layer (reverseMode)": True}, res
    res = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="kina.validateFunction", arguments=[uri, "step", "function"]))
    assert res["ok"] is True and res["functions"] == {"step": True}, res


GENERIC = """fn linear[M, K, N](x: Tensor[F32, [M, K]], w: Tensor[F32, [K, N]]) -> Tensor[F32, [M, N]] {
  let y = x @ w in
  y
}

fn use_linear(x: Tensor[F32, [2, 3]], w: Tensor[F32, [3, 4]]) -> Tensor[F32, [2, 4]] {
  linear(x, w)
}

fn grad_linear(x: Tensor[F32, [2, 3]], w: Tensor[F32, [3, 4]]) -> (Tensor[F32, [2, 4]], Tensor[F32, [2, 3]], Tensor[F32, [3, 4]]) {
  handle linear(x, w) with reverseMode
}
"""


async def test_workspace_symbols_show_size_parameters(client, workspace):
    uri = open_at(client, workspace / "generic_ws.kina", GENERIC)
    await published(client, uri, 1)
    res = await client.workspace_symbol_async(lsp.WorkspaceSymbolParams(query="linear"))
    got = {s.name: s for s in res}
    assert {"linear[M, K, N]", "use_linear", "grad_linear"} <= set(got)
    assert got["linear[M, K, N]"].location.range == lsp.Range(start=lsp.Position(line=0, character=3),
                                                              end=lsp.Position(line=0, character=9))
    # the query matches the name, not the sizes
    assert "linear[M, K, N]" not in {s.name for s in await client.workspace_symbol_async(
        lsp.WorkspaceSymbolParams(query="MKN"))}


async def test_a_generic_function_lens_validates_its_dynamic_export(client, workspace):
    """A generic function is a dynamic export of the editor's build (issue 25): its lens
    validates it at three size sets; it has no gradient lens (the handles of it at fixed
    sizes differentiate instantiations), and that command says why without building."""
    uri = open_at(client, workspace / "generic_lens.kina", GENERIC)
    await published(client, uri, 1)
    lenses = await client.text_document_code_lens_async(lsp.CodeLensParams(text_document=doc_id(uri)))
    got = [(lens.range.start.line, lens.command.title, list(lens.command.arguments)[1]) for lens in lenses]
    assert got == [(0, "Build & validate", "linear"), (5, "Build & validate", "use_linear"),
                   (9, "Build & validate", "grad_linear")]
    res = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="kina.validateFunction", arguments=[uri, "linear", "function"]))
    assert res["ok"], res
    assert sorted(res["functions"])[0].startswith("linear[M=") and len(res["functions"]) == 3
    res = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="kina.validateFunction", arguments=[uri, "linear", "gradient"]))
    assert res["ok"] is False and "`linear` is size-generic" in res["message"], res
