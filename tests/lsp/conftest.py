"""pytest-lsp fixtures: a real `python -m kina_lsp` process per test module, driven by a
client with neovim 0.11 capabilities (the bundled VS Code ones predate inlay
hints).  The debounce is 0 so tests wait only for the analysis itself.  Test modules
mark themselves `pytestmark = MODULE_LOOP` to share the module's event loop.
"""
from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pygls.protocol import default_converter
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features
from pytest_lsp.client import LanguageClient as _Client

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
# Monomorphic StoryLM-0 programs kept as test documents (examples/storylm.kina is generic).
FIXTURES = ROOT / "tests" / "fixtures"


def example_path(name: str) -> Path:
    """examples/NAME, or tests/fixtures/NAME when only that exists."""
    return EXAMPLES / name if (EXAMPLES / name).exists() or not (FIXTURES / name).exists() else FIXTURES / name
SERVER = [sys.executable, "-m", "kina_lsp"]
MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")


def make_client() -> LanguageClient:
    """The stock test client, plus a log of every publishDiagnostics with its version
    (the stock one keeps only the latest diagnostics per URI)."""
    client = _Client(converter_factory=default_converter)
    client.published = []
    stock = DEFAULT_CLIENT_FEATURES[lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS]

    def record(c: _Client, params: lsp.PublishDiagnosticsParams):
        stock(c, params)
        c.published.append(params)

    register_lsp_features(client, {**DEFAULT_CLIENT_FEATURES, lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS: record})
    return client


def init_params(pull: bool = False, **options) -> lsp.InitializeParams:
    # feature tests check answers, not the request budget: a loaded CI machine must not
    # turn a slow analysis into an empty answer (test_lsp_hostile.py checks the budget)
    opts = {"kina": {"diagnostics": {"debounceMs": 0}, "requests": {"budgetMs": 30_000}}}
    opts["kina"].update(options)
    caps = client_capabilities("neovim@v0.11.0")
    # neovim prefers UTF-8 positions; VS Code (our main client) speaks UTF-16, the LSP default
    caps.general.position_encodings = [lsp.PositionEncodingKind.Utf16]
    if not pull:   # a client that can pull gets no pushes; most tests read the pushes
        caps.text_document.diagnostic = None
    return lsp.InitializeParams(capabilities=caps,
                                root_uri=ROOT.as_uri(), initialization_options=opts)


# One server per test module (starting one costs about a second); tests use distinct
# document names, so they do not see each other's state.
@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=SERVER, client_factory=make_client))
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(init_params())
    yield
    await lsp_client.shutdown_session()


# ---- helpers shared by the test files --------------------------------------------------
def open_doc(client, text: str, name: str = "scratch.kina", version: int = 1) -> str:
    path = example_path(name)
    uri = path.as_uri() if path.exists() else f"file:///tmp/kina-lsp-test/{name}"
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(
        text_document=lsp.TextDocumentItem(uri=uri, language_id="kina", version=version, text=text)))
    return uri


def open_example(client, name: str) -> tuple[str, str]:
    text = example_path(name).read_text(encoding="utf-8")
    return open_doc(client, text, name), text


def change(client, uri: str, version: int, text: str, rng: lsp.Range | None = None) -> None:
    """Send one edit: replace rng (or the whole document when rng is None) by text."""
    event = (lsp.TextDocumentContentChangePartial(range=rng, text=text) if rng is not None
             else lsp.TextDocumentContentChangeWholeDocument(text=text))
    client.text_document_did_change(lsp.DidChangeTextDocumentParams(
        text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=version), content_changes=[event]))


async def published(client, uri: str, version: int, timeout: float = 15.0) -> list[lsp.Diagnostic]:
    """The diagnostics published for `uri` at `version` (waits for them)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in reversed(client.published):
            if p.uri == uri and p.version == version:
                return list(p.diagnostics)
        await asyncio.sleep(0.01)
    raise AssertionError(f"no diagnostics published for {uri} version {version}; got "
                         f"{[(p.uri, p.version) for p in client.published]}")


def pos(text: str, needle: str, delta: int = 0) -> lsp.Position:
    """LSP position (UTF-16) of the first occurrence of needle, plus delta characters."""
    off = text.index(needle) + delta
    line = text.count("\n", 0, off)
    col_text = text[text.rfind("\n", 0, off) + 1:off]
    return lsp.Position(line=line, character=len(col_text.encode("utf-16-le")) // 2)


def doc_id(uri: str) -> lsp.TextDocumentIdentifier:
    return lsp.TextDocumentIdentifier(uri=uri)
