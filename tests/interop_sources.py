"""The Kina functions the interop tests differentiate through PyTorch and JAX (an MLP, the
decoder block of examples/decoder_block.kina, a gather embedding whose VJP scatters), and
their PyTorch twins.  `dtype`: "F32", or "F64" for float64 gradchecks (the same source)."""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DECODER = ROOT / "examples" / "decoder_block.kina"
# the same block without imports: std's layers are F32 only, the F64 gradcheck needs its own
DECODER_STANDALONE = ROOT / "tests" / "fixtures" / "interop" / "decoder_block_standalone.kina"

MLP = """
fn mlp(x: Tensor[F32, [4, 3]], w1: Tensor[F32, [3, 5]], b1: Tensor[F32, [5]], w2: Tensor[F32, [5, 2]])
    -> Tensor[F32, [4, 2]] {
  let h = x @ w1 in
  let b_row = b1.reshape([1, 5]) in
  let b = b_row.broadcast([4, 5]) in
  let hb = h + b in
  let a = hb.tanh() in
  let y = a @ w2 in
  y
}
"""

EMBED = """
fn embed(emb: Tensor[F32, [8, 4]], ids: Tensor[I64, [2, 3]], w: Tensor[F32, [2, 3, 4]]) -> Tensor[F32, [2, 3, 4]] {
  let x = gather(emb, ids) in
  let y = x * w in
  y
}
"""


def source(text: str, dtype: str = "F32") -> str:
    return text.replace("F32", dtype)


def decoder(dtype: str = "F32") -> str:
    """The example (which imports std) in F32; its standalone twin in another dtype."""
    return DECODER.read_text() if dtype == "F32" else source(DECODER_STANDALONE.read_text(), dtype)


DECODER_PARAMS = ["x", "ln1_g", "ln1_b", "wq", "wk", "wv", "wo", "ln2_g", "ln2_b", "w_up", "w_down"]
DECODER_SHAPES = {"x": (2, 4, 8), "ln1_g": (8,), "ln1_b": (8,), "wq": (8, 8), "wk": (8, 8), "wv": (8, 8),
                  "wo": (8, 8), "ln2_g": (8,), "ln2_b": (8,), "w_up": (8, 16), "w_down": (16, 8)}


def torch_mlp(torch, x, w1, b1, w2):
    return torch.tanh(x @ w1 + b1) @ w2


def torch_embed(torch, emb, ids, w):
    return torch.nn.functional.embedding(ids, emb) * w


def torch_block(torch, x, ln1_g, ln1_b, wq, wk, wv, wo, ln2_g, ln2_b, w_up, w_down):
    """examples/decoder_block.kina's `block` in torch.nn.functional (B=2, T=4, D=8, H=2)."""
    F = torch.nn.functional
    B, T, D, H = 2, 4, 8, 2

    def heads(a):
        return a.reshape(B, T, H, D // H).permute(0, 2, 1, 3)
    n1 = F.layer_norm(x, (D,), ln1_g, ln1_b, eps=1e-5)
    ctx = F.scaled_dot_product_attention(heads(n1 @ wq), heads(n1 @ wk), heads(n1 @ wv), is_causal=True)
    h = x + ctx.permute(0, 2, 1, 3).reshape(B, T, D) @ wo
    return h + F.gelu(F.layer_norm(h, (D,), ln2_g, ln2_b, eps=1e-5) @ w_up) @ w_down
