"""The item split: a document -> its top-level items (`fn ... { ... }`) as text ranges.

A cheap brace scan that skips comments, run before any parsing: syntax/parse.py parses each
item on its own (so one broken function never hides the others), the incremental
front end (analysis.py) re-parses only the items whose text changed, and the editor
features (folding, symbols, completion, formatting a range) find the function around
a position without parsing.  Text outside every item that is not blank or a comment
is a `syntax` diagnostic (`gaps`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from compiler.core.diagnostics import BOM, Diagnostic, Span


@dataclass(frozen=True)
class Item:
    """One top-level chunk of the document: text[start:end], named after `fn NAME` (or "")."""
    start: int
    end: int
    name: str


# Only comments, the `fn` keyword and braces matter for the split.
# (The lookahead lets the regex engine skip every other character fast: 3x on a long file.)
_SPLIT_TOKENS = re.compile(r"(?=[/f{}])(?://[^\r\n]*|(?<![\w])fn(?![\w])|[{}])")
_FN_NAME = re.compile(r"fn\s+([A-Za-z_][A-Za-z0-9_]*)")
_COMMENT = re.compile(r"//[^\r\n]*")   # a comment ends at any line break


# the last text split and its items: the module loader (compiler/modules) splits a file to
# find its import lines, then its analysis splits the same text again (tens of ms on a
# 5,000-line file, on every edit)
_last: tuple[str, tuple[Item, ...]] | None = None


def split_items(text: str) -> list[Item]:
    """Top-level items: each starts at a `fn` keyword at brace depth 0 and ends at the
    brace that closes its body (see _split_items); the last text's are remembered."""
    global _last
    hit = _last
    if hit is not None and hit[0] is text:
        return list(hit[1])
    items = _split_items(text)
    _last = (text, tuple(items))
    return items


def _split_items(text: str) -> list[Item]:
    """Top-level items: each starts at a `fn` keyword at brace depth 0 and ends at the
    brace that closes its body.  A `fn` met inside an unfinished item starts a new
    item (fn is a keyword, so it cannot belong to a body): a missing `}` costs one
    function, not the rest of the file."""
    items: list[Item] = []
    start = None          # start of the current item
    depth = 0
    for m in _SPLIT_TOKENS.finditer(text):
        tok = m.group()
        if tok.startswith("//"):
            continue
        if tok == "fn":
            if start is not None:
                items.append(_item(text, start, _trim_end(text, start, m.start())))
            start, depth = m.start(), 0
            continue
        if start is None:
            continue      # a stray brace outside any item: reported as junk by gaps()
        depth += 1 if tok == "{" else -1
        if depth == 0:
            items.append(_item(text, start, m.end()))
            start = None
    if start is not None:
        items.append(_item(text, start, _trim_end(text, start, len(text))))
    return items


def _item(text: str, start: int, end: int) -> Item:
    m = _FN_NAME.match(text, start, end)
    return Item(start, end, m.group(1) if m else "")


def _trim_end(text: str, start: int, end: int) -> int:
    """End of an unterminated item: drop trailing whitespace (comments stay: harmless)."""
    while end > start and text[end - 1].isspace():
        end -= 1
    return end


def gaps(text: str, items: list[Item]) -> list[Diagnostic]:
    """A syntax diagnostic for every run of text outside items that is not blank or a comment."""
    diags = []
    prev = 0
    for lo, hi in [(it.start, it.end) for it in items] + [(len(text), len(text))]:
        chunk = _COMMENT.sub(lambda m: " " * len(m.group()), text[prev:lo])
        if prev == 0 and chunk.startswith(BOM):   # a byte-order mark opening the file is no junk
            chunk = " " + chunk[1:]
        stripped = chunk.strip()
        if stripped:
            first = prev + chunk.index(stripped[0])
            last = prev + len(chunk.rstrip())
            word = stripped.split()[0][:20]
            diags.append(Diagnostic("syntax", f"expected a top-level function (`fn name(...) -> Type {{ ... }}`), "
                                              f"found `{word}`", Span(first, last)))
        prev = hi
    return diags

