"""Tensors an elementwise op reads through, not as tensors: a literal's fill (one value
everywhere: the op reads the scalar) and a broadcast (the op reads the broadcast's source
through the broadcast's map).

The emitter records each as it writes it (`FnEmitter.filled`, `ops.lower_broadcast`);
`FnEmitter.map_elementwise` asks `operand` what to read for each of its inputs; and `prune`
drops from the function's lines every recorded op that nothing reads any more, so it is
neither lowered nor run.  The result is what -O2's elementwise fusion (compiler/backend/
fusion.py) made of such pairs, now at every level from the start: `x * 0.5` at -O2 took a
fill of x's size and a second read of it (0.33 ms on a [256, 2048] x; 0.12 as a scalar),
and at -O0 each bias add or LayerNorm statistic wrote its broadcast in full first.  An op
of another kind (a matmul, a reduction's init) still reads the tensor, which then stays.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

_SSA_NAME = re.compile(r"%[\w.$-]+")   # an SSA value's name (a use `%r#1` names `%r`)
# What an elementwise op reads for one input: (tensor, its type, its map results over the
# op's loops), or the name of a scalar.
Read = Any


@dataclass
class Folded:
    splats: dict[str, str] = field(default_factory=dict)      # a fill's name -> its scalar's
    views: dict[str, tuple[str, Any, list[int | str]]] = field(default_factory=dict)  # a broadcast's
    _lines: dict[str, tuple[int, int]] = field(default_factory=dict)   # op -> its lines [start, end)

    def splat(self, name: str, scalar: str, lines: tuple[int, int]) -> None:
        """`name`, made by lines [start, end) of the function (its init included), holds
        `scalar` everywhere."""
        self.splats[name] = scalar
        self._lines[name] = lines

    def broadcast(self, name: str, source: str, source_t: Any, reads: list[int | str],
                  lines: tuple[int, int]) -> None:
        """`name` is `source` broadcast, element d of it reading `source` at `reads` (map
        results over its dims, 0 on an expanded unit axis).  A broadcast of a splat is that
        splat; of another broadcast, a broadcast of that one's source."""
        if source in self.splats:
            self.splat(name, self.splats[source], lines)
            return
        if source in self.views:
            source, source_t, inner = self.views[source]
            reads = [r if isinstance(r, int) else reads[int(r[1:])] for r in inner]
        self.views[name] = (source, source_t, reads)
        self._lines[name] = lines

    def operand(self, value: str, t: Any, identity: list[str]) -> Read:
        """What an elementwise op over `identity`'s loops reads for its input `value`."""
        if value in self.splats:
            return self.splats[value]
        if value in self.views:
            return self.views[value]
        return (value, t, identity)

    def prune(self, lines: list[str]) -> list[str]:
        """`lines` without the recorded ops no line reads (transitively: a broadcast of a
        fill that no op reads any more frees the fill)."""
        if not self._lines:
            return lines
        uses = Counter(_SSA_NAME.findall("\n".join(lines)))   # counted once, then less each dead op's
        dead: set[str] = set()
        gone: set[int] = set()        # the dead ops' line numbers
        while True:
            more = {name for name in self._lines if name not in dead and uses[name] == 1}   # its definition only
            if not more:
                return [line for i, line in enumerate(lines) if i not in gone]
            dead |= more
            for name in more:
                start, end = self._lines[name]
                gone.update(range(start, end))
                uses.subtract(_SSA_NAME.findall("\n".join(lines[start:end])))
