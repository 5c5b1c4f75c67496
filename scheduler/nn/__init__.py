"""Neural-network layers with tinygrad's names: Linear, Conv1d/Conv2d, ConvTranspose1d/ConvTranspose2d, BatchNorm
(BatchNorm1d/2d/3d), LayerNorm, LayerNorm2d, GroupNorm, InstanceNorm, RMSNorm, Embedding, LSTMCell.

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


def _weight_and_bias(weight_shape: tuple, with_bias: bool, fan_in: int,
                     outputs: Optional[int] = None) -> tuple[Tensor, Optional[Tensor]]:
  """Both drawn from U(-1/sqrt(fan_in), 1/sqrt(fan_in)), weight first; the bias has `outputs` entries (by default
  weight_shape[0])."""
  limit = 1.0 / math.sqrt(fan_in)
  weight = Tensor.uniform(*weight_shape, low=-limit, high=limit)
  outputs = weight_shape[0] if outputs is None else outputs
  return weight, (Tensor.uniform(outputs, low=-limit, high=limit) if with_bias else None)


def _affine(shape: tuple, enabled: bool) -> tuple[Optional[Tensor], Optional[Tensor]]:
  """(scale, shift) starting as the identity transform, or (None, None)."""
  return (Tensor.ones(*shape), Tensor.zeros(*shape)) if enabled else (None, None)


class Linear:
  """y = x @ weight.T + bias, weight of shape (out_features, in_features)."""
  def __init__(self, in_features: int, out_features: int, bias: bool = True):
    self.weight, self.bias = _weight_and_bias((out_features, in_features), bias, fan_in=in_features)

  def __call__(self, x: Tensor) -> Tensor: return x.linear(self.weight.transpose(), self.bias)


def _kernel(kernel_size, dims: int) -> tuple:
  """An int is that size along each of `dims` axes; a tuple gives the axes (Conv2d((3,)) is a 1-D convolution)."""
  return tuple(kernel_size) if isinstance(kernel_size, (tuple, list)) else make_tuple(kernel_size, dims)


class Conv2d:
  """Convolution over the kernel's axes (2 for an int kernel_size); weight of shape
  (out_channels, in_channels // groups, *kernel_size)."""
  def __call__(self, x: Tensor) -> Tensor:
    return x.conv2d(self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation,
                    padding=self.padding)

  def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1, groups=1,
               bias=True):
    self.kernel_size = _kernel(kernel_size, 2)
    self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
    per_group = in_channels // groups
    self.weight, self.bias = _weight_and_bias((out_channels, per_group, *self.kernel_size), bias,
                                              fan_in=per_group * math.prod(self.kernel_size))


def Conv1d(in_channels: int, out_channels: int, kernel_size: int, *args, **options) -> Conv2d:
  """A convolution over one axis: inputs (batch, channels, length); the other arguments are Conv2d's."""
  return Conv2d(in_channels, out_channels, (kernel_size,), *args, **options)


class ConvTranspose2d(Conv2d):
  """The transpose of a convolution (the gradient of Conv2d with respect to its input); weight of shape
  (in_channels, out_channels // groups, *kernel_size)."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0,
               dilation=1, groups=1, bias=True):
    self.kernel_size = _kernel(kernel_size, 2)
    self.stride, self.padding, self.output_padding = stride, padding, output_padding
    self.dilation, self.groups = dilation, groups
    per_group = out_channels // groups
    self.weight, self.bias = _weight_and_bias((in_channels, per_group, *self.kernel_size), bias,
                                              fan_in=per_group * math.prod(self.kernel_size), outputs=out_channels)

  def __call__(self, x: Tensor) -> Tensor:
    return x.conv_transpose2d(self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation,
                              padding=self.padding, output_padding=self.output_padding)


def ConvTranspose1d(in_channels: int, out_channels: int, kernel_size: int, *args, **options) -> ConvTranspose2d:
  """A transposed convolution over one axis; the other arguments are ConvTranspose2d's."""
  return ConvTranspose2d(in_channels, out_channels, (kernel_size,), *args, **options)


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


BatchNorm1d = BatchNorm2d = BatchNorm3d = BatchNorm


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


class LayerNorm2d(LayerNorm):
  """LayerNorm over the channel axis of (batch, channels, height, width)."""
  def __call__(self, x: Tensor) -> Tensor:
    channels_last = x.transpose(1, -1)   # (batch, width, height, channels): normalized over the last axis
    return LayerNorm.__call__(self, channels_last).transpose(1, -1)


def _per_channel(t: Tensor, x: Tensor) -> Tensor:
  """A (channels,) tensor shaped to broadcast along axis 1 of x."""
  return t.reshape(1, -1, *([1] * (x.ndim - 2)))


class GroupNorm:
  """Normalizes each group of num_channels // num_groups channels of each sample (over the group's channels and all
  spatial positions), then scales and shifts per channel (when affine)."""
  def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
    if num_channels % num_groups:
      raise ValueError(f"GroupNorm: {num_channels} channels do not split into {num_groups} groups")
    self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
    self.weight, self.bias = _affine((num_channels,), affine)

  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 2 or x.shape[1] != self.num_channels:
      raise ValueError(f"GroupNorm expects {self.num_channels} channels on axis 1, got shape {x.shape}")
    groups = x.flatten(1).unflatten(1, (self.num_groups, -1))   # (batch, groups, the group's channels and positions)
    normed = groups.layernorm(axis=-1, eps=self.eps).reshape(x.shape)
    return normed if self.weight is None else _per_channel(self.weight, x) * normed + _per_channel(self.bias, x)


class InstanceNorm(GroupNorm):
  """GroupNorm with one group per channel: each channel of each sample normalized over its spatial positions."""
  def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True):
    super().__init__(num_features, num_features, eps, affine)


class RMSNorm:
  """x / sqrt(mean(x^2 over the last axis) + eps), computed in float32 and cast back, times weight (when affine)."""
  def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = True):
    self.eps = eps
    self.weight = Tensor.ones(dim) if elementwise_affine else None

  def __call__(self, x: Tensor) -> Tensor:
    wide = x.float()
    inverse_rms = wide.square().mean(axis=-1, keepdim=True).add(self.eps).rsqrt()
    normed = (wide * inverse_rms).cast(x.dtype)
    return normed if self.weight is None else normed * self.weight


class LSTMCell:
  """One step of an LSTM: gates i, f, g, o (in torch's order) from x @ weight_ih.T + h @ weight_hh.T (+ biases);
  c' = f * c + i * g, h' = o * tanh(c'). Called with (h, c) or None for zeros; returns (h', c')."""
  def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
    self.hidden_size = hidden_size
    def gate_weights(columns: int) -> Tensor:   # the four gates' rows stacked, U(-1/sqrt(hidden), 1/sqrt(hidden))
      return Tensor.uniform(4 * hidden_size, columns, low=-hidden_size ** -0.5, high=hidden_size ** -0.5)
    self.weight_ih, self.weight_hh = gate_weights(input_size), gate_weights(hidden_size)
    self.bias_ih = Tensor.zeros(4 * hidden_size) if bias else None
    self.bias_hh = Tensor.zeros(4 * hidden_size) if bias else None

  def __call__(self, x: Tensor, hc: Optional[tuple[Tensor, Tensor]] = None) -> tuple[Tensor, Tensor]:
    if hc is None:
      zeros = Tensor.zeros(x.shape[0], self.hidden_size, dtype=x.dtype, device=x.device, requires_grad=False)
      hc = (zeros, zeros)
    h, c = hc
    gates = x.linear(self.weight_ih.T, self.bias_ih) + h.linear(self.weight_hh.T, self.bias_hh)
    i, f, g, o = gates.chunk(4, dim=1)
    new_c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    new_h = o.sigmoid() * new_c.tanh()
    return new_h.contiguous(), new_c.contiguous()


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
