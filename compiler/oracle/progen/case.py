"""The generated program as data: its parameters (Value), its lets (Let) and the Case that
holds them with how its AD wrapper uses the handle, and its size-generic helpers
(GenericFn, GenericHandle; built by generic.py).  The makers build these, the renderer
prints them as Kina (render.py), the oracle runs them (compiler/oracle/differential.py)."""
from __future__ import annotations

from dataclasses import dataclass, field

from compiler.core.sizes import Dim
from compiler.core.types import DType, TensorType
from compiler.oracle.progen.base import CALL, SCALE

# An op attribute as the generator writes it: an axis or count, a float (pow's p, clamp's
# bounds), an enum word, a shape or permutation, or None (clamp without that bound); in a
# generic function, dims and shapes may be symbolic (core.sizes.Size: `stop=B + 1`).
AttrValue = int | float | str | Dim | tuple[Dim, ...] | None


# ---- the generated program -------------------------------------------------------------
@dataclass
class Value:
    name: str
    type: TensorType
    mag: float = 1.0                # typical magnitude (RMS estimate)
    pos_lo: float | None = None     # known lower bound > 0, when positive by construction
    index_hi: int | None = None     # I64 literals: the largest value (params: None, any bound)


@dataclass
class Let:
    name: str
    op: str | None                  # a row of ops.OPS, or None for a literal / an alias
    args: list[str]
    attrs: dict[str, AttrValue]
    type: TensorType
    literal: tuple[float, ...] | None = None    # (x,) a splat, or the payload of an I64 literal


@dataclass
class Case:
    """One generated program.  `wrapper` says how `f_g` uses the handle (AD cases)."""
    params: list[Value]
    lets: list[Let]
    results: list[str]
    dtype: DType
    ad: bool = False
    wrapper: str = "tuple"          # "tuple" | "destructure" | "sgd"
    picks: list[int] = field(default_factory=list)   # wrapper results: indices into (R, g..)
    split: int = 0                  # > 0: the first `split` lets form a helper f_h that f calls
    seed: int | None = None
    choices: list[int] = field(default_factory=list)

    generics: list[GenericFn] = field(default_factory=list)   # size-generic helpers f_s0, f_s1, ..
    gh: GenericHandle | None = None   # `fn f_gh(..)`: handle of a generic helper, sizes inferred

    def types(self) -> dict[str, TensorType]:
        out = {p.name: p.type for p in self.params}
        out.update((l.name, l.type) for l in self.lets)
        return out

    @property
    def ops_used(self) -> set[str]:
        return {l.op for l in self.lets if l.op and l.op not in (CALL, SCALE)}

    def float_params(self) -> list[Value]:
        return [p for p in self.params if p.type.is_float]

    def source(self, name: str = "f") -> str:
        from compiler.oracle.progen.render import render_case
        return render_case(self, name)

    def functions(self, name: str = "f") -> list[str]:
        """The exported functions of `source(name)` that the oracle runs."""
        from compiler.oracle.progen.render import helper_split
        return ([f"{name}_h"] if helper_split(self) else []) + ([name, f"{name}_g"] if self.ad else [name]) + \
            ([f"{name}_gh"] if self.gh else [])

    def handled(self, name: str = "f") -> list[str]:
        """The IR names of the functions `source(name)` differentiates: f, and the instance
        of the generic helper that f_gh handles (`f_s1$2_3`)."""
        own = [name] if self.ad else []
        if self.gh:
            own.append(f"{name}_s{self.gh.fn}${'_'.join(map(str, self.gh.sizes))}")
        return own

    def helpers(self, name: str = "f") -> list[str]:
        """Its other functions (the generic ones by their names before the `$`)."""
        return [f"{name}_h"] + [f"{name}_s{g.index}" for g in self.generics]


@dataclass
class GenericFn:
    """`fn f_s<index>[A, B](..)`: a size-generic helper whose types hold Dims (core.sizes);
    params[0]'s dims are its sizes (or a size + 1, or an int), so every call can infer them."""
    index: int
    sizes: tuple[str, ...]
    params: list[Value] = field(default_factory=list)
    lets: list[Let] = field(default_factory=list)
    result: str = ""

    def types(self) -> dict[str, TensorType]:
        out = {p.name: p.type for p in self.params}
        out.update((l.name, l.type) for l in self.lets)
        return out


@dataclass
class GenericHandle:
    """`fn f_gh(params) = handle f_s<fn>(params) with reverseMode`, at these sizes."""
    fn: int
    sizes: tuple[int, ...]
    params: list[Value]
    explicit: bool = False


def module_source(named_cases: list[tuple[str, Case]]) -> str:
    """Many cases in one Kina file, each under its own function names."""
    return "\n".join(case.source(name) for name, case in named_cases)
