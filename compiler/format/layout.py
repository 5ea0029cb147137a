"""Layout: the line-breaking engine behind `kinac fmt` (compiler/format/formatter.py).

A document is built from text, groups, indents and breaks, and printed within a
width by the Wadler/Lindig algorithm as Prettier refines it: a group is printed
flat (its breaks as spaces) when it fits on the rest of the line, else broken
(its breaks as newlines) while inner groups decide again.  On top of that, what a
code formatter needs and the wadler-lindig package lacks:

  HARD / FRESH / BLANK  a newline unless the line is still empty (HARD and FRESH
                        print alike; FRESH marks a comment's own line) / an empty
                        line (never two); each breaks every enclosing group
  Trail(text)           a line-suffix (a trailing `// comment`): printed at the end
                        of the current line, just before its newline; breaks every
                        enclosing group so that the newline comes right after it
  IfBreak(text)         text printed only when the enclosing group is broken
                        (trailing commas of vertical lists)
  Fill                  as many items per line as fit (tensor literal values)

Documents are built in order with `Builder` (context managers for groups,
indents and fills), which is also where hard breaks mark the open groups.
Printing is iterative (no recursion limit: a literal may have 100,000 values)
and strips trailing blanks from every line.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TypeVar


class Line:
    """A break: `flat` when its group is flat, a newline when broken."""
    __slots__ = ("flat",)

    def __init__(self, flat: str) -> None:
        self.flat = flat


class _Hard:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


LINE, SOFT = Line(" "), Line("")
HARD, FRESH, BLANK = _Hard("HARD"), _Hard("FRESH"), _Hard("BLANK")


class Trail:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


class IfBreak:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


class Group:
    __slots__ = ("parts", "hard")

    def __init__(self) -> None:
        self.parts: list[Doc] = []
        self.hard = False       # contains a hard break or a Trail: never flat


class Indent:
    __slots__ = ("parts", "n")

    def __init__(self, n: int) -> None:
        self.parts: list[Doc] = []
        self.n = n


class Fill:
    """Items separated by Line objects at its top level; each Line breaks only when the
    next item does not fit (or a Trail is waiting for the end of the line)."""
    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[Doc] = []


# A document: text, a break, or a node holding documents.
Doc = str | Line | _Hard | Trail | IfBreak | Group | Indent | Fill
_Node = TypeVar("_Node", Group, Indent, Fill)


class Builder:
    """Appends documents in print order; groups, indents and fills are `with` blocks."""

    def __init__(self) -> None:
        self.root: list[Doc] = []
        self._stack = [self.root]
        self._groups: list[Group] = []

    def text(self, s: str) -> None:
        if s:
            self._stack[-1].append(s)

    def add(self, doc: Doc) -> None:
        if isinstance(doc, (_Hard, Trail)):
            for g in self._groups:
                g.hard = True
        self._stack[-1].append(doc)

    @contextmanager
    def _open(self, node: _Node) -> Iterator[_Node]:
        self._stack[-1].append(node)
        self._stack.append(node.parts)
        if isinstance(node, Group):
            self._groups.append(node)   # a hard break inside marks it (see add)
        try:
            yield node
        finally:
            self._stack.pop()
            if isinstance(node, Group):
                self._groups.pop()

    def group(self) -> AbstractContextManager[Group]:
        return self._open(Group())

    def indent(self, n: int = 2) -> AbstractContextManager[Indent]:
        return self._open(Indent(n))

    def fill(self) -> AbstractContextManager[Fill]:
        return self._open(Fill())


# ---- printing -------------------------------------------------------------------------
_FLAT, _BREAK = 0, 1


class _FillStep:
    """Stack entry: print item i of a fill (after deciding the separator before it)."""
    __slots__ = ("items", "seps", "i")

    def __init__(self, items: list[list[Doc]], seps: list[Line], i: int) -> None:
        self.items, self.seps, self.i = items, seps, i


# A print-stack entry: (indentation, _FLAT or _BREAK, what to print).
_Entry = tuple[int, int, Doc | _FillStep]


def _split_fill(fill: Fill) -> tuple[list[list[Doc]], list[Line]]:
    items: list[list[Doc]] = [[]]
    seps: list[Line] = []
    for part in fill.parts:
        if isinstance(part, Line):
            seps.append(part)
            items.append([])
        else:
            items[-1].append(part)
    return items, seps


def _push_children(stack: list[_Entry], ind: int, mode: int, parts: list[Doc]) -> None:
    for part in reversed(parts):
        stack.append((ind, mode, part))


def _flat(ind: int, docs: list[Doc]) -> list[_Entry]:
    """Stack entries printing docs flat (top of the stack = first doc)."""
    return [(ind, _FLAT, d) for d in reversed(docs)]


def _fits(first: list[_Entry], rest: list[_Entry], width: int) -> bool:
    """Whether `first` (then the rest of the print stack, up to its first newline) fits
    in `width` columns.  Walks at most a line's worth of documents."""
    stack = list(first)
    ri = len(rest)
    while width >= 0:
        if not stack:
            if ri == 0:
                return True
            ri -= 1
            stack.append(rest[ri])
            continue
        ind, mode, doc = stack.pop()
        if isinstance(doc, str):
            width -= len(doc)
        elif isinstance(doc, Line):
            if mode == _BREAK:
                return True
            width -= len(doc.flat)
        elif isinstance(doc, (_Hard, _FillStep)):
            return True
        elif isinstance(doc, Group):
            _push_children(stack, ind, _BREAK if doc.hard else mode, doc.parts)
        elif isinstance(doc, (Indent, Fill)):
            _push_children(stack, ind, mode, doc.parts)
        elif isinstance(doc, IfBreak):
            if mode == _BREAK:
                width -= len(doc.text)
        # Trail: printed past the end of the line, it takes no width
    return False


class _Printer:
    def __init__(self, width: int) -> None:
        self.width = width
        self.out: list[str] = []
        self.pos = 0                 # column
        self.content = False         # something other than indentation is on this line
        self.prev_empty = True       # the line before this one is empty (or there is none)
        self.suffix: list[str] = []

    def _strip(self) -> None:
        while self.out and self.out[-1].endswith(" "):
            self.out[-1] = self.out[-1].rstrip(" ")
            if not self.out[-1]:
                self.out.pop()

    def newline(self, ind: int) -> None:
        if self.suffix:
            if self.content:
                self._strip()
            else:   # a trailing comment whose token went away: on its own line, indented
                self.suffix[0] = self.suffix[0].lstrip()
                self.content = True
            self.out.extend(self.suffix)
            self.suffix.clear()
        self._strip()
        self.prev_empty = not self.content
        self.out.append("\n" + " " * ind)
        self.pos, self.content = ind, False

    def hard(self, doc: _Hard, ind: int) -> None:
        """HARD, FRESH and a broken Line end the line unless it is still empty: blank lines
        come only from BLANK, so a break right after a comment's own newline adds nothing."""
        if self.content or self.suffix:
            self.newline(ind)
        else:
            self._reindent(ind)
        if doc is BLANK and not self.prev_empty:
            self.newline(ind)

    def _reindent(self, ind: int) -> None:
        """The still-empty current line takes the indentation `ind`."""
        self._strip()
        if self.out:
            self.out[-1] += " " * ind
            self.pos = ind

    def text(self, s: str) -> None:
        self.out.append(s)
        self.pos += len(s)
        if not self.content and s.strip():
            self.content = True

    def fill_step(self, stack: list[_Entry], ind: int, step: _FillStep) -> None:
        item = step.items[step.i]
        if step.i > 0:   # the separator before this item: flat if the item fits after it
            sep = step.seps[step.i - 1]
            if not self.suffix and _fits(_flat(ind, [sep, *item]), [], self.width - self.pos):
                self.text(sep.flat)
            else:
                self.newline(ind)
        if step.i + 1 < len(step.items):
            stack.append((ind, _BREAK, _FillStep(step.items, step.seps, step.i + 1)))
        fits = _fits(_flat(ind, item), [], self.width - self.pos)
        _push_children(stack, ind, _FLAT if fits else _BREAK, item)

    def run(self, root: list[Doc]) -> str:
        stack: list[_Entry] = []
        _push_children(stack, 0, _BREAK, root)
        while stack:
            ind, mode, doc = stack.pop()
            if isinstance(doc, str):
                self.text(doc)
            elif isinstance(doc, Line):
                if mode == _FLAT:
                    self.text(doc.flat)
                else:
                    self.hard(HARD, ind)
            elif isinstance(doc, _Hard):
                self.hard(doc, ind)
            elif isinstance(doc, Group):
                if mode == _BREAK and (doc.hard or not _fits([(ind, _FLAT, doc)], stack, self.width - self.pos)):
                    _push_children(stack, ind, _BREAK, doc.parts)
                else:
                    _push_children(stack, ind, _FLAT, doc.parts)
            elif isinstance(doc, Indent):
                _push_children(stack, ind + doc.n, mode, doc.parts)
            elif isinstance(doc, Fill):
                if mode == _FLAT:
                    _push_children(stack, ind, _FLAT, doc.parts)
                else:
                    items, seps = _split_fill(doc)
                    stack.append((ind, _BREAK, _FillStep(items, seps, 0)))
            elif isinstance(doc, _FillStep):
                self.fill_step(stack, ind, doc)
            elif isinstance(doc, Trail):
                self.suffix.append(doc.text)
            elif isinstance(doc, IfBreak):
                if mode == _BREAK:
                    self.text(doc.text)
            else:  # pragma: no cover - a builder bug
                raise TypeError(f"not a layout document: {doc!r}")
        self.newline(0)
        return "".join(self.out)


def render(root: list[Doc], width: int) -> str:
    """The text of a document (every line stripped of trailing blanks, ending in a newline)."""
    return _Printer(width).run(root)
