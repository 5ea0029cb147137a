"""Splitting an emitted module into parts that compile side by side (one per core).

A build's pass pipeline and LLVM run one process per module, one core at a time, and after
`--inline` each exported function is a world of its own: it calls nothing but the runtime.
So a large module is cut into PARTS modules along its exported functions: each part holds
some of them (the roots), with every function they call (copied into each part that calls
it, as the inliner would copy it anyway), and each part is compiled on its own core.  The
parts' objects are joined with the entry points' object (compiler/backend/entry_points.py
`entry_module_text`: the checked and packed entries, the error slot and the ABI text, made
once for the whole library) into one library.

The cut reads the text compiler/backend/emit/program.py writes (one top-level item per
function, each closed by a `  }` line at two spaces), not arbitrary MLIR: `split_module`
returns None for any text it does not recognise, and the build compiles that text whole.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

PARTS = 2
# Below this much emitted text a build is one module: a part costs its own processes
# (~0.1 s of tool start-up at -O0), which a small module's whole compile does not repay.
# KINA_SPLIT_BYTES overrides it (0: split every module with two exported functions or
# more; a huge value: never split).
SPLIT_MIN_BYTES = 100_000
# The -O2 engine builds whole unless KINA_SPLIT_BYTES asks, or the process builds again (the
# language server after each Build & validate: `split_module(..., rebuilding=True)`): its
# LLVM stage already runs in two halves, and it merges identical kernels across the module
# (llvm_stage.dedupe_kernels), which parts cannot: the GPT block's loss and gradient share
# their forward kernels.  In parts its cold -O2 build took 1.1-2.5 s more CPU (the second
# part's copies of those kernels, a second worker loading the bindings) for 0-0.5 s less
# wall (benchmarks/README.md).  An edit rebuilt in a warm process is another matter: its LLVM
# stage reuses the objects of the functions the edit left alone, so the passes are the
# build, and in parts the gradient's no longer wait for the other exports' (the GPT block's
# edit 1.54-1.58 -> 1.42-1.49 s on an Intel Xeon).
SPLIT_BACKENDS = ("tools",)
SPLIT_ENV = "KINA_SPLIT_BYTES"

_HEAD_RE = re.compile(r"^  func\.func (private )?@(\"[^\"]+\"|[\w$.]+)\(")
_SYMBOL_RE = re.compile(r"@(\"[^\"]+\"|[\w$.]+)")
EXPORT_ATTRS = " attributes {llvm.emit_c_interface}"
# A private func.func lowers to an LLVM function of external linkage (when --inline leaves
# it: a function that is never inlined); two parts holding one would clash in the link.
INTERNAL = " attributes {llvm.linkage = #llvm.linkage<internal>}"


@dataclass
class Item:
    """One top-level function of the emitted module (its `//` comment lines included)."""
    name: str
    lines: list[str]
    private: bool
    calls: set[str] = field(default_factory=set)

    @property
    def size(self) -> int:
        return sum(len(line) + 1 for line in self.lines)

    def in_part(self, owned: bool) -> list[str]:
        """The function's lines in a part: as it is when the part `owned` it (an export of
        this part), else as an internal copy (no C interface, no ABI comment: its own part
        exports it; here it is only called, or inlined into its callers)."""
        if owned or not self.lines[-1].startswith("  }"):      # an export, or a declaration
            return self.lines
        body = [line for line in self.lines if not line.startswith("  // kina-abi:")]
        for i, line in enumerate(body):
            if _HEAD_RE.match(line):
                head = line.replace("  func.func @", "  func.func private @", 1).replace(EXPORT_ATTRS, "", 1)
                if " attributes {" in head:
                    body[i] = head.replace(" attributes {", INTERNAL[:-1] + ", ", 1)
                else:
                    body[i] = head[:-len(" {")] + INTERNAL + " {"
                break
        return body


def parse_items(text: str) -> tuple[list[str], list[Item]] | None:
    """(the header lines before `module {`, the module's functions), or None when the text is
    not in the emitter's layout."""
    lines = text.split("\n")
    try:
        start = lines.index("module {")
    except ValueError:
        return None
    end = len(lines) - 1
    while end > start and lines[end] == "":
        end -= 1
    if lines[end] != "}":
        return None
    items: list[Item] = []
    comments: list[str] = []
    i = start + 1
    while i < end:
        line = lines[i]
        if line == "":
            i += 1
        elif line.startswith("  //"):
            comments.append(line)
            i += 1
        elif (m := _HEAD_RE.match(line)) is not None:
            j = i
            if line.endswith("{"):       # a definition: up to its closing brace at two spaces
                j = next((k for k in range(i + 1, end) if lines[k] == "  }" or lines[k].startswith("  } loc(")), -1)
                if j < 0:
                    return None
            items.append(Item(m[2], comments + lines[i:j + 1], m[1] is not None))
            comments = []
            i = j + 1
        else:
            return None
    names = {item.name for item in items}
    for item in items:
        item.calls = {s for line in item.lines[1:] for s in _SYMBOL_RE.findall(line) if s in names} - {item.name}
    return lines[:start], items


def _closure(root: str, by_name: dict[str, Item]) -> list[str]:
    seen, work = [root], [root]
    while work:
        for callee in sorted(by_name[work.pop()].calls):
            if callee not in seen:
                seen.append(callee)
                work.append(callee)
    return seen


NEVER = 1 << 62   # a threshold no module reaches


def min_bytes(variable: str, default: int, parts: int) -> int:
    """The smallest module worth cutting into `parts` run side by side: $`variable` when it
    is a whole number (0: every module), else `default` on a machine with `parts` cores or
    more, else never (the parts would run one after the other).  Both cuts read it: this
    module's (KINA_SPLIT_BYTES) and the -O2 LLVM stage's (llvm_stage, KINA_LLVM_SPLIT_BYTES)."""
    setting = os.environ.get(variable, "").strip()
    if setting.isdigit():
        return int(setting)
    return default if len(os.sched_getaffinity(0)) >= parts else NEVER


def split_min_bytes(backend: str = "tools", rebuilding: bool = False) -> int:
    """The smallest module `backend` ("tools" or "engine": pipelines.Pipeline.backend) builds
    in parts: KINA_SPLIT_BYTES, else SPLIT_MIN_BYTES for the backends of SPLIT_BACKENDS (any
    backend in a process that builds again: `rebuilding`) on a machine with PARTS cores or
    more, else never."""
    return min_bytes(SPLIT_ENV, SPLIT_MIN_BYTES if backend in SPLIT_BACKENDS or rebuilding else NEVER, PARTS)


def split_module(text: str, backend: str = "tools", parts: int = PARTS, rebuilding: bool = False) -> list[str] | None:
    """The emitted module as up to `parts` modules (each exported function in exactly one,
    as an export; the functions it calls copied in as private), or None when it is one part:
    too small for `backend` (split_min_bytes), one exported function, or not the emitter's layout."""
    if len(text) < split_min_bytes(backend, rebuilding):
        return None
    parsed = parse_items(text)
    if parsed is None:
        return None
    header, items = parsed
    by_name = {item.name: item for item in items}
    roots = [item.name for item in items if not item.private]
    if len(roots) < 2:
        return None
    closures = {r: _closure(r, by_name) for r in roots}
    weight = {r: sum(by_name[n].size for n in closures[r]) for r in roots}
    # Longest first, each to the lightest part so far: every root's weight counts its whole
    # closure, since --inline copies each callee into every caller.
    loads = [0] * parts
    owned: list[list[str]] = [[] for _ in range(parts)]
    for r in sorted(roots, key=lambda r: -weight[r]):
        k = loads.index(min(loads))
        owned[k].append(r)
        loads[k] += weight[r]
    owned = [o for o in owned if o]
    if len(owned) < 2:
        return None
    return [_part_text(header, items, group, closures) for group in owned]


def _part_text(header: list[str], items: list[Item], roots: list[str], closures: dict[str, list[str]]) -> str:
    wanted = {n for r in roots for n in closures[r]}
    chunks = []
    for item in items:     # in the module's order
        if item.name in wanted:
            chunks.append("\n".join(item.in_part(item.name in roots)))
    return "\n".join(header) + "\nmodule {\n" + "\n\n".join(chunks) + "\n}\n"
