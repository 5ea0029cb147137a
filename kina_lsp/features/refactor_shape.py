"""Quick fixes of `shape` diagnostics: the `.broadcast(..)` or `.reshape(..)` the checker's
message asks for (compiler/ir/shape_rules.py: "operand shapes differ ... use .broadcast";
matmul's inner and batch dimensions; compiler/check/type_exprs.mismatch for a result or an
argument of the wrong shape).

The fixes are chosen from the types, never from the message text: the diagnostic's span is
the operand the checker blames, and its parent node is the op.  Candidates:

- an elementwise op (`+ - * /`, or an op in method or free form with two tensor operands)
  whose operands differ: the one that broadcasts to the other's shape gets
  `.broadcast([..])` (`[1, N]` or `[N]` against `[M, N]`), or `.reshape([..])` when the
  volumes agree (`[M * N]` against `[M, N]`);
- matmul: the lower-rank side broadcast to the other's batch dimensions, or the rhs reshaped
  to the lhs's K;
- the function's result, or an argument of a user function, of the wrong shape: reshaped
  (or broadcast) to the declared type, written as declared (`[B, T * D]`).

A candidate is offered only when the fixed text re-checks without that diagnostic and
without any new one (refactor_check); the shapes are written with the function's own size
names, so a size-generic function gets `x.broadcast([M, N])`.
"""
from __future__ import annotations

import math
from typing import Any

from compiler.core.diagnostics import Diagnostic
from compiler.syntax import nodes as ast

from ..documents import View
from . import refactor_syntax as syn
from .refactor_check import Expect, Plan, type_of

Args = dict[str, Any]
_ELEMENTWISE = {"+", "-", "*", "/"}


def _dims(typ: str | None) -> list[str] | None:
    """The dimensions of a printed tensor type, `Tensor[F32, [M, 4], @host]` -> ["M", "4"]."""
    if not typ or not typ.startswith("Tensor[") or "[" not in typ[7:]:
        return None
    inner = typ[typ.index("[", 7) + 1:typ.index("]", 7)]
    return [d.strip() for d in inner.split(",")] if inner.strip() else []


def _volume(dims: list[str]) -> int | None:
    return math.prod(int(d) for d in dims) if all(d.isdigit() for d in dims) else None


def _broadcasts(small: list[str], big: list[str]) -> bool:
    """`small` expands to `big` (trailing alignment; only 1 expands)."""
    if len(small) > len(big) or small == big:
        return False
    lead = len(big) - len(small)
    return all(d == "1" or d == big[lead + i] for i, d in enumerate(small))


def _fixes_to(small: list[str] | None, big: list[str] | None) -> list[tuple[str, list[str]]]:
    """(op, shape) making a `small`-shaped value `big`-shaped."""
    if small is None or big is None or small == big:
        return []
    out = [("broadcast", big)] if _broadcasts(small, big) else []
    vs, vb = _volume(small), _volume(big)
    if vs is not None and vs == vb:
        out.append(("reshape", big))
    return out


def _diagnostic(view: View, start: int, end: int) -> Diagnostic | None:
    return next((d for d in view.snapshot.diagnostics
                 if d.code == "shape" and d.span.start == start and d.span.end == end), None)


def _operands(node: ast.Expr) -> list[ast.Expr]:
    if isinstance(node, ast.BinOp):
        return [node.lhs, node.rhs]
    if isinstance(node, ast.MethodCall):
        return [node.receiver, *node.args]
    if isinstance(node, ast.Call):
        return list(node.args)
    return []


def candidates(view: View, start: int, end: int) -> list[tuple[ast.Expr, str, list[str]]]:
    """(operand to fix, op, target shape) for the `shape` diagnostic at [start, end)."""
    fn = view.snapshot.function_at(start)
    found = syn.node_spanning(fn, start, end) if fn is not None else None
    if fn is None or found is None or _diagnostic(view, start, end) is None:
        return []
    node, parent = found
    typ = _type_of(view, node)
    out: list[tuple[ast.Expr, str, list[str]]] = []
    if isinstance(parent, ast.BinOp) and parent.op == "@":
        out += _matmul(view, parent)
    elif parent is not None and len(ops := _operands(parent)) == 2 and (
            not isinstance(parent, ast.BinOp) or parent.op in _ELEMENTWISE):
        a, b = ops
        ta, tb = _dims(_type_of(view, a)), _dims(_type_of(view, b))
        out += [(a, op, shape) for op, shape in _fixes_to(ta, tb)]
        out += [(b, op, shape) for op, shape in _fixes_to(tb, ta)]
    want = _declared(view, fn, node, parent)
    out += [(node, op, shape) for op, shape in _fixes_to(_dims(typ), want)]
    return out


def _matmul(view: View, mm: ast.BinOp) -> list[tuple[ast.Expr, str, list[str]]]:
    a, b = _dims(_type_of(view, mm.lhs)), _dims(_type_of(view, mm.rhs))
    if a is None or b is None or len(a) < 2 or len(b) < 2:
        return []
    out: list[tuple[ast.Expr, str, list[str]]] = []
    if len(b) < len(a) and _broadcasts(b, a[:-2] + b[-2:]):
        out.append((mm.rhs, "broadcast", a[:-2] + b[-2:]))
    if len(a) < len(b) and _broadcasts(a, b[:-2] + a[-2:]):
        out.append((mm.lhs, "broadcast", b[:-2] + a[-2:]))
    vb, k = _volume(b), a[-1]
    if vb is not None and k.isdigit() and b[-2] != k:
        batch = _volume(a[:-2]) if len(b) == len(a) else 1
        if batch and vb % (batch * int(k)) == 0:
            shape = (a[:-2] if len(b) == len(a) else []) + [k, str(vb // (batch * int(k)))]
            out.append((mm.rhs, "reshape", shape))
    return out


def _declared(view: View, fn: ast.FnDef, node: ast.Expr, parent: ast.Expr | None) -> list[str] | None:
    """The shape written for node's place: the function's result type when node is the chain's
    final expression, a user function's parameter type when it is an argument of its call."""
    tail = fn.body
    while isinstance(tail, ast.Let):
        tail = tail.body
    if node is tail and isinstance(fn.ret, ast.TensorTypeExpr):
        return [ast.size_text(d) for d in fn.ret.shape]
    if isinstance(parent, ast.Call) and node in parent.args:
        callee = view.snapshot.function_named(parent.func)
        i = parent.args.index(node)
        if callee is not None and not callee.sizes and i < len(callee.params):
            t = callee.params[i].type
            return [ast.size_text(d) for d in t.shape] if isinstance(t, ast.TensorTypeExpr) else None
    return None


def _type_of(view: View, node: ast.Expr) -> str | None:
    return type_of(view.snapshot, node.span.start, node.span.end)


def find_fixes(view: View, diagnostics: list[tuple[int, int, str]]) -> list[Args]:
    """Args of every candidate fix of the `shape` diagnostics among (start, end, code)."""
    out: list[Args] = []
    for start, end, code in diagnostics:
        if code == "shape":
            out += [{"start": start, "end": end, "i": i} for i in range(len(candidates(view, start, end)))]
    return out


def make_fix(view: View, args: Args) -> Plan | None:
    s, e, i = args.get("start"), args.get("end"), args.get("i")
    if not (isinstance(s, int) and isinstance(e, int) and isinstance(i, int)):
        return None
    found = candidates(view, s, e)
    diag = _diagnostic(view, s, e)
    fn = view.snapshot.function_at(s)
    if not 0 <= i < len(found) or diag is None or fn is None:
        return None
    operand, op, shape = found[i]
    text = view.text
    written = text[operand.span.start:operand.span.end]
    if syn.level(operand, text) < syn.POSTFIX_LEVEL:
        written = f"({written})"
    shape_text = f"[{', '.join(shape)}]"
    edit = (operand.span.start, operand.span.end, f"{written}.{op}({shape_text})")
    title = f"{op.capitalize()} `{text[operand.span.start:operand.span.end]}` to {shape_text}"
    return Plan(title, "quickfix", (edit,), Expect(fn.name, {}, fixes=diag))
