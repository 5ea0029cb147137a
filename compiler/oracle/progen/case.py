"""The generated program as data: its parameters (Value), its lets (Let) and the Case that
holds them with how its AD wrapper uses the handle.  The makers build these, the renderer
prints them as Kina (render.py), the oracle runs them (compiler/oracle/differential.py)."""
from __future__ import annotations

from dataclasses import dataclass, field

from compiler.core.types import DType, TensorType

# An op attribute as the generator writes it: an axis or count, a float (pow's p, clamp's
# bounds), an enum word, a shape or permutation, or None (clamp without that bound).
AttrValue = int | float | str | tuple[int, ...] | None


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

    def types(self) -> dict[str, TensorType]:
        out = {p.name: p.type for p in self.params}
        out.update((l.name, l.type) for l in self.lets)
        return out

    @property
    def ops_used(self) -> set[str]:
        return {l.op for l in self.lets if l.op}

    def float_params(self) -> list[Value]:
        return [p for p in self.params if p.type.is_float]

    def source(self, name: str = "f") -> str:
        from compiler.oracle.progen.render import render_case
        return render_case(self, name)

    def functions(self, name: str = "f") -> list[str]:
        """The exported functions of `source(name)` that the oracle runs."""
        from compiler.oracle.progen.render import helper_split
        return ([f"{name}_h"] if helper_split(self) else []) + ([name, f"{name}_g"] if self.ad else [name])


def module_source(named_cases: list[tuple[str, Case]]) -> str:
    """Many cases in one Kina file, each under its own function names."""
    return "\n".join(case.source(name) for name, case in named_cases)
