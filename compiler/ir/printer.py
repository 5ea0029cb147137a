"""A readable printer for the typed IR (ir/nodes.py), used by `kinac check --emit=grad`
and in test failure messages:

    fn f.rev(x: Tensor[F32, [2, 2], @host]) -> (Tensor[...], Tensor[...]) {
      let y : Tensor[F32, [2, 2], @host] = exp(x) in
      (y, ct0)
    }

Method chains stay nested (`transpose(reshape(x, shape=[1, 4]), perm=[1, 0])`),
attributes come after the operands as `name=value`, and long literal payloads
are abbreviated.
"""
from __future__ import annotations

from compiler.ir import nodes as ir

# Literal payloads longer than this print as `{v0, v1, ..., (n values)}`.
MAX_LITERAL_VALUES = 8


def format_attr(value: object) -> str:
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def _literal(e: ir.Literal) -> str:
    t = e.type
    head = f"Tensor[{t.dtype}, {format_attr(t.shape)}]"
    vals = [repr(v) if isinstance(v, float) else str(v) for v in e.values]
    if e.size_value is not None:
        vals = [str(e.size_value)]
    if len(vals) > MAX_LITERAL_VALUES:
        vals = vals[:3] + [f"... ({len(vals)} values)"]
    return head + " {" + (" " + ", ".join(vals) + " " if vals else "") + "}"


def _sizes(sizes: tuple[object, ...]) -> str:
    return f"[{', '.join(map(str, sizes))}]" if sizes else ""


def format_expr(e: ir.Expr) -> str:
    """One IR expression on one line (recursive: IR trees are at most a few ops deep)."""
    if isinstance(e, ir.Var):
        return e.name
    if isinstance(e, ir.OpApp):
        parts = [format_expr(a) for a in e.args] + [f"{k}={format_attr(v)}" for k, v in e.attrs.items()]
        return f"{e.op}({', '.join(parts)})"
    if isinstance(e, ir.CallFn):
        return f"{e.fn}{_sizes(e.sizes)}({', '.join(format_expr(a) for a in e.args)})"
    if isinstance(e, ir.Handle):
        return f"handle {e.fn}{_sizes(e.sizes)}({', '.join(format_expr(a) for a in e.args)}) with {e.handler}"
    if isinstance(e, ir.Literal):
        return _literal(e)
    if isinstance(e, ir.MakeTuple):
        return "(" + ", ".join(format_expr(i) for i in e.items) + ")"
    return repr(e)


def format_binding(b: ir.Binding) -> str:
    if b.destructure:
        types = ", ".join(str(t) for t in b.types)
        return f"let ({', '.join(b.names)}) : ({types}) = {format_expr(b.value)} in"
    return f"let {b.names[0]} : {b.value.type} = {format_expr(b.value)} in"


def format_function(fn: ir.Function) -> str:
    params = ", ".join(f"{p.name}: {p.type}" for p in fn.params)
    lines = [f"fn {fn.name}{_sizes(fn.sizes)}({params}) -> {fn.ret_type} {{"]
    lines += ["  " + format_binding(b) for b in fn.lets]
    lines.append("  " + format_expr(fn.result))
    lines.append("}")
    return "\n".join(lines)


def format_program(program: ir.Program) -> str:
    return "\n\n".join(format_function(fn) for fn in program.functions.values())

