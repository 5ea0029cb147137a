"""Kina source text of a generated case (compiler/oracle/progen/generate.py): its surface syntax, one
row per op (`SURFACE`), so every generated program goes through the parser and checker
exactly as a user's program does."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, cast

from compiler.core.sizes import Size, subst_shape
from compiler.core.types import DType, TensorType
from compiler.oracle.progen.base import CALL, SCALE

if TYPE_CHECKING:
    from compiler.oracle.progen.case import AttrValue, Case, GenericFn, Let, Value

# how one op is written: (operand names, attributes) -> text
Surface = Callable[[list[str], dict[str, "AttrValue"]], str]
# what helper_split finds: (helper lets, its parameters, its live-out values, the names it defines)
Split = tuple[list["Let"], list["Value"], list[str], set[str]]


def type_text(t: TensorType) -> str:
    return f"Tensor[{t.dtype}, [{', '.join(map(str, t.shape))}]]"


def _ints(xs: AttrValue) -> str:
    assert isinstance(xs, tuple), xs   # a shape or permutation
    return "[" + ", ".join(str(x) for x in xs) + "]"


def require_float(x: AttrValue) -> str:
    assert isinstance(x, (int, float)), x   # pow's p, clamp's bounds
    return repr(float(x))


def _method(op: str, *keys: str) -> Surface:
    def fmt(args: list[str], attrs: dict[str, AttrValue]) -> str:
        kw = ", ".join(f"{k}={attrs[k]}" for k in keys)
        return f"{args[0]}.{op}({kw})"
    return fmt


def _infix(sym: str) -> Surface:
    return lambda a, at: f"{a[0]} {sym} {a[1]}"


def _call(op: str) -> Surface:
    return lambda a, at: f"{op}({', '.join(a)})"


def _draw(op: str) -> Surface:
    return lambda a, at: f"{op}({a[0]}, shape={_ints(at['shape'])}" + (f", dtype={at['dtype']})" if "dtype" in at else ")")


# op -> text of `op(args, attrs)` with operands already spelled (names).
SURFACE: dict[str, Surface] = {
    **{op: _infix(sym) for op, sym in (("add", "+"), ("sub", "-"), ("mul", "*"), ("div", "/"), ("matmul", "@"))},
    "neg": lambda a, at: f"-{a[0]}",
    **{op: _method(op) for op in ("exp", "log", "tanh", "sqrt", "rsqrt", "sigmoid", "relu")},
    "transpose": lambda a, at: f"{a[0]}.transpose({_ints(at['perm'])})",
    "reshape": lambda a, at: f"{a[0]}.reshape({_ints(at['shape'])})",
    "broadcast": lambda a, at: f"{a[0]}.broadcast({_ints(at['shape'])})",
    "slice": _method("slice", "axis", "start", "stop"),
    "concat": lambda a, at: f"concat({', '.join(a)}, axis={at['axis']})",
    "gather": lambda a, at: f"gather({a[0]}, {a[1]})",
    "reduce_keep": _method("reduce_keep", "op", "axis"),
    "softmax": _method("softmax", "axis"),
    "log_softmax": _method("log_softmax", "axis"),
    "take_along_axis": lambda a, at: f"{a[0]}.take_along_axis({a[1]}, axis={at['axis']})",
    **{op: _call(op) for op in ("maximum", "minimum", "lt", "le", "gt", "ge", "eq", "ne", "where")},
    **{op: _method(op) for op in ("abs", "sign", "square", "erf")},
    "pow": lambda a, at: f"{a[0]}.pow(p={require_float(at['p'])})",
    "clamp": lambda a, at: f"{a[0]}.clamp(" + ", ".join(f"{k}={require_float(at[k])}" for k in ("min", "max")
                                                        if at.get(k) is not None) + ")",
    "gelu": _method("gelu", "approximate"),
    "cast": _method("cast", "dtype"),
    "iota": lambda a, at: f"iota(shape={_ints(at['shape'])}, axis={at['axis']})",
    "tril": _method("tril", "k"),
    "argmax": _method("argmax", "axis"),
    "pow_tensor": lambda a, at: f"{a[0]}.pow({a[1]})",
    **{op: _method(op, "axis") for op in ("cumsum", "cumprod", "logsumexp")},
    **{op: _method(op, "axis", "descending") for op in ("sort", "argsort")},
    **{op: _method(op, "k", "axis") for op in ("topk", "argtopk")},
    "random_split": lambda a, at: f"random_split({a[0]}, {at['n']})",
    "random_fold_in": _call("random_fold_in"),
    **{op: _draw(op) for op in ("random_bits", "random_uniform", "random_normal")},
    "bernoulli": lambda a, at: f"bernoulli({a[0]}, {require_float(at['p'])}, shape={_ints(at['shape'])})",
    "categorical": lambda a, at: f"categorical({a[0]}, {a[1]}, axis={at['axis']})",
}


def _number(x: float, dtype: DType) -> str:
    return str(int(x)) if dtype == DType.I64 else repr(float(x))


def size_atom(d: AttrValue) -> str:
    """A size expression as an operand: `B`, `3`, `(A*B + 1)`."""
    text = str(d)
    return text if isinstance(d, int) or (isinstance(d, Size) and str(d).isidentifier()) else f"({text})"


def let_text(let: Let, name: str = "f") -> str:
    """`name`: the case's function name (generic helpers are `name_s0`, ..)."""
    if let.literal is not None:
        vals = ", ".join(_number(v, let.type.dtype) for v in let.literal)
        return f"{type_text(let.type)} {{ {vals} }}"
    if let.op is None:
        return let.args[0]           # an alias
    if let.op == SCALE:
        return f"{let.args[0]} * (1.0 / {size_atom(let.attrs['by'])})"
    if let.op == CALL:
        sizes = _ints(let.attrs["sizes"]) if let.attrs["explicit"] else ""
        return f"{name}_s{let.attrs['fn']}{sizes}({', '.join(let.args)})"
    return SURFACE[let.op](let.args, let.attrs)


def _tuple_type(types: Sequence[str]) -> str:
    return types[0] if len(types) == 1 else "(" + ", ".join(types) + ")"


def helper_split(case: Case) -> Split | None:
    """(helper lets, its parameters, its live-out values) when case.split makes a helper:
    the live-out values are those of the first lets that later lets or the results use;
    under reverseMode (no destructuring) only a single live-out value makes a helper."""
    k = case.split
    if not (0 < k < len(case.lets)):
        return None
    head, tail = case.lets[:k], case.lets[k:]
    defined = {l.name for l in head}
    later = {a for l in tail for a in l.args} | set(case.results)
    live = [l.name for l in head if l.name in later]
    if not live or (case.ad and len(live) != 1):
        return None
    used = {a for l in head for a in l.args}
    params = [p for p in case.params if p.name in used]
    return head, params, live, defined


def _helper(case: Case, name: str, split: Split, types: dict[str, TensorType]) -> tuple[list[str], str]:
    """The helper function's text, and the let of f that calls it."""
    head, params, live, _ = split
    ps = ", ".join(f"{p.name}: {type_text(p.type)}" for p in params)
    ret = _tuple_type([type_text(types[v]) for v in live])
    body = [f"fn {name}_h({ps}) -> {ret} {{", *[f"  let {l.name} = {let_text(l, name)} in" for l in head],
            "  " + (live[0] if len(live) == 1 else "(" + ", ".join(live) + ")"), "}"]
    call = f"{name}_h({', '.join(p.name for p in params)})"
    bind = live[0] if len(live) == 1 else "(" + ", ".join(live) + ")"
    return body, f"  let {bind} = {call} in"


def render_case(case: Case, name: str) -> str:
    types = case.types()
    params = ", ".join(f"{p.name}: {type_text(p.type)}" for p in case.params)
    ret = _tuple_type([type_text(types[r]) for r in case.results])
    split = helper_split(case)
    lines: list[str] = []
    for fn in used_generics(case):
        lines += _generic(fn, name) + [""]
    lets = case.lets
    if split:
        helper, call = _helper(case, name, split, types)
        lines += helper + [""]
        lets = case.lets[case.split:]
    lines.append(f"fn {name}({params}) -> {ret} {{")
    if split:
        lines.append(call)
    lines += [f"  let {l.name} = {let_text(l, name)} in" for l in lets]
    lines.append("  " + (case.results[0] if len(case.results) == 1 else "(" + ", ".join(case.results) + ")"))
    lines.append("}")
    if case.ad:
        lines += _wrapper(case, name, params, types)
    if case.gh is not None:
        lines += _generic_handle(case, name)
    return "\n".join(lines) + "\n"


def used_generics(case: Case) -> list[GenericFn]:
    """The generic helpers that f (or f_gh) calls, and those they call, in definition
    order: one that nothing calls would be a root with unbound sizes, which a build refuses."""
    todo = [int(str(l.attrs["fn"])) for l in case.lets if l.op == CALL] + ([case.gh.fn] if case.gh else [])
    used: set[int] = set()
    while todo:
        k = todo.pop()
        if k not in used:
            used.add(k)
            todo += [int(str(l.attrs["fn"])) for l in case.generics[k].lets if l.op == CALL]
    return [fn for fn in case.generics if fn.index in used]


def _generic(fn: GenericFn, name: str) -> list[str]:
    ps = ", ".join(f"{p.name}: {type_text(p.type)}" for p in fn.params)
    ret = type_text(fn.types()[fn.result])
    return [f"fn {name}_s{fn.index}[{', '.join(fn.sizes)}]({ps}) -> {ret} {{",
            *[f"  let {l.name} = {let_text(l, name)} in" for l in fn.lets], f"  {fn.result}", "}"]


def _generic_handle(case: Case, name: str) -> list[str]:
    """`fn name_gh(..)`: handle of a generic helper, its sizes inferred or written."""
    gh = case.gh
    assert gh is not None
    fn = case.generics[gh.fn]
    sizes = _ints(gh.sizes) if gh.explicit else ""
    ps = ", ".join(f"{p.name}: {type_text(p.type)}" for p in gh.params)
    t = fn.types()[fn.result]
    ret = t.with_shape(cast("tuple[int, ...]", subst_shape(t.shape, dict(zip(fn.sizes, gh.sizes)))))  # ints: all bound
    outs = _tuple_type([type_text(ret)] + [type_text(p.type) for p in gh.params])
    call = f"handle {name}_s{gh.fn}{sizes}({', '.join(p.name for p in gh.params)}) with reverseMode"
    return ["", f"fn {name}_gh({ps}) -> {outs} {{", f"  let r = {call} in", "  r", "}"]


def _wrapper(case: Case, name: str, params: str, types: dict[str, TensorType]) -> list[str]:
    """`fn name_g(..)`: handle name(..) with reverseMode, then the cotangents used."""
    (r,) = case.results
    floats = case.float_params()
    outs = [("y", types[r])] + [(f"g_{p.name}", p.type) for p in floats]
    call = f"handle {name}({', '.join(p.name for p in case.params)}) with reverseMode"
    if not floats or case.wrapper == "tuple":
        ret = _tuple_type([type_text(t) for _, t in outs])
        return [f"fn {name}_g({params}) -> {ret} {{", f"  let r = {call} in", "  r", "}"]
    body = [f"  let ({', '.join(n for n, _ in outs)}) = {call} in"]
    picked = [outs[i] for i in case.picks] or outs
    if case.wrapper == "sgd":      # p - g_p * lr for every float parameter
        results = [outs[0]]
        for p in floats:
            body.append(f"  let lr_{p.name} = {type_text(p.type)} {{ 0.125 }} in")
            body.append(f"  let s_{p.name} = g_{p.name} * lr_{p.name} in")
            body.append(f"  let new_{p.name} = {p.name} - s_{p.name} in")
            results.append((f"new_{p.name}", p.type))
        picked = results
    ret = _tuple_type([type_text(t) for _, t in picked])
    body.append("  " + (picked[0][0] if len(picked) == 1 else "(" + ", ".join(n for n, _ in picked) + ")"))
    return [f"fn {name}_g({params}) -> {ret} {{", *body, "}"]
