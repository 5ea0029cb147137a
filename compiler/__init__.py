"""Kina compiler core: one package per stage (docs/internals.md has the map and the layers).

  core         the shared vocabulary: types (dtypes, tensor types), diagnostics (spans,
               codes, collected diagnostics)
  syntax       text -> AST with character-offset spans      [grammar.lark, error recovery]
  ir           the typed IR, the op table (one row per op: its shape rule), the verifier
  check        AST -> typed IR, with collected diagnostics naming the shapes involved
  ad           typed IR -> typed IR: `handle f(..) with reverseMode` replaced by a call of
               a generated function computing (R, g0, .., gk-1)       [VJP table]
  backend      typed IR -> MLIR text [lowering table] -> .so: the pass pipeline of each -O
               level, the -O2 transform script and rewrites, the worker, LLVM, the cache
  runtime      load a .so + manifest, call its functions with NumPy arrays (checked)
  format       `kinac fmt`
  oracle       what compiled code is checked against: the NumPy interpreter [NumPy table],
               the PyTorch reference, `kinac validate`, the program generator, the
               differential oracle and the shrinker
  distributed  the same libraries on N processes (torch.distributed), checkpoints

At the top, only the modules that join stages: analysis (+ snapshot), the incremental
front end (parse + check per function, and the reverseMode restrictions) shared by the
CLI, the build and the language server (kina_lsp/), so all three report the same
diagnostics; build, the driver (`kinac build`: .kina -> .so + manifest + C header), with
outputs (the manifest and header it writes) and build_cli (its command line); cli.

Each package's __init__ says what it takes and gives and names its public entry points;
the layering is a contract (`lint-imports`, tests/test_architecture.py).  Per-op
knowledge lives in one row per op per stage: ir.ops.OPS (its typing rule in
ir/shape_rules.py), oracle.interp.NUMPY_OPS, ad.vjp.VJPS, backend.emit.ops.LOWERINGS,
oracle.torch_ref.TORCH_OPS, oracle.progen.makers.MAKERS, and each stage's ATTR_CHOICES
for enum attributes (tests/test_tables.py); docs/internals.md says how to add an op.
"""
