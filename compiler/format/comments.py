"""The comment-aware emitter of `kinac fmt` (compiler/format/formatter.py prints the AST through it).

Tokens are emitted into a layout.Builder together with their offset in the
source, and the source's `//` comments are woven in by those offsets:

- a comment alone on its line is emitted on its own line before the first
  token after it (a blank line before it is kept where blank lines may be);
- a comment after code on its line ("trailing") becomes a layout.Trail after
  the token it followed, which ends that line at the next break (or forces one);
- a token the source does not have (added parentheses, a trailing comma of a
  vertical list) has no offset: comments are never attached to it.

Offsets of punctuation come from the source itself (`find`: is the next token
after this node a `,`?), so no token list is kept; parenthesis pairs are matched
once up front because a parenthesised name keeps only its own span in the AST.
"""
from __future__ import annotations

import re
from typing import Protocol

from compiler.core.diagnostics import Span
from compiler.format import layout


class Spanned(Protocol):
    """A node printed by the formatter: anything of the AST with a span."""
    @property
    def span(self) -> Span: ...

_COMMENT = re.compile(r"//[^\n]*")
_SKIP = re.compile(r"(?:\s+|//[^\n]*)*")          # blanks and comments between tokens
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_PAREN = re.compile(r"//[^\n]*|[()]")


class _Comment:
    __slots__ = ("start", "end", "text", "own_line")

    def __init__(self, text: str, m: re.Match[str]) -> None:
        self.start, self.end = m.start(), m.end()
        self.text = m.group().rstrip()
        line_start = text.rfind("\n", 0, m.start()) + 1
        self.own_line = not text[line_start:m.start()].strip()


# ---- the comment-aware emitter -----------------------------------------------------------
class Emitter:
    """Emits tokens into a layout.Builder, and the comments of the source around them.
    `at` is a token's offset in the source (None for a token the source does not have:
    then its comments are kept by the next token that has one)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.b = layout.Builder()
        self.comments = [_Comment(text, m) for m in _COMMENT.finditer(text)]
        self.ci = 0                 # first comment not emitted yet
        self.pending: list[_Comment] = []   # trailing comments waiting for the next break
        self.last_end = 0           # end of the last token or comment emitted
        self.close_of: dict[int, int] = {}  # "(" offset -> its ")" (comments skipped)
        self.open_of: dict[int, int] = {}
        self.structural: set[int] = set()   # "(" of calls, parameter lists, tuples, patterns
        stack: list[int] = []
        for m in _PAREN.finditer(text):
            if m.group() == "(":
                stack.append(m.start())
            elif m.group() == ")" and stack:
                o = stack.pop()
                self.close_of[o], self.open_of[m.start()] = m.start(), o

    # -- source positions
    def next_at(self, pos: int) -> int:
        """Offset of the first token at or after pos."""
        m = _SKIP.match(self.text, pos)
        return m.end() if m else pos      # _SKIP matches the empty string: always a match

    def find(self, word: str, pos: int) -> int | None:
        """Offset of `word` if it is the next token after pos (else None: the source has none)."""
        at = self.next_at(pos)
        return at if self.text.startswith(word, at) else None

    def number_at(self, pos: int) -> tuple[int, int, str, str] | None:
        """(offset, end, digits, sign) of a (possibly signed) number that is the next token, or None."""
        at = self.next_at(pos)
        sign = ""
        digits_at = at
        if self.text.startswith("-", at):
            sign, digits_at = "-", self.next_at(at + 1)
        m = _NUMBER.match(self.text, digits_at)
        return (at, m.end(), m.group(), sign) if m else None

    def outer(self, node: Spanned) -> tuple[int, int]:
        """The source extent of an expression with its parentheses.  The AST's span already
        covers them except for a name (the parser keeps a name's own span), so for a name the
        pairs right around it that are not a call's, a tuple's or a list's are added."""
        s, e = node.span.start, node.span.end
        if type(node).__name__ != "Name":
            return s, e
        while True:
            q = self.next_at(e)
            p = self.open_of.get(q)
            if p is None or p >= s or p in self.structural or self.next_at(p + 1) != s:
                return s, e
            s, e = p, q + 1

    def parens_of(self, node: Spanned) -> tuple[int | None, int | None]:
        """The offsets of the source's grouping parentheses right around node, if any."""
        s, e = self.outer(node)
        if s not in self.structural and self.close_of.get(s) == e - 1:
            return s, e - 1
        return None, None

    # -- tokens and breaks
    def tok(self, s: str, at: int | None = None, end: int | None = None, blank_ok: bool = False) -> None:
        if at is not None:
            self.lead(at, blank_ok)
        elif self.pending:
            self._flush_pending(hard=True)
        self.b.text(s)
        if at is not None:
            self._trailing(end if end is not None else at + len(s))

    def expect(self, word: str, pos: int) -> int:
        """Emit `word`, mapped to the source if it is the next token there; the position after it."""
        at = self.find(word, pos)
        self.tok(word, at)
        return at + len(word) if at is not None else pos

    def skip(self, at: int | None, end: int | None = None) -> None:
        """A source token that is not printed (a trailing comma): keep its comments."""
        if at is not None:
            self.lead(at)
            self._trailing(end if end is not None else at + 1)

    def brk(self, doc: layout.Doc) -> None:
        """A break (layout.LINE/SOFT/HARD): trailing comments go just before it."""
        self._flush_pending(hard=False)
        self.b.add(doc)

    def space(self) -> None:
        self.b.text(" ")

    def lead(self, at: int, blank_ok: bool = False, token: bool = True) -> None:
        """Emit the comments before offset `at`: own-line ones on their own lines, others
        at the end of the current line, which then ends."""
        need_break = bool(self.pending)
        self._flush_pending(hard=False)
        while self.ci < len(self.comments) and self.comments[self.ci].start < at:
            c = self.comments[self.ci]
            self.ci += 1
            if c.own_line:
                self.b.add(layout.BLANK if blank_ok and self._blank_before(c.start) else layout.FRESH)
                self.b.text(c.text)
                self.b.add(layout.HARD)
                need_break = False
            else:   # its token is not printed (a dropped parenthesis): end of this line
                if need_break:
                    self.b.add(layout.HARD)
                self.b.add(layout.Trail(" " + c.text))
                need_break = True
            self.last_end = max(self.last_end, c.end)
        if need_break:
            self.b.add(layout.HARD)
        if token and blank_ok and self._blank_before(at):   # (no blank line before a closing `}`)
            self.b.add(layout.BLANK)

    def dangling(self, before: int, blank_ok: bool = False) -> None:
        """The comments before `before` when no token follows them in this construct."""
        if self.ci < len(self.comments) and self.comments[self.ci].start < before:
            self.lead(before, blank_ok, token=False)

    def finish(self) -> None:
        """End of the document: the comments after the last function."""
        self.dangling(len(self.text) + 1, blank_ok=True)
        self._flush_pending(hard=False)

    def _blank_before(self, pos: int) -> bool:
        return self.last_end > 0 and self.text.count("\n", self.last_end, pos) >= 2

    def _trailing(self, end: int) -> None:
        self.last_end = max(self.last_end, end)
        if self.ci < len(self.comments):
            c = self.comments[self.ci]
            between = self.text[end:c.start] if c.start >= end else "x"
            if not between.strip() and "\n" not in between:
                self.ci += 1
                self.pending.append(c)
                self.last_end = c.end

    def _flush_pending(self, hard: bool) -> None:
        if not self.pending:
            return
        for c in self.pending:
            self.b.add(layout.Trail(" " + c.text))
        self.pending.clear()
        if hard:
            self.b.add(layout.HARD)
