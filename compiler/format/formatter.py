"""Format: Kina source -> the same program in the one Kina style (`kinac fmt`).

The text is parsed (a file with a syntax error is refused with its located
diagnostics), each function is printed from its AST through compiler/format/layout.py
within 100 columns, and the `//` comments are woven back in by position:

- the AST says what is printed; the source gives only the spelling of numbers
  (`1e-3` stays `1e-3`) and where each comment and blank line was;
- a comment alone on its line stays alone on its line, before the token that
  followed it; a comment after code on the same line ("trailing") stays at the
  end of the line of the token it followed, and that line ends right after it;
- blank lines are kept (at most one) between the links of a let chain and
  between top-level items and comments; functions are separated by one blank line.

The style (docs/language.md, "Formatting"): two-space indentation, one `let`
per line, spaces around binary operators and after commas, none inside
brackets (`[1, 4]`) or around `=` of attributes (`axis=1`); parentheses only
where precedence needs them (and around a `handle` used as a receiver); a list
that does not fit puts one item per line with a trailing comma; a method chain
of two or more calls that does not fit puts one `.call(...)` per line; tensor
literal values fill their lines.

Every result is checked before it is returned: it must parse to the same AST
(modulo spans) and hold the same comments in the same order, else FormatError
(an internal error; nothing is written).  Formatting twice changes nothing more
(tests/test_format.py checks that, with hypothesis-generated programs).
"""
from __future__ import annotations

import math
import re
from dataclasses import fields, is_dataclass

from compiler.core.diagnostics import BOM, Diagnostic, Span
from compiler.format import imports, layout
from compiler.format.errors import FormatError
from compiler.format.print_expr import ExprPrinter
from compiler.format.print_types import INDENT
from compiler.syntax import nodes as ast
from compiler.syntax.items import gaps, split_items
from compiler.syntax.parse import parse_local
from compiler.syntax.walk import SPINE, shift, spine

__all__ = ["FormatError", "WIDTH", "ast_shape", "comments_of", "format_source"]

WIDTH = 100

_COMMENT = re.compile(r"//[^\n]*")


def comments_of(text: str) -> list[str]:
    """The comments of a text, in order (Kina has no strings, so `//` always starts one)."""
    return [m.group().rstrip() for m in _COMMENT.finditer(text)]


# ---- the printer -------------------------------------------------------------------------
class _Formatter(ExprPrinter):
    """The whole module: functions separated by one blank line."""

    def module(self, module: ast.Module) -> None:
        self.structural = self._structural_opens(module)
        for i, fn in enumerate(module.functions):
            if i:
                self.brk(layout.HARD)
                self.b.add(layout.BLANK)
            self.function(fn)
        self.finish()

    def function(self, fn: ast.FnDef) -> None:
        self.tok("fn", fn.span.start, blank_ok=True)
        self.space()
        self.tok(fn.name, fn.name_span.start)
        with self.b.group():
            pos = self.size_params(fn)
            # the parameters break when `(params) -> type {` does not fit, never the
            # return type's shape list while the parameters stay on one line
            pos = self.bracketed(fn.params, self.param, pos, grouped=False)
            self.space()
            pos = self.expect("->", pos)
            self.space()
            self.type_expr(fn.ret)
        self.space()
        self.tok("{", self.find("{", fn.ret.span.end))
        close = fn.span.end - 1
        with self.b.indent(INDENT):
            self.brk(layout.HARD)
            self.chain(fn.body)
            self.dangling(close, blank_ok=True)
        self.brk(layout.HARD)
        self.tok("}", close)


# ---- checks ---------------------------------------------------------------------------------
def ast_shape(node: object) -> object:
    """An AST without its spans, as nested tuples (let chains walked with a loop)."""
    if isinstance(node, ast.Let):
        links: list[object] = []
        body: ast.Expr = node
        while isinstance(body, ast.Let):
            links.append(("let", ast_shape(body.names), body.destructure, ast_shape(body.value)))
            body = body.body
        return ("chain", tuple(links), ast_shape(body))
    if type(node) in SPINE:            # a flat chain, walked with a loop: it may be long
        return ("spine", tuple(_link_shape(link) for link in spine(node)))
    if isinstance(node, (list, tuple)):
        return tuple(ast_shape(x) for x in node)
    if isinstance(node, float):     # NaN as a word: nan != nan would make every tree with one differ
        return ("float", "nan" if math.isnan(node) else node, math.copysign(1.0, node))
    if is_dataclass(node) and not isinstance(node, Span):
        return (type(node).__name__,) + tuple(ast_shape(getattr(node, f.name)) for f in fields(node)
                                              if not isinstance(getattr(node, f.name), Span))
    return node


def _link_shape(node: object) -> object:
    """One link of a flat chain without the link it continues (its SPINE field)."""
    if type(node) not in SPINE:
        return ast_shape(node)
    skip = SPINE[type(node)]
    parts = [ast_shape(getattr(node, f.name)) for f in fields(node)   # type: ignore[arg-type]
             if f.name != skip and not isinstance(getattr(node, f.name), Span)]
    return (type(node).__name__, *parts)


def _parse(text: str) -> tuple[ast.Module, list[Diagnostic], list[str]]:
    """parse_module, through the per-item cache (parse_local): the language server has
    parsed these items already, and an item that formatting leaves as it is costs nothing
    the second time.  Also returns each function's item text."""
    items = split_items(text)
    diags = gaps(text, items)
    functions: list[ast.FnDef] = []
    texts: list[str] = []
    for it in items:
        fn, item_diags = parse_local(text[it.start:it.end])
        diags += [d.shift(it.start) for d in item_diags]
        if fn is not None:
            functions.append(shift(fn, it.start))
            texts.append(text[it.start:it.end])
    diags.sort(key=lambda d: (d.span.start, d.span.end))
    return ast.Module(tuple(functions), Span(0, len(text))), diags, texts


def _parse_or_raise(text: str, what: str) -> tuple[ast.Module, list[str]]:
    module, diags, texts = _parse(text)
    if diags:
        raise FormatError(f"{what} has syntax errors", diags)
    return module, texts


# ---- entry points -----------------------------------------------------------------------------
def format_source(text: str, width: int = WIDTH) -> str:
    """The formatted text, or FormatError (with the syntax diagnostics, spans in `text`) when
    it does not parse.  A byte-order mark opening the text opens the result too (the
    formatter changes layout, not encoding)."""
    if not text.startswith(BOM):
        return _format(text, width)
    try:
        return BOM + _format(text[1:], width)
    except FormatError as e:
        raise FormatError(str(e), [d.shift(1) for d in e.diagnostics]) from e


def _format(text: str, width: int) -> str:
    crlf = "\r\n" in text[:text.find("\n") + 1] if "\n" in text else False
    plain = text.replace("\r\n", "\n") if crlf else text
    try:
        header, rest, at = imports.split_header(plain)
    except imports.ImportProblem as e:
        raise FormatError("the input has syntax errors", e.diagnostics) from e
    if not header:
        out = _format_items(plain, width)
    else:
        try:
            body = _format_items(rest, width)
        except FormatError as e:
            raise FormatError(str(e), [d.shift(at) for d in e.diagnostics]) from e
        out = header + ("\n" + body if body else "")
    return out.replace("\n", "\r\n") if crlf else out


def _format_items(plain: str, width: int) -> str:
    """The formatted functions (and comments) of a text without import lines."""
    module, texts = _parse_or_raise(plain, "the input")
    f = _Formatter(plain)
    f.module(module)
    out = layout.render(f.b.root, width).strip("\n")
    out = out + "\n" if out else ""
    _check(plain, module, texts, out)
    return out


def _check(before: str, module: ast.Module, texts: list[str], after: str) -> None:
    """The formatted text must mean the same program and keep every comment, in order
    (a function whose text did not change is the same function)."""
    try:
        formatted, new_texts = _parse_or_raise(after, "the formatted text")
    except FormatError as e:
        raise FormatError("internal error: the formatted text does not parse "
                          f"({e.diagnostics[0].message if e.diagnostics else e}); the file was left as it is") from e
    same = len(formatted.functions) == len(module.functions) and all(
        t == u or ast_shape(f) == ast_shape(g)
        for t, u, f, g in zip(texts, new_texts, module.functions, formatted.functions))
    if not same:
        raise FormatError("internal error: formatting would change the program; the file was left as it is")
    if comments_of(after) != comments_of(before):
        raise FormatError("internal error: formatting would lose or merge a comment; the file was left as it is")
