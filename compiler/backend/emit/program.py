"""MLIR emission: typed IR (handles already lowered) -> MLIR text.

Every Kina function `f` becomes a public `func.func @kina_f` with
`llvm.emit_c_interface` (exported to C as `_mlir_ciface_kina_f`; the prefix
keeps a Kina `step` away from glibc's `step`).  Generated functions, whose
names contain a dot (`f.rev`), become `func.func private @"kina_f.rev"`.
Tuple results are multiple func results, in order.

The body is tensor-level MLIR (func, linalg, tensor, arith, math, cf) that
`one-shot-bufferize` and the pass lists of compiler/backend/pipelines.py (docs/compiling.md) turn into LLVM.
Each op's lowering lives in compiler/backend/emit/ops.py (LOWERINGS, one row per op);
this module owns the per-function emitter (SSA names, `linalg.generic`
builder, source locations) and the walk over let chains.

Dtypes: F32, F64 and I64 lower directly (an op with an F64 operand or result
computes in f64: FnEmitter.F; erf of f64 calls libm's `erf`).  F16, BF16, F8E4M3 and F8E5M2 are
*stored* in their own type (f16, bf16, f8E4M3FN, f8E5M2) but every
computation happens in f32 (extf on load, truncf on store, f32 accumulators),
so the only low-precision operations are conversions: the toolchain expands
bf16 ones (`arith-expand{include-bf16}`) and sends f8 ones to MLIR's APFloat
runtime (`convert-arith-to-apfloat`).  `@device` operands are rejected op by
op ("scatter_add: checked device lowering is not available").

Every op carries `loc("path":line:col)` of its Kina expression, so an
mlir-opt error names the Kina source line.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from compiler.backend.emit.builder import EmitError, FnEmitter, compute_type, float_literal, symbol, ty
from compiler.backend.emit.ops import LOWERINGS
from compiler.backend.emit.ops_ext import LIBM_ERF
from compiler.core.diagnostics import Diagnostic, SourceText, Span, plain_name
from compiler.core.sizes import has_sizes
from compiler.core.types import TensorType, TupleType, Type
from compiler.ir import nodes as ir
from compiler.ir.nodes import as_tensor

__all__ = ["EmitResult", "emit_program", "emit_function"]


# One host tensor may hold at most this many bytes: shapes are static, so a
# larger one is a typo (or a program for another machine), and MLIR/LLVM would
# otherwise spend minutes materialising it.
MAX_TENSOR_BYTES = 1 << 34  # 16 GiB


def _check_size(t: TensorType, span: Span) -> None:
    if has_sizes(t.shape):
        return      # a dynamic shape: the runtime allocates what each call's sizes give
    size = t.volume * t.dtype.itemsize
    if size > MAX_TENSOR_BYTES:
        raise EmitError(f"{t} needs {size / 2**30:,.0f} GiB; the host backend limits one tensor "
                        f"to {MAX_TENSOR_BYTES >> 30} GiB", span)



@dataclass
class EmitResult:
    """`text` is the MLIR module, or "" when `diagnostics` holds an error."""
    text: str
    diagnostics: list[Diagnostic] = field(default_factory=list)


# ---- the walk over a function ------------------------------------------------
Value = str | list["Value"]  # an SSA reference, or a list of them for a tuple


class FunctionLowering:
    """Lowers one ir.Function: parameters, let chain, result."""

    def __init__(self, fn: ir.Function, source: SourceText | None,
                 functions: dict[str, ir.Function] | None = None) -> None:
        self.fn = fn
        self.em = FnEmitter(source)
        self.env: dict[str, Value] = {}
        self.functions = functions or {}   # the callees' signatures (a dynamic callee's types)

    def run(self) -> list[str]:
        fn, em = self.fn, self.em
        self._check_types()
        em.fallback = fn.span
        em.at(fn.span)
        params = []
        for name in fn.sizes:        # a dynamic function takes its sizes first, as index values
            em.sizes[name] = em.fresh("size_" + name)
            params.append(f"{em.sizes[name]}: index")
        for p in fn.params:
            self.env[p.name] = em.fresh(p.name)
            params.append(f"{self.env[p.name]}: {ty(p.type).mlir}")
        for b in fn.lets:
            self._let(b)
        em.fallback = fn.span
        result = self.expr(fn.result, None)
        rtypes = [ty(t).mlir for t in _flat_types(fn.ret_type)]
        em.at(fn.result.span)
        results = _distinct_results(em, _flat_values(result), rtypes)
        em.stmt(f"return {', '.join(results)} : {', '.join(rtypes)}")
        em.at(fn.span)
        private = not ir.is_export(fn.name)
        head = (f"func.func {'private ' if private else ''}{symbol(fn.name)}({', '.join(params)}) -> "
                f"({', '.join(rtypes)})" + ("" if private else " attributes {llvm.emit_c_interface}"))
        abi = [] if private else [f"// kina-abi: {abi_line(fn)}"]
        return [*abi, head + " {", *("  " + line for line in em.prologue), *em.body_lines(), "}" + em.loc]

    def _check_types(self) -> None:
        """Reject placements with no host lowering before emitting anything: first at the
        op that uses them (the message names the op), then at parameters and results."""
        for expr in [b.value for b in self.fn.lets] + [self.fn.result]:
            for node in ir.walk(expr):
                if isinstance(node, ir.OpApp):
                    operands = [a.type for a in node.args] + [node.type]
                    if any(isinstance(t, TensorType) and t.placement != "host" for t in operands):
                        raise EmitError(f"{node.op}: checked device lowering is not available", node.span)
                for t in _flat_types(node.type):
                    _check_size(t, node.span)
        for p in self.fn.params:
            self._check_type(p.type, p.span, f"parameter `{p.name}`")
        for t in _flat_types(self.fn.ret_type):
            self._check_type(t, self.fn.span, f"the result of `{self.fn.name}`")

    @staticmethod
    def _check_type(t: TensorType, span: Span, what: str) -> None:
        if t.placement != "host":
            raise EmitError(f"{what} has type {t}: checked device lowering is not available", span)
        _check_size(t, span)


    def _let(self, b: ir.Binding) -> None:
        self.em.fallback = b.span if b.span != ir.NO_SPAN else self.fn.span
        if b.destructure:
            value = self.expr(b.value, None)
            assert isinstance(value, list) and len(value) == len(b.names)
            for name, v in zip(b.names, value):
                self.env[name] = v
        else:
            self.env[b.names[0]] = self.expr(b.value, b.names[0])

    def expr(self, e: ir.Expr, hint: str | None) -> Value:
        """Emit `e`; the op producing its value is named `%hint` when given."""
        em = self.em
        if isinstance(e, ir.Var):
            return self.env[e.name]
        if isinstance(e, ir.MakeTuple):
            return [self.expr(x, None) for x in e.items]
        if isinstance(e, ir.Handle):
            raise EmitError(f"`handle {e.fn}(..) with {e.handler}` reached emission unlowered "
                            "(run compiler.ad.transform.lower_handles first)", e.span)
        args = [self.expr(a, None) for a in getattr(e, "args", [])]
        em.at(e.span)
        out = em.fresh(hint)
        if isinstance(e, ir.Literal):
            if e.size_value is not None:
                return em.filled(ty(e.type), e.size_value, out)
            if e.scalar or (len(e.values) <= 1 and (has_sizes(e.type.shape) or e.type.volume >= SPLAT_FILL_MIN)):
                # `x * 0.5`, or a big splat: a fill, not a dense constant the size of x in the .so
                # (an elementwise op reads its scalar instead, and an unread fill is not written:
                # compiler/backend/emit/folded.py)
                return em.filled(ty(e.type), e.values[0] if e.values else 0, out)
            return em.op(literal(e), out)
        if isinstance(e, ir.CallFn):   # parameters are tensors: each argument one SSA value
            return self._call(e, [a for a in args if isinstance(a, str)], out)
        if isinstance(e, ir.OpApp):
            if e.op not in LOWERINGS:
                raise EmitError(f"{e.op}: no host lowering", e.span)
            operands = [a for a in args if isinstance(a, str)]   # op operands are tensors (checked)
            em.F = compute_type(as_tensor(x.type).dtype for x in [*e.args, e])
            try:
                return LOWERINGS[e.op](em, e, operands, out)
            except EmitError:
                raise
            except Exception as err:   # a bug in a lowering row: a located diagnostic, not a traceback
                raise EmitError(f"{e.op}: internal error in its lowering ({type(err).__name__}: {err}); "
                                "this is a compiler bug, please report it", e.span) from err
        raise EmitError(f"cannot emit {type(e).__name__}", getattr(e, "span", ir.NO_SPAN))

    def _call(self, e: ir.CallFn, args: list[str], out: str) -> Value:
        callee = self.functions.get(e.fn)
        if e.sizes and callee is not None:
            return self._dynamic_call(e, callee, args, out)
        types = _flat_types(e.type)
        sig = (f"({', '.join(ty(a.type).mlir for a in e.args)}) -> "
               f"({', '.join(ty(t).mlir for t in types)})")
        # A call to an exported function stays a call: inlining it would copy the callee's
        # whole body into every caller (an example's `main` duplicated its step, doubling
        # the lowered module and its compile time).  Generated private functions (`f.rev`)
        # have one caller and are inlined.
        attrs = "" if "." in e.fn else " {no_inline}"
        call = f"func.call {symbol(e.fn)}({', '.join(args)}){attrs} : {sig}"
        if isinstance(e.type, TupleType):
            self.em.op(call, f"{out}:{len(types)}")
            return [f"{out}#{i}" for i in range(len(types))]
        return self.em.op(call, out)


    def _dynamic_call(self, e: ir.CallFn, callee: ir.Function, args: list[str], out: str) -> Value:
        """A call of a dynamic function: the size values first, each tensor cast to the
        callee's parameter type (its `?` dimensions), and the results cast back to this
        call's types (which may know more of the dimensions)."""
        em = self.em
        sizes = [em.dim(d) for d in e.sizes]
        casts = []
        for a, arg, p in zip(args, e.args, callee.params):
            mine, theirs = ty(arg.type).mlir, ty(p.type).mlir
            casts.append(a if mine == theirs else em.op(f"tensor.cast {a} : {mine} to {theirs}"))
        rets = [ty(t).mlir for t in _flat_types(callee.ret_type)]
        wanted = [ty(t).mlir for t in _flat_types(e.type)]
        sig = f"({', '.join(['index'] * len(sizes) + [ty(p.type).mlir for p in callee.params])}) -> ({', '.join(rets)})"
        # Inlined, unlike a static export's call: buffer-results-to-out-params cannot give a
        # call the out-param of a result whose sizes the callee computes (`T + 1`).
        call = f"func.call {symbol(e.fn)}({', '.join(sizes + casts)}) : {sig}"
        res = em.fresh() if len(rets) > 1 else out
        em.line(f"{res}:{len(rets)} = {call}{em.loc}" if len(rets) > 1 else f"{res} = {call}{em.loc}")
        values = [f"{res}#{i}" for i in range(len(rets))] if len(rets) > 1 else [res]
        results = [v if a == b else em.op(f"tensor.cast {v} : {a} to {b}") for v, a, b in zip(values, rets, wanted)]
        return list(results) if isinstance(e.type, TupleType) else results[0]


def abi_line(fn: ir.Function) -> str:
    """The function's line of the library's `_kina_abi()` text (backend/entry_points.py):
    `kina_f(f32[2,3], i64[4]) -> (f32[2])`, with `[B,T]` after the name and size
    expressions in the shapes for a dynamic function (`i64[B,T + 1]`)."""
    def t(x: TensorType) -> str:
        return f"{ty(x).elem}[{','.join(map(str, x.shape))}]"

    sizes = f"[{','.join(fn.sizes)}]" if fn.sizes else ""
    return (f"kina_{fn.name}{sizes}({', '.join(t(p.type) for p in fn.params)}) -> "
            f"({', '.join(t(x) for x in _flat_types(fn.ret_type))})")


def _distinct_results(em: FnEmitter, results: list[str], types: list[str]) -> list[str]:
    """Every result its own tensor: a value returned twice (`(y, y)`, or both cotangents of
    `x + b`) is copied for its second use.  Each result becomes its own caller-owned
    buffer, and buffer-results-to-out-params (hoist-static-allocs) crashes when one
    allocation is returned twice.  alloc_tensor, unlike tensor.empty + linalg.copy, is
    never folded or CSE'd back into the original value."""
    seen: set[str] = set()
    out = []
    for v, t in zip(results, types):
        if v in seen:
            v = em.op(f"bufferization.alloc_tensor() copy({v}) : {t}")
        seen.add(v)
        out.append(v)
    return out


def _flat_values(v: Value) -> list[str]:
    """Tuple values (possibly nested) as the flat list of func results."""
    return [x for item in v for x in _flat_values(item)] if isinstance(v, list) else [v]


def _flat_types(t: Type) -> list[TensorType]:
    if isinstance(t, TupleType):
        return [x for item in t.items for x in _flat_types(item)]
    return [t]


# A splat (or zeros) literal of at least this many elements is a linalg.fill of a fresh
# tensor, not an arith.constant: a dense constant becomes a global of every element in the
# LLVM IR and the object file (a [4000, 4000] splat took 241 s to build at -O0 and 64 MB);
# the fill is one loop.  Small splats stay constants, which the canonicalizer folds.
SPLAT_FILL_MIN = 4096


def literal(e: ir.Literal) -> str:
    """arith.constant dense<..>: () zeros, (x,) splat, else a nested row-major payload."""
    t = ty(e.type)
    is_int = not e.type.is_float        # I64, and Bool stored as i8 0 / 1

    def fmt(x: float) -> str:
        return str(int(x)) if is_int else float_literal(float(x), t.elem)

    if len(e.values) <= 1:
        body = fmt(e.values[0] if e.values else 0)
    else:
        body = _nested([fmt(v) for v in e.values], e.type.shape)
    return f"arith.constant dense<{body}> : {t.mlir}"


def _nested(flat: list[str], shape: tuple[int, ...]) -> str:
    if len(shape) <= 1:
        return "[" + ", ".join(flat) + "]"
    step = len(flat) // shape[0] if shape[0] else 0
    return "[" + ", ".join(_nested(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])) + "]"


# ---- entry point -------------------------------------------------------------
def emit_function(fn: ir.Function, source: SourceText | None = None,
                  functions: dict[str, ir.Function] | None = None) -> list[str]:
    """The func.func lines of one function (`functions`: the program's, for calls of
    dynamic functions); raises EmitError."""
    return FunctionLowering(fn, source, functions).run()


def emit_program(program: ir.Program, source: SourceText | None = None) -> EmitResult:
    """Lower every function of `program` (handles already lowered) to one MLIR module."""
    diagnostics: list[Diagnostic] = []
    chunks: list[str] = []
    for fn in program.functions.values():
        try:
            chunks.append("\n".join(emit_function(fn, source, program.functions)))
        except EmitError as err:
            diagnostics.append(Diagnostic("emit", err.message, err.span))
        except Exception as err:   # outside any op's lowering (a compiler bug): still a diagnostic
            diagnostics.append(Diagnostic("emit", f"internal error while lowering `{fn.name}` "
                                                  f"({type(err).__name__}: {err}); this is a compiler bug, "
                                                  "please report it", fn.span))
    if diagnostics:
        return EmitResult("", diagnostics)
    origin = f" from {plain_name(source.path)}" if source is not None else ""   # a `//` comment: one line
    header = (f"// Generated by kinac{origin}.\n"
              "// Each Kina function f is func.func @kina_f, exported to C as _mlir_ciface_kina_f.\n")
    if any("func.call @erf(" in c for c in chunks):   # the f64 erf (emit/ops_ext.py)
        chunks.append(LIBM_ERF)
    return EmitResult(header + "module {\n" + "\n\n".join(_indent(c) for c in chunks) + "\n}\n", [])


def _indent(chunk: str) -> str:
    return "\n".join("  " + line if line else line for line in chunk.split("\n"))

