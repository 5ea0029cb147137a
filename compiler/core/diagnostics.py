"""Diagnostics: a code, a message, a primary span, optional notes and an optional fix.

Every stage *collects* diagnostics into a list instead of raising, so one run
reports all the mistakes of a file.  `render` gives the CLI's
`path:line:col: error[code]: message` form with the source line and a caret;
the language server converts the same objects to LSP diagnostics.
"""
from __future__ import annotations

import bisect
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Span:
    """Half-open character range [start, end) into the source text."""

    start: int
    end: int

    def contains(self, offset: int) -> bool:
        return self.start <= offset <= self.end

    def cover(self, other: Span) -> Span:
        return Span(min(self.start, other.start), max(self.end, other.end))

    def shift(self, delta: int) -> Span:
        return Span(self.start + delta, self.end + delta)


@dataclass(frozen=True)
class Note:
    message: str
    span: Span | None = None


@dataclass(frozen=True)
class Fix:
    """A change that resolves a diagnostic, for editors to offer (kina_lsp/actions.py keys its
    quick fixes on `kind`, one of FIXES; never on the message text).  `text`: what to write
    over the diagnostic's span, for the kinds that say so."""
    kind: str
    text: str | None = None


@dataclass(frozen=True)
class Diagnostic:
    code: str
    message: str
    span: Span
    notes: tuple[Note, ...] = ()
    severity: str = "error"  # "error" | "warning"
    fix: Fix | None = None

    def shift(self, delta: int) -> Diagnostic:
        notes = tuple(Note(n.message, n.span.shift(delta) if n.span else None) for n in self.notes)
        return Diagnostic(self.code, self.message, self.span.shift(delta), notes, self.severity, self.fix)


# Every diagnostic code the compiler can emit, with a one-line description.
# docs/language.md lists them; tests check that every emitted code is here.
CODES: dict[str, str] = {
    "syntax": "the text does not parse",
    "unknown-name": "a variable, function, op or handler that is not defined",
    "duplicate": "a function, parameter or let name defined twice",
    "type-annotation": "a malformed type (unknown dtype, placement, negative dimension)",
    "shape": "operand shapes violate an op's shape rule",
    "dtype": "operand dtypes violate an op's rule (e.g. I64 where a float is needed)",
    "placement": "operands of one op live on different placements",
    "attr": "a missing, unknown or out-of-range attribute",
    "arity": "wrong number of operands or arguments",
    "return-type": "a function body's type differs from its declared return type",
    "destructure": "a destructuring let whose pattern does not match the tuple",
    "literal": "a tensor literal whose payload does not match its type",
    "index": "a constant index (a tensor literal) outside the range of the tensor it indexes",
    "main": "the entry function `main` is malformed",
    "ad-unsupported": "an op or form that reverseMode cannot differentiate",
    "ad-structure": "a differentiated body that is not a let chain of single ops on variables",
    "ad-result": "a differentiated function whose result cannot be seeded",
    "emit": "the program cannot be lowered to the host (e.g. @device operands)",
    "recursion": "a function that calls itself, directly or not",
    "size": "a size parameter or size expression that is wrong: unknown, not exact, conflicting at a call, "
            "or a bound that does not hold for every size",
    "shadow": "a user function named like a built-in op (a warning: its free calls and handles mean the function)",
    "toolchain": "mlir-opt, mlir-translate, llc or cc rejected the generated code, or a tool is missing",
    "import": "an import that cannot be used: no such module on the search path, or the module has errors",
    "import-cycle": "files that import each other, directly or not (the message names the path)",
    "private": "a qualified call of a module's private function (its name starts with `_`)",
}


# Every kind of Fix, with what applying it does (the language server offers each as a quick fix).
FIXES: dict[str, str] = {
    "split-let": "hoist the nested operand at the span into its own let before the enclosing let",
    "write": "replace the span by `text` (e.g. a tensor literal where a bare number is not a tensor)",
    "cast": "append `.cast(dtype=text)` to the operand at the span (in parentheses when it is not a postfix "
            "expression)",
    "import": "add the line `import text` after the file's last import line (in a file with none: after its "
              "header comment when a blank line ends it, else first)",
}


# Lines end at \n, \r\n or \r: what editors (and the LSP) count, so CLI and server agree.
_NEWLINE = re.compile("\r\n|\r|\n")


def display_path(path: str | os.PathLike[str]) -> str:
    """A file name as Kina prints it (diagnostics, CLI and server messages): unchanged when
    every character is printable, else in double quotes with C-style escapes (`\\n`, `\\"`,
    `\\xff` for a byte that is not UTF-8, `\\u202e`), so a crafted name can neither break
    a line, fake an `error:` line of its own, nor make printing fail on a non-UTF-8 byte."""
    name = os.fspath(path)
    if name.isprintable() and '"' not in name and not _has_surrogates(name):
        return name
    return '"' + "".join(_escape_char(c) for c in name) + '"'


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", '"': '\\"', "\\": "\\\\"}


def _escape_char(c: str) -> str:
    if c in _ESCAPES:
        return _ESCAPES[c]
    code = ord(c)
    if 0xDC80 <= code <= 0xDCFF:       # a byte that is not UTF-8 (os.fsdecode's surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    if c.isprintable() and not 0xD800 <= code <= 0xDFFF:
        return c
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _has_surrogates(name: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in name)


def plain_name(path: str | os.PathLike[str]) -> str:
    """A file name for generated text (MLIR `loc(...)` and comments, C comments): itself when
    it is printable ASCII without `"`, `\\`, `:` or `*/`; else its bytes (UTF-8, a non-UTF-8
    byte as itself) with each of those written `%XX`, so it is plain ASCII that no tool
    reads as a line break, a quote, the end of a comment or a `file:line:col` separator."""
    name = os.fspath(path)
    if all(" " <= c <= "~" for c in name) and not any(s in name for s in ('"', "\\", ":", "*/", "%")):
        return name
    data = name.encode("utf-8", "surrogateescape")
    return "".join(chr(b) if 0x20 <= b <= 0x7E and b not in b'"\\:*%' else f"%{b:02X}" for b in data)


class UsageError(Exception):
    """A tool invoked wrongly (arguments, files, environment variables): the CLI
    reports it as one line and exits 2, never as a traceback."""


# A UTF-8 byte-order mark: accepted (and skipped) at the start of a file, as Python and rustc do.
BOM = "\ufeff"


def read_source(path: str | os.PathLike[str], keep_bom: bool = False) -> str:
    """The text of a .kina file, or a UsageError that says why it cannot be read.  A leading
    byte-order mark is dropped (so columns are those an editor shows) unless `keep_bom`
    (`kinac fmt` writes it back); the parser skips one at offset 0 anyway (the language
    server gets the editor's text)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise UsageError(f"cannot read {display_path(path)}: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{display_path(path)} is not UTF-8 text (byte {e.start} is 0x{data[e.start]:02x})") from None
    return text if keep_bom or not text.startswith(BOM) else text[1:]


class SourceText:
    """Maps character offsets to 1-based (line, column) and back."""

    def __init__(self, text: str, path: str = "<input>") -> None:
        self.text = text
        self.path = path
        self._starts = [0] + [m.end() for m in _NEWLINE.finditer(text)]

    def line_col(self, offset: int) -> tuple[int, int]:
        offset = max(0, min(offset, len(self.text)))
        line = bisect.bisect_right(self._starts, offset) - 1
        return line + 1, offset - self._starts[line] + 1

    def offset(self, line: int, col: int) -> int:
        """Inverse of line_col (1-based), clamped to the text."""
        line = max(1, min(line, len(self._starts)))
        return min(self._starts[line - 1] + col - 1, len(self.text))

    def line_text(self, line: int) -> str:
        start = self._starts[line - 1]
        m = _NEWLINE.search(self.text, start)
        return self.text[start:] if m is None else self.text[start:m.start()]

    def render(self, diag: Diagnostic) -> str:
        line, col = self.line_col(diag.span.start)
        out = [f"{display_path(self.path)}:{line}:{col}: {diag.severity}[{diag.code}]: {diag.message}"]
        src = self.line_text(line)
        end_line, end_col = self.line_col(diag.span.end)
        width = (end_col - col) if end_line == line else len(src) - col + 1
        out.append("  " + src)
        out.append("  " + " " * (col - 1) + "^" + "~" * max(0, width - 1))
        for note in diag.notes:
            if note.span is not None:
                nl, nc = self.line_col(note.span.start)
                out.append(f"{display_path(self.path)}:{nl}:{nc}: note: {note.message}")
            else:
                out.append(f"  note: {note.message}")
        return "\n".join(out)

    def to_json(self, diag: Diagnostic) -> dict[str, object]:
        line, col = self.line_col(diag.span.start)
        end_line, end_col = self.line_col(diag.span.end)
        return {
            "path": self.path, "code": diag.code, "severity": diag.severity,
            "message": diag.message, "start": diag.span.start, "end": diag.span.end,
            "line": line, "col": col, "end_line": end_line, "end_col": end_col,
            "notes": [{"message": n.message,
                       "start": n.span.start if n.span else None,
                       "end": n.span.end if n.span else None} for n in diag.notes],
        }


@dataclass
class DiagnosticBag:
    """A collector passed through a stage."""

    items: list[Diagnostic] = field(default_factory=list)

    def error(self, code: str, message: str, span: Span, *notes: Note, fix: Fix | None = None) -> None:
        assert code in CODES, code
        assert fix is None or fix.kind in FIXES, fix
        self.items.append(Diagnostic(code, message, span, tuple(notes), fix=fix))

    def warning(self, code: str, message: str, span: Span, *notes: Note) -> None:
        """A diagnostic that does not stop the build (the CLI prints it, the server shows it)."""
        assert code in CODES, code
        self.items.append(Diagnostic(code, message, span, tuple(notes), severity="warning"))

    def has_errors(self) -> bool:
        return any(d.severity == "error" for d in self.items)

    def extend(self, diags: Iterable[Diagnostic]) -> None:
        self.items.extend(diags)

    def __bool__(self) -> bool:
        return bool(self.items)
