"""Hover: the checker's type of what is under the cursor.

- a name or expression: its inferred type (`x: Tensor[F32, [1, 4, 4], @host]`);
- a built-in op (method name or free call): its typing rule and doc line from
  compiler.ir.ops.OPS, plus the type this application got;
- an attribute name: its kind and, for enums, the choices;
- a user function name: its signature (a size-generic one with its size parameters,
  `fn linear[M, K, N](..)`); at a call of a generic function, the instantiation
  (`linear[M=8, K=4, N=16]`, the checker's fact) and the signature at those sizes;
- a size parameter, where declared or used: what it is;
- `handle f(..) with reverseMode`: the result tuple, primal first, then one
  cotangent per floating parameter named g_<param> (I64 parameters get none).
"""
from __future__ import annotations

from lsprotocol import types as lsp

from compiler.check import TypeFact
from compiler.check import sizes as check_sizes
from compiler.core.diagnostics import Span
from compiler.core.sizes import Bound, evaluate, solve
from compiler.core.types import TensorType, TupleType, Type
from compiler.ir import nodes as ir
from compiler.ir.ops import SURFACE_OPS
from compiler.syntax import lex
from compiler.syntax import nodes as ast

from ..documents import View
from . import astutil


def _code(text: str) -> str:
    return f"```kina\n{text}\n```"


def _hover(view: View, span: Span, *parts: str) -> lsp.Hover:
    return lsp.Hover(contents=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value="\n\n".join(parts)),
                     range=view.index.range(span))


def _type_at(view: View, offset: int) -> TypeFact | None:
    try:
        return view.snapshot.type_at(offset)
    except Exception:  # a half-typed function may have no facts; hover shows nothing
        return None


def op_markdown(name: str) -> str:
    op = SURFACE_OPS[name]
    attrs = ", ".join(f"{a.name}: {a.shown}" for a in op.attrs)
    lines = [f"**{name}** (built-in)", _code(op.rule), op.doc]
    if attrs:
        lines.append(f"attributes: {attrs}")
    return "\n\n".join(lines)


def reverse_mode_markdown(view: View, handle: ast.Handle) -> str | None:
    fn = view.snapshot.function_named(handle.call.func)
    if fn is None:
        return None
    names = ["R"] + [f"g_{p.name}" for p in fn.params if astutil.is_float_param(p)]
    typ = type_of_span(view, handle.span, handle.handler_span.start)
    if isinstance(typ, TupleType) and len(typ.items) == len(names):
        types = [str(t) for t in typ.items]
    elif len(names) == 1 and typ is not None:
        types = [str(typ)]
    else:  # cotangents have their parameter's type; the primal has the return type
        types = [astutil.type_text(fn.ret)] + [astutil.type_text(p.type) for p in fn.params
                                              if astutil.is_float_param(p)]
    body = ",\n ".join(f"{n}: {t}" for n, t in zip(names, types))
    result = f"({body})" if len(names) > 1 else body
    return "\n\n".join([f"`handle {fn.name}(..) with reverseMode`: the primal result, then the cotangent "
                        "of each floating parameter", _code(result)])


def node_at_span(view: View, span: Span) -> ir.Expr | None:
    """The typed IR node of the expression written exactly at span (None when its
    function does not check cleanly)."""
    fn = view.snapshot.ir_function_at(span.start)   # only this function's IR, not the program's
    if fn is None or not fn.span.contains(span.start):
        return None
    roots = [b.value for b in fn.lets] + [fn.result]
    for node in (n for r in roots for n in ir.walk(r)):
        if node.span == span:
            return node
    return None


def type_of_span(view: View, span: Span, probe: int | None = None) -> Type | None:
    """The type the checker gave the expression written exactly at span, if any.
    `probe` is an offset inside span but inside none of its operands (an op's
    name): there the innermost TypeFact is the expression's own."""
    fact = _type_at(view, probe) if probe is not None else None
    if fact is not None and fact.span == span:
        return fact.type
    node = node_at_span(view, span)
    return node.type if node is not None else None


def _call_target(view: View, name: str, span: Span, call_span: Span, method: bool,
                 handle: ast.Handle | None = None) -> lsp.Hover | None:
    """The callee's hover: a user function shadows an op in free form only (`x.op()` is the op).
    `handle`: the `handle` whose call this is."""
    fn = None if method else view.snapshot.function_named(name)
    if fn is not None:
        if fn.sizes:
            return _hover(view, span, *_generic_call(view, fn, span, handle.span if handle else call_span,
                                                     handle is not None))
        return _hover(view, span, _code(astutil.signature(fn)))
    if name in SURFACE_OPS:
        typ = type_of_span(view, call_span, span.start)
        parts = [op_markdown(name)]
        if typ is not None:
            parts.append("type here:\n" + _code(str(typ)))
        return _hover(view, span, *parts)
    return None


def instantiation_at(view: View, fn: ast.FnDef, span: Span, probe: int) -> TypeFact | None:
    """The checker's fact of a call (or a `handle`) of generic fn written at span, when it
    was instantiated: its name is `linear[M=8, K=4, N=16]` (check/sizes.display), its type
    the result at those sizes."""
    fact = _type_at(view, probe)
    if fact is None or fact.span != span or not (fact.name or "").startswith(fn.name + "["):
        return None
    return fact


def _generic_call(view: View, fn: ast.FnDef, span: Span, fact_span: Span, handled: bool) -> list[str]:
    """At a call of a generic function: the instantiation with its signature, then the generic one.
    `fact_span`: the call's span, or its `handle`'s (`handled`)."""
    generic = _code(astutil.signature(fn))
    fact = instantiation_at(view, fn, fact_span, span.start)
    if fact is None:   # the sizes could not be inferred here (the diagnostics say why)
        return [generic]
    sig = _instantiated(view, fn, fact_span, fact, handled)
    head = _code(f"fn {fact.name}{sig}" if sig else f"{fact.name}")
    return [head, "generic:\n" + generic]


def _instantiated(view: View, fn: ast.FnDef, span: Span, fact: TypeFact, handled: bool) -> str | None:
    """`(x: Tensor[F32, [8, 4], @host], ..) -> ...`: fn's signature at the sizes of the call
    (or `handle`) at span.  The parameters' types are those the checker gave the arguments
    (the call unified them with the parameters); without the IR (the caller has errors
    elsewhere), the signature's types with the instantiation's integer sizes put in."""
    item = view.snapshot.item_at(fn.span.start)
    sig = item.res.signature if item is not None else None
    env = _int_sizes(fact.name or "", fn)
    node = node_at_span(view, span)
    if isinstance(node, (ir.CallFn, ir.Handle)) and len(node.args) == len(fn.params):
        params = [(p.name, str(a.type)) for p, a in zip(fn.params, node.args)]
    elif sig is not None and env is not None and len(sig.params) == len(fn.params):
        params = [(n, str(_subst(t, env))) for n, t in sig.params]
    else:
        return None
    # under reverseMode the fact is (R, cotangents..) (or R alone): R is the function's result
    ret = fact.type.items[0] if handled and isinstance(fact.type, TupleType) else fact.type
    return f"({', '.join(f'{n}: {t}' for n, t in params)}) -> {ret}"


def _subst(t: object, env: dict[str, int]) -> object:
    return check_sizes.subst_type(t, env) if isinstance(t, (TensorType, TupleType)) else t


def _int_sizes(shown: str, fn: ast.FnDef) -> dict[str, int] | None:
    """{M: 8, ...} of `linear[M=8, K=4, N=16]` when every size is an integer (None otherwise:
    a call inside a generic body, at symbolic sizes)."""
    inner = shown[len(fn.name) + 1:-1]
    parts = inner.split(", ") if inner else []
    env: dict[str, int] = {}
    for s, part in zip(fn.sizes, parts):
        name, _, value = part.partition("=")
        if name != s.name or not value.lstrip("-").isdigit():
            return None
        env[name] = int(value)
    return env if len(env) == len(fn.sizes) == len(parts) else None


def _size_hover(view: View, fn: ast.FnDef, offset: int) -> lsp.Hover | None:
    """On a size parameter (declared, or used in a type, a list, an attribute or as a number)."""
    try:
        target = view.snapshot.definition(offset)
    except Exception:
        return None
    param = astutil.size_param(fn, target) if target is not None else None
    if param is None:
        return None
    word = navigation_word(view.text, offset)
    span = Span(word[1], word[2]) if word is not None else param.span
    return _hover(view, span, f"size parameter `{param.name}` of `{astutil.generic_name(fn)}`: a positive integer "
                  "fixed at each call (inferred from the arguments' shapes, or written in brackets); "
                  "as a value, a bare number")


def navigation_word(text: str, offset: int) -> tuple[str, int, int] | None:
    tok = lex.word_at(text, offset)
    return (str(tok), lex.start(tok), lex.end(tok)) if tok is not None else None


def _attr_hover(view: View, op_name: str, attr: ast.Attr, call_span: Span) -> lsp.Hover | None:
    op = SURFACE_OPS.get(op_name)
    spec = op.attr(attr.name) if op else None
    if spec is None:
        return None
    choices = f": one of {', '.join(spec.choices)}" if spec.choices else ""
    kind = spec.kind if spec.choices else spec.shown
    parts = [f"attribute `{attr.name}` of **{op_name}** ({kind}){choices}"]
    node = node_at_span(view, call_span) if spec.kind in ("axis", "axes") else None
    if isinstance(node, ir.OpApp) and spec.name in node.attrs:
        # the checker's normalised value: axis=-1 of a rank-3 operand is axis 2
        value = node.attrs[spec.name]
        shown = f"[{', '.join(map(str, value))}]" if isinstance(value, tuple) else str(value)
        operand = (node.args[spec.of].type if isinstance(spec.of, int) and spec.of < len(node.args)
                   else None)
        parts.append(f"here: `{attr.name}={shown}`" + (f" of `{operand}`" if operand is not None else ""))
    return _hover(view, attr.name_span, *parts)


_PRIMES = (101, 103, 107, 109, 113, 127, 131, 137, 139, 149, 151, 157, 163, 167, 173, 179, 181, 191, 193, 197)


def dynamic_markdown(view: View, fn: ast.FnDef) -> str:
    """How a generic function is called from its library: built without --size it is one
    dynamic export, whose sizes the runtime reads from the arrays' shapes (core.sizes.solve,
    as compiler/runtime/binding.py does); those no shape determines are keywords."""
    info = view.snapshot.functions.get(fn.name)
    sig = info.signature if info is not None else None
    names = [s.name for s in fn.sizes]
    if sig is None or len(names) > len(_PRIMES):
        return ""
    # arrays of one sample call (distinct primes for the sizes), bound as the runtime binds them
    sample = dict(zip(names, _PRIMES))
    dims = [((i, j), d, evaluate(d, sample)) for i, (_, t) in enumerate(sig.params) if isinstance(t, TensorType)
            for j, d in enumerate(t.shape)]
    keywords: list[str] = []      # the fewest, in order, that make the shapes give the rest
    while True:
        found = solve(names, dims, {k: Bound(sample[k], "keyword") for k in keywords}).found
        if len(found) == len(names):
            break
        keywords.append(next(n for n in names if n not in found))
    call = f"`{fn.name}(..., {', '.join(f'{n}=...' for n in keywords)})`" if keywords else f"`{fn.name}(...)`"
    how = (f"the runtime reads {', '.join(n for n in names if n not in keywords) or 'no size'} from the arrays' "
           f"shapes; {', '.join(keywords)} (in no shape alone) as keyword{'s' if len(keywords) > 1 else ''}: {call}"
           if keywords else f"the runtime reads {', '.join(names)} from the arrays' shapes: {call}")
    return (f"Built without `--size`, one compiled function for every size (a dynamic export): {how}. "
            "`kinac build --size` binds sizes at build time instead.")


def _syntactic(view: View, fn: ast.FnDef, offset: int) -> lsp.Hover | None:
    if fn.name_span.contains(offset):
        if fn.sizes:
            return _hover(view, fn.name_span, _code(astutil.signature(fn)), dynamic_markdown(view, fn))
        return _hover(view, fn.name_span, _code(astutil.signature(fn)))
    if fn.sizes:
        found = _size_hover(view, fn, offset)
        if found is not None:
            return found
    path = astutil.path_at(fn, offset)
    for i in range(len(path) - 1, -1, -1):
        node = path[i]
        parent = path[i - 1] if i else None
        if isinstance(node, ast.Handle):
            if node.call.func_span.contains(offset) or not node.call.span.contains(offset):
                md = reverse_mode_markdown(view, node)
                return _hover(view, node.span, md) if md else None
        if isinstance(node, ast.MethodCall) and node.method_span.contains(offset):
            return _call_target(view, node.method, node.method_span, node.span, method=True)
        if isinstance(node, ast.Call) and node.func_span.contains(offset):
            return _call_target(view, node.func, node.func_span, node.span, method=False,
                                handle=parent if isinstance(parent, ast.Handle) else None)
        if isinstance(node, (ast.MethodCall, ast.Call)):
            op_name = node.method if isinstance(node, ast.MethodCall) else node.func
            attr = next((a for a in node.attrs if a.name_span.contains(offset)), None)
            if attr is not None:
                return _attr_hover(view, op_name, attr, node.span)
    return None


def hover(view: View, offset: int) -> lsp.Hover | None:
    fn = view.snapshot.function_at(offset)
    if fn is not None:
        found = _syntactic(view, fn, offset)
        if found is not None:
            return found
    fact = _type_at(view, offset)
    if fact is None:
        return None
    label = f"{fact.name}: {fact.type}" if getattr(fact, "name", None) else str(fact.type)
    return _hover(view, fact.span, _code(label))
