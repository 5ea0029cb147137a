"""NumPy / PyTorch names that are not Kina ops, and how Kina spells them.

An unknown op or function whose name is here (`x.sum(dim=1)`, `torch.cat`'s
`cat(...)`, `x.T`) gets a note naming the Kina op to use instead of a
"did you mean" guess (`sum` is close to `sub`, which is no help).
docs/language.md's "From PyTorch to Kina" table lists the same spellings
(tests/test_check.py checks that every entry is there).
"""
from __future__ import annotations

from compiler.core.diagnostics import Note

_REDUCE = "`x.reduce_keep(op={op}, axis=i)` (keeps axis i with size 1; reduce several axes one at a time)"
_RESHAPE = "`x.reshape([..])` with the whole target shape"
_BROADCAST = "`x.broadcast([..])` (expands axes of size 1 to the target shape)"
_CAT = "`concat(a, b, axis=i)`"
_MATMUL = ("`a @ b` over a shared batch prefix (`[.., M, K] @ [.., K, N]`); "
           "transpose or reshape the operands into that form")
_CAST = "`x.cast(dtype=F32)` (any float dtype; from I64 or Bool too)"
_LITERAL = "a tensor literal: `Tensor[F32, [2, 3]] {}` (zeros) or `Tensor[F32, [2, 3]] { 1.0 }` (a splat)"

# name -> the Kina spelling, as shown in the note.
FOREIGN: dict[str, str] = {
    "sum": _REDUCE.format(op="sum"),
    "mean": _REDUCE.format(op="mean") + "; under reverseMode use op=sum times `1.0 / n`",
    "max": _REDUCE.format(op="max") + " for a reduction, `maximum(a, b)` elementwise",
    "amax": _REDUCE.format(op="max"),
    "min": _REDUCE.format(op="min") + " for a reduction, `minimum(a, b)` elementwise",
    "amin": _REDUCE.format(op="min"),
    "argmin": "`(-x).argmax(axis=i)`",
    "multinomial": "`categorical(key, logits, axis=-1)` (one draw per row; logits = probs.log())",
    "rand": "`random_uniform(key, shape=[..])` (a key is a Tensor[I64, [2]]; split it, never reuse it)",
    "randn": "`random_normal(key, shape=[..])` (a key is a Tensor[I64, [2]]; split it, never reuse it)",
    "dropout": "`where(bernoulli(key, 1 - p, shape=[..]), x * (1 / (1 - p)), 0.0)` with a fresh key per step",
    "T": "`x.transpose([1, 0])` (the permutation lists every axis)",
    "mT": "`x.transpose([.., -1, -2])` (the permutation lists every axis)",
    "t": "`x.transpose([1, 0])`",
    "permute": "`x.transpose([..])`",
    "swapaxes": "`x.transpose([..])` (the permutation lists every axis)",
    "view": _RESHAPE,
    "flatten": _RESHAPE,
    "unflatten": _RESHAPE,
    "squeeze": _RESHAPE,
    "unsqueeze": _RESHAPE,
    "expand_dims": _RESHAPE,
    "expand": _BROADCAST,
    "expand_as": _BROADCAST,
    "broadcast_to": _BROADCAST,
    "repeat": _BROADCAST + " or `concat`",
    "tile": _BROADCAST + " or `concat`",
    "cat": _CAT,
    "concatenate": _CAT,
    "stack": "`concat` of operands reshaped to have a unit axis: `concat(a.reshape([1, ..]), b.reshape([1, ..]), axis=0)`",
    "einsum": _MATMUL,
    "mm": _MATMUL,
    "bmm": _MATMUL,
    "dot": _MATMUL,
    "tensordot": _MATMUL,
    "linear": "`x @ w` plus a broadcast bias: `x @ w + b.broadcast([..])`",
    "index_select": "`gather(table, ids)` (rows of a [V, D] table)",
    "embedding": "`gather(table, ids)` (rows of a [V, D] table)",
    "take_along_dim": "`x.take_along_axis(idx, axis=i)`",
    "take": "`gather(table, ids)` (rows of a [V, D] table), or `x.take_along_axis(idx, axis=i)` (one pick per row)",
    "masked_fill": "`where(mask, value, x)` (a bare number value takes x's type)",
    "clip": "`x.clamp(min=a, max=b)`",
    "absolute": "`x.abs()`",
    "power": "`x.pow(p=2.0)` (a static exponent)",
    "float_power": "`x.pow(p=2.0)` (a static exponent)",
    "silu": "`x * x.sigmoid()`",
    "swish": "`x * x.sigmoid()`",
    "leaky_relu": "`maximum(x, 0.01 * x)`",
    "layer_norm": ("composition: mean and variance with `reduce_keep(op=mean, axis=-1)`, then `rsqrt` "
                   "(see examples/decoder_block.kina)"),
    "rms_norm": "composition: `x * ((x * x).reduce_keep(op=mean, axis=-1) + eps).rsqrt().broadcast([..])`",
    "cross_entropy": "`-logits.log_softmax(axis=-1).take_along_axis(targets, axis=-1)`, then a mean",
    "nll_loss": "`-logp.take_along_axis(targets, axis=-1)`, then a mean",
    "arange": "`iota(shape=[n], axis=0)` (I64; `.cast(dtype=F32)` for floats)",
    "triu": "`x - x.tril(k=-1)` (tril keeps the lower triangle)",
    "zeros": _LITERAL,
    "ones": _LITERAL,
    "full": _LITERAL,
    "zeros_like": _LITERAL,
    "ones_like": _LITERAL,
    "full_like": _LITERAL,
    "empty": _LITERAL,
    "astype": _CAST,
    "to": _CAST,
    "type": _CAST,
    "float": _CAST,
    "half": "`x.cast(dtype=F16)`",
    "bfloat16": "`x.cast(dtype=BF16)`",
    "double": "`x.cast(dtype=F64)`",
    "norm": "`(x * x).reduce_keep(op=sum, axis=i).sqrt()`",
}

RETURN_MESSAGE = "Kina bodies end with an expression; drop `return`"


def foreign_note(name: str) -> tuple[Note, ...]:
    """The note for a NumPy/PyTorch name (empty when the name is not one)."""
    spelling = FOREIGN.get(name)
    if spelling is None:
        return ()
    return (Note(f"`{name}` is not a Kina op; Kina spells it {spelling}"),)
