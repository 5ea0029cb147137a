"""The item split the features use: compiler.syntax.items.split_items, which is incremental
(an edit re-splits the edited item, not the file: see _incremental there), and
common_ends, the common prefix and suffix of two versions of a text.

Every whole-document feature starts from the item split (semantic-token chunks, folds,
completion's window and function names, hover's last-good answer), as does the analysis
of each edit; the split of a text is shared by all of them (tests/lsp/test_lsp_scale.py
compares the incremental split with a fresh one over random edits).
"""
from __future__ import annotations

from compiler.syntax.items import common_ends, split_items

__all__ = ["common_ends", "split_items"]
