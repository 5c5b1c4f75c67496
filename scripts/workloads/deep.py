"""Deep workloads of the corpus: graphs hundreds to thousands of nodes deep, as real models build them (issue 25).
A training step of a 64-block residual MLP (forward, backward and SGD in one graph) and the forward pass of a
24-block transformer encoder, at small widths. Fixed seeds; tests/scripts/test_workloads.py checks both against
numpy written independently (the MLP's gradients by hand)."""
from __future__ import annotations
import numpy as np
from scheduler import Tensor
from scheduler.nn.optim import SGD
from replay import replay_location

MLP_BLOCKS, MLP_WIDTH, MLP_BATCH = 64, 16, 8
ENCODER_BLOCKS, MODEL_WIDTH, HEADS, SEQUENCE = 24, 16, 2, 6


def residual_mlp_weights(rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray]]:
  scale = 0.5 / np.sqrt(MLP_WIDTH)   # small blocks: 64 residual additions stay of order one
  return [((rng.standard_normal((MLP_WIDTH, MLP_WIDTH)) * scale).astype(np.float32),
           (rng.standard_normal((MLP_WIDTH, MLP_WIDTH)) * scale).astype(np.float32)) for _ in range(MLP_BLOCKS)]


def residual_mlp_step(lr: float = 0.05) -> dict:
  """One SGD step of x -> x + relu(x @ A) @ B, 64 times, on the mean squared output; the loss and the updated
  weights of the first and last blocks."""
  rng = np.random.default_rng(31)
  x_np = rng.standard_normal((MLP_BATCH, MLP_WIDTH)).astype(np.float32)
  blocks = [(Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)) for a, b in residual_mlp_weights(rng)]
  params = [w for block in blocks for w in block]
  opt = SGD(params, lr=lr)
  with Tensor.train(), replay_location("step 0"):
    h = Tensor(x_np)
    for a, b in blocks: h = h + (h @ a).relu() @ b
    loss = (h * h).mean()
    opt.zero_grad()
    loss.backward()
    Tensor.realize(loss, *opt.schedule_step())
  return {"outputs": [blocks[0][0].numpy(), blocks[0][1].numpy(), blocks[-1][1].numpy()], "losses": [loss.item()]}


def encoder_weights(rng: np.random.Generator) -> list[dict[str, np.ndarray]]:
  d, scale = MODEL_WIDTH, 1 / np.sqrt(MODEL_WIDTH)
  def w(*shape): return (rng.standard_normal(shape) * scale).astype(np.float32)
  return [{"wq": w(d, d), "wk": w(d, d), "wv": w(d, d), "wo": w(d, d), "w1": w(d, 2 * d),
           "w2": w(2 * d, d)} for _ in range(ENCODER_BLOCKS)]


def transformer_encoder() -> dict:
  """24 post-norm encoder blocks (two-head self-attention, a GELU MLP, layer norms without affine parameters) over
  a batch of two sequences of six tokens."""
  rng = np.random.default_rng(32)
  x = Tensor(rng.standard_normal((2, SEQUENCE, MODEL_WIDTH)).astype(np.float32))
  head = MODEL_WIDTH // HEADS
  for block in encoder_weights(rng):
    w = {k: Tensor(v) for k, v in block.items()}
    def split(t): return t.reshape(2, SEQUENCE, HEADS, head).permute(0, 2, 1, 3)
    q, k, v = split(x @ w["wq"]), split(x @ w["wk"]), split(x @ w["wv"])
    attention = (q @ k.transpose(-1, -2) / np.sqrt(head)).softmax(-1) @ v
    x = (x + attention.permute(0, 2, 1, 3).reshape(2, SEQUENCE, MODEL_WIDTH) @ w["wo"]).layernorm()
    x = (x + (x @ w["w1"]).gelu() @ w["w2"]).layernorm()
  with replay_location("encoder"): return {"outputs": [x.numpy()]}
