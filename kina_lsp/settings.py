"""Server settings: `kina.diagnostics.debounceMs`, `kina.inlayHints.enabled`,
`kina.inlayHints.parameterNames` (parameter names at calls of user functions),
`kina.validate.optLevel` (the level Build & validate builds at, 0-3; unset: the
server's $KINA_OPT_LEVEL, else 0), `kina.requests.budgetMs` (how long a request waits for the analysis of an edit
before it is answered without it; not an editor setting, clients may pass it in
initializationOptions).

Values come from initializationOptions and from workspace/configuration
(section "kina"); both may be nested (`{"diagnostics": {"debounceMs": 0}}`)
or use dotted keys (`{"diagnostics.debounceMs": 0}`), with or without the
leading `kina`, because editors spell settings both ways.
"""
from __future__ import annotations

from dataclasses import dataclass

# setting key -> (attribute, type, default); integers are clamped to [0, INT_MAX[attribute]]
SETTINGS = {
    "diagnostics.debounceMs": ("debounce_ms", int, 150),
    "inlayHints.enabled": ("inlay_hints", bool, True),
    "inlayHints.parameterNames": ("parameter_hints", bool, True),
    "requests.budgetMs": ("budget_ms", int, 75),
    "validate.optLevel": ("opt_level", int, None),
}
INT_MAX = {"debounce_ms": 5000, "budget_ms": 600_000, "opt_level": 3}


def _lookup(tree: object, dotted: str) -> object:
    """Find `a.b` in a nested or dotted-key dict; None when absent."""
    if not isinstance(tree, dict):
        return None
    if dotted in tree:
        return tree[dotted]
    head, _, rest = dotted.partition(".")
    if rest and head in tree:
        return _lookup(tree[head], rest)
    return None


@dataclass
class Settings:
    debounce_ms: int = 150
    inlay_hints: bool = True
    parameter_hints: bool = True     # `attn(q: .., k_t: ..)` at calls of user functions
    budget_ms: int = 75
    opt_level: int | None = None

    @property
    def budget(self) -> float:
        return self.budget_ms / 1000.0

    def update(self, raw: object) -> None:
        """Merge user settings; ill-typed values are ignored, not fatal."""
        if not isinstance(raw, dict):
            return
        for key, (attr, typ, _default) in SETTINGS.items():
            value = _lookup(raw, "kina." + key)
            if value is None:
                value = _lookup(raw, key)
            if value is None:
                continue
            try:
                if (typ is bool) != isinstance(value, bool):   # true is no number, 1 no boolean
                    raise ValueError(value)
                value = typ(value)
            except (TypeError, ValueError, OverflowError):
                continue
            if typ is int:
                value = max(0, min(value, INT_MAX[attr]))
            setattr(self, attr, value)
