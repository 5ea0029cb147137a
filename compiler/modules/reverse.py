"""reverseMode's checks of a handle whose function is in (or calls into) an imported module.

The analysis of a file checks reverseMode's restrictions of each function it handles
(autodiff.check_differentiable) on the functions the handle inlines; with imports, some of
those are another file's.  ImportedFunctions holds the imported modules' good functions
named as in a linked program (check/linking.py) and with their spans moved far away, so
that a diagnostic inside one is recognised as such and reported at the importer's handle
with the file and line where it is.
"""
from __future__ import annotations

from compiler import ad as autodiff
from compiler.check import linking
from compiler.core.diagnostics import Diagnostic, Note, Span, display_path
from compiler.ir import nodes as ir
from compiler.ir import sizes as ir_sizes
from compiler.snapshot import ModuleLink, Snapshot
from compiler.syntax.walk import shift


class ImportedFunctions:
    """The imported modules' good functions, for reverseMode's checks in an importer: named as
    in a linked program (check/linking.py; the i-th module of the closure named after its file, as in a build), and with spans moved by i * FAR, so that a diagnostic inside an imported function
    is recognised as such, and reported at the importer's handle with its file and line."""
    FAR = 1 << 40

    def __init__(self, modules: list[Snapshot], own: frozenset[str]) -> None:
        self.modules = modules
        prefixes = linking.module_prefixes([m.path for m in modules[1:]])
        prefixes[modules[0].path] = ""
        self.functions: dict[str, ir.Function] = {}
        for i, m in enumerate(modules[1:], start=1):
            parts = m.parts()
            named = linking.rename_parts(linking.Parts(mono=parts.mono, symbolic=parts.symbolic), m.namer(prefixes),
                                         m.is_user_function)
            for name, fn in {**named.mono, **named.symbolic}.items():
                self.functions[name] = shift(fn, i * self.FAR)
        self.rename = modules[0].namer(prefixes, own)

    @staticmethod
    def of(links: list[ModuleLink], own: frozenset[str]) -> ImportedFunctions | None:
        snaps = [m.snapshot for m in links if m.snapshot is not None and m.problem is None]
        if not snaps:
            return None
        entry = Snapshot("", "<entry>", [], [], set(), {}, links)
        return ImportedFunctions(entry.closure(), own)

    def has(self, target: str) -> bool:
        return self.rename(target).partition("$")[0] in self.functions

    def check(self, local: dict[str, ir.Function], target: str, at: Span) -> list[Diagnostic]:
        renamed = {self.rename(n): ir_sizes.map_calls(f, lambda c: self.rename(c.fn)) for n, f in local.items()}
        program = ir.Program(Generic({**self.functions, **renamed}))
        return [self._placed(d, at) for d in autodiff.check_differentiable(program, self.rename(target))]

    def _placed(self, d: Diagnostic, at: Span) -> Diagnostic:
        i = d.span.start // self.FAR
        if i == 0:
            return d
        m = self.modules[i]
        line, col = m.source.line_col(d.span.start - i * self.FAR)
        return Diagnostic(d.code, f"{d.message} (in {display_path(m.path)}:{line}:{col})", at,
                          tuple(Note(n.message) for n in d.notes), d.severity)


class Generic(dict[str, ir.Function]):
    """Functions by name, where an instantiation `g$3` is the generic `g`'s symbolic IR:
    reverseMode's restrictions are about the structure of a body, which every
    instantiation shares, so the generic body is checked once, at its definition."""

    def __missing__(self, key: str) -> ir.Function:
        base = key.partition("$")[0]
        if base != key and dict.__contains__(self, base):
            return dict.__getitem__(self, base)
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or (
            isinstance(key, str) and "$" in key and dict.__contains__(self, key.partition("$")[0]))
