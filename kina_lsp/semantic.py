"""Semantic tokens (full document): a lexical pass classified with the op table
and the module's function names, so built-in ops, user functions, dtypes and
the reverseMode handler are told apart even where a TextMate grammar cannot.

Token rows are (line, start, length) in the negotiated position encoding,
delta-encoded as LSP requires.
"""
from __future__ import annotations

import re

from lsprotocol import types as lsp

from compiler.ops import SURFACE_OPS
from compiler.types import DType

TOKEN_TYPES = ["keyword", "type", "function", "method", "parameter", "variable", "number", "comment", "macro",
               "property", "enumMember"]
TOKEN_MODIFIERS = ["declaration", "defaultLibrary"]
LEGEND = lsp.SemanticTokensLegend(token_types=TOKEN_TYPES, token_modifiers=TOKEN_MODIFIERS)

_TOKEN = re.compile(r"(?P<comment>//[^\n]*)|(?P<number>\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
                    r"|(?P<ident>[A-Za-z_]\w*)(?P<call>\s*\()?(?P<kw>\s*=(?!=))?")
_KEYWORDS = {"fn", "let", "in", "handle", "with", "Tensor"}
_DTYPES = {d.value for d in DType}
_ENUMS = {c for op in SURFACE_OPS.values() for a in op.attrs for c in a.choices}


def _classify(m: re.Match, text: str, functions: set[str]) -> tuple[str, int] | None:
    """(token type, modifier bits) of one identifier match."""
    word = m.group("ident")
    after_dot = text[:m.start()].rstrip().endswith(".")
    if word in _KEYWORDS:
        return "keyword", 0
    if word in _DTYPES:
        return "type", 0
    if word == "reverseMode":
        return "macro", 2
    if m.group("kw"):
        return "property", 0
    if word in SURFACE_OPS and (after_dot or m.group("call")):
        return ("method" if after_dot else "function"), 2
    if word in functions and m.group("call"):
        declares = text[:m.start()].rstrip().endswith("fn")
        return "function", 1 if declares else 0
    if word in _ENUMS and text[:m.start()].rstrip().endswith("="):
        return "enumMember", 0
    return None  # plain variables are left to the editor's own highlighting


def semantic_tokens(text: str, index, functions: set[str], params: set[str]) -> lsp.SemanticTokens:
    data: list[int] = []
    prev_line = prev_col = 0
    for m in _TOKEN.finditer(text):
        if m.group("comment"):
            kind, mods, start, end = "comment", 0, m.start(), m.end()
        elif m.group("number"):
            kind, mods, start, end = "number", 0, m.start(), m.end()
        else:
            start, end = m.start("ident"), m.end("ident")
            cls = _classify(m, text, functions)
            if cls is None:
                if m.group("ident") not in params:
                    continue
                cls = ("parameter", 0)
            kind, mods = cls
        a, b = index.position(start), index.position(end)
        if a.line != b.line:
            continue
        delta_line = a.line - prev_line
        delta_col = a.character - prev_col if delta_line == 0 else a.character
        data += [delta_line, delta_col, b.character - a.character, TOKEN_TYPES.index(kind), mods]
        prev_line, prev_col = a.line, a.character
    return lsp.SemanticTokens(data=data)
