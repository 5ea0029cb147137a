"""Syntax queries and text pieces the refactors share (refactor*.py): which node a selection
is, where the statement around an expression starts, fresh names, precedence and
parentheses, and the text of a let inserted or removed.  All read the compiler's AST
(compiler/syntax/nodes.py, spans in document offsets); none type-checks anything.

A Kina body is one let chain (`let` appears only there, never inside an operand), so "the
statement" of an expression is the let whose value holds it, or the chain's final
expression.
"""
from __future__ import annotations

from compiler.syntax import lex
from compiler.syntax import nodes as ast
from compiler.syntax.walk import children

from ..documents import View
from . import astutil
from .refactor_check import Edit

# Binding strength (docs/language.md §5.2): + - loosest, then * /, @, prefix -, postfix
# `.op(..)`, and atoms (names, literals, calls, handle, anything in parentheses).
_BINOP_LEVEL = {"+": 1, "-": 1, "*": 2, "/": 2, "@": 3}
NEG_LEVEL, POSTFIX_LEVEL, ATOM_LEVEL = 4, 5, 6


def walk(fn: ast.FnDef) -> list[tuple[ast.Expr, ast.Expr | None]]:
    """Every expression of fn's body with its parent (None for the body itself)."""
    out: list[tuple[ast.Expr, ast.Expr | None]] = []
    stack: list[tuple[ast.Expr, ast.Expr | None]] = [(fn.body, None)]
    while stack:
        node, parent = stack.pop()
        out.append((node, parent))
        stack.extend((c, node) for c in children(node))
    return out


def node_spanning(fn: ast.FnDef, start: int, end: int) -> tuple[ast.Expr, ast.Expr | None] | None:
    """The expression (not a let) whose span is exactly [start, end), with its parent; the
    outermost one when several share it."""
    hits = [(n, p) for n, p in walk(fn) if n.span.start == start and n.span.end == end and not isinstance(n, ast.Let)]
    return hits[0] if hits else None


def trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    """[start, end) without the blanks at either end."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def statement_start(fn: ast.FnDef, offset: int) -> int:
    """Where the statement holding `offset` starts: its let, or the chain's final expression."""
    let = astutil.let_of(fn, offset)
    if let is not None:
        return let.span.start
    tail = fn.body
    while isinstance(tail, ast.Let):
        tail = tail.body
    return tail.span.start


def taken_names(view: View, fn: ast.FnDef) -> set[str]:
    """The words a new let of fn must not be: every word of the function's text (its
    parameters, lets, size names, the ops and functions it calls), every function of the
    document and every import name, and the keywords."""
    words = {str(t) for t in lex.tokens(view.text, fn.span.start, fn.span.end) if t.type in lex.WORDS}
    imports = {link.decl.name for link in view.snapshot.imports}
    return words | set(view.snapshot.defined_names) | imports | {"in", "let", "fn", "handle", "with", "_"}


def fresh(base: str, taken: set[str]) -> str:
    """`base`, or base2, base3 ...: a name not in `taken` (which it joins)."""
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}{n}"
    taken.add(name)
    return name


def label(node: ast.Expr) -> str:
    """A name for the value of node: `x_exp` for `x.exp()`, the op or callee otherwise."""
    if isinstance(node, ast.MethodCall):
        receiver = node.receiver
        return f"{receiver.id}_{node.method}" if isinstance(receiver, ast.Name) else node.method
    if isinstance(node, ast.Call):
        return node.func.replace(".", "_")
    if isinstance(node, ast.BinOp):
        return {"+": "sum", "-": "diff", "*": "prod", "/": "quot", "@": "mm"}.get(node.op, "t")
    if isinstance(node, ast.Neg):
        return "neg"
    return "t"


def level(node: ast.Expr, text: str) -> int:
    """How tightly the text of `node` binds (its spans include its own parentheses)."""
    if parenthesized(text[node.span.start:node.span.end]):
        return ATOM_LEVEL
    if isinstance(node, ast.BinOp):
        return _BINOP_LEVEL.get(node.op, 1)
    if isinstance(node, ast.Neg):
        return NEG_LEVEL
    if isinstance(node, (ast.MethodCall, ast.Field)):
        return POSTFIX_LEVEL
    return ATOM_LEVEL


def needed_level(parent: ast.Expr | None, child: ast.Expr) -> int:
    """The binding strength an expression must have to stand where `child` is, under `parent`."""
    if isinstance(parent, ast.BinOp):
        own = _BINOP_LEVEL.get(parent.op, 1)
        # left-associative: the left operand may be as loose as the operator, the right not
        return own if child is parent.lhs else own + 1
    if isinstance(parent, ast.Neg):
        return POSTFIX_LEVEL       # `-(-x)`, `-(a * b)`: never `--x`
    if isinstance(parent, (ast.MethodCall, ast.Field)) and child is parent.receiver:
        return POSTFIX_LEVEL
    return 1                       # an argument, a tuple item, a let's value, the final expression


def fits(value: ast.Expr, text: str, parent: ast.Expr | None, child: ast.Expr) -> str:
    """The text of `value` to write where `child` is: in parentheses when precedence needs them."""
    written = text[value.span.start:value.span.end]
    return written if level(value, text) >= needed_level(parent, child) else f"({written})"


def parenthesized(text: str) -> bool:
    """`(a - b)` (one pair around the whole), not `(a) - (b)`."""
    depth = 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if depth == 0:
            return i == len(text) - 1 and text.startswith("(")
    return False


def insert_let(text: str, at: int, name: str, value: str) -> Edit:
    """Insert `let name = value in` before the statement starting at `at`: on a line of its
    own, indented like the statement, when the statement starts its line."""
    line_start = text.rfind("\n", 0, at) + 1
    before = text[line_start:at]
    if before.strip():
        return at, at, f"let {name} = {value} in "
    newline = "\r\n" if text[line_start - 2:line_start] == "\r\n" else "\n"    # the file's own line breaks
    return at, at, f"let {name} = {value} in{newline}{before}"


def in_keyword_end(text: str, let: ast.Let) -> int:
    """The offset just after the `in` of a let (the first `in` token after its value)."""
    for tok in lex.tokens(text, let.value.span.end, let.body.span.start):
        if str(tok) == "in":
            return lex.end(tok)
    return let.value.span.end


def remove_let(text: str, let: ast.Let) -> Edit:
    """Delete `let NAME = VALUE in`: its whole line(s) (with a trailing comment) when it
    stands on lines of its own, else just the let and the blanks after it."""
    start, end = let.span.start, in_keyword_end(text, let)
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end
    rest = text[end:line_end].strip()
    if not text[line_start:start].strip() and (not rest or rest.startswith("//")) and line_end < let.body.span.start:
        return line_start, line_end + 1, ""
    while end < len(text) and text[end] in " \t":
        end += 1
    return start, end, ""


def uses(let: ast.Let, name: str) -> list[tuple[ast.Name, ast.Expr | None]]:
    """The uses of a let's name (names are bound once, so every Name of it in the body)."""
    out: list[tuple[ast.Name, ast.Expr | None]] = []
    stack: list[tuple[ast.Expr, ast.Expr | None]] = [(let.body, let)]
    while stack:
        node, parent = stack.pop()
        if isinstance(node, ast.Name) and node.id == name:
            out.append((node, None if isinstance(parent, ast.Let) and node is parent.body else parent))
        stack.extend((c, node) for c in children(node))
    return sorted(out, key=lambda u: u[0].span.start)


def under_handle(let: ast.Let, name: ast.Name) -> bool:
    """Whether this use of a name is an argument of `handle f(..) with ..`."""
    stack: list[ast.Expr] = [let.body]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Handle) and node.span.contains(name.span.start):
            return True
        stack.extend(c for c in children(node) if c.span.contains(name.span.start))
    return False
