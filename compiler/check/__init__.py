"""Stage 2, check: AST (compiler.syntax) -> typed IR (compiler.ir), with collected diagnostics.

Takes one parsed function and the signatures of the module's functions; gives its typed
IR function (or None) with every diagnostic of its body (a code, a message naming the
shapes involved, a span), and a TypeFact for every binding and sub-expression (hover,
inlay hints).  One function at a time: the incremental front end (compiler/analysis.py)
runs it per item; the module-wide rules are module_rules.

Public entry points (other packages import only these):
  check_function(fn, signatures, sizes=None) -> FunctionResult(function, diagnostics, types, calls,
                  generic, instances): a generic function symbolically, or one instantiation
  signature_of(fn, sizes=None) -> (Signature, diagnostics)
  TypeFact        one typed span (span, type, kind, name)
  literal_text    a bare number as Kina source (quick fixes)
  module_rules    first_definitions (duplicates), recursion_diagnostics, recursive_functions
  names           resolve(fn) -> Symbols (definitions, uses, calls); rename conflicts
  linking         Parts (a file's good functions), rename_parts / namer (program-wide names of
                  imported modules' functions: `layers.linear`), merge, assemble (the program a
                  build compiles: instantiations and dynamic exports)
  instances       instantiate (the instantiations a program's calls of size-generic functions
                  need), unbound_exports (generic functions bound by --size; unbound roots)
  sizes           display (`linear[M=8, K=4]`), (instance_name is core.sizes.instance_name)

Inside: expr (expressions), calls (user calls and `handle`), size_rules (sizes in a
body), literals (tensor literals), op_args (op applications and attributes), index_literals
(constant indices against their range: `index` errors), scalars (bare numbers), fold
(expressions of bare numbers only, folded to one), type_exprs (type expressions, the error
type), sizes (size expressions and the sizes of a call; symbolic Dims are core/sizes.py).
"""
from compiler.check.expr import TypeFact
from compiler.check.function import FunctionResult, Signature, check_function, signature_of
from compiler.check.scalars import literal_text

__all__ = ["FunctionResult", "Signature", "TypeFact", "check_function", "instances", "linking", "literal_text",
           "module_rules", "names", "signature_of", "sizes"]
