"""One function for all of a dynamic export's products of one type (-O2, issue 25).

A dynamic export's matmuls have `?` sizes, so most of them are of one type: the scaled
StoryLM's 20 matmuls are all `tensor<?x?xf32>` products.  The transform script tiled,
peeled, packed and vectorised each on its own, and each became its own kernels through
bufferization and LLVM: half of the dynamic build's time (user CPU 6.9-8.9 s, 3.7-5.0 s
with those matmuls left as loop nests).  `share_dynamic_products` (the start of the
"@tag-for-script" slot, right after --inline) moves each f32 matmul / batch_matmul with a
dynamic result and a filled accumulator into a private function, one per (op, operand
types, fill value type): `@"kina.product.N"(a, b, empty, fill_value)` fills `empty` and
multiplies; the op and its fill become a call.  The tags that follow (parallelize.py)
then apply to each function's one product, and the script transforms it once.  The
function returns its accumulator: after bufferization `return_accumulators` (the
"@product-results" slot) makes that return the buffer argument itself (it came through the
scf.if of the packed and blocked bodies), and --drop-equivalent-buffer-results then drops
it, so each call writes the caller's buffer (no copy, no allocation; an out-parameter of
`?` sizes cannot be made at all).
A static product keeps its place: its static sizes pick its tiles, and its kernels are
merged with equal ones at the LLVM stage (llvm_stage.dedupe_kernels).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from compiler.backend.bindings import walk_ops

if TYPE_CHECKING:
    from types import ModuleType

    from mlir.ir import Module, OpView

PREFIX = "kina.product."
PRODUCTS = ("linalg.matmul", "linalg.batch_matmul")


def _shareable(mlir_ir: ModuleType, op: OpView) -> bool:
    """An f32 product with a dynamic result whose accumulator is a linalg.fill."""
    if op.name not in PRODUCTS or len(op.results) != 1:
        return False
    t = mlir_ir.RankedTensorType(op.results[0].type)
    fill = op.operands[2].owner
    return (not t.has_static_shape and str(t.element_type) == "f32"
            and getattr(fill, "name", None) == "linalg.fill")


def share_dynamic_products(mlir_ir: ModuleType, module: Module) -> int:
    """Every shareable product -> a call of its type's function; returns how many moved."""
    functions: dict[tuple[str, ...], str] = {}
    moved = 0
    for op in walk_ops(mlir_ir, module, lambda o: _shareable(mlir_ir, o)):
        fill = op.operands[2].owner
        args = [op.operands[0], op.operands[1], fill.operands[1], fill.operands[0]]
        key = (op.name, *(str(a.type) for a in args), str(op.attributes))
        if key not in functions:
            functions[key] = _define(mlir_ir, module, f"{PREFIX}{len(functions)}", op, fill)
        with mlir_ir.InsertionPoint(op), op.location:
            call = mlir_ir.Operation.create(
                "func.call", results=[op.results[0].type], operands=args,
                attributes={"callee": mlir_ir.FlatSymbolRefAttr.get(functions[key])})
        op.results[0].replace_all_uses_with(call.results[0])
        op.operation.erase()
        if not list(fill.results[0].uses):
            fill.erase()
        moved += 1
    return moved


def _define(mlir_ir: ModuleType, module: Module, name: str, op: OpView, fill: OpView) -> str:
    """The private function `name`(a, b, empty, value) -> fill(value, empty) then `op`
    (copies of both, attributes kept), at the end of the module; returns `name`."""
    types = [str(v.type) for v in (op.operands[0], op.operands[1], fill.operands[1], fill.operands[0])]
    result = str(op.results[0].type)
    params = ", ".join(f"%p{i}: {t}" for i, t in enumerate(types))
    text = (f'func.func private @"{name}"({params}) -> {result} '
            "attributes {llvm.linkage = #llvm.linkage<internal>} {\n"
            f"  return %p2 : {result}\n}}")
    parsed = mlir_ir.Module.parse(text, module.context)
    func = parsed.body.operations[0].detach_from_parent()
    module.body.append(func)
    block = func.regions[0].blocks[0]
    ret = block.operations[0]
    a, b, empty, value = block.arguments
    new_fill = fill.operation.clone(ip=mlir_ir.InsertionPoint(ret))
    new_fill.operands[0], new_fill.operands[1] = value, empty
    product = op.operation.clone(ip=mlir_ir.InsertionPoint(ret))
    product.operands[0], product.operands[1], product.operands[2] = a, b, new_fill.results[0]
    ret.operands[0] = product.results[0]
    return name


def return_accumulators(mlir_ir: ModuleType, module: Module) -> int:
    """After one-shot bufferization: each product function whose return value is its buffer
    argument 2 through scf.if results (every branch yields that argument) returns the
    argument itself; returns how many."""
    changed = 0
    for func in module.body.operations:
        if (func.operation.name != "func.func"
                or not mlir_ir.StringAttr(func.attributes["sym_name"]).value.startswith(PREFIX)):
            continue
        block = func.regions[0].blocks[0]
        ret = list(block.operations)[-1]
        accumulator = block.arguments[2]
        if ret.operands[0] != accumulator and _yields_only(mlir_ir, ret.operands[0], accumulator):
            ret.operands[0] = accumulator
            changed += 1
    return changed


def _yields_only(mlir_ir: ModuleType, value: object, accumulator: object) -> bool:
    """Whether `value` is `accumulator`, or an scf.if result each branch of which yields it."""
    if value == accumulator:
        return True
    if not isinstance(value, mlir_ir.OpResult) or value.owner.name != "scf.if":
        return False
    k = value.result_number
    return all(_yields_only(mlir_ir, list(region.blocks[0].operations)[-1].operands[k], accumulator)
               for region in value.owner.regions)
