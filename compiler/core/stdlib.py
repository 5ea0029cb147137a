"""Where the standard library's modules are (compiler/std/), and their names: the import
search (compiler/modules/search.py) looks there last, and the checker names them when a call
such as `nn.linear(..)` uses one that the file does not import."""
from __future__ import annotations

import functools
from pathlib import Path

STD_DIR = str(Path(__file__).resolve().parent.parent / "std")


@functools.cache
def std_modules() -> frozenset[str]:
    """The names `import NAME` finds in the standard library: `nn`, `losses`, ..."""
    return frozenset(p.stem for p in Path(STD_DIR).glob("*.kina"))
