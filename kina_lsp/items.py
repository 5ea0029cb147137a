"""compiler.syntax.items.split_items, incremental: an edit re-splits the edited item, not
the file.

Every whole-document feature starts from the item split (semantic-token chunks, folds,
completion's window and function names, hover's last-good answer).  On a 20,000-line file
one split is 50-90 ms, and the editor asks for several after each keystroke.  The scan of
split_items restarts at every `fn` keyword (a new item starts there, whatever came
before), so after an edit the items before the last `fn` ahead of the edit are kept, the
scan resumes at that `fn`, and it stops at the first `fn` past the edit at which the
previous text had an item too: the items from there on are the previous ones, shifted.
The result equals split_items(text) (tests/lsp/test_lsp_scale.py compares them over random edits).
"""
from __future__ import annotations

import threading

from compiler.syntax import items as item_split
from compiler.syntax.items import Item

_recent: list[tuple[str, list[Item]]] = []     # newest first, a few texts
_lock = threading.Lock()
KEEP = 4


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


def split_items(text: str) -> list[Item]:
    """split_items(text), from the most recent split the cache holds."""
    with _lock:
        for t, its in _recent:
            if t is text or (len(t) == len(text) and t == text):
                return its
        base = _recent[0] if _recent else None
    items = _incremental(base[0], base[1], text) if base is not None else item_split.split_items(text)
    with _lock:
        _recent.insert(0, (text, items))
        del _recent[KEEP:]
    return items


def _incremental(old: str, old_items: list[Item], new: str) -> list[Item]:
    prefix, suffix = common_ends(old, new)
    delta = len(new) - len(old)
    # resume at the last item whose `fn` (and the character after it) is before the edit:
    # the scan restarts there whatever came before, so the items before it are unchanged
    ahead = 0
    while ahead < len(old_items) and old_items[ahead].start + 3 <= prefix:
        ahead += 1
    out = list(old_items[:ahead - 1]) if ahead else []
    pos = old_items[ahead - 1].start if ahead else 0
    old_starts = {it.start: i for i, it in enumerate(old_items)}
    sync_from = len(new) - suffix + 1      # a `fn` here has the same text before and after it
    start: int | None = None
    depth = 0
    for m in item_split._SPLIT_TOKENS.finditer(new, pos):
        tok = m.group()
        if tok.startswith("//"):
            continue
        if tok == "fn":
            if start is not None:
                out.append(item_split._item(new, start, item_split._trim_end(new, start, m.start())))
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
            out.append(item_split._item(new, start, m.end()))
            start = None
    if start is not None:
        out.append(item_split._item(new, start, item_split._trim_end(new, start, len(new))))
    return out
