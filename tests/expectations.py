"""Inline expectations in .kina case files (mypy's `# E:` / `# N:` harness, in Kina comments).

A case file is an ordinary Kina program whose lines may end with expectation comments:

    let y = x + w in  // E[shape]: add: operand shapes differ: ...the whole message...
    let x = a in  // N: first defined here

- `// E[code]: message` expects an error with exactly that code and that whole message
  whose span starts on this line;
- `// W[code]: message` the same for a warning;
- `// N: message` expects a note with exactly that message on this line (the line of the
  note's span, or of its diagnostic when the note has no span).

Several expectations may follow each other on one line.  The file must get exactly the
expected diagnostics and notes, no more and no fewer: a line without an expectation
must be clean.  Diagnostics come from `compiler.analysis.analyze`, the one front end the
CLI (`kinac check`), `kinac build` and the language server share.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from compiler.analysis import analyze
from compiler.core.diagnostics import Diagnostic, SourceText

_ONE = r"//\s*(?:[EW]\[[\w-]+\]|N):"
EXPECTATION = re.compile(rf"//\s*(?:(?P<severity>[EW])\[(?P<code>[\w-]+)\]|(?P<note>N)):\s*(?P<message>.*?)\s*"
                         rf"(?={_ONE}|$)")


@dataclass(frozen=True, order=True)
class Expectation:
    """One expected (or found) diagnostic or note: its line, "E[code]" or "N", the message."""
    line: int
    kind: str
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: // {self.kind}: {self.message}"


def expected(text: str) -> list[Expectation]:
    """The expectations written in the comments of `text`."""
    out = []
    for line, content in enumerate(text.splitlines(), 1):
        for m in EXPECTATION.finditer(content):
            kind = "N" if m.group("note") else f"{m.group('severity')}[{m.group('code')}]"
            out.append(Expectation(line, kind, m.group("message")))
    return out


def found(diagnostics: list[Diagnostic], source: SourceText) -> list[Expectation]:
    """What `diagnostics` give, in the same form: one E per diagnostic, one N per note."""
    out = []
    for d in diagnostics:
        line = source.line_col(d.span.start)[0]
        kind = f"E[{d.code}]" if d.severity == "error" else f"W[{d.code}]"
        out.append(Expectation(line, kind, d.message))
        for note in d.notes:
            out.append(Expectation(source.line_col(note.span.start)[0] if note.span else line, "N", note.message))
    return out


def mismatches(want: list[Expectation], got: list[Expectation]) -> list[str]:
    """`missing ...` / `unexpected ...` lines, in line order (empty when they agree)."""
    missing = Counter(want) - Counter(got)
    extra = Counter(got) - Counter(want)
    rows = [(e, "missing") for e in missing.elements()] + [(e, "unexpected") for e in extra.elements()]
    return [f"{what} {e}" for e, what in sorted(rows)]


def check_file(path: Path) -> list[str]:
    """Analyse a case file as `kinac check` does and compare with its expectations."""
    text = path.read_text()
    snap = analyze(text, str(path))
    return mismatches(expected(text), found(snap.diagnostics, snap.source))
