"""Symbolic sizes: the dimensions of a size-generic function's types while it is checked.

A `Size` is a polynomial over size parameters with integer coefficients, kept in one
canonical form (a sum of products of sizes: `B*T + 1`, `H*DH`, `2*D - 1`), so two size
expressions are equal exactly when their canonical forms are, whatever order or
grouping they were written in.  Arithmetic on Sizes and ints gives a Size, or a plain
int when every size cancels (`(T + 1) - T` is 1), so a shape is a tuple whose items are
ints and Sizes, and a monomorphic shape is all ints.

The checker checks a generic function's body once with its size parameters as Sizes:
the shape rules (ir/shape_rules.py) compare and combine dimensions with ==, +, -, *
and the comparisons below, and all of them are sound for every instantiation (every
size at least 1):

- == is structural: [M, N] vs [N, M] differ (an error at the definition), even
  though M = N would make them agree; a symbolic check may refuse what one
  instantiation would accept, never the reverse;
- <, <=, >, >= answer only what holds for every size >= 1 (`T - 1 < T`,
  `0 <= T - 1`) and raise `Undecidable` otherwise (`2 < T`), which the checker
  reports as "cannot show ... for every size";
- `exact_div` divides only where the divisor provably divides (`(H*DH) / H` is DH).

Instantiation substitutes ints for the sizes (`subst`), which gives ints again.
"""
from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import product as cartesian
from typing import Union

Monomial = tuple[str, ...]          # sorted size names, repeated for powers; () is the constant
Dim = Union[int, "Size"]


class Undecidable(Exception):
    """A comparison of sizes that holds for some instantiations and not others."""

    def __init__(self, lhs: Dim, op: str, rhs: Dim) -> None:
        super().__init__(f"{lhs} {op} {rhs}")
        self.lhs, self.op, self.rhs = lhs, op, rhs

    @property
    def claim(self) -> str:
        return f"{self.lhs} {self.op} {self.rhs}"


class Size:
    """A non-constant polynomial over size names (construct with `var` and arithmetic)."""

    __slots__ = ("terms", "_hash")

    def __init__(self, terms: tuple[tuple[Monomial, int], ...]) -> None:
        self.terms = terms          # canonical: sorted, no zero coefficient, some non-constant term
        self._hash = hash(terms)

    # ---- construction
    @staticmethod
    def var(name: str) -> Size:
        return Size((((name,), 1),))

    @staticmethod
    def of(terms: Mapping[Monomial, int]) -> Dim:
        """The canonical Dim of a term map: an int when only the constant is left."""
        kept = tuple(sorted(((m, c) for m, c in terms.items() if c), key=_term_order))
        if all(m == () for m, _ in kept):
            return kept[0][1] if kept else 0
        return Size(kept)

    # ---- queries
    @property
    def names(self) -> frozenset[str]:
        return frozenset(n for m, _ in self.terms for n in m)

    def subst(self, env: Mapping[str, Dim]) -> Dim:
        """Every size named in env replaced by its value (simultaneously)."""
        if all(_kept(n, env) for n in self.names):   # nothing to replace (half the calls of a build)
            return self
        total: Dim = 0
        for m, c in self.terms:
            term: Dim = c
            for n in m:
                term = term * (env[n] if n in env else Size.var(n))
            total = total + term
        return total

    def linear_in(self, name: str) -> tuple[int, Dim] | None:
        """(a, rest) with self == a*name + rest and `name` not in rest, or None when
        `name` appears in a product or a power."""
        a, rest = 0, {}
        for m, c in self.terms:
            k = m.count(name)
            if k == 0:
                rest[m] = c
            elif m == (name,):
                a = c
            else:
                return None
        return (a, Size.of(rest)) if a else None

    # ---- arithmetic
    def _map(self) -> dict[Monomial, int]:
        return dict(self.terms)

    def __add__(self, other: Dim) -> Dim:
        out = self._map()
        for m, c in _terms(other):
            out[m] = out.get(m, 0) + c
        return Size.of(out)

    __radd__ = __add__

    def __neg__(self) -> Dim:
        return Size.of({m: -c for m, c in self.terms})

    def __sub__(self, other: Dim) -> Dim:
        return self + (-other)

    def __rsub__(self, other: Dim) -> Dim:
        return (-self) + other

    def __mul__(self, other: Dim) -> Dim:
        out: dict[Monomial, int] = {}
        for (m1, c1), (m2, c2) in cartesian(self.terms, _terms(other)):
            m = tuple(sorted(m1 + m2))
            out[m] = out.get(m, 0) + c1 * c2
        return Size.of(out)

    __rmul__ = __mul__

    # ---- comparisons: == structural, ordering only when it holds for every size >= 1
    def __eq__(self, other: object) -> bool:
        return isinstance(other, Size) and self.terms == other.terms

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return self._hash

    def __lt__(self, other: Dim) -> bool:
        return _decide(self, "<", other)

    def __le__(self, other: Dim) -> bool:
        return _decide(self, "<=", other)

    def __gt__(self, other: Dim) -> bool:
        return _decide(self, ">", other)

    def __ge__(self, other: Dim) -> bool:
        return _decide(self, ">=", other)

    def __bool__(self) -> bool:     # `if d:` means d != 0
        if nonnegative(self - 1):
            return True
        raise Undecidable(self, "!=", 0)

    def __repr__(self) -> str:
        return f"Size({self})"

    def __str__(self) -> str:
        out = ""
        for i, (m, c) in enumerate(reversed(self.terms)):
            body = "*".join(m)
            mag = abs(c)
            text = (f"{mag}*{body}" if mag != 1 else body) if m else str(mag)
            out += (text if c > 0 else f"-{text}") if i == 0 else (f" + {text}" if c > 0 else f" - {text}")
        return out


def _kept(name: str, env: Mapping[str, Dim]) -> bool:
    """Whether env leaves the size `name` as it is (unbound, or bound to itself)."""
    value = env.get(name)
    return value is None or (isinstance(value, Size) and value.terms == (((name,), 1),))


def _term_order(t: tuple[Monomial, int]) -> tuple[int, Monomial]:
    return (len(t[0]), t[0])        # printed reversed: highest degree first, the constant last


def _terms(d: Dim) -> tuple[tuple[Monomial, int], ...]:
    if isinstance(d, Size):
        return d.terms
    return (((), int(d)),)


def is_symbolic(d: object) -> bool:
    return isinstance(d, Size)


def has_sizes(shape: tuple[object, ...]) -> bool:
    return any(isinstance(d, Size) for d in shape)


def nonnegative(d: Dim) -> bool:
    """True when d >= 0 for every assignment of integers >= 1 to its sizes: with each
    size written 1 + y (y >= 0), every coefficient of the expansion is >= 0.  (Sufficient,
    not necessary: False means "not shown".)"""
    if not isinstance(d, Size):
        return d >= 0
    return _nonnegative_size(d)


@functools.lru_cache(maxsize=4096)
def _nonnegative_size(d: Size) -> bool:
    """nonnegative of a Size, remembered: the checker, the AD and the emitter ask the same few
    questions thousands of times (a quarter of the GPT block's front end was this expansion)."""
    shifted = d.subst({n: Size.var(n) + 1 for n in d.names})
    return all(c >= 0 for _, c in _terms(shifted))


def _decide(a: Dim, op: str, b: Dim) -> bool:
    diff = a - b       # a op b  <=>  diff op 0
    holds = {"<": lambda: nonnegative(-diff - 1), "<=": lambda: nonnegative(-diff),
             ">": lambda: nonnegative(diff - 1), ">=": lambda: nonnegative(diff)}
    fails = {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}
    if holds[op]():
        return True
    if holds[fails[op]]():
        return False
    raise Undecidable(a, op, b)


def exact_div(a: Dim, b: Dim) -> Dim | None:
    """a / b when b divides a for every size (an int divisor of every coefficient, or a
    monomial that every term contains); None otherwise."""
    if not isinstance(b, Size):
        if b == 0:
            return None
        if not isinstance(a, Size):
            return a // b if a % b == 0 else None
        if any(c % b for _, c in a.terms):
            return None
        return Size.of({m: c // b for m, c in a.terms})
    if len(b.terms) != 1 or not isinstance(a, Size):
        return None
    (bm, bc), = b.terms
    out: dict[Monomial, int] = {}
    for m, c in a.terms:
        rest = list(m)
        for n in bm:
            if n not in rest:
                return None
            rest.remove(n)
        if c % bc:
            return None
        out[tuple(rest)] = c // bc
    return Size.of(out)


def subst(d: Dim, env: Mapping[str, Dim]) -> Dim:
    return d.subst(env) if isinstance(d, Size) else d


def subst_shape(shape: tuple[Dim, ...], env: Mapping[str, Dim]) -> tuple[Dim, ...]:
    return tuple(subst(d, env) for d in shape)


def parse_binding(text: str) -> tuple[str, int]:
    """`B=4` (a `--size` value) -> ("B", 4); ValueError with the reason otherwise."""
    name, eq, value = text.partition("=")
    if not eq or not name.strip().isidentifier() or not value.strip().isdigit() or int(value) < 1:
        raise ValueError(f"{text!r}: write NAME=N with N a whole number >= 1, e.g. --size B=4")
    return name.strip(), int(value)


def bindings(pairs: list[tuple[str, int]]) -> dict[str, int]:
    """--size values as a dict; a size given twice with different values is a ValueError."""
    out: dict[str, int] = {}
    for name, value in pairs:
        if out.get(name, value) != value:
            raise ValueError(f"--size {name} is given twice ({out[name]} and {value})")
        out[name] = value
    return out


def instance_name(name: str, values: Sequence[int]) -> str:
    """The IR name of one instantiation at int sizes: `linear$8_4_16` (`$` is no Kina name
    character, so it cannot clash with a user function, and MLIR symbols allow it)."""
    return f"{name}${'_'.join(map(str, values))}"


def written_name(name: str) -> str:
    """The name a user wrote for a function, from the IR name of one of its instances
    (`linear$8_4_16` -> `linear`); other names are unchanged.  For messages."""
    return name.partition("$")[0]


# ---- size expressions as text (manifests, ABI lines) ------------------------------------
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_]\w*)|(.))")


def parse_size(text: str) -> Dim:
    """`B*T + 1` (how str(Size) spells it, or any + - * expression with parentheses) -> a
    Dim; ValueError when it is not one.  The runtime reads a manifest's shapes with it."""
    tokens = [(m[1], m[2], m[3]) for m in _TOKEN.finditer(text) if m.group(0).strip()]
    pos = 0

    def peek() -> str | None:
        return tokens[pos][2] if pos < len(tokens) else None

    def atom() -> Dim:
        nonlocal pos
        if pos >= len(tokens):
            raise ValueError(f"size expression {text!r} ends early")
        num, name, sym = tokens[pos]
        pos += 1
        if num:
            return int(num)
        if name:
            return Size.var(name)
        if sym == "(":
            value = total()
            if peek() != ")":
                raise ValueError(f"size expression {text!r}: missing `)`")
            pos += 1
            return value
        if sym == "-":
            return -atom()
        raise ValueError(f"size expression {text!r}: unexpected {sym!r}")

    def product() -> Dim:
        nonlocal pos
        value = atom()
        while peek() == "*":
            pos += 1
            value = value * atom()
        return value

    def total() -> Dim:
        nonlocal pos
        value = product()
        while peek() in ("+", "-"):
            sign = peek()
            pos += 1
            value = value + product() if sign == "+" else value - product()
        return value

    result = total()
    if pos != len(tokens):
        raise ValueError(f"size expression {text!r}: unexpected {tokens[pos][2] or tokens[pos][1]!r}")
    return result


def evaluate(d: Dim, env: Mapping[str, int]) -> int:
    """The int a Dim takes with every size in env (KeyError naming a missing size)."""
    value = subst(d, env)
    if isinstance(value, Size):
        raise KeyError(sorted(value.names)[0])
    return value


# ---- binding sizes from the dimensions of arguments -------------------------------------
@dataclass(frozen=True)
class Bound:
    value: Dim
    source: Hashable        # what bound it (the caller's key of the dimension)


@dataclass
class Solution:
    """`found`: each size solved, with its source; `checks`: the (key, expected, actual)
    of every dimension not used to solve a size; `unsolvable`: (size, key, pattern,
    actual) of a dimension linear in one unknown size that no size >= 1 satisfies."""
    found: dict[str, Bound]
    checks: list[tuple[Hashable, Dim, Dim]]
    unsolvable: tuple[str, Hashable, Dim, Dim] | None = None


def solve(unknowns: Iterable[str], dims: Iterable[tuple[Hashable, Dim, Dim]],
          known: Mapping[str, Bound] = {}) -> Solution:
    """Bind sizes from (key, pattern, actual) pairs: a pattern (`T + 1`, `2*D`, `H*DH` once
    H is known) linear in exactly one unknown size binds it from the actual dimension,
    repeatedly, until nothing more is solved; the remaining pairs are returned as checks
    with the pattern evaluated.  The checker unifies calls with it (actuals may be
    symbolic) and the runtime binds a dynamic function's sizes from its arrays (ints)."""
    names = set(unknowns)
    found = dict(known)
    todo = list(dims)
    progress = True
    while progress:
        progress = False
        for item in list(todo):
            key, pattern, actual = item
            pd = subst(pattern, {k: b.value for k, b in found.items()})
            unbound = [n for n in names - found.keys() if isinstance(pd, Size) and n in pd.names]
            if len(unbound) != 1:
                continue
            assert isinstance(pd, Size)
            solved = pd.linear_in(unbound[0])
            if solved is None:
                continue
            a, rest = solved
            value = exact_div(actual - rest, a)
            if value is None or not _at_least_one(value):
                return Solution(found, [], (unbound[0], key, pd, actual))
            found[unbound[0]] = Bound(value, key)
            todo.remove(item)
            progress = True
    env = {k: b.value for k, b in found.items()}
    return Solution(found, [(key, subst(p, env), actual) for key, p, actual in todo])


def _at_least_one(d: Dim) -> bool:
    try:
        return bool(d >= 1)
    except Undecidable:
        return False


# ---- sizes used as numbers --------------------------------------------------------------
@dataclass(frozen=True)
class SizeNumber:
    """A number computed from sizes in a generic body (`1.0 / (B * T)`, `1.0 / sqrt(E)`),
    kept symbolic so that a dynamic export computes it from the sizes of each call.  op:
    "num" (args: a Python number), "size" (args: a Dim), "+" and "*" over any number of
    SizeNumbers (a flat chain `N + N + ... + N` is one node, not a tree as deep as it is
    long), "-" and "/" over two, or one of SIZE_NUMBER_FUNCTIONS (neg, sqrt, ...) of one."""
    op: str
    args: tuple[object, ...]

    @staticmethod
    def of(x: int | float | Dim) -> SizeNumber:
        return SizeNumber("size", (x,)) if isinstance(x, Size) else SizeNumber("num", (x,))

    @property
    def is_integer(self) -> bool:
        """Whether it is an integer for every size (no `/`, no fractional constant)."""
        if self.op == "num":
            return isinstance(self.args[0], int)
        if self.op == "size":
            return True
        return self.op in ("+", "-", "*", "neg", "abs", "square") and all(
            isinstance(a, SizeNumber) and a.is_integer for a in self.args)

    def subst(self, env: Mapping[str, Dim]) -> SizeNumber:
        if self.op == "num":
            return self
        if self.op == "size":
            return SizeNumber.of(subst(self.args[0], env))   # type: ignore[arg-type]
        return SizeNumber(self.op, tuple(a.subst(env) for a in self.args if isinstance(a, SizeNumber)))

    def constant(self) -> int | float | None:
        """Its value when no size is left (ints stay ints but for `/`), else None."""
        if self.op == "num":
            return self.args[0]   # type: ignore[return-value]
        if self.op == "size":
            d = self.args[0]
            return None if isinstance(d, Size) else d   # type: ignore[return-value]
        values = [a.constant() for a in self.args if isinstance(a, SizeNumber)]
        if any(v is None for v in values):
            return None
        a = values[0]
        b = values[1] if len(values) > 1 else 0
        assert a is not None and b is not None
        if self.op in SIZE_NUMBER_FUNCTIONS:
            return SIZE_NUMBER_FUNCTIONS[self.op](a)
        try:
            if self.op in ("+", "*"):
                total = a
                for v in values[1:]:
                    assert v is not None
                    total = total + v if self.op == "+" else total * v
                return total
            return a - b if self.op == "-" else a / b
        except ZeroDivisionError:
            return float("nan") if a == 0 else float("inf") if a > 0 else float("-inf")

    def __str__(self) -> str:
        if self.op in ("num", "size"):
            d = self.args[0]
            return f"({d})" if isinstance(d, Size) and any(c in str(d) for c in " *") else str(d)
        if self.op == "neg":
            return f"-{self.args[0]}"
        if self.op in SIZE_NUMBER_FUNCTIONS:
            return f"{self.op}({self.args[0]})"
        return "(" + f" {self.op} ".join(map(str, self.args)) + ")"


def _float_of(f: Callable[[float], float]) -> Callable[[int | float], int | float]:
    def apply(x: int | float) -> int | float:
        try:
            return f(x)
        except ValueError:      # a domain error: NaN, as the tensors would compute it
            return math.nan
    return apply


# The functions of one number a size number may apply (as bare numbers fold them:
# check/fold.py), and their values; the back end lowers each to its math-dialect op.
SIZE_NUMBER_FUNCTIONS: dict[str, Callable[[int | float], int | float]] = {
    "neg": lambda x: -x, "abs": abs, "square": lambda x: x * x,
    "sqrt": _float_of(math.sqrt), "rsqrt": _float_of(lambda x: 1.0 / math.sqrt(x)),
    "exp": _float_of(math.exp), "log": _float_of(math.log),
}
