"""IR verification between stages (`ir.verify(program)`): every node of every function
re-typed by the rules user code obeys, so a pass that builds ill-typed IR (the AD pass,
lowering handles) is caught at the pass, with a diagnostic at the node, instead of as
raw MLIR errors (or wrong code) further down.

Checked: each OpApp against its row of ops.OPS (operand count, float operands, the
shape rule `infer` with its attributes, and the node's recorded type); Vars against the
binding they name; calls and handles against the callee's signature; literals (payload
size, integer indices); tuples; destructuring lets; each function's result type.
"""
from __future__ import annotations

from compiler.core.diagnostics import Diagnostic, Note
from compiler.core.types import TensorType, TupleType, Type
from compiler.ir import nodes as ir
from compiler.ir.ops import OPS, check_float_only
from compiler.ir.shape_rules import OpError
from compiler.ir.sizes import subst_type


class _Bad(Exception):
    def __init__(self, message: str, node: object) -> None:
        super().__init__(message)
        self.message, self.node = message, node


def verify(program: ir.Program, stage: str = "") -> list[Diagnostic]:
    """Diagnostics (code "ir-verify") for every ill-typed node; [] when the IR is sound.
    `stage` names the pass that produced the IR, for the message."""
    diags: list[Diagnostic] = []
    for fn in program.functions.values():
        try:
            _function(program, fn)
        except _Bad as bad:
            after = f" after {stage}" if stage else ""
            diags.append(Diagnostic(
                "ir-verify", f"internal compiler error{after}: in `{fn.name}`: {bad.message}",
                getattr(bad.node, "span", fn.span),
                (Note("the program type-checked; this is a bug in the compiler, please report it"),)))
    return diags


def _function(program: ir.Program, fn: ir.Function) -> None:
    env: dict[str, Type] = {p.name: p.type for p in fn.params}
    for b in fn.lets:
        t = _expr(program, b.value, env)
        if b.destructure:
            if not isinstance(t, TupleType) or len(t.items) != len(b.names):
                raise _Bad(f"`let ({', '.join(b.names)}) = ..` destructures a value of type {t}", b)
            env.update(zip(b.names, t.items))
        else:
            env[b.names[0]] = t
    t = _expr(program, fn.result, env)
    if t != fn.ret_type:
        raise _Bad(f"the result has type {t}, but `{fn.name}` is declared to return {fn.ret_type}", fn.result)


def _expr(program: ir.Program, e: ir.Expr, env: dict[str, Type]) -> Type:
    if isinstance(e, ir.Var):
        if e.name not in env:
            raise _Bad(f"`{e.name}` is not bound here", e)
        if env[e.name] != e.type:
            raise _Bad(f"`{e.name}` is used as {e.type}, but it is bound to {env[e.name]}", e)
        return e.type
    if isinstance(e, ir.Literal):
        return _literal(e)
    args = [_expr(program, a, env) for a in ir.children(e)]
    want: Type
    if isinstance(e, ir.OpApp):
        want = _op(e, args)
    elif isinstance(e, ir.MakeTuple):
        want = TupleType(tuple(args))
    elif isinstance(e, (ir.CallFn, ir.Handle)):
        want = _call(program, e, args)
    else:
        raise _Bad(f"unknown IR node {type(e).__name__}", e)
    if want != e.type:
        raise _Bad(f"{_what(e)} has type {want} by its rule, but the node records {e.type}", e)
    return e.type


def _op(e: ir.OpApp, args: list[Type]) -> TensorType:
    row = OPS.get(e.op)
    if row is None:
        raise _Bad(f"unknown op `{e.op}`", e)
    if (row.operands >= 0 and len(args) != row.operands) or (row.operands < 0 and len(args) < 2):
        raise _Bad(f"{e.op} takes {row.operands if row.operands >= 0 else 'at least 2'} operands, "
                   f"this node has {len(args)}", e)
    tensors = [a for a in args if isinstance(a, TensorType)]
    if len(tensors) != len(args):
        raise _Bad(f"{e.op}: an operand is a tuple ({', '.join(map(str, args))})", e)
    missing = [a.name for a in row.attrs if a.required and a.name not in e.attrs]
    if missing:
        raise _Bad(f"{e.op}: attribute {missing[0]} is missing", e)
    try:
        out = row.infer(tensors, e.attrs)
        check_float_only(row, tensors)
    except OpError as err:
        raise _Bad(err.message, e) from None
    return out


def _call(program: ir.Program, e: ir.CallFn | ir.Handle, args: list[Type]) -> Type:
    callee = program.functions.get(e.fn)
    if callee is None:
        raise _Bad(f"no function `{e.fn}`", e)
    params: list[Type] = [p.type for p in callee.params]
    ret = callee.ret_type
    if e.sizes:    # a dynamic callee: its types at this call's sizes
        env = dict(zip(callee.sizes, e.sizes))
        params, ret = [subst_type(t, env) for t in params], subst_type(ret, env)
    if args != params:
        raise _Bad(f"`{e.fn}` takes ({', '.join(map(str, params))}), called with ({', '.join(map(str, args))})", e)
    if isinstance(e, ir.CallFn):
        return ret
    floats = [p for p in params if isinstance(p, TensorType) and p.is_float]   # handle: (R, g0, ..) or R
    return TupleType((ret, *floats)) if floats else ret


def _literal(e: ir.Literal) -> TensorType:
    n = len(e.values)
    if n not in (0, 1, e.type.volume):
        raise _Bad(f"a literal of type {e.type} has {n} values (0, 1 or {e.type.volume} expected)", e)
    if not e.type.is_float and any(float(v) != int(v) for v in e.values):
        raise _Bad(f"an index literal of type {e.type} holds a non-integer value", e)
    return e.type


def _what(e: ir.Expr) -> str:
    if isinstance(e, ir.OpApp):
        return e.op
    if isinstance(e, (ir.CallFn, ir.Handle)):
        return f"the call of `{e.fn}`"
    return "the tuple"
