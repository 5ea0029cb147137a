"""Small read-only queries over the compiler's AST (compiler/syntax/nodes.py).

The server never re-implements typing; these helpers only answer "which
syntax node is under the cursor" and "which lets does this function bind",
which hover, inlay hints and the quick fix need.
"""
from __future__ import annotations

from collections.abc import Iterator

from compiler.syntax import nodes as ast
from compiler.syntax.walk import children

EXPR_TYPES = (ast.Name, ast.IntList, ast.Number, ast.MethodCall, ast.Field, ast.Call, ast.BinOp,
              ast.Neg, ast.Handle, ast.TensorLit, ast.TupleExpr, ast.Let)


def function_at(module: ast.Module | None, offset: int) -> ast.FnDef | None:
    if module is None:
        return None
    return next((f for f in module.functions if f.span.contains(offset)), None)


def path_at(fn: ast.FnDef, offset: int) -> list[ast.Expr]:
    """Nodes from the function body down to the innermost expression containing offset."""
    path: list[ast.Expr] = []
    node: ast.Expr | None = fn.body
    while node is not None and node.span.contains(offset):
        path.append(node)
        node = next((c for c in children(node) if c.span.contains(offset)), None)
    return path


def lets(fn: ast.FnDef) -> Iterator[ast.Let]:
    """The let chain of a function body, outermost first."""
    node = fn.body
    while isinstance(node, ast.Let):
        yield node
        node = node.body


def let_of(fn: ast.FnDef, offset: int) -> ast.Let | None:
    """The let whose bound value contains offset."""
    return next((let for let in lets(fn) if let.value.span.contains(offset)), None)


def find_function(module: ast.Module | None, name: str) -> ast.FnDef | None:
    if module is None:
        return None
    return next((f for f in module.functions if f.name == name), None)


def type_text(t: ast.TypeExpr) -> str:
    """How a parameter's type was written (types as written, before checking)."""
    if isinstance(t, ast.TensorTypeExpr):
        dims = ", ".join(ast.size_text(d) for d in t.shape)     # `B * T` as written (canonical spacing)
        return f"Tensor[{t.dtype}, [{dims}], @{t.placement or 'host'}]"
    if isinstance(t, ast.TupleTypeExpr):
        return "(" + ", ".join(type_text(i) for i in t.items) + ")"
    return str(t)


def generic_name(fn: ast.FnDef) -> str:
    """`linear[M, K, N]` for a size-generic function, else its name."""
    return f"{fn.name}[{', '.join(s.name for s in fn.sizes)}]" if fn.sizes else fn.name


def signature(fn: ast.FnDef) -> str:
    """`fn linear[M, K, N](x: Tensor[F32, [M, K], @host], ...) -> ...` (types as written)."""
    params = ", ".join(f"{p.name}: {type_text(p.type)}" for p in fn.params)
    return f"fn {generic_name(fn)}({params}) -> {type_text(fn.ret)}"


def size_param(fn: ast.FnDef, span: object) -> ast.SizeParam | None:
    """The size parameter of fn declared at `span` (a definition's span), if it is one."""
    return next((s for s in fn.sizes if s.span == span), None)


def is_float_param(p: ast.Param) -> bool:
    """Floating parameters receive a cotangent under reverseMode; I64 never does."""
    return isinstance(p.type, ast.TensorTypeExpr) and p.type.dtype != "I64"
