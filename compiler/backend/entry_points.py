"""The C ABI of a Kina library: checked entry points, failed bounds checks that return, and
the library's own description of its functions (both back ends add all of it to the lowered
module; docs/compiling.md, "The C ABI").

For every exported `_mlir_ciface_kina_f(descriptors...)` of a lowered module:

- `int32_t _kina_checked_kina_f(descriptors...)` compares the sizes of every descriptor with
  the shapes `f` was compiled for (one compare per dimension) and returns 2 + i, calling
  nothing, at the first descriptor i that differs; else it calls `_mlir_ciface_kina_f` and
  returns 1 when a bounds check failed inside (the message: `_kina_last_error()`), 0 when not;
- `int32_t _kina_packed_kina_f(void **args)` reads the descriptor pointers from one array and
  returns what the checked entry returns (the Python runtime makes a one-argument call).

A failed bounds check (`cf.assert`, emit/builder.py bounds_check) lowers to a message on
stdout and abort(): it killed the process that loaded the library.  `record_failed_asserts`
rewrites each lowered assert's failure block `puts(msg); abort(); unreachable` into
`_kina_fail(msg); return`: the function returns at once (before the index is used), and
`_kina_fail` keeps the first message of the call in a thread-local slot, which the checked
entry clears before the call and reads after it.  The asserts sit in the body of the
exported function itself (never in an OpenMP region or an outlined kernel: the rewrite
checks it), so they run on the calling thread and no unwinding is needed.  A function
called by another one that failed returns its garbage results to its caller; every index
that caller uses is itself checked, so no memory outside the buffers is touched.  The
buffers the failed call allocated for intermediates are not freed (an error path).

`_kina_abi()` returns the text `abi_text` makes of the emitted functions' signatures, one
line per function (`kina_f(f32[2,3], i64[4]) -> (f32[2])`): the runtime compares the
manifest with it when loading, so a manifest that lies about a dtype, a shape or a result
count is refused by name instead of passing wrong buffers to compiled code.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from compiler.backend.errors import StageFailed
from compiler.core.sizes import Dim, Size, parse_size

if TYPE_CHECKING:
    from types import ModuleType

    from mlir.ir import Module

CIFACE_PREFIX = "_mlir_ciface_"
PACKED_PREFIX = "_kina_packed_"
CHECKED_PREFIX = "_kina_checked_"
LAST_ERROR_SYMBOL = "_kina_last_error"
ABI_SYMBOL = "_kina_abi"
FAIL_SYMBOL = "_kina_fail"
# What the checked and packed entries return.
OK = 0
BOUNDS_FAILED = 1     # a bounds check failed: _kina_last_error() says which
BAD_SIZES = 2         # BAD_SIZES + i: descriptor i (inputs, then outputs) has other sizes

_CIFACE_RE = re.compile(r"llvm\.func @(" + CIFACE_PREFIX + r"kina_[\w.$]*)\(([^)]*)\)")
# emit/program.py writes one `// kina-abi: <line>` comment before each exported function.
_ABI_COMMENT_RE = re.compile(r"^\s*// kina-abi: (.*)$", re.M)
_ABI_LINE_RE = re.compile(r"(kina_[\w$]*)(?:\[([^\]]*)\])?\((.*)\) -> \((.*)\)")
_TENSOR_TEXT_RE = re.compile(r"(\w+)\[([^\]]*)\]")


@dataclass(frozen=True)
class Tensor:
    elem: str                 # the MLIR element type (f32, i64, i8 for Bool, ...)
    shape: tuple[Dim, ...]    # ints, and size expressions in a dynamic function

    def text(self) -> str:
        return f"{self.elem}[{','.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class Signature:
    name: str                 # kina_f
    params: tuple[Tensor, ...]
    results: tuple[Tensor, ...]
    sizes: tuple[str, ...] = ()   # a dynamic function's size arguments, in order

    @property
    def tensors(self) -> tuple[Tensor, ...]:
        """The descriptors of a call: inputs, then outputs."""
        return self.params + self.results

    def text(self) -> str:
        """`kina_f(f32[2,3], i64[4]) -> (f32[2])`; `kina_g[B,T](i64[B,T + 1]) -> (f32[B])`."""
        sizes = f"[{','.join(self.sizes)}]" if self.sizes else ""
        return (f"{self.name}{sizes}({', '.join(t.text() for t in self.params)}) -> "
                f"({', '.join(t.text() for t in self.results)})")


def _tensors(text: str) -> tuple[Tensor, ...]:
    return tuple(Tensor(m[1], tuple(parse_size(d) for d in m[2].split(",") if d))
                 for m in _TENSOR_TEXT_RE.finditer(text))


def parse_abi_line(line: str) -> Signature | None:
    m = _ABI_LINE_RE.fullmatch(line.strip())
    if m is None:
        return None
    return Signature(m[1], _tensors(m[3]), _tensors(m[4]), tuple(n for n in (m[2] or "").split(",") if n))


def signatures(emitted_mlir: str) -> dict[str, Signature]:
    """The exported functions of an emitted module (compiler/backend/emit/program.py) by name:
    from its `// kina-abi:` comments, else (hand-written MLIR, static shapes) from the
    types of each exported func.func."""
    sigs = (parse_abi_line(m[1]) for m in _ABI_COMMENT_RE.finditer(emitted_mlir))
    found = {s.name: s for s in sigs if s is not None}
    for m in _EXPORTED_RE.finditer(emitted_mlir):
        if m[1] not in found:
            found[m[1]] = Signature(m[1], _static_tensors(m[2]), _static_tensors(m[3] or ""))
    return found


_EXPORTED_RE = re.compile(r"^\s*func\.func @(kina_[\w$]*)\(([^)]*)\)(?: -> (.*?))? attributes \{[^}]*llvm\.emit_c_interface",
                          re.M)
_STATIC_TENSOR_RE = re.compile(r"tensor<((?:\d+x)*)(\w+)>")


def _static_tensors(text: str) -> tuple[Tensor, ...]:
    return tuple(Tensor(m[2], tuple(int(d) for d in m[1].split("x") if d)) for m in _STATIC_TENSOR_RE.finditer(text))


def abi_text(sigs: dict[str, Signature]) -> str:
    """One line per function (Signature.text; the runtime parses it)."""
    return "".join(s.text() + "\n" for s in sigs.values())


def packed_symbol(ciface_symbol: str) -> str:
    """`_mlir_ciface_kina_f` -> `_kina_packed_kina_f` (the runtime derives it the same way)."""
    return PACKED_PREFIX + ciface_symbol[len(CIFACE_PREFIX):]


def checked_symbol(ciface_symbol: str) -> str:
    """`_mlir_ciface_kina_f` -> `_kina_checked_kina_f` (what lib.h declares)."""
    return CHECKED_PREFIX + ciface_symbol[len(CIFACE_PREFIX):]


# ---- generated LLVM-dialect text -------------------------------------------------------------
def _string_global(name: str, text: str) -> str:
    data = text.encode() + b"\0"
    escaped = "".join(chr(b) if 32 <= b < 127 and chr(b) not in '"\\' else f"\\{b:02X}" for b in data)
    return f'llvm.mlir.global private constant @{name}("{escaped}") {{addr_space = 0 : i32}} : !llvm.array<{len(data)} x i8>'


# `_kina_fail` is internal to a library built as one module; a library built in parts
# (compiler/backend/split.py) defines it once, in its entry module, where the parts' failed
# asserts call it (each part declares it: PART_DECLARATIONS).
_RUNTIME = f"""\
llvm.mlir.global internal thread_local @_kina_error() {{addr_space = 0 : i32}} : !llvm.ptr {{
  %0 = llvm.mlir.zero : !llvm.ptr
  llvm.return %0 : !llvm.ptr
}}
llvm.func LINKAGE@{FAIL_SYMBOL}(%msg: !llvm.ptr) {{
  %slot = llvm.mlir.addressof @_kina_error : !llvm.ptr
  %old = llvm.load %slot : !llvm.ptr -> !llvm.ptr
  %null = llvm.mlir.zero : !llvm.ptr
  %first = llvm.icmp "eq" %old, %null : !llvm.ptr
  llvm.cond_br %first, ^keep, ^done
^keep:
  llvm.store %msg, %slot : !llvm.ptr, !llvm.ptr
  llvm.br ^done
^done:
  llvm.return
}}
llvm.func @{LAST_ERROR_SYMBOL}() -> !llvm.ptr {{
  %slot = llvm.mlir.addressof @_kina_error : !llvm.ptr
  %msg = llvm.load %slot : !llvm.ptr -> !llvm.ptr
  llvm.return %msg : !llvm.ptr
}}
llvm.func @{ABI_SYMBOL}() -> !llvm.ptr {{
  %text = llvm.mlir.addressof @_kina_abi_text : !llvm.ptr
  llvm.return %text : !llvm.ptr
}}"""


def _checked_entry(ciface: str, sig: Signature) -> list[str]:
    """`_kina_checked_kina_f(sizes..., descriptors...)`: the checks of the sizes and of
    every descriptor's sizes, then the call with a cleared error slot."""
    n, k = len(sig.tensors), len(sig.sizes)
    params = ", ".join([f"%z{j}: i64" for j in range(k)] + [f"%d{i}: !llvm.ptr" for i in range(n)])
    lines = [f"llvm.func @{checked_symbol(ciface)}({params}) -> i32 {{"]
    ev = _Poly(lines, {name: f"%z{j}" for j, name in enumerate(sig.sizes)})
    for j in range(k):                       # every size >= 1
        lines += [f"  %zbad{j} = llvm.icmp \"slt\" %z{j}, {ev.value(1)} : i64"]
        lines += _fail_if(f"%zbad{j}", BAD_SIZES + n + j, f"z{j}")
    for i, t in enumerate(sig.tensors):
        if not t.shape:
            continue
        bad = ""
        for d, size in enumerate(t.shape):   # sizes[d] is word 3 + d of {allocated, aligned, offset, sizes, strides}
            v = f"%s{i}_{d}"
            lines += [f"  {v}p = llvm.getelementptr %d{i}[{3 + d}] : (!llvm.ptr) -> !llvm.ptr, i64",
                      f"  {v} = llvm.load {v}p : !llvm.ptr -> i64",
                      f"  {v}ne = llvm.icmp \"ne\" {v}, {ev.value(size)} : i64"]
            if bad:
                lines.append(f"  {v}or = llvm.or {bad}, {v}ne : i1")
            bad = f"{v}or" if bad else f"{v}ne"
        lines += _fail_if(bad, BAD_SIZES + i, f"d{i}")
    args = ", ".join([f"%z{j}" for j in range(k)] + [f"%d{i}" for i in range(n)])
    types = ", ".join(["i64"] * k + ["!llvm.ptr"] * n)
    lines += ["  %slot = llvm.mlir.addressof @_kina_error : !llvm.ptr",
              "  %null = llvm.mlir.zero : !llvm.ptr",
              "  llvm.store %null, %slot : !llvm.ptr, !llvm.ptr",
              f"  llvm.call @{ciface}({args}) : ({types}) -> ()",
              "  %msg = llvm.load %slot : !llvm.ptr -> !llvm.ptr",
              "  %failed = llvm.icmp \"ne\" %msg, %null : !llvm.ptr",
              "  %code = llvm.zext %failed : i1 to i32",
              "  llvm.return %code : i32", "}"]
    return lines


def _fail_if(cond: str, code: int, tag: str) -> list[str]:
    return [f"  llvm.cond_br {cond}, ^bad{tag}, ^ok{tag}", f"^bad{tag}:",
            f"  %code{tag} = llvm.mlir.constant({code} : i32) : i32",
            f"  llvm.return %code{tag} : i32", f"^ok{tag}:"]


class _Poly:
    """Emits i64 values of dimensions (constants, or polynomials of the size arguments) in
    the LLVM dialect, each computed once.  The products wrap like C's: sizes that large
    are refused by the descriptors' own sizes, which cannot match them."""

    def __init__(self, lines: list[str], sizes: dict[str, str]) -> None:
        self.lines, self.sizes = lines, sizes
        self.cache: dict[object, str] = {}

    def value(self, d: Dim) -> str:
        if d in self.cache:
            return self.cache[d]
        if isinstance(d, Size):
            terms = []
            for monomial, coeff in d.terms:
                term = self.value(coeff) if coeff != 1 or not monomial else None
                for name in monomial:
                    term = self.sizes[name] if term is None else self._op("mul", term, self.sizes[name])
                assert term is not None
                terms.append(term)
            out = terms[0]
            for term in terms[1:]:
                out = self._op("add", out, term)
        else:
            out = f"%c{len(self.lines)}"
            self.lines.append(f"  {out} = llvm.mlir.constant({int(d)} : i64) : i64")
        self.cache[d] = out
        return out

    def _op(self, op: str, a: str, b: str) -> str:
        out = f"%t{len(self.lines)}"
        self.lines.append(f"  {out} = llvm.{op} {a}, {b} : i64")
        return out


def _packed_entry(ciface: str, sig: Signature) -> list[str]:
    """`int32_t packed(void **a) { return checked(sizes..., a[0], ..., a[n-1]); }` where a
    dynamic function's sizes are the int64 array a[n] points to."""
    n, k = len(sig.tensors), len(sig.sizes)
    lines = [f"llvm.func @{packed_symbol(ciface)}(%args: !llvm.ptr) -> i32 {{"]
    for i in range(n + (1 if k else 0)):
        lines.append(f"  %p{i} = llvm.getelementptr %args[{i}] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr")
        lines.append(f"  %a{i} = llvm.load %p{i} : !llvm.ptr -> !llvm.ptr")
    for j in range(k):
        lines.append(f"  %zp{j} = llvm.getelementptr %a{n}[{j}] : (!llvm.ptr) -> !llvm.ptr, i64")
        lines.append(f"  %z{j} = llvm.load %zp{j} : !llvm.ptr -> i64")
    args = ", ".join([f"%z{j}" for j in range(k)] + [f"%a{i}" for i in range(n)])
    types = ", ".join(["i64"] * k + ["!llvm.ptr"] * n)
    lines += [f"  %r = llvm.call @{checked_symbol(ciface)}({args}) : ({types}) -> i32", "  llvm.return %r : i32", "}"]
    return lines


PART_DECLARATIONS = f"llvm.func hidden @{FAIL_SYMBOL}(!llvm.ptr)"


def entry_points_text(exported: list[tuple[str, int]], emitted_mlir: str, declare: bool = False,
                      shared: bool = False) -> str:
    """LLVM-dialect text of the runtime pieces and of the checked and packed entry of every
    (ciface symbol, number of descriptor arguments) of the lowered module; `declare`: with a
    declaration of each ciface function first (a module of its own); `shared`: with
    `_kina_fail` visible to the library's other objects (a library built in parts)."""
    sigs = signatures(emitted_mlir)
    found = []
    for ciface, n_args in exported:
        sig = sigs.get(ciface[len(CIFACE_PREFIX):])
        if sig is None or len(sig.tensors) != n_args:
            raise StageFailed("mlir-opt", f"{ciface} takes {n_args} descriptors, but the emitted module "
                                          f"declares {'no such function' if sig is None else len(sig.tensors)} "
                                          "(a compiler bug, please report it)")
        found.append((ciface, sig))
    lines = []
    if declare:
        lines += [f"llvm.func @{c}({', '.join(['i64'] * len(sig.sizes) + ['!llvm.ptr'] * len(sig.tensors))})"
                  for c, sig in found]
    lines += [_RUNTIME.replace("LINKAGE", "hidden " if shared else "internal "), _string_global("_kina_abi_text", abi_text(sigs))]
    for ciface, sig in found:
        lines += _checked_entry(ciface, sig) + _packed_entry(ciface, sig)
    return "\n".join(lines)


def add_entry_points(llvm_mlir_text: str, emitted_mlir: str) -> str:
    """The lowered (LLVM dialect) module text with its failed asserts returning and the entry
    points appended (the "tools" back end; the engine's is engine._append_packed)."""
    exported = exported_functions(llvm_mlir_text)
    body = record_failed_asserts_text(llvm_mlir_text).rstrip()
    if not body.endswith("}"):
        return llvm_mlir_text
    return body[:-1] + entry_points_text(exported, emitted_mlir) + "\n}\n"


def exported_functions(llvm_mlir_text: str) -> list[tuple[str, int]]:
    """(ciface symbol, number of descriptor arguments) of each exported function of a lowered module."""
    return [(m[1], m[2].count("!llvm.ptr")) for m in _CIFACE_RE.finditer(llvm_mlir_text)]


def add_part_runtime(llvm_mlir_text: str) -> str:
    """A part's lowered module (compiler/backend/split.py) with its failed asserts returning
    through the library's one `_kina_fail` (declared here; the entry module defines it)."""
    body = record_failed_asserts_text(llvm_mlir_text).rstrip()
    if not body.endswith("}"):
        return llvm_mlir_text
    return body[:-1] + PART_DECLARATIONS + "\n}\n"


def entry_module_text(emitted_mlir: str) -> tuple[str, list[tuple[str, int]]]:
    """The entry module of a library built in parts: every exported function's checked and
    packed entry (its ciface function declared: a part defines it), the error slot, the one
    `_kina_fail` and the ABI text; and the (ciface symbol, descriptors) it expects the parts
    to define (the build compares them with what the parts lowered)."""
    exported = [(CIFACE_PREFIX + name, len(sig.tensors)) for name, sig in signatures(emitted_mlir).items()]
    return "module {\n" + entry_points_text(exported, emitted_mlir, declare=True, shared=True) + "\n}\n", exported


# ---- failed asserts: record and return -------------------------------------------------------
# What convert-cf-to-llvm makes of a failed cf.assert, in a block of the function body
# (4 spaces: directly in an llvm.func of the module, not in a nested region).
_FAILED_ASSERT_RE = re.compile(r"^    llvm\.call @puts\((%\w+)\) : \(!llvm\.ptr\) -> \(\)\n"
                               r"    llvm\.call @abort\(\) : \(\) -> \(\)\n"
                               r"    llvm\.unreachable\n", re.M)
_FUNC_HEAD_RE = re.compile(r"^  llvm\.func (?:\w+ )*@[\w.$\"]+\(.*$", re.M)


def record_failed_asserts_text(text: str) -> str:
    """Each failed-assert block `puts(msg); abort()` of a function returning nothing ->
    `_kina_fail(msg); return` (text form; see the module docstring)."""
    heads = [(m.start(), m[0]) for m in _FUNC_HEAD_RE.finditer(text)]

    def replace(m: re.Match[str]) -> str:
        head = next((h for start, h in reversed(heads) if start < m.start()), "")
        if ") -> " in head.split(" attributes ")[0]:
            return m[0]    # a function with a result: keep the abort (no lowering produces one)
        return f"    llvm.call @{FAIL_SYMBOL}({m[1]}) : (!llvm.ptr) -> ()\n    llvm.return\n"

    return _FAILED_ASSERT_RE.sub(replace, text)


def record_failed_asserts(mlir_ir: ModuleType, module: Module) -> int:
    """The same rewrite on a module through the bindings (the "engine" back end); returns
    the number of asserts rewritten."""
    count = 0
    for func in module.body.operations:
        if func.operation.name != "llvm.func" or not str(func.attributes["function_type"]).startswith(
                "!llvm.func<void "):
            continue
        for block in func.regions[0].blocks:
            ops = list(block.operations)
            for k in range(1, len(ops) - 1):
                if _is_call(mlir_ir, ops[k], "abort") and _is_call(mlir_ir, ops[k - 1], "puts") \
                        and ops[k + 1].operation.name == "llvm.unreachable":
                    ops[k - 1].attributes["callee"] = mlir_ir.FlatSymbolRefAttr.get(FAIL_SYMBOL)
                    with mlir_ir.InsertionPoint(ops[k]), ops[k].location:
                        mlir_ir.Operation.create("llvm.return")
                    ops[k + 1].operation.erase()
                    ops[k].operation.erase()
                    count += 1
    return count


# ---- the glue is not optimised -----------------------------------------------------------------
# The C-interface wrapper of a large function unpacks dozens of descriptors and passes
# hundreds of scalars in one basic block: llc -O2 spent 0.10 of its 1.27 s on the GPT
# block's gradient's wrapper alone (instruction selection), 0.19 s on all of its wrappers.
# Optimised, they save a few loads per call; at -O0 (optnone: fast instruction selection)
# they take 0.04 s.  `noinline` goes with it (LLVM requires it) and keeps opt from
# inlining the wrapped function into its wrapper, a second copy of it to compile.
GLUE_PREFIXES = (CIFACE_PREFIX, CHECKED_PREFIX, PACKED_PREFIX)
GLUE_ATTRIBUTES = ("noinline", "optnone")


def mark_glue(mlir_ir: ModuleType, module: Module) -> int:
    """Every entry wrapper of the lowered module (GLUE_PREFIXES) compiled without
    optimisation (GLUE_ATTRIBUTES as LLVM function attributes); returns how many."""
    attrs = mlir_ir.ArrayAttr.get([mlir_ir.StringAttr.get(a) for a in GLUE_ATTRIBUTES])
    count = 0
    for func in module.body.operations:
        if func.operation.name != "llvm.func" or len(func.regions[0].blocks) == 0:
            continue
        if mlir_ir.StringAttr(func.attributes["sym_name"]).value.startswith(GLUE_PREFIXES):
            func.attributes["passthrough"] = attrs
            count += 1
    return count


def _is_call(mlir_ir: ModuleType, op: object, callee: str) -> bool:
    operation = op.operation  # type: ignore[attr-defined]   # an OpView of the bindings
    return bool(operation.name == "llvm.call" and "callee" in operation.attributes
                and mlir_ir.FlatSymbolRefAttr(operation.attributes["callee"]).value == callee)
