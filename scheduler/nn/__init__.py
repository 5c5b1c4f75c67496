"""Neural-network layers with tinygrad's names: Linear, Conv2d, BatchNorm (BatchNorm2d), LayerNorm, Embedding.

Each layer is a plain object holding its parameters as Tensors and computing its output when called;
`nn.state` finds the parameters by attribute path. `nn.optim` holds the optimizers.
"""
from __future__ import annotations
import math
from typing import Optional
from scheduler.tensor import Tensor
from scheduler.dtype import dtypes
from scheduler.helpers import make_tuple
from scheduler.nn import optim, state  # noqa: F401


def _weight_and_bias(weight_shape: tuple, with_bias: bool, fan_in: int) -> tuple[Tensor, Optional[Tensor]]:
  """Both drawn from U(-1/sqrt(fan_in), 1/sqrt(fan_in)), weight first; the bias has weight_shape[0] entries."""
  limit = 1.0 / math.sqrt(fan_in)
  weight = Tensor.uniform(*weight_shape, low=-limit, high=limit)
  return weight, (Tensor.uniform(weight_shape[0], low=-limit, high=limit) if with_bias else None)


def _affine(shape: tuple, enabled: bool) -> tuple[Optional[Tensor], Optional[Tensor]]:
  """(scale, shift) starting as the identity transform, or (None, None)."""
  return (Tensor.ones(*shape), Tensor.zeros(*shape)) if enabled else (None, None)


class Linear:
  """y = x @ weight.T + bias, weight of shape (out_features, in_features)."""
  def __init__(self, in_features: int, out_features: int, bias: bool = True):
    self.weight, self.bias = _weight_and_bias((out_features, in_features), bias, fan_in=in_features)

  def __call__(self, x: Tensor) -> Tensor: return x.linear(self.weight.transpose(), self.bias)


class Conv2d:
  """2-D convolution; weight of shape (out_channels, in_channels // groups, kh, kw)."""
  def __call__(self, x: Tensor) -> Tensor:
    return x.conv2d(self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation,
                    padding=self.padding)

  def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1, groups=1,
               bias=True):
    kh, kw = self.kernel_size = make_tuple(kernel_size, 2)
    self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
    per_group = in_channels // groups
    self.weight, self.bias = _weight_and_bias((out_channels, per_group, kh, kw), bias, fan_in=per_group * kh * kw)


class BatchNorm:
  """Normalizes over every axis but the channel axis (1). In training it uses the batch's statistics and
  moves the running ones toward them (by assign); in evaluation it uses the running statistics."""
  def __init__(self, sz: int, eps=1e-5, affine=True, track_running_stats=True, momentum=0.1):
    self.num_batches_tracked = Tensor.zeros(1, dtype=dtypes.int32, requires_grad=False)
    self.weight, self.bias = _affine((sz,), affine)
    if track_running_stats:
      self.running_mean = Tensor.zeros(sz, requires_grad=False)
      self.running_var = Tensor.ones(sz, requires_grad=False)
    self.eps, self.momentum, self.track_running_stats = eps, momentum, track_running_stats

  def calc_stats(self, x: Tensor) -> tuple[Tensor, Tensor]:
    """(mean, variance) per channel: the batch's (biased variance), or the running ones in evaluation."""
    per_channel = [1, -1] + [1] * (x.ndim - 2)
    if self.track_running_stats and not Tensor.training:
      return self.running_mean, self.running_var.reshape(per_channel).expand(x.shape)
    axes = tuple(axis for axis in range(x.ndim) if axis != 1)
    mean = x.mean(axis=axes)
    centered = x - mean.detach().reshape(per_channel)
    return mean, (centered * centered).mean(axis=axes)

  def __call__(self, x: Tensor) -> Tensor:
    mean, var = self.calc_stats(x)
    if self.track_running_stats and Tensor.training:
      count = x.numel()
      unbiased = var.detach() * (count / (count - x.shape[1]))   # the running variance is the unbiased estimate
      self.running_mean.assign(self.running_mean * (1 - self.momentum) + mean.detach() * self.momentum)
      self.running_var.assign(self.running_var * (1 - self.momentum) + unbiased * self.momentum)
      self.num_batches_tracked += 1
    return x.batchnorm(self.weight, self.bias, mean, (var + self.eps).rsqrt())


BatchNorm2d = BatchNorm


class LayerNorm:
  """Normalizes over the last len(normalized_shape) axes, then scales and shifts (when affine)."""
  def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True):
    self.normalized_shape = make_tuple(normalized_shape, 1)
    self.eps = eps
    self.axis = tuple(range(-len(self.normalized_shape), 0))
    self.weight, self.bias = _affine(self.normalized_shape, elementwise_affine)

  def __call__(self, x: Tensor) -> Tensor:
    trailing = x.shape[len(x.shape) - len(self.normalized_shape):]
    if trailing != self.normalized_shape:
      raise ValueError(f"last dimensions of {x.shape} must match {self.normalized_shape}")
    normed = x.layernorm(axis=self.axis, eps=self.eps)
    if self.weight is None: return normed
    return normed * self.weight + self.bias


class Embedding:
  """Rows of `weight` picked by integer indices, computed as a one-hot product so it stays differentiable."""
  def __init__(self, vocab_size: int, embed_size: int):
    self.vocab_sz, self.embed_sz = vocab_size, embed_size
    self.weight = Tensor.glorot_uniform(vocab_size, embed_size)

  def __call__(self, idx: Tensor) -> Tensor:
    full = (*idx.shape, self.vocab_sz, self.embed_sz)
    rows = Tensor.arange(self.vocab_sz, requires_grad=False,
                         device=self.weight.device).reshape(self.vocab_sz, 1).expand(full)
    picked = rows == idx.reshape(*idx.shape, 1, 1).expand(full)
    return picked.mul(self.weight.expand(full)).sum(-2, dtype=self.weight.dtype)
