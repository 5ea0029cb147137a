"""The MLIR text builder behind emit_mlir: element types, tensor types, fresh SSA
names, op lines carrying `loc("file.kina":line:col)`, and helpers for the
recurring shapes of tensor-level code (linalg.generic, fill, collapse/expand,
f32 compute domain, index bounds checks).  It knows nothing about Kina ops.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from compiler.backend.emit.folded import Folded
from compiler.backend.math_lowering import log_lines
from compiler.core.diagnostics import SourceText, Span, plain_name
from compiler.core.sizes import Dim, Size, SizeNumber
from compiler.core.types import BY_MLIR, DType, Type
from compiler.ir import nodes as ir
from compiler.ir.nodes import as_tensor

# Kina dtype -> MLIR element type (storage); the facts live in types.DType.
ELEM: dict[DType, str] = {d: d.mlir for d in DType}
COMPUTE = "f32"  # scalar type in which float ops compute (F16/BF16/F8 storage too) ...
WIDE = "f64"     # ... but an op touching F64 computes in f64 (FnEmitter.F, set per op)
_WIDTH = {"f64": 64, "f32": 32, "f16": 16, "bf16": 16, "f8E4M3FN": 8, "f8E5M2": 8}


def compute_type(dtypes: Iterable[DType]) -> str:
    """The scalar float type an op over these operand / result dtypes computes in."""
    return WIDE if DType.F64 in dtypes else COMPUTE
# The results of an indexing map over d0..dn-1: a loop dimension ("d2") or a constant (0).
MapResults = Sequence[int | str]
# A linalg body: the block arguments' SSA names in (one per operand, so the arity varies
# with the op) -> the name of the value to yield.
Body = Callable[..., str]


class EmitError(Exception):
    """A construct with no host lowering; becomes an `emit` diagnostic at `span`."""

    def __init__(self, message: str, span: Span) -> None:
        super().__init__(message)
        self.message, self.span = message, span


@dataclass(frozen=True)
class Ty:
    """An MLIR ranked tensor type: element type and shape.  In a dynamic function a
    dimension may be a symbolic Size (`B*T`): it is `?` in the type, and its value is
    computed from the function's size arguments (FnEmitter.dim)."""
    elem: str
    shape: tuple[int, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def mlir(self) -> str:
        return "tensor<" + "".join(f"{_mlir_dim(d)}x" for d in self.shape) + self.elem + ">"

    @property
    def dynamic(self) -> list[int]:
        """The axes whose size is symbolic."""
        return [i for i, d in enumerate(self.shape) if isinstance(d, Size)]

    def with_elem(self, elem: str) -> Ty:
        return Ty(elem, self.shape)

    def with_shape(self, shape: Iterable[int]) -> Ty:
        return Ty(self.elem, tuple(shape))


# The float functions of size numbers (core.sizes.SIZE_NUMBER_FUNCTIONS) in f32.
_MATH = {"sqrt": "math.sqrt {x} : {t}", "rsqrt": "math.rsqrt {x} : {t}", "exp": "math.exp {x} : {t}",
         "log": "math.log {x} : {t}"}


def _mlir_dim(d: object) -> str:
    return "?" if isinstance(d, Size) else str(d)


def ty(t: Type) -> Ty:
    """The MLIR tensor type of a Kina tensor type (a tuple has none: a TypeError)."""
    t = as_tensor(t)
    return Ty(ELEM[t.dtype], t.shape)


def symbol(fn: str) -> str:
    """`f` -> `@kina_f`; generated `f.rev` -> `@"kina_f.rev"` (quoted: not a bare identifier)."""
    name = "kina_" + fn
    return f'@"{name}"' if not name.replace("_", "a").isalnum() else "@" + name


def affine(n: int, results: MapResults) -> str:
    dims = ", ".join(f"d{i}" for i in range(n))
    return f"affine_map<({dims}) -> ({', '.join(str(r) for r in results)})>"


def identity(n: int) -> list[str]:
    return [f"d{i}" for i in range(n)]


def float_literal(x: float, elem: str) -> str:
    """A float in MLIR syntax (which needs a '.' before any exponent; inf/nan as hex bits)."""
    if x != x or x in (float("inf"), float("-inf")):
        return hex(BY_MLIR[elem].bits_of(x))   # E4M3FN has no inf: NaN, as in the interpreter
    s = repr(float(x))
    mant, _, exp = s.partition("e")
    if "." not in mant:
        mant += ".0"
    return mant + ("e" + exp if exp else "")


class FnEmitter:
    """Emits one func.func: fresh SSA names, op lines with locations, linalg.generic."""

    def __init__(self, source: SourceText | None) -> None:
        self.source = source
        self.lines: list[str] = []
        self.indent = 2
        self.counter = 0
        self.used: set[str] = set()
        self.loc = ""
        self.span = ir.NO_SPAN
        self.fallback = ir.NO_SPAN  # location for span-less nodes: the current let or function
        # A dynamic function: its size arguments (name -> SSA index value), and the index
        # values computed from them (emitted once, at the top of the body: `prologue`).
        self.sizes: dict[str, str] = {}
        self.prologue: list[str] = []
        self._dims: dict[object, str] = {}
        self.F = COMPUTE   # the float compute type of the op being lowered (compute_type)
        # The fills and broadcasts an elementwise op reads through (compiler/backend/emit/folded.py)
        self.folded = Folded()

    # ---- names and lines ---------------------------------------------------
    def fresh(self, hint: str | None = None) -> str:
        if hint is None:
            self.counter += 1
            return f"%{self.counter - 1}"
        name, k = hint, 0
        while name in self.used:  # lets are unique per function; generated code may not be
            k += 1
            name = f"{hint}_{k}"
        self.used.add(name)
        return "%" + name

    def at(self, span: Span) -> None:
        """Attach `span`'s Kina location to the ops emitted from now on.  Generated nodes
        (autodiff's backward graph) may have no span: they take the enclosing `fallback`."""
        if span == ir.NO_SPAN:
            span = self.fallback
        self.span = span
        if self.source is not None:
            line, col = self.source.line_col(span.start)
            # plain_name: a newline, quote or non-UTF-8 byte of the file name must not reach
            # the MLIR text (toolchain.tool_diagnostics maps this name back to the source)
            self.loc = f' loc("{plain_name(self.source.path)}":{line}:{col})'

    def line(self, text: str) -> None:
        self.lines.append(" " * self.indent + text)

    def op(self, text: str, out: str | None = None) -> str:
        """Emit `out = text loc(..)`; returns the result name."""
        out = out or self.fresh()
        self.line(f"{out} = {text}{self.loc}")
        return out

    def stmt(self, text: str) -> None:
        self.line(text + self.loc)

    def own_log(self, x: str) -> str:
        """log of an f32 value by Kina's own polynomial (math_lowering.log_lines), the same
        ops at every level, where libm's logf (-O0) and libmvec's (-O2) differ in the last bit."""
        lines, y = log_lines(x, "%kina_log_" + self.fresh()[1:])
        for text in lines:
            self.line(text + self.loc)
        return y

    def fail(self, message: str) -> None:
        raise EmitError(message, self.span)

    # ---- sizes of dynamic functions ------------------------------------------
    def dim(self, d: Dim) -> str:
        """The SSA index value of a dimension: a constant, or a size polynomial computed
        from the size arguments.  Emitted into the prologue (it dominates every use, also
        inside linalg bodies) and computed once per function."""
        if d in self._dims:
            return self._dims[d]
        if isinstance(d, Size):
            value = self._poly(d)
        else:
            value = self._pro(f"arith.constant {int(d)} : index")
        self._dims[d] = value
        return value

    def _poly(self, d: Size) -> str:
        total = None
        for monomial, coeff in d.terms:
            term = self.dim(coeff) if not monomial or coeff != 1 else None
            for name in monomial:
                v = self.sizes[name]
                term = v if term is None else self._pro(f"arith.muli {term}, {v} : index")
            assert term is not None
            total = term if total is None else self._pro(f"arith.addi {total}, {term} : index")
        assert total is not None
        return total

    def _pro(self, text: str) -> str:
        out = self.fresh()
        self.prologue.append(f"{out} = {text}")
        return out

    def dyn_operands(self, t: Ty) -> str:
        """The operands giving the `?` dimensions of t (`tensor.empty(%a, %b)`)."""
        return ", ".join(self.dim(t.shape[i]) for i in t.dynamic)

    def size_number(self, n: SizeNumber, elem: str) -> str:
        """A number computed from sizes (`1.0 / (B * T)`) as a scalar of `elem` (f32 math
        for floats, i64 for integers), in the prologue."""
        f = elem if elem in (COMPUTE, WIDE) else COMPUTE   # f32 math but for f64
        if n.op == "num":
            v = n.args[0]
            if elem == "i64":
                return self._pro(f"arith.constant {int(v)} : i64")   # type: ignore[call-overload]
            return self._pro(f"arith.constant {float_literal(float(v), f)} : {f}")  # type: ignore[arg-type]
        if n.op == "size":
            i = self._pro(f"arith.index_cast {self.dim(n.args[0])} : index to i64")   # type: ignore[arg-type]
            return i if elem == "i64" else self._pro(f"arith.sitofp {i} : i64 to {f}")
        t = "i64" if elem == "i64" else f
        if n.op in _MATH and t != "i64":   # a float function of a number: computed in f32 (f64)
            x = self.size_number(n.args[0], f)   # type: ignore[arg-type]
            return self._pro(_MATH[n.op].format(x=x, t=t, one=self._pro(f"arith.constant 1.0 : {t}")))
        args = [self.size_number(a, elem) for a in n.args if isinstance(a, SizeNumber)]
        if n.op == "square":
            return self._pro(f"arith.mul{'i' if t == 'i64' else 'f'} {args[0]}, {args[0]} : {t}")
        if n.op == "abs":
            return self._pro(f"math.absi {args[0]} : {t}" if t == "i64" else f"math.absf {args[0]} : {t}")
        if n.op == "neg":
            if t == "i64":
                return self._pro(f"arith.subi {self._pro('arith.constant 0 : i64')}, {args[0]} : i64")
            return self._pro(f"arith.negf {args[0]} : {t}")
        name = {"+": "add", "-": "sub", "*": "mul", "/": "div"}[n.op]
        name = name + ("i" if t == "i64" else "f")
        total = args[0]
        for x in args[1:]:     # + and * take any number of operands, - and / two
            total = self._pro(f"arith.{name} {total}, {x} : {t}")
        return total

    # ---- tensor helpers ----------------------------------------------------
    def empty(self, t: Ty) -> str:
        return self.op(f"tensor.empty({self.dyn_operands(t)}) : {t.mlir}")

    def scalar(self, value: float, elem: str) -> str:
        if elem in ("i1",):
            return self.op(f"arith.constant {'true' if value else 'false'}")
        if elem.startswith("i"):
            return self.op(f"arith.constant {int(value)} : {elem}")
        if elem == "index":
            return self.op(f"arith.constant {int(value)} : index")
        return self.op(f"arith.constant {float_literal(value, elem)} : {elem}")

    def filled(self, t: Ty, value: float | SizeNumber, out: str | None = None) -> str:
        """A tensor of type t holding `value` everywhere: linalg.fill of a
        bufferization.alloc_tensor.  It is an accumulator that its op updates in place; a
        tensor.empty would let CSE merge the accumulators of two matmuls into one tensor,
        which bufferization must then copy (issue 11's first program is that pattern)."""
        if isinstance(value, SizeNumber):
            # an F64 tensor's number is computed in f64 whatever the op's compute type: `x * (1.0
            # / A)` of an F64 x once took 1 / A in f32 (1e-8 off for A = 3, 5: fuzz seed 2545)
            f = t.elem if t.elem in ("i64", WIDE) else self.F
            c = self.size_number(value, f)
            if t.elem != f:
                c = self.store(c, t.elem)
        else:
            c = self.scalar(value, t.elem)
        start = len(self.lines)
        e = self.alloc(t)
        filled = self.op(f"linalg.fill ins({c} : {t.elem}) outs({e} : {t.mlir}) -> {t.mlir}", out)
        self.folded.splat(filled, c, (start, len(self.lines)))
        return filled

    def body_lines(self) -> list[str]:
        """The emitted lines, without the fills and broadcasts that every reader read through."""
        return self.folded.prune(self.lines)

    def alloc(self, t: Ty) -> str:
        """A fresh bufferization.alloc_tensor of type t (never merged by CSE)."""
        return self.op(f"bufferization.alloc_tensor({self.dyn_operands(t)}) : {t.mlir}")

    def generic(self, ins: list[tuple[str, Ty, MapResults]], init: tuple[str, Ty, MapResults],
                iterators: list[str], body: Body, out: str | None = None) -> str:
        """linalg.generic with one output.  ins/init: (value, type, map results over d0..dn-1).
        `body(*block_args)` emits the scalar code and returns the value to yield."""
        n = len(iterators)
        operands = ins + [init]
        maps = ", ".join(affine(n, m) for _, _, m in operands)
        its = ", ".join(f'"{i}"' for i in iterators)
        ins_txt = (f"ins({', '.join(v for v, _, _ in ins)} : {', '.join(t.mlir for _, t, _ in ins)}) "
                   if ins else "")
        v0, t0, _ = init
        out = out or self.fresh()
        self.line(f"{out} = linalg.generic {{indexing_maps = [{maps}], iterator_types = [{its}]}} "
                  f"{ins_txt}outs({v0} : {t0.mlir}) {{")
        args = [self.fresh() for _ in operands]
        self.line("^bb0(" + ", ".join(f"{a}: {t.elem}" for a, (_, t, _) in zip(args, operands)) + "):")
        self.indent += 2
        y = body(*args)
        self.stmt(f"linalg.yield {y} : {t0.elem}")
        self.indent -= 2
        self.line(f"}} -> {t0.mlir}{self.loc}")
        return out

    def map_elementwise(self, ins: list[tuple[str, Ty]], out_t: Ty, fn: Body,
                        out: str | None = None) -> str:
        """out[i] = fn(ins[i]...) over identically shaped tensors: fn sees the block argument
        of each, or the scalar of a splat; a broadcast is read through its map (`folded`)."""
        n = out_t.rank
        reads = [self.folded.operand(v, t, identity(n)) for v, t in ins]
        tensors = [r for r in reads if isinstance(r, tuple)]

        def body(*block_args: str) -> str:
            read = iter(block_args)        # the tensors' arguments, then the output's (unused)
            return fn(*[next(read) if isinstance(r, tuple) else r for r in reads])
        return self.generic(tensors, (self.empty(out_t), out_t, identity(n)), ["parallel"] * n, body, out)

    # ---- float compute domain ------------------------------------------------
    def load(self, x: str, elem: str) -> str:
        """Scalar of storage type `elem` -> the op's compute type (f32, or f64: self.F)."""
        return self.fconv(x, elem, self.F)

    def store(self, x: str, elem: str) -> str:
        return self.fconv(x, self.F, elem)

    def fconv(self, x: str, src: str, dst: str) -> str:
        """A float scalar of type src as dst (extf to a wider type, truncf to a narrower)."""
        if src == dst:
            return x
        if WIDE in (src, dst) and COMPUTE not in (src, dst):
            # f64 <-> f16 / bf16 / f8 go through f32: LLVM would call compiler-rt's
            # __truncdfbf2 & co., which a Kina library does not link (the interpreter's
            # casts round through float32 the same way)
            return self.fconv(self.fconv(x, src, COMPUTE), COMPUTE, dst)
        op = "extf" if _WIDTH[dst] > _WIDTH[src] else "truncf"
        return self.op(f"arith.{op} {x} : {src} to {dst}")

    def to_index(self, x: str) -> str:
        return self.op(f"arith.index_cast {x} : i64 to index")

    def convert(self, x: str, src: Ty, elem: str, out: str | None = None) -> str:
        """Elementwise storage conversion (f32 accumulator -> f16/bf16 result)."""
        if src.elem == elem:
            return x
        return self.map_elementwise([(x, src)], src.with_elem(elem),
                                    lambda a: self.fconv(a, src.elem, elem), out)

    # ---- shape helpers -----------------------------------------------------
    def collapse(self, x: str, t: Ty, groups: list[list[int]], out: str | None = None) -> str:
        new = t.with_shape(_prod(t.shape[i] for i in g) for g in groups)
        return self.op(f"tensor.collapse_shape {x} {_groups(groups)} : {t.mlir} into {new.mlir}", out)

    def expand(self, x: str, t: Ty, groups: list[list[int]], shape: Sequence[int], out: str | None = None) -> str:
        new = t.with_shape(shape)
        if any(sum(isinstance(shape[i], Size) for i in g) > 1 for g in groups):
            # expand-strided-metadata takes at most one dynamic size per group ([B*T] ->
            # [B, T] has two): a tensor.reshape to a shape tensor instead (a view too)
            dims = ", ".join(self.dim(d) for d in shape)
            spec = self.op(f"tensor.from_elements {dims} : tensor<{len(shape)}xindex>")
            return self.op(f"tensor.reshape {x}({spec}) : ({t.mlir}, tensor<{len(shape)}xindex>) -> {new.mlir}", out)
        dims = ", ".join(self.dim(d) if isinstance(d, Size) else str(d) for d in shape)
        return self.op(f"tensor.expand_shape {x} {_groups(groups)} output_shape [{dims}] : "
                       f"{t.mlir} into {new.mlir}", out)

    def bounds_check(self, idx: str, t: Ty, limit: Dim, message: str) -> None:
        """Assert 0 <= idx < limit for every element.  cf.assert cannot sit inside a linalg
        body, so an all-reduction linalg.generic counts the bad indices (in i64: i1 tensors
        do not lower through memref-to-llvm) and one cf.assert checks the count is 0."""
        n = t.rank
        count = Ty("i64", ())
        # a size's value comes from the prologue; a number is a constant next to its compare
        bound = self._pro(f"arith.index_cast {self.dim(limit)} : index to i64") if isinstance(limit, Size) else None
        number = limit if isinstance(limit, int) else 0

        def body(i: str, acc: str) -> str:
            lo = self.op(f"arith.cmpi slt, {i}, {self.scalar(0, 'i64')} : i64")
            hi = self.op(f"arith.cmpi sge, {i}, {bound or self.scalar(number, 'i64')} : i64")
            bad = self.op(f"arith.ori {lo}, {hi} : i1")
            return self.op(f"arith.addi {acc}, {self.op(f'arith.extui {bad} : i1 to i64')} : i64")

        bad = self.generic([(idx, t, identity(n))], (self.filled(count, 0), count, []), ["reduction"] * n, body)
        total = self.op(f"tensor.extract {bad}[] : {count.mlir}")
        ok = self.op(f"arith.cmpi eq, {total}, {self.scalar(0, 'i64')} : i64")
        self.stmt(f'cf.assert {ok}, "{message}"')


# A lowering (a row of emit_ops.LOWERINGS): the function's emitter, the op, its operands'
# SSA names and the name its result must get -> the name of the result.
Emitter = Callable[[FnEmitter, ir.OpApp, list[str], str], str]


def _prod(xs: Iterable[int]) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


def _groups(groups: list[list[int]]) -> str:
    return "[" + ", ".join("[" + ", ".join(str(i) for i in g) + "]" for g in groups) + "]"


def keep_axis(em: FnEmitter, x: str, acc: Ty, axis: int, out: str | None) -> str:
    """[.., ..] -> [.., 1, ..]: re-insert the reduced axis with tensor.expand_shape."""
    shape = acc.shape[:axis] + (1,) + acc.shape[axis:]
    if acc.rank == 0:
        return em.expand(x, acc, [], shape, out)
    # One group per kept axis; the unit axis joins its left neighbour (or the first group).
    groups = [[d if d < axis else d + 1] for d in range(acc.rank)]
    if axis == 0:
        groups[0].insert(0, 0)
    else:
        groups[axis - 1].append(axis)
    return em.expand(x, acc, groups, shape, out)
