"""Document links: the paths and URLs written in `//` comments (`// see docs/language.md`,
`// https://...`), clickable as in rust-analyzer and pyright, and each import's module
word or quoted path (`import layers`), to the file it resolved to (features/modules.py).

A path is a link when the file exists, relative to the document's folder or to the
workspace root (the folder the editor opened); a URL always is.  Comments are found by a
regex, not the lexer: Kina has no strings, so `//` starts a comment wherever it is.  The
scan is linear and runs on the document worker (background.py).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from lsprotocol import types as lsp

from compiler.core.diagnostics import Span

from .. import background
from ..background import Checkpoint
from ..convert import index_of
from . import modules

if TYPE_CHECKING:
    from ..base import Safe, Server

_COMMENT = re.compile(r"//[^\r\n]*")
_URL = re.compile(r"https?://[^\s<>()\[\]`'\"]+[^\s<>()\[\]`'\".,;:]")
_PATH = re.compile(r"(?<![\w/.-])(?:\.{1,2}/)?[\w.-]+(?:/[\w.-]+)*\.[A-Za-z0-9]+(?![\w/])")
MAX_LINKS = 1_000


def _folder(uri: str) -> Path | None:
    parsed = urlparse(uri)
    return Path(unquote(parsed.path)).parent if parsed.scheme == "file" else None


def find_links(text: str, bases: list[Path], checkpoint: Checkpoint = background.never) -> list[tuple[Span, str]]:
    """(span, target URI) of each URL and existing file path in the comments of text."""
    out: list[tuple[Span, str]] = []
    for n, c in enumerate(_COMMENT.finditer(text)):
        if n % 256 == 0:
            checkpoint()
        body, at = c.group(), c.start()
        urls = [(m.start(), m.end(), m.group()) for m in _URL.finditer(body)]
        out += [(Span(at + a, at + b), url) for a, b, url in urls]
        for m in _PATH.finditer(body):
            if any(a <= m.start() < b for a, b, _ in urls):
                continue
            target = next((base / m.group() for base in bases if (base / m.group()).is_file()), None)
            if target is not None:
                out.append((Span(at + m.start(), at + m.end()), target.resolve().as_uri()))
        if len(out) >= MAX_LINKS:
            break
    return out[:MAX_LINKS]


def register(server: Server, safe: Safe) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_DOCUMENT_LINK, lsp.DocumentLinkOptions(resolve_provider=False))
    @safe(default=list)
    async def on_document_link(ls: Server, params: lsp.DocumentLinkParams) -> list[lsp.DocumentLink]:
        uri = params.text_document.uri
        cur = ls.buffer(uri)
        if cur is None:
            return []
        text, version = cur
        bases = [b for b in (_folder(uri), _folder((ls.workspace.root_uri or "").rstrip("/") + "/x")) if b]
        encoding = ls.position_encoding()

        def work(checkpoint: Checkpoint) -> list[lsp.DocumentLink]:
            index = index_of(text, encoding)
            return [lsp.DocumentLink(range=index.range(span), target=target)
                    for span, target in find_links(text, bases, checkpoint)]
        found = await background.run(ls, uri, text, version, work)
        view = await ls.view(uri)
        if view is None or view.text != text:
            return found
        caps = ls.client_capabilities.text_document
        tooltips = bool(caps and caps.document_link and caps.document_link.tooltip_support)
        return modules.import_links(view, ls.documents.uri_of, tooltips) + found
