"""Module-level rules: what no single function can decide.

- `first_definitions`: a function name defined twice is a `duplicate` (the first
  definition is the one calls and the program use);
- `recursion_diagnostics` / `recursive_functions`: functions on a call cycle of two
  or more functions (direct self-calls are reported by check.check_function); `call_cycles`
  and `recursion_diagnostic` are the same in two steps (names, then spans).

The one front-end driver, compiler/analysis.py, applies them to every version of
the text (they are cheap: names and call sets only).
"""
from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TypeVar

from compiler.check.function import FunctionResult
from compiler.core.diagnostics import Diagnostic, Note, Span
from compiler.syntax import nodes as syntax

T = TypeVar("T")


def first_definitions(defs: Sequence[tuple[T, int, syntax.FnDef]]) -> tuple[dict[str, T], list[Diagnostic]]:
    """defs: (key, offset, FnDef in spans relative to offset) in text order.  Returns
    name -> key of its first definition, and a `duplicate` for every later one
    (document spans, with a note at the first)."""
    first: dict[str, tuple[T, int, syntax.FnDef]] = {}
    diags = []
    for key, offset, fn in defs:
        prev = first.get(fn.name)
        if prev is None:
            first[fn.name] = (key, offset, fn)
            continue
        diags.append(Diagnostic("duplicate", f"function `{fn.name}` is defined twice", fn.name_span.shift(offset),
                                (Note("first defined here", prev[2].name_span.shift(prev[1])),)))
    return {name: key for name, (key, _, _) in first.items()}, diags


def recursion_diagnostics(results: dict[str, FunctionResult]) -> list[Diagnostic]:
    """`recursion` for every function on a call cycle of two or more functions
    (direct self-calls are reported by check_function), at its call into the cycle."""
    cycles = call_cycles({name: r.calls for name, r in results.items()})
    return [recursion_diagnostic(name, callee, path, results[name].call_spans[callee])
            for name, (callee, path) in sorted(cycles.items())]


def recursive_functions(results: dict[str, FunctionResult]) -> set[str]:
    """Names of the functions on a call cycle of two or more functions (they
    are left out of the program; self-calls already have function=None)."""
    return set(call_cycles({name: r.calls for name, r in results.items()}))


def call_cycles(calls: Mapping[str, Collection[str]]) -> dict[str, tuple[str, list[str]]]:
    """name -> (a callee on its cycle, the call path from that callee back to name) for
    every function on a call cycle of two or more functions; `calls`: function name ->
    the names it calls (names that are no key of `calls` are ignored).  Names only, no
    spans: the incremental front end reuses the answer while no call changed."""
    return _cycles({name: sorted(c for c in cs if c in calls) for name, cs in calls.items()})


def recursion_diagnostic(name: str, callee: str, path: list[str], call: Span) -> Diagnostic:
    """The `recursion` diagnostic of `name`, whose call of `callee` (at `call`) starts the cycle `path`."""
    return Diagnostic("recursion", f"`{name}` is recursive: {' -> '.join([name] + path)}; "
                      "Kina functions cannot recurse", call)


def _cycles(graph: dict[str, list[str]]) -> dict[str, tuple[str, list[str]]]:
    """name -> (a callee on its cycle, the call path from that callee back to
    name), for every function in a strongly connected component of size >= 2."""
    out = {}
    for scc in strongly_connected_components(graph):
        members = set(scc)
        if len(scc) < 2:
            continue
        for name in scc:
            callee = next(c for c in graph[name] if c in members)
            out[name] = (callee, _path(graph, members, callee, name))
    return out


def _path(graph: dict[str, list[str]], members: set[str], start: str, goal: str) -> list[str]:
    """Shortest call path start -> ... -> goal inside one strongly connected component (BFS)."""
    prev: dict[str, str | None] = {start: None}
    frontier = [start]
    while goal not in prev:
        nxt = []
        for f in frontier:
            for m in graph[f]:
                if m in members and m not in prev:
                    prev[m] = f
                    nxt.append(m)
        frontier = nxt
    path: list[str] = []
    node: str | None = goal
    while node is not None:
        path.append(node)
        node = prev[node]
    return path[::-1]


def strongly_connected_components(graph: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative: no recursion limit)."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter[0]
                counter[0] += 1
                stack.append(node)
                on_stack.add(node)
            succ = graph[node]
            if i < len(succ):
                work.append((node, i + 1))
                nxt = succ[i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                out.append(comp)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return out
