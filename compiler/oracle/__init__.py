"""The oracles: what compiled code is checked against, and the tooling that checks it.

Takes typed IR programs and compiled libraries; gives reference values and verdicts.
Everything here sits above the build (compiler/build.py): it compiles, runs and compares.

Public modules (other packages import only these):
  interp        the NumPy reference interpreter of the typed IR (NUMPY_OPS, one row per op;
                run_function(program, name, args, dtype=None); random_inputs); `kinac run`
  validate      `kinac validate`: a library against the interpreter and finite
                differences, in a child process (validate_file -> ValidationReport)
  child         the child process a library runs in (run_in_child, write_inputs, load_outputs)
  gradients     the gradient wrappers validate exports (add_gradient_wrappers) and the
                per-element finite-difference check (`--exhaustive`)
  directional   the default gradient check: central differences along random directions
  dynamic_sizes the size assignments a dynamic export is validated at (size_runs, tasks)
  tolerance     the comparison rule of results against references (compare, check_output,
                OutputCheck, TOLERANCES), shared by validate and differential
  torch_ref     a PyTorch evaluator of the typed IR (TORCH_OPS), a second reference
  differential  the differential oracle: generated programs at -O0 and -O2 against the
                interpreter in float64, PyTorch and finite differences
                (scripts/fuzz_compile.py, `make fuzz`); its VJP-export and bitwise
                random-value runs are in differential_runs
  shrink        a failing generated case -> a minimal reproducer
  kinks         where each op is not smooth (KINKS, SMOOTH_OPS: a row or a name per op):
                the rule both finite-difference checks (validate, differential) skip or
                re-draw steps that reach a kink by
  progen        the program generator (generate(seed) -> Case; one MAKERS row per op)
"""
__all__ = ["child", "differential", "directional", "dynamic_sizes", "gradients", "interp", "kinks", "progen", "shrink",
           "tolerance", "torch_ref", "validate"]
