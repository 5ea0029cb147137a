"""The program generator: random well-typed Kina programs for differential testing.

Takes a seed (and a GenConfig); gives a Case (compiler/oracle/progen/case.py): parameters,
single-op lets and results, optionally under reverseMode, which `Case.source()` prints as
Kina.  Deterministic in the seed; `replay` regenerates a case from its recorded choices
(what the shrinker edits).

Public modules:
  generate  generate(seed, config) -> Case; GenConfig, DEFAULT, Choices, Gen
  case      Case, Let, Value (the program as data), module_source
  makers    MAKERS: the generator's row per surface op (tests/test_progen.py names a
            missing one), ATTR_CHOICES, VIA_AD
  motifs    MOTIFS (model-like chains), WIDE_N (the big cases' LM head)
  render    SURFACE: how each generated let is spelled in Kina; render_case

Inside: driver (build_case: a case's decisions, in order), base (the row type and shared
helpers), makers_math (rows of the elementwise math, comparison, mask, cast and index ops),
makers_scan and makers_random (the scans and sorts; the random ops), generic and
generic_calls (size-generic helpers: their bodies with symbolic shapes, and f's calls of
them at two sizes), probe (the random-value probe of a case: its random values as
results, for the bitwise check).
"""
__all__ = ["case", "generate", "makers", "motifs", "render"]
