"""Uses: where the values of a function parameter go, found by walking the typed IR.

A parameter's elements may move through layout ops (OpDef.layout: reshape,
transpose, broadcast, slice, concat) and casts to their own dtype, lets (plain and destructuring), tuples, calls and
`handle`s (into the callee's parameter, and back out through its result)
before an op consumes them.  `Uses.sinks(fn, name)` lists those consuming ops;
from them:

- `index_bound(fn, name)`: the exclusive upper bound an I64 parameter must
  respect because it feeds the index operand of an op with an `index_bound`
  (ops.OPS: gather, take_along_axis, ScatterAdd, ScatterAlongAxis; the smallest
  over every use), or None.  The
  interpreter draws its inputs below it; the build records it in the manifest,
  and the runtime checks every call against it before calling the library.
- `positive(fn, name)`: whether it reaches an op whose `positive` rule holds
  (ops.OPS: log, sqrt, rsqrt, a fractional pow; inputs must be > 0).

The bound is for the whole parameter, even where a slice drops some of its
elements before the index op (the check is conservative, never lax).
"""
from __future__ import annotations

from compiler.core.sizes import Dim, subst
from compiler.core.types import TupleType
from compiler.ir import nodes as ir
from compiler.ir.nodes import CallFn, Expr, Function, Handle, MakeTuple, OpApp, Program, Var
from compiler.ir.ops import OPS

MAX_DEPTH = 64   # call nesting followed; deeper chains are not analysed

# A value being followed: an expression, the element of its tuple value it stands for
# (None: the whole value), and the call sites its function was entered through.
_Frame = tuple[Function, CallFn | Handle]
# What holds an expression, and at which operand: an Expr node, the Binding whose whole
# value it is (operand 0), or None for the function's result (operand 0).
_Parent = tuple[Expr | ir.Binding | None, int]
# A visited state of the walk: ids of the function, the expression and the call sites, the position.
_Seen = set[tuple[int, int, int | None, tuple[int, ...]]]
# A consuming op, its operand index, and the call sites its function was entered through.
_Sink = tuple[OpApp, int, tuple[_Frame, ...]]


class Uses:
    """Value flow of parameters over one program (`program` may be None: calls are then
    not followed)."""

    def __init__(self, program: Program | None) -> None:
        self.program = program
        self._parents: dict[int, tuple[Function, dict[int, _Parent]]] = {}   # id(fn) -> (fn, table)

    # ---- the answers ----------------------------------------------------------------
    def index_bound(self, fn: Function, name: str) -> Dim | None:
        """The bound in fn's own sizes: an index op inside a generic callee reached through a
        call at symbolic sizes has its bound in the callee's sizes, mapped back through the
        calls' sizes (a partly bound export's `gather` in a callee at V gives the bound 8)."""
        bounds = [self._to_caller(bound([ir.as_tensor(a.type) for a in op.args], op.attrs), stack)
                  for op, i, stack in self._sinks(fn, name)
                  if (bound := OPS[op.op].index_bound) is not None and i == 1]
        return min(bounds) if bounds else None

    def positive(self, fn: Function, name: str) -> bool:
        return any((rule := OPS[op.op].positive) is not None and rule(op.attrs) for op, _ in self.sinks(fn, name))

    def _to_caller(self, d: Dim, stack: tuple[_Frame, ...]) -> Dim:
        """A dimension of a callee's types in the sizes of the function the walk started
        from: each call at symbolic sizes (CallFn.sizes / Handle.sizes) substitutes its values
        for the callee's size parameters, innermost call first."""
        for _, call in reversed(stack):
            callee = self.program.functions.get(call.fn) if self.program else None
            if call.sizes and callee is not None:
                d = subst(d, dict(zip(callee.sizes, call.sizes)))
        return d

    def sinks(self, fn: Function, name: str) -> list[tuple[OpApp, int]]:
        """(op, operand index) of every op that consumes the parameter's elements."""
        return [(op, i) for op, i, _ in self._sinks(fn, name)]

    def _sinks(self, fn: Function, name: str) -> list[_Sink]:
        out: list[_Sink] = []
        seen: _Seen = set()
        self._follow_name(fn, name, None, (), out, seen)
        return out

    # ---- the walk ---------------------------------------------------------------------
    def _follow_name(self, fn: Function, name: str, pos: int | None, stack: tuple[_Frame, ...],
                     out: list[_Sink], seen: _Seen) -> None:
        for var in self._occurrences(fn, name):
            self._follow(fn, var, pos, stack, out, seen)

    def _follow(self, fn: Function, expr: Expr, pos: int | None, stack: tuple[_Frame, ...],
                out: list[_Sink], seen: _Seen) -> None:
        key = (id(fn), id(expr), pos, tuple(id(c) for _, c in stack))
        if key in seen or len(stack) > MAX_DEPTH:
            return
        seen.add(key)
        parent, i = self._parent(fn, expr)
        if isinstance(parent, OpApp):
            if pos is None and (OPS[parent.op].layout or _identity(parent)):
                self._follow(fn, parent, None, stack, out, seen)
            elif pos is None:
                out.append((parent, i, stack))
        elif isinstance(parent, ir.Binding):
            if parent.destructure:
                if pos is not None:
                    self._follow_name(fn, parent.names[pos], None, stack, out, seen)
            else:
                self._follow_name(fn, parent.names[0], pos, stack, out, seen)
        elif isinstance(parent, MakeTuple):
            if pos is None:
                self._follow(fn, parent, i, stack, out, seen)
        elif isinstance(parent, (CallFn, Handle)):
            callee = self.program.functions.get(parent.fn) if self.program else None
            if callee is not None and pos is None and i < len(callee.params):
                self._follow_name(callee, callee.params[i].name, None, stack + ((fn, parent),), out, seen)
        elif parent is None and stack:      # the function's result: back to the call site
            caller, call = stack[-1]
            if isinstance(call, Handle):    # (R, cotangents...): R is element 0, or the whole value
                if pos is None:
                    self._follow(caller, call, 0 if isinstance(call.type, TupleType) else None,
                                 stack[:-1], out, seen)
            else:
                self._follow(caller, call, pos, stack[:-1], out, seen)

    # ---- the tree -----------------------------------------------------------------------
    def _occurrences(self, fn: Function, name: str) -> list[Var]:
        return [e for root in _roots(fn) for e in ir.walk(root) if isinstance(e, Var) and e.name == name]

    def _parent(self, fn: Function, expr: Expr) -> _Parent:
        """(parent, operand index) of expr: an Expr node, the Binding whose whole value it is,
        or None for the function's result (the index is 0 for those two)."""
        cached = self._parents.get(id(fn))
        if cached is None:
            table: dict[int, _Parent] = {}
            for b in fn.lets:
                table[id(b.value)] = (b, 0)
            for root in _roots(fn):
                for node in ir.walk(root):
                    for j, child in enumerate(ir.children(node)):
                        table[id(child)] = (node, j)
            table[id(fn.result)] = (None, 0)
            cached = self._parents[id(fn)] = (fn, table)   # holding fn keeps its id unique
        return cached[1].get(id(expr), (None, 0))


def _identity(op: OpApp) -> bool:
    """A cast to the operand's own dtype moves the values unchanged, as a layout op does."""
    return op.op == "cast" and ir.as_tensor(op.args[0].type).dtype is ir.as_tensor(op.type).dtype


def _roots(fn: Function) -> list[Expr]:
    return [b.value for b in fn.lets] + [fn.result]
