"""Stage 4, backend: typed IR -> MLIR text -> a host shared library (.so).

Takes a program without handles (compiler.ad.lower_handles); gives MLIR text
(emit), then an object file and a linked library through one of two back ends:
-O0, the reference lowering, runs the external tools (mlir-opt, mlir-translate, llc,
cc); -O1..-O3 run the pass pipeline through the MLIR Python bindings in a worker
process (an MLIR or LLVM abort is a diagnostic, never the caller's death), then opt and
llc.  A failing stage is a diagnostic with the Kina source location, never a traceback.

Public modules (other packages import only these; this file imports none of them, so
`import compiler.backend.threads` from the runtime stays cheap):
  emit          emit_program(program, source) -> EmitResult(text, diagnostics); LOWERINGS
  toolchain     compile_mlir(text, out_so, opt_level=..) -> CompileResult; mlir_to_llvm_ir
  pipelines     PIPELINES: the pass list of each -O level, as data
  cache         the build cache (key_for, fetch, store, source_hint, hinted_hit, clear; object_key:
                the -O2 LLVM stage's objects, one per part)
  worker        the -O2 worker started ahead of its request (prestart, take_spare)
  errors        ToolchainError, StageFailed: how every back-end stage fails
  threads       libomp: the OpenMP runtime the -O2 kernels link (the runtime preloads it)
  entry_points  the C ABI: packed_symbol / checked_symbol (the `_kina_packed_kina_f(void **)` and
                `_kina_checked_kina_f` entries of each function), their return codes (OK,
                BOUNDS_FAILED, BAD_SIZES), LAST_ERROR_SYMBOL, ABI_SYMBOL

Inside, in the order a build runs them: pipelines (the slots), fusion, transposed_operands
and math_lowering (-O2 rewrites before tagging), shared_products (a dynamic export's products of one type
moved into one function), parallelize (which matmuls and generics the script vectorises,
tiles, threads) and loop_tags (its transposes and inner reductions),
accumulate (an SGD update accumulated into a copy of the weight, during the tagging),
parallel_if (a dynamic export's threads chosen at the call), transform_library (the -O2
transform-dialect script) and transform_dynamic (its peeled parts for dynamic sizes),
block_fills (a parallel matmul's fill or weight copy per block, after the script), zero_tiles
(register tiles that start from their fill's value, the fill dropped; after bufferization),
rewrites (the Python rewrite slots),
bindings (the MLIR Python bindings, walk_ops), engine (the in-process pipeline),
worker_main (the worker process's side), mlir_opt (-O0's pass list through mlir-opt, with
the rewrite slots), llvm_stage (opt, llc, llvm-split; -O0's mlir-translate and llc), tools
(finding and running the external tools), host (the CPU -mcpu=native compiles for, read
once), alloc_cache (the -O2 heap-buffer cache linked into libraries), split (a large
emitted module cut into parts along its exports) and parts (the parts compiled side by
side, one per core, joined with the entry module's object), toolchain (the driver of both
back ends).
"""
__all__ = ["cache", "emit", "entry_points", "errors", "pipelines", "threads", "toolchain", "worker"]
