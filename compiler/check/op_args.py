"""Applying a built-in op: operand count, attributes, dtype rules and the
op's shape rule, all read from its row in ops.OPS.

Every surface form ends here: `a @ b`, `-a`, `x.op(a, k=v)` and `op(x, a, k=v)`.
The op's `positional=True` attribute may be written as the first positional
integer list (`x.reshape([1, 4])` == `x.reshape(shape=[1, 4])`).  An OpError
from the row's `infer` becomes a Diagnostic whose span is the operand
(`where` = int), the attribute (`where` = str) or the op itself.
"""
from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from typing import TypeGuard, cast

from compiler.check.type_exprs import ERROR, ERROR_TYPE, ErrorType, did_you_mean, is_error
from compiler.core.diagnostics import DiagnosticBag, Fix, Note, Span
from compiler.core.sizes import Size, Undecidable, has_sizes
from compiler.core.types import Attrs, DType, TensorType
from compiler.ir import nodes as ir
from compiler.ir.nodes import as_tensor
from compiler.ir.ops import OPS, SURFACE_OPS, AttrSpec, OpDef, check_float_only, normalise_axes
from compiler.ir.shape_rules import OpError
from compiler.syntax import nodes as syntax
from compiler.syntax.hints import RETURN_MESSAGE, foreign_note

# A positional argument that is an attribute value (`x.reshape([1, 4])`, `x.pow(2)`).
Static = syntax.IntList | syntax.Number
# An attribute value as written (syntax.Attr.value, its sizes evaluated by the checker: ints or
# symbolic Sizes) and as the IR holds it once normalised.
AttrValue = int | float | tuple[int, ...] | str

_KIND_WORDS = {"int": "an integer", "ints": "an integer list like [1, 2]", "enum": "one of {choices}",
               "axis": "an integer",
               "axes": "an integer list of axes like [0, 2, 1]", "float": "a number",
               "dtype": "a dtype name ({choices})", "type": "a type (IR-internal)"}


def is_static_arg(e: syntax.Expr) -> TypeGuard[Static]:
    """A positional argument that is an attribute value, not a tensor operand."""
    return isinstance(e, (syntax.IntList, syntax.Number))


def usage(op: OpDef) -> Note:
    """The op's surface form: its typing rule up to the first ` : ` outside
    brackets (`x.reshape(shape) : ...`, `gather(values : [V, D], ...) : ...`)."""
    depth, rule = 0, op.rule
    for i, ch in enumerate(rule):
        depth += (ch in "([") - (ch in ")]")
        if depth == 0 and rule.startswith(" : ", i):
            return Note(f"usage: {rule[:i]}")
    return Note(f"usage: {rule}")


def apply_op(bag: DiagnosticBag, op: OpDef, operands: list[tuple[ir.Expr, Span]], statics: Sequence[Static],
             attrs: Sequence[syntax.Attr], op_span: Span, span: Span, method: bool) -> ir.Expr:
    """Type one application of `op`; returns an OpApp (typed ERROR if it is wrong)."""
    args = [a for a, _ in operands]
    ok = _check_arity(bag, op, len(operands), op_span, method)
    values, value_spans, attrs_ok = _collect_attrs(bag, op, statics, attrs, op_span)
    if not (ok and attrs_ok) or any(is_error(a.type) for a in args):
        return ir.OpApp(op.name, args, values, ERROR_TYPE, span)
    tuples = [i for i, a in enumerate(args) if not isinstance(a.type, TensorType)]
    if tuples:  # a tuple where a tensor is needed
        i = tuples[0]
        bag.error("shape", f"{op.name}: operand {i} has tuple type {args[i].type}; ops take tensors "
                  "(destructure the tuple with `let (a, b) = ...` first)", operands[i][1])
        return ir.OpApp(op.name, args, values, ERROR_TYPE, span)
    try:
        types = [as_tensor(a.type) for a in args]    # no tuple operand (reported above)
        values = normalise_axes(op, types, values)
        result = op.infer(types, values)
        check_float_only(op, types)
    except OpError as err:
        where = err.where
        at = (operands[where][1] if isinstance(where, int) and where < len(operands)
              else value_spans.get(where, op_span) if isinstance(where, str) else op_span)
        if err.cast_to is not None and isinstance(where, int):
            cast = f".cast(dtype={err.cast_to})"
            bag.error(err.code, err.message, at, Note(f"cast operand {where} to {err.cast_to}: `{cast}`"),
                      usage(op), fix=Fix("cast", str(err.cast_to)))
        else:
            bag.error(err.code, err.message, at, usage(op))
        return ir.OpApp(op.name, args, values, ERROR_TYPE, span)
    except Undecidable as err:   # a rule needed an order of sizes that holds only for some of them
        bag.error("size", f"{op.name}: cannot show {err.claim} for every size (sizes are only known to be "
                  ">= 1)", op_span, Note("give the function a size parameter for this dimension, or write "
                                         "the bound with the sizes it depends on"), usage(op))
        return ir.OpApp(op.name, args, values, ERROR_TYPE, span)
    except (TypeError, ValueError, ArithmeticError) as err:
        if not any(has_sizes(t.shape) for t in types) and not _sized(values):
            raise
        bag.error("size", f"{op.name}: this op cannot take symbolic sizes here ({err}); give the function "
                  "fixed sizes for this operand", op_span, usage(op))
        return ir.OpApp(op.name, args, values, ERROR_TYPE, span)
    return ir.OpApp(op.name, args, values, result, span)


def _sized(values: Attrs) -> bool:
    return any(isinstance(v, Size) or isinstance(v, tuple) and any(isinstance(x, Size) for x in v)
               for v in values.values())


def _check_arity(bag: DiagnosticBag, op: OpDef, got: int, op_span: Span, method: bool) -> bool:
    want = op.operands
    if (want == -1 and got >= 2) or got == want:
        return True
    expected = "at least 2 tensor operands" if want == -1 else f"{want} tensor operand{'s' * (want != 1)}"
    hint = " (the receiver of `x.op(...)` is operand 0)" if method else ""
    bag.error("arity", f"{op.name} takes {expected}, got {got}{hint}", op_span, usage(op))
    return False


def _collect_attrs(bag: DiagnosticBag, op: OpDef, statics: Sequence[Static], attrs: Sequence[syntax.Attr],
                   op_span: Span) -> tuple[Attrs, dict[str, Span], bool]:
    """-> (values normalised for the IR, span of each given value, ok)."""
    values: Attrs = {}
    spans: dict[str, Span] = {}
    ok = True
    given = _positional_attr(bag, op, statics)
    if given is None:  # already reported: a misplaced value is not also "missing"
        return values, spans, False
    # check/expr.py evaluated the size expressions of `attrs` before (`_size_attrs`)
    written = [(a.name, cast(AttrValue, a.value), a.name_span, a.value_span) for a in attrs]
    for name, value, name_span, value_span in given + written:
        spec = op.attr(name)
        if spec is None or spec.kind == "type":
            names = ", ".join(a.name for a in op.attrs if a.kind != "type") or "none"
            bag.error("attr", f"{op.name} has no attribute `{name}` (its attributes: {names})", name_span,
                      *did_you_mean(name, [a.name for a in op.attrs]), usage(op))
            ok = False
        elif name in values:
            bag.error("attr", f"{op.name}: attribute `{name}` is given twice", name_span)
            ok = False
        else:
            norm = _normalise(bag, op, spec, value, value_span)
            ok = ok and norm is not ERROR
            values[name], spans[name] = norm, value_span
    for spec in op.attrs:
        if spec.name in values or spec.kind == "type":
            continue
        if spec.required:
            bag.error("attr", f"{op.name}: missing attribute `{spec.name}`", op_span, usage(op))
            ok = False
        else:
            values[spec.name] = spec.default
    return values, spans, ok


def _positional_attr(bag: DiagnosticBag, op: OpDef,
                     statics: Sequence[Static]) -> list[tuple[str, AttrValue, Span, Span]] | None:
    """The static positional arguments as [(attr name, value, spans)], or None
    after reporting them (only the op's positional attribute may be positional)."""
    positional = next((a for a in op.attrs if a.positional), None)
    out: list[tuple[str, AttrValue, Span, Span]] = []
    ok = True
    for i, s in enumerate(statics):
        if i == 0 and positional is not None and isinstance(s, syntax.IntList) and positional.kind != "float":
            out.append((positional.name, cast(tuple[int, ...], tuple(s.values)), s.span, s.span))   # sizes evaluated
            continue
        if i == 0 and positional is not None and isinstance(s, syntax.Number) and positional.kind in ("float", "int"):
            out.append((positional.name, s.value, s.span, s.span))   # `x.pow(2)`, `x.topk(3)` (an int is checked later)
            continue
        kw = ", ".join(f"{a.name}=..." for a in op.attrs if not a.positional and a.kind != "type")
        bag.error("attr", f"{op.name}: this positional argument is not a tensor operand; "
                  f"attributes are given by keyword" + (f" ({kw})" if kw else ""), s.span, usage(op))
        ok = False
    return out if ok else None


def _normalise(bag: DiagnosticBag, op: OpDef, spec: AttrSpec, value: AttrValue, span: Span) -> AttrValue | ErrorType:
    """Attribute value -> its IR form (int, tuple of ints, enum word, float), or ERROR."""
    # sizes (symbolic in a generic function's check) are integers; axes are not sizes
    whole = (int, Size) if spec.kind in ("int", "ints") else int
    if spec.kind in ("int", "axis") and isinstance(value, whole) and not isinstance(value, bool):
        return value
    if spec.kind in ("ints", "axes") and isinstance(value, tuple) and all(isinstance(v, whole) for v in value):
        return tuple(value)
    if spec.kind == "enum" and isinstance(value, str) and value in spec.choices:
        return value
    if spec.kind == "float" and isinstance(value, (int, float)) and not isinstance(value, bool):
        problem = _float_attr_problem(spec, value)
        if problem:
            bag.error("attr", f"{op.name}: attribute `{spec.name}` {problem}", span)
            return ERROR
        return float(value)
    if spec.kind == "dtype" and isinstance(value, str) and value in spec.choices:
        return value
    want = _KIND_WORDS[spec.kind].format(choices=", ".join(spec.choices))
    shown = f"[{', '.join(map(str, value))}]" if isinstance(value, tuple) else str(value)
    notes = did_you_mean(value, spec.choices) if spec.kind in ("enum", "dtype") and isinstance(value, str) else ()
    bag.error("attr", f"{op.name}: attribute `{spec.name}` must be {want}, got `{shown}`", span, *notes)
    return ERROR


def _float_attr_problem(spec: AttrSpec, value: int | float) -> str:
    """Why a number cannot be this float attribute ("" when it can).  Float attributes are
    constants of the F32 computation of their op (narrow dtypes compute in F32), so a
    finite number beyond F32 would silently be an infinity; `inf`, `-inf` and `nan` are
    written as such (clamp's bounds take them; pow's exponent must be finite)."""
    try:
        x = float(value)
        overflow = DType.F32.overflows(x)
    except OverflowError:         # an integer beyond every float
        x, overflow = math.inf, True
    if overflow:
        return (f"is an F32 constant of the computation, and {value} overflows F32 (largest finite value "
                f"{DType.F32.finite_max:g}; write `inf` or `-inf` for an infinity)")
    if spec.finite and not math.isfinite(x):
        return f"must be a finite number, got `{value}`"
    return ""


def resolve_builtin(bag: DiagnosticBag, name: str, span: Span, method: bool,
                    signatures: Collection[str]) -> OpDef | None:
    """The surface op `name`, or None after a diagnostic that says what `name` is instead
    (an IR-internal op, a user function called as a method, a foreign spelling, a typo)."""
    op = SURFACE_OPS.get(name)
    if op is not None:
        return op
    if name in OPS:
        bag.error("unknown-name", f"unknown op `{name}`", span,
              Note(f"`{name}` is IR-internal: the autodiff pass builds it; it has no surface form"))
    elif name == "return":
        bag.error("syntax", RETURN_MESSAGE, span)
    elif method:
        notes = foreign_note(name) or did_you_mean(name, SURFACE_OPS)
        if name in signatures:
            notes = (Note(f"`{name}` is a user function; call it as `{name}(x, ...)`"),)
        bag.error("unknown-name", f"unknown op `{name}` in method call `.{name}(...)`", span, *notes)
    else:
        bag.error("unknown-name", f"unknown function or op `{name}`", span,
              *(foreign_note(name) or did_you_mean(name, list(signatures) + list(SURFACE_OPS))))
    return None
