"""Selection ranges (expand / shrink selection): from the word under the cursor
out through every enclosing expression, then the `let ... in` link, the let
chain, the function body and the whole function; in a signature, the name or
type, the parameter, the parameter list and the function.

Everything comes from the AST (compiler.syntax.nodes spans).  Outside any function
(or in one that does not parse) the answer is the word, then the item the
cursor is in, so expand selection still does something sensible.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from compiler.core.diagnostics import Span
from compiler.syntax import lex
from compiler.syntax import nodes as ast
from compiler.syntax import walk as ast_walk

from .. import background
from ..background import Checkpoint
from ..documents import View
from ..items import split_items
from . import astutil

if TYPE_CHECKING:
    from ..base import Safe, Server



def _inside(span: Span, offset: int) -> bool:
    return span.start <= offset <= span.end


# What a selection can grow from: a node of the AST, or a bare span (an attribute's name or value)
Node = ast.Expr | ast.Attr | ast.TypeExpr | Span


def _children(node: ast.Expr | ast.Attr | ast.TypeExpr) -> list[Node]:
    """Sub-nodes with spans, attributes and names included, in source order."""
    if isinstance(node, ast.Attr):
        return [Span(node.name_span.start, node.name_span.end), Span(node.value_span.start, node.value_span.end)]
    if isinstance(node, (ast.TensorTypeExpr, ast.TupleTypeExpr)):
        return []   # a literal's type is selected as a whole
    kids: list[Node] = list(ast_walk.children(node))
    if isinstance(node, (ast.Call, ast.MethodCall)):
        kids += node.attrs
    if isinstance(node, ast.TensorLit):
        kids = [node.type]
    return kids


def _span_of(node: Node) -> Span:
    return node if isinstance(node, Span) else node.span


# At most this many enclosing expressions are offered: in a flat chain of 30,000 terms
# every prefix `y + ... + y` encloses the cursor, and a reply nesting 30,000 parents is
# more than a client (or a JSON encoder) takes; the outermost and innermost are kept.
MAX_PATH = 96


def _expression_path(node: Node | None, offset: int) -> list[Span]:
    out: list[Span] = []
    while node is not None:
        out.append(_span_of(node))
        if isinstance(node, Span):
            break
        node = next((c for c in _children(node) if _inside(_span_of(c), offset)), None)
    if len(out) > MAX_PATH:
        out = out[:MAX_PATH // 4] + out[len(out) - (MAX_PATH - MAX_PATH // 4):]
    return out


def _let_link(text: str, let: ast.Let) -> Span:
    """`let PATTERN = VALUE in` (the let's own span runs to the end of the chain)."""
    after = lex.tokens(text, let.value.span.end, let.span.end)
    in_ = after[0] if after and after[0].type == "IN" else None
    return Span(let.span.start, lex.end(in_) if in_ is not None else let.value.span.end)


def _in_signature(fn: ast.FnDef, offset: int) -> list[Span]:
    for p in fn.params:
        if _inside(p.span, offset):
            inner = p.name_span if _inside(p.name_span, offset) else p.type.span
            params = Span(fn.params[0].span.start, fn.params[-1].span.end)
            return [params, p.span, inner]
    if _inside(fn.ret.span, offset):
        return [fn.ret.span]
    return [fn.name_span] if _inside(fn.name_span, offset) else []


def _in_body(text: str, fn: ast.FnDef, offset: int) -> list[Span]:
    lets = list(astutil.lets(fn))
    out = [fn.body.span]
    for let in lets:
        link = _let_link(text, let)
        if _inside(link, offset):
            chain = Span(lets[0].span.start, _let_link(text, lets[-1]).end)
            out += [chain, link]
            for n in let.names:
                if _inside(n.span, offset):
                    return out + [n.span]
            return out + (_expression_path(let.value, offset) if _inside(let.value.span, offset) else [])
    final = lets[-1].body if lets else fn.body
    return out + (_expression_path(final, offset) if _inside(final.span, offset) else [])


def spans_at(view: View, offset: int) -> list[Span]:
    """Enclosing spans, outermost first."""
    text = view.text
    fn = astutil.function_at(view.snapshot.module, offset)
    if fn is not None:
        inner = _in_body(text, fn, offset) if _inside(fn.body.span, offset) else _in_signature(fn, offset)
        spans = [fn.span] + inner
    else:
        item = next((it for it in split_items(text) if it.start <= offset <= it.end), None)
        spans = [Span(item.start, item.end)] if item else []
    word = lex.word_at(text, offset, numbers=True)
    if word is not None:
        spans.append(Span(lex.start(word), lex.end(word)))
    out: list[Span] = []
    for s in spans:   # each strictly inside the previous one
        if not out or (out[-1].start <= s.start and s.end <= out[-1].end and s != out[-1]):
            out.append(s)
    return out


def selection_range(view: View, position: lsp.Position) -> lsp.SelectionRange:
    offset = view.index.offset(position)
    spans = spans_at(view, offset) or [Span(offset, offset)]
    node = lsp.SelectionRange(range=view.index.range(spans[0]))
    for s in spans[1:]:
        node = lsp.SelectionRange(range=view.index.range(s), parent=node)
    return node


def register(server: Server, safe: Safe) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_SELECTION_RANGE)
    @safe(default=list)
    async def on_selection_range(ls: Server, params: lsp.SelectionRangeParams) -> list[lsp.SelectionRange]:
        uri = params.text_document.uri
        view = await ls.view(uri, wait=True)   # a keystroke the user waits on
        if view is None:
            return []
        cur = ls.buffer(uri)
        version = cur[1] if cur is not None and cur[0] == view.text else None

        def work(checkpoint: Checkpoint) -> list[lsp.SelectionRange]:
            out = []
            for p in params.positions:
                checkpoint()
                out.append(selection_range(view, p))
            return out
        return await background.run(ls, uri, view.text, version, work)   # off the request loop
