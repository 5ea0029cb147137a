"""Formatting the import lines that open a file (syntax/imports.py reads them).

Each import is written in one spelling: `import layers`, `import layers as L` (`as` only
when the name differs from the module's), `import "path/to/file.kina" as name`, with its
trailing comment kept.  Comments between imports stay on their own lines, runs of blank
lines become one, and one blank line separates the imports from what follows.  The rest
of the file is formatted as before (formatter.py)."""
from __future__ import annotations

from compiler.core.diagnostics import Diagnostic
from compiler.syntax.imports import ImportDecl, scan
from compiler.syntax.items import split_items


class ImportProblem(Exception):
    """The import lines have syntax errors (scan's diagnostics, in `diagnostics`)."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        super().__init__("syntax errors in the import lines")
        self.diagnostics = diagnostics


def split_header(text: str) -> tuple[str, str, int]:
    """(the formatted import lines, "" when there are none; the rest of the text; where the
    rest starts in `text`).  ImportProblem when an import line is malformed or misplaced."""
    decls, diags, _ = scan(text, split_items(text))
    if diags:
        raise ImportProblem(diags)
    if not decls:
        return "", text, 0
    end = text.find("\n", decls[-1].span.end)
    end = len(text) if end < 0 else end + 1
    starts = {d.span.start: d for d in decls}
    out: list[str] = []
    pos = 0
    for line in text[:end].splitlines(keepends=True):
        stripped = line.strip()
        # the indentation only: a blank line's newline is no lead (its end is where the next
        # line, perhaps an import, starts)
        lead = len(line) - len(line.lstrip(" \t"))
        decl = starts.get(pos + lead) if stripped else None
        if decl is not None:
            comment = text[decl.span.end:pos + len(line.rstrip())].strip()
            out.append(_spelling(decl) + (f" {comment}" if comment else ""))
        elif stripped:
            out.append(stripped)          # a comment line (scan reported anything else)
        elif out and out[-1] != "":
            out.append("")
        pos += len(line)
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n", text[end:], end


def _spelling(d: ImportDecl) -> str:
    if d.module is None:
        return f'import "{d.path}" as {d.name}'
    return f"import {d.module}" + (f" as {d.name}" if d.name != d.module else "")
