"""Kina compiler core.

The pipeline, one module per stage (read them in this order):

  lex        text -> tokens: the terminals of grammar.lark (the parser's recovery and
             the editor features read Kina through it)
  parse      text -> AST (syntax.py) with character-offset spans        [grammar.lark]
             (item_split: the top-level items; ast_builder: the LALR parser building
             the AST; syntax_errors: errors in words; parse_recovery: all of an item's
             errors; ast_walk: children / shift over any AST)
  check      AST -> typed IR (ir.py); shape/type rules from ops.py       [diagnostics]
  autodiff   typed IR -> typed IR: `handle f(..) with reverseMode` replaced by a call of
             a generated function computing (R, g0, .., gk-1)            [VJP table]
  ir_verify  `ir.verify`: every node re-typed by its rule after the AD pass
  interp     NumPy reference interpreter of the typed IR (the oracle)    [NumPy table]
  emit_mlir  typed IR -> MLIR text (func/linalg/tensor/arith/math/cf)     [lowering table]
  pipelines  the pass pipeline of each -O level, as data (slots expanded per module)
  transform_library  the -O2 transform-dialect script (tiles, vectors, foralls, outlining)
  fusion     -O2: elementwise producers moved into their consumers (no work repeated)
  math_lowering  -O2: f32 exp as a vectorisable polynomial (no library call)
  parallelize  which ops the -O2 script vectorises, tiles and makes parallel (tags)
  threads    the script's parallel loops as OpenMP loops on libomp
  rewrites   the pipelines' Python IR rewrites (strided copies, bf16 memory as i16, scatters)
  entry_points  the packed entry points `_kina_packed_kina_f(void **)` of every library
  toolchain_errors  ToolchainError / StageFailed, raised by every back-end stage
  toolchain  MLIR text -> .so through mlir-opt / mlir-translate / llc / cc, or the -O2
             back end in a worker process (backend_worker: an LLVM abort is a diagnostic)
  engine     -O1..-O3: the pipeline through the MLIR bindings (in that worker process)
  llvm_stage LLVM's part: mlir-translate, opt, llc (a large module in halves, one per core)
  build      `kinac build`: the stages above, plus the manifest (.json) and C header (.h)
  runtime    load a .so + manifest, call functions with NumPy arrays (_fastcall.c)
  validate   compiled library vs. interpreter vs. finite differences, in a child process

  distributed, checkpoint: the same libraries on N processes (torch.distributed collectives
  on NumPy buffers, atomic checkpoints); see docs/distributed.md

Differential testing (scripts/fuzz_compile.py): progen (+ progen_ops, progen_render)
generates well-typed programs, differential checks them at -O0 and -O2 against the
interpreter in float64, torch_ref (PyTorch) and finite differences, shrink minimises
a failure.

format.py is `kinac fmt`: AST -> source in the one Kina style, comments woven back in
by position (format_emit.py) and laid out within 100 columns by layout.py.

analysis.py is the incremental front end (parse + check per function, and the
reverseMode restrictions) shared by the CLI (cli.py), `kinac build` and the
language server (kina_lsp/), so all three report the same diagnostics; each version
it analyses is a snapshot.py Snapshot (per-item results and the queries on them).
Per-op knowledge lives in one row per op per stage: ops.OPS (its typing rule in
shape_rules.py), interp.NUMPY_OPS, vjp.VJPS, emit_ops.LOWERINGS (with the rows of
emit_ops_ext.py), torch_ref.TORCH_OPS, progen_ops.MAKERS, and each stage's ATTR_CHOICES for
enum attributes (tests/test_tables.py, tests/test_progen.py); docs/internals.md says how
to add an op.
"""
