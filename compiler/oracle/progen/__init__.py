"""The program generator: random well-typed Kina programs for differential testing.

Takes a seed (and a GenConfig); gives a Case (compiler/oracle/progen/case.py): parameters,
single-op lets and results, optionally under reverseMode, which `Case.source()` prints as
Kina.  Deterministic in the seed; `replay` regenerates a case from its recorded choices
(what the shrinker edits).

Public modules:
  generate  generate(seed, config) -> Case; GenConfig, DEFAULT, Choices, Gen
  case      Case, Let, Value (the program as data), module_source
  makers    MAKERS: the generator's row per surface op (tests/test_progen.py names a
            missing one), MOTIFS (model-like shapes), ATTR_CHOICES, VIA_AD
  render    SURFACE: how each generated let is spelled in Kina; render_case

Inside: base (the row type and shared helpers), makers_math (rows of the elementwise math,
comparison, mask, cast and index ops), generic and generic_calls (size-generic helpers:
their bodies with symbolic shapes, and f's calls of them at two sizes), probe (the
random-value probe of a case: its random values as results, for the bitwise check).
"""
__all__ = ["case", "generate", "makers", "render"]
