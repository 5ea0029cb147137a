"""Parsing: Kina source text -> AST (compiler/syntax/nodes.py) + syntax diagnostics.

The driver of the front end's first stage; each step is its own module:

  item_split     the text -> its top-level items (`fn ... { ... }`), by a cheap brace
                 scan that skips comments; text outside items is a diagnostic
  ast_builder    the LALR parser of grammar.lark, building syntax/nodes.py nodes as it parses
  syntax_errors  a lark error -> a diagnostic worded for people
  parse_recovery a broken item parsed again to report all its errors, not the first

Each item is parsed on its own, so one broken function never hides the others and
the incremental front end (analysis.py) can re-parse only the items whose text
changed.  Spans are character offsets; `parse_item(text, offset)` returns spans
already shifted to document offsets.

An item that parses costs one plain LALR parse.  Only an item that fails is
parsed again in recovery mode, which resynchronises at the let chain's `in`s so
that every independent syntax error of a function is reported at once (the
language server shows them all); a broken item's AST is None either way, so the
checker never sees a partial tree.

Nothing here raises on bad input: binary junk, unbalanced braces and absurd
nesting all come back as `syntax` diagnostics whose spans lie inside the text.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import cast

from lark.exceptions import UnexpectedInput, VisitError

from compiler.core.diagnostics import Diagnostic, Span
from compiler.syntax import nodes as ast
from compiler.syntax.builder import MAX_DEPTH, PARSE_LOCK, PARSER, TO_AST, SyntaxProblem, TooDeep
from compiler.syntax.errors import failure_diagnostic
from compiler.syntax.items import gaps, split_items
from compiler.syntax.recovery import merge, recover
from compiler.syntax.walk import SPINE, children


def _too_deep_at(text: str) -> int | None:
    """Offset of the first bracket nested deeper than MAX_DEPTH, or None."""
    depth = 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
            if depth > MAX_DEPTH:
                return i
        elif ch in ")]}":
            depth -= 1
    return None


def _tree_depth(node: ast.FnDef) -> int:
    """Expression depth of an AST, iteratively (the point is to reject trees too deep to
    recurse on).  A let's body continues the chain at the let's own depth, and so does a
    flat chain's next link (walk.SPINE: a left operand, a receiver): every stage walks
    both with loops, so a function may have any number of lets and a chain any length."""
    best = 0
    stack: list[tuple[ast.Expr | ast.FnDef, int]] = [(node, 1)]
    while stack:
        here, d = stack.pop()
        best = max(best, d)
        if isinstance(here, ast.Let):
            stack.append((here.value, d + 1))
            stack.append((here.body, d))
            continue
        field = SPINE.get(type(here))
        link = getattr(here, field) if field else None
        for child in children(here):
            stack.append((child, d if child is link else d + 1))
    return best


def _parse_at(text: str, offset: int) -> tuple[ast.FnDef | None, tuple[Diagnostic, ...]]:
    """Parse one item whose first character sits at `offset` in the document.  The plain
    parse is the fast path; only a failed item is parsed again in recovery mode."""
    deep = _too_deep_at(text)
    if deep is not None:
        msg = f"brackets nested more than {MAX_DEPTH} deep; split the expression with lets"
        return None, (Diagnostic("syntax", msg, Span(offset + deep, offset + deep + 1)),)
    with PARSE_LOCK:
        TO_AST.offset = offset
        try:
            # the embedded transformer builds the AST while parsing: an FnDef, not a Tree
            fn = cast(ast.FnDef, PARSER.parse(text))
        except (UnexpectedInput, SyntaxProblem, VisitError) as err:
            first = failure_diagnostic(err, text, offset)
            if isinstance(getattr(err, "orig_exc", err), TooDeep):
                return None, (first,)
            return None, merge(first, recover(text, offset))
    depth = _tree_depth(fn)
    if depth > MAX_DEPTH:
        return None, (Diagnostic("syntax", f"expression nested {depth} deep (the limit is {MAX_DEPTH}); "
                                           "split it with lets", fn.name_span),)
    return fn, ()


Parsed = tuple[ast.FnDef | None, tuple[Diagnostic, ...]]


class _ItemCache:
    """parse_local's cache: least recently used first out, bounded by entries *and* by the
    characters of the texts it keeps.  (An lru_cache of 4,096 entries, bounded by count
    only, kept 4,096 versions of an item holding a 250,000-character line: a language
    server grew by gigabytes.)  Shared by every thread that parses (the server's
    analysis worker, formatting)."""

    def __init__(self, parse: Callable[[str], Parsed], entries: int, chars: int) -> None:
        self._parse, self.entries, self.chars = parse, entries, chars
        self._data: OrderedDict[str, Parsed] = OrderedDict()
        self._size = 0                   # characters of the keys in _data
        self._lock = threading.Lock()

    def __call__(self, text: str) -> Parsed:
        with self._lock:
            hit = self._data.get(text)
            if hit is not None:
                self._data.move_to_end(text)
                return hit
        parsed = self._parse(text)
        if len(text) > self.chars // 4:
            return parsed                # one item that would crowd out everything else
        with self._lock:
            if text not in self._data:
                self._data[text] = parsed
                self._size += len(text)
            while len(self._data) > self.entries or self._size > self.chars:
                old, _ = self._data.popitem(last=False)
                self._size -= len(old)
        return parsed

    def cache_clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._size = 0

    def cache_size(self) -> tuple[int, int]:
        """(entries, characters) kept."""
        with self._lock:
            return len(self._data), self._size


def _parse_local(text: str) -> Parsed:
    return _parse_at(text, 0)


# Parse one item with spans relative to its own start.  Cached by text (the incremental
# front end re-parses only items whose text changed); callers must treat the result as
# immutable.  About 50 bytes of AST per character of code: 1,000,000 characters of items
# keep it under about 50 MB.
parse_local = _ItemCache(_parse_local, entries=4096, chars=1_000_000)


def parse_item(text: str, offset: int = 0) -> tuple[ast.FnDef | None, list[Diagnostic]]:
    """Parse one top-level item (`fn ... { ... }`) whose first character is at `offset`
    in the document; spans come back in document offsets."""
    fn, diags = parse_local(text) if offset == 0 else _parse_at(text, offset)
    return fn, list(diags)


def parse_module(text: str) -> tuple[ast.Module, list[Diagnostic]]:
    """Parse a whole document: every item separately, spans in document offsets."""
    items = split_items(text)
    diags = gaps(text, items)
    functions = []
    for it in items:
        fn, item_diags = parse_item(text[it.start:it.end], it.start)
        diags += item_diags
        if fn is not None:
            functions.append(fn)
    diags.sort(key=lambda d: (d.span.start, d.span.end))
    return ast.Module(tuple(functions), Span(0, len(text))), diags
