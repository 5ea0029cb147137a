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
import threading
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


# The last few texts split and their items, newest first.  Every whole-document pass (the
# module loader's import scan, the analysis, semantic tokens, folds, completion) starts from
# the split, on every edit: one split of a 20,000-line file is 25-90 ms, so a new text is
# split from the newest one here (`_incremental`: only the edited item is scanned again).
_recent: list[tuple[str, tuple[Item, ...]]] = []
_lock = threading.Lock()       # the language server splits on several threads
KEEP = 4


def split_items(text: str) -> list[Item]:
    """Top-level items: each starts at a `fn` keyword at brace depth 0 and ends at the
    brace that closes its body (see split_all).  Equal to split_all(text), computed from
    the most recent split of a similar text when there is one."""
    with _lock:
        for t, its in _recent:
            if t is text or (len(t) == len(text) and t == text):
                return list(its)
        base = _recent[0] if _recent else None
    items = _incremental(base[0], list(base[1]), text) if base is not None else split_all(text)
    with _lock:
        _recent.insert(0, (text, tuple(items)))
        del _recent[KEEP:]
    return items


def common_ends(a: str, b: str) -> tuple[int, int]:
    """(length of the common prefix, of the common suffix) of a and b, not overlapping;
    by bisection over slice comparisons (C speed: a 600,000-character text costs ~1 ms)."""
    n = min(len(a), len(b))
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    prefix = lo
    lo, hi = 0, n - prefix
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[len(a) - mid:] == b[len(b) - mid:]:
            lo = mid
        else:
            hi = mid - 1
    return prefix, lo


def _incremental(old: str, old_items: list[Item], new: str) -> list[Item]:
    """split_all(new), from old's items.  The scan restarts at every `fn` keyword (a new
    item starts there, whatever came before), so the items before the last `fn` ahead of
    the edit are kept, the scan resumes at that `fn`, and it stops at the first `fn` past
    the edit at which the old text had an item too: from there on the items are the old
    ones, shifted."""
    prefix, suffix = common_ends(old, new)
    delta = len(new) - len(old)
    # resume at the last item whose `fn` (and the character after it) is before the edit
    ahead = 0
    while ahead < len(old_items) and old_items[ahead].start + 3 <= prefix:
        ahead += 1
    out = list(old_items[:ahead - 1]) if ahead else []
    pos = old_items[ahead - 1].start if ahead else 0
    old_starts = {it.start: i for i, it in enumerate(old_items)}
    sync_from = len(new) - suffix + 1      # a `fn` here has the same text before and after it
    start: int | None = None
    depth = 0
    for m in _SPLIT_TOKENS.finditer(new, pos):
        tok = m.group()
        if tok.startswith("//"):
            continue
        if tok == "fn":
            if start is not None:
                out.append(_item(new, start, _trim_end(new, start, m.start())))
            at = old_starts.get(m.start() - delta) if m.start() >= sync_from else None
            if at is not None:
                out += [Item(it.start + delta, it.end + delta, it.name) for it in old_items[at:]]
                return out
            start, depth = m.start(), 0
            continue
        if start is None:
            continue
        depth += 1 if tok == "{" else -1
        if depth == 0:
            out.append(_item(new, start, m.end()))
            start = None
    if start is not None:
        out.append(_item(new, start, _trim_end(new, start, len(new))))
    return out


def split_all(text: str) -> list[Item]:
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

