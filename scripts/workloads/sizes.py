"""Workloads of the corpus at the sizes and dtypes real programs use, so that the compiler's size thresholds and
its dtype promotion run under capture: layers doing more than 2^20 multiply-adds (their kernels are upcast, see
`UPCAST_MIN_WORK` in scheduler/codegen/lowerer.py), kernels of more than 2^14 loop steps (built optimized, see
`SMALL_KERNEL_STEPS` in runtimes/cpu.py), reductions over more than 32768 elements (split in two kernels), and the
mixed-dtype arithmetic of image pipelines, quantized layers and half-precision inference. Fixed seeds."""
from __future__ import annotations
import numpy as np
from scheduler import Tensor, dtypes
from replay import replay_location


def large_layers() -> dict:
  """A dense layer (128x256 @ 256x96), one with extents that only 4 lanes divide (100x300 @ 300x52), one that no
  lane count divides (37x1000 @ 1000x41), a padded 3x3 convolution of 16 to 32 channels on 34x34 images, a
  row softmax over 64x2048 and the mean of 2^17 elements."""
  rng = np.random.default_rng(21)
  def t(*shape): return Tensor(rng.standard_normal(shape).astype(np.float32))
  outs = []
  for m, k, n in ((128, 256, 96), (100, 300, 52), (37, 1000, 41)):
    with replay_location(f"matmul {m}x{k}x{n}"):
      outs.append((t(m, k) @ (t(k, n) * k ** -0.5) + t(n)).relu().realize())  # scaled as initialized
  with replay_location("conv 16->32 34x34"):
    outs.append(t(2, 16, 34, 34).conv2d(t(32, 16, 3, 3) * 0.1, t(32), padding=1).realize())
  with replay_location("softmax 64x2048"): outs.append(t(64, 2048).softmax(axis=1).realize())
  with replay_location("mean of 2^17"): outs.append(t(1 << 17).mean().realize())
  return {"outputs": [o.numpy() for o in outs]}


def contrastive_loss() -> dict:
  """A CLIP-style symmetric cross-entropy over the 1024x1024 similarities of two batches of unit embeddings: the
  log-softmax of each row and of each column against the diagonal. The column one sums exp along the axis that is
  not contiguous, for 1024 outputs at once (2^20 steps: an upcast kernel)."""
  rng = np.random.default_rng(23)
  def unit(*shape):
    v = rng.standard_normal(shape).astype(np.float32)
    return Tensor(v / np.linalg.norm(v, axis=1, keepdims=True))
  images, texts = unit(1024, 64), unit(1024, 64)
  with replay_location("contrastive loss 1024"):
    logits = (images @ texts.T) * 14.3
    labels = Tensor.arange(1024)
    rows = logits.sparse_categorical_crossentropy(labels)
    columns = logits.T.sparse_categorical_crossentropy(labels)
    loss = ((rows + columns) / 2).realize()
  return {"outputs": [loss.numpy()]}


def mobile_block() -> dict:
  """A MobileNetV2-style inverted residual block on a 2x16x32x32 batch: a 1x1 expansion to 64 channels, a padded 3x3
  depthwise conv, both clamped to [0, 6] (ReLU6 as `clip`), a 1x1 projection back to 16 and the residual add."""
  rng = np.random.default_rng(24)
  def t(*shape, scale=1.0): return Tensor((rng.standard_normal(shape) * scale).astype(np.float32))
  x = t(2, 16, 32, 32)
  with replay_location("mobile inverted residual"):
    expanded = x.conv2d(t(64, 16, 1, 1, scale=0.25), t(64, scale=0.1)).clip(0, 6)
    depthwise = expanded.conv2d(t(64, 1, 3, 3, scale=0.3), padding=1, groups=64).clip(0, 6)
    out = (x + depthwise.conv2d(t(16, 64, 1, 1, scale=0.125))).realize()
  return {"outputs": [out.numpy()]}


def mixed_dtypes() -> dict:
  """Arithmetic across dtypes as programs write it: a uint8 image normalized to float32, an int8 weight times a
  uint8 activation accumulated in int32, a half-precision layer with a float32 bias, int and bool masks mixed
  with floats, a float16 result scaled by a Python int."""
  rng = np.random.default_rng(22)
  image = Tensor(rng.integers(0, 256, (3, 32, 32), dtype=np.uint8))
  mean, std = Tensor([0.485, 0.456, 0.406]).reshape(3, 1, 1), Tensor([0.229, 0.224, 0.225]).reshape(3, 1, 1)
  normalized = (image / 255 - mean) / std                                     # uint8 / int -> float32
  weights = Tensor(rng.integers(-128, 128, (64, 48), dtype=np.int8))
  activations = Tensor(rng.integers(0, 256, (48, 16), dtype=np.uint8))
  quantized = weights.cast(dtypes.int32) @ activations.cast(dtypes.int32)       # int32 accumulation
  mixed_ints = weights[:16, :16] * 3 + activations[:16, :16]                   # int8 + uint8 -> int16
  x = Tensor(rng.standard_normal((32, 64)).astype(np.float16))
  w = Tensor(rng.standard_normal((64, 24)).astype(np.float16) * 0.1)
  half_layer = (x @ w + Tensor(rng.standard_normal(24).astype(np.float32))).relu()   # half + float -> float32
  counts = Tensor(rng.integers(-5, 5, (32, 24), dtype=np.int32))
  masked = (counts > 0).where(half_layer, 0) * counts + (counts < 0) * 0.5     # bool * float, int * float
  scaled = (x * 3).sum(axis=1) + Tensor(rng.integers(0, 4, 32, dtype=np.int64))   # half * int, half + int64 -> half
  outs = [normalized, quantized, mixed_ints, half_layer, masked, scaled]
  with replay_location("mixed dtypes"): Tensor.realize(*outs)
  return {"outputs": [o.numpy() for o in outs]}
