"""Reductions and what is built on them: sum/prod/max and friends, softmax, arg-max, cumulative ops,
sliding windows (pooling, convolution) and matrix products.

A mixin of `Tensor`. Every reduction goes through `_reduce` (one REDUCE_AXIS UOp). Windows are made by
`_pool` from movement ops only, so pooling and convolution are a single reduce over a view of the input.
"""
from __future__ import annotations
from typing import Optional, Sequence
from scheduler.dtype import dtypes, least_upper_dtype, sum_acc_dtype, to_dtype
from scheduler.helpers import ceildiv, flatten, make_tuple, prod, round_up
from scheduler.ops import UOp, Ops, resolve, smax, identity_element

CUMULATIVE_BLOCK = 256   # cumulative ops over longer axes work in blocks (two small reduces, not one quadratic one)


class Reduce:
  def _reduce(self, op: Ops, axis=None, keepdim=False):
    axes = () if self.ndim == 0 else tuple(self._resolve_dim(a) for a in (range(self.ndim) if axis is None else make_tuple(axis, 1)))
    reduced = self._apply_uop(UOp.r, op=op, axis=axes)
    return reduced if keepdim else reduced.reshape(tuple(s for a, s in enumerate(self.shape) if a not in axes))

  def _reduced_count(self, axis) -> int:
    """How many elements each output of a reduction over `axis` combines."""
    kept = self._reduce(Ops.ADD, axis, keepdim=True).shape
    return prod(before for before, after in zip(self.shape, kept) if resolve(before != after))

  def sum(self, axis=None, keepdim=False, dtype=None):
    """Sums accumulate in at least 32 bits (float16 sums come back as float16)."""
    total = self.cast(sum_acc_dtype(self.dtype) if dtype is None else to_dtype(dtype))._reduce(Ops.ADD, axis, keepdim)
    return total.cast(self.dtype) if dtype is None and self.dtype == dtypes.float16 else total

  def prod(self, axis=None, keepdim=False, dtype=None):
    return self.cast(self.dtype if dtype is None else to_dtype(dtype))._reduce(Ops.MUL, axis, keepdim)

  def max(self, axis=None, keepdim=False): return self._reduce(Ops.MAX, axis, keepdim)

  def min(self, axis=None, keepdim=False): return self._inverse().max(axis=axis, keepdim=keepdim)._inverse()

  def any(self, axis=None, keepdim=False): return self.bool().max(axis, keepdim)
  def all(self, axis=None, keepdim=False): return self.logical_not().any(axis, keepdim).logical_not()

  def mean(self, axis=None, keepdim=False):
    out_dtype = self.dtype if dtypes.is_float(self.dtype) else dtypes.float32
    total = self.cast(sum_acc_dtype(self.dtype)).sum(axis=axis, keepdim=keepdim)
    return total.div(self._reduced_count(axis)).cast(out_dtype)

  def var(self, axis=None, keepdim=False, correction=1):
    squared = (self - self.mean(axis=axis, keepdim=True)).square()
    return squared.sum(axis=axis, keepdim=keepdim).div(smax([0, squared._reduced_count(axis) - correction]))

  def std(self, axis=None, keepdim=False, correction=1): return self.var(axis, keepdim, correction).sqrt()

  # ***** softmax family *****

  def _shifted_exp(self, axis, dtype=None):
    """(x - max, exp of that, its sum): the max is detached, it only keeps exp from overflowing."""
    shifted = self - self.max(axis=axis, keepdim=True).detach()
    if dtype is not None: shifted = shifted.cast(to_dtype(dtype))
    exps = shifted.exp()
    return shifted, exps, exps.sum(axis=axis, keepdim=True)

  def softmax(self, axis=-1, dtype=None):
    _, exps, total = self._shifted_exp(axis, dtype)
    return exps.div(total)

  def log_softmax(self, axis=-1, dtype=None):
    shifted, _, total = self._shifted_exp(axis, dtype)
    return shifted - total.log()

  def logsumexp(self, axis=None, keepdim=False):
    top = self.max(axis=axis, keepdim=True)
    top_out = top if keepdim else (top.squeeze(axis) if axis is not None else top.reshape(()))
    return (self - top).exp().sum(axis=axis, keepdim=keepdim).log() + top_out

  def argmax(self, axis=None, keepdim=False):
    """The first position of the maximum: max over (is max) * (n, n-1, ..., 1), subtracted from n."""
    if axis is None: return self.flatten().argmax(0)
    axis = self._resolve_dim(axis)
    n = self.shape[axis]
    countdown = type(self).arange(n, 0, -1, requires_grad=False, device=self.device).reshape(n, *[1] * (self.ndim - axis - 1))
    hits = (self == self.max(axis=axis, keepdim=True)) * countdown
    return (n - hits.max(axis=axis, keepdim=keepdim)).cast(dtypes.int32)

  def argmin(self, axis=None, keepdim=False):
    flipped = ~self if dtypes.is_int(self.dtype) or self.dtype == dtypes.bool else -self
    return flipped.argmax(axis=axis, keepdim=keepdim)

  # ***** cumulative ops *****

  def _cumalu(self, axis: int, op: Ops, _include_initial=False):
    """Cumulative op along one axis: each output reduces a window over the input padded with the identity."""
    n = self.shape[axis]
    if n == 0 or op not in (Ops.ADD, Ops.MAX): raise ValueError(f"cannot cumulate {op} over an empty axis")
    padded = self.transpose(axis, -1).pad((n - int(not _include_initial), -int(_include_initial)), value=identity_element(op, self.dtype))
    windows = padded._pool((n,))
    return (windows.sum(-1) if op is Ops.ADD else windows.max(-1)).transpose(axis, -1)

  def _split_cumalu(self, axis: int, op: Ops):
    axis = self._resolve_dim(axis)
    if self.ndim == 0 or 0 in self.shape: return self
    n = self.shape[axis]
    if not isinstance(n, int) or n <= 2 * CUMULATIVE_BLOCK: return self._cumalu(axis, op)
    # within blocks, then across the blocks' totals
    blocks = self.transpose(axis, -1).pad((round_up(n, CUMULATIVE_BLOCK) - n, 0), value=identity_element(op, self.dtype))
    inside = blocks.unflatten(-1, (-1, CUMULATIVE_BLOCK))._cumalu(-1, op)
    carried = inside[..., -1]._cumalu(-1, op, _include_initial=True)
    carried = carried.unsqueeze(-1).expand(*carried.shape, inside.shape[-1])
    def back(t): return t.flatten(start_dim=-2)[..., -n:].transpose(axis, -1)
    return back(inside) + back(carried) if op is Ops.ADD else back(inside).maximum(back(carried))

  def cumsum(self, axis: int = 0): return self._split_cumalu(axis, Ops.ADD)
  def cummax(self, axis: int = 0): return self._split_cumalu(axis, Ops.MAX)

  # ***** sliding windows *****

  def _pool(self, kernel: tuple, stride=1, dilation=1):
    """Windows over the last len(kernel) axes: shape (..., *out, *kernel), built from movement ops."""
    if self.ndim < len(kernel): raise ValueError(f"can't pool {self.shape} with {kernel}")
    strides, dilations = make_tuple(stride, len(kernel)), make_tuple(dilation, len(kernel))
    lead, sizes = [None] * (self.ndim - len(kernel)), self.shape[-len(kernel):]
    if any(not resolve(d * (k - 1) + 1 <= i) for k, d, i in zip(kernel, dilations, sizes)):
      raise ValueError("kernel size cannot be greater than actual input size")
    outs = [ceildiv(i - d * (k - 1), s) for i, d, k, s in zip(sizes, dilations, kernel, strides)]
    nl = len(lead)
    if any(resolve(k > s) for k, s in zip(kernel, strides)) or any(d != 1 for d in dilations):
      # overlapping or dilated windows: repeat the input k times, then read it diagonally
      grow = [1 + int(resolve(o * s > i - d * (k - 1))) for o, s, i, d, k in zip(outs, strides, sizes, dilations, kernel)]
      spans = [i * g + d for i, g, d in zip(sizes, grow, dilations)]
      x = self.repeat([1] * nl + [ceildiv(k * span, i) for k, span, i in zip(kernel, spans, sizes)])
      x = x.shrink(tuple(lead + [(0, k * span) for k, span in zip(kernel, spans)])).reshape(lead + flatten((k, span) for k, span in zip(kernel, spans)))
      x = x.shrink(tuple(lead + flatten(((0, k), (0, o * s)) for k, o, s in zip(kernel, outs, strides))))
      x = x.reshape(lead + flatten((k, o, s) for k, o, s in zip(kernel, outs, strides)))
      x = x.shrink(tuple(lead + flatten(((0, k), (0, o), (0, 1)) for k, o in zip(kernel, outs)))).reshape(lead + flatten((k, o) for k, o in zip(kernel, outs)))
      return x.permute(*range(nl), *[nl + 2 * a + 1 for a in range(len(sizes))], *[nl + 2 * a for a in range(len(sizes))])
    # windows that do not overlap: cut the axis into (out, stride) blocks and keep the first k of each
    x = self.pad(tuple(lead + [(0, max(0, o * s - i)) for i, o, s in zip(sizes, outs, strides)]))
    x = x.shrink(tuple(lead + [(0, o * s) for o, s in zip(outs, strides)])).reshape(lead + flatten((o, s) for o, s in zip(outs, strides)))
    x = x.shrink(tuple(lead + flatten(((0, o), (0, k)) for o, k in zip(outs, kernel))))
    return x.permute(*range(nl), *[nl + 2 * a for a in range(len(sizes))], *[nl + 2 * a + 1 for a in range(len(sizes))])

  def _resolve_pool_pads(self, padding, dims: int) -> Sequence[int]:
    """Flat pads (last axis first) from an int, one pad per axis, or two per axis."""
    if isinstance(padding, int): return [padding] * (2 * dims)
    if len(padding) == 2 * dims: return padding
    if len(padding) != dims: raise ValueError(f"padding must be an int or a sequence of length {dims} or {2 * dims}, got {padding}")
    return [p for p in reversed(padding) for _ in range(2)]

  def avg_pool2d(self, kernel_size=(2, 2), stride=None, dilation=1, padding=0, count_include_pad=True):
    kernel = make_tuple(kernel_size, 2)
    pads = self._resolve_pool_pads(padding, len(kernel))
    step = kernel if stride is None else stride
    axes = tuple(range(-len(kernel), 0))
    windows = self.pad(pads)._pool(kernel, step, dilation)
    if count_include_pad: return windows.mean(axis=axes)
    return windows.sum(axis=axes) / self.ones_like().pad(pads)._pool(kernel, step, dilation).sum(axis=axes)

  def max_pool2d(self, kernel_size=(2, 2), stride=None, dilation=1, padding=0):
    kernel = make_tuple(kernel_size, 2)
    pads = self._resolve_pool_pads(padding, len(kernel))
    windows = self.pad(pads, value=dtypes.min(self.dtype))._pool(kernel, kernel if stride is None else stride, dilation)
    return windows.max(tuple(range(-len(kernel), 0)))

  def conv2d(self, weight, bias=None, groups=1, stride=1, dilation=1, padding=0, dtype=None):
    """Convolution as one reduce: input windows (bs, groups, cin, 1, *out, *k) times weights, summed over cin and k."""
    (bs, channels), (cout, cin), kernel = self.shape[:2], weight.shape[:2], weight.shape[2:]
    if groups * cin != channels or self.ndim != weight.ndim:
      raise ValueError(f"input shape {self.shape} does not match the shape of the weights {weight.shape} ({groups * cin} vs. {channels})")
    windows = self.pad(self._resolve_pool_pads(padding, len(kernel)))._pool(kernel, stride, dilation)
    per_group, out = cout // groups, windows.shape[2:-len(kernel)]
    nk, no = len(kernel), len(out)
    x = windows.reshape(bs, groups, cin, 1, *out, *kernel).expand(bs, groups, cin, per_group, *out, *kernel)
    x = x.permute(0, 1, 3, *[4 + a for a in range(no)], 2, *[4 + no + a for a in range(nk)])
    products = x * weight.reshape(1, groups, per_group, *[1] * no, cin, *kernel)
    result = products.sum([-1 - a for a in range(1 + no)], keepdim=True, dtype=dtype).reshape(bs, cout, *out)
    return result if bias is None else result.add(bias.reshape(1, -1, *[1] * nk))

  # ***** products *****

  def dot(self, w, dtype=None):
    """Matrix product by broadcast multiply and sum over the shared axis."""
    if self.ndim == 0 or w.ndim == 0: raise RuntimeError(f"both tensors need to be at least 1D, got {self.ndim}D and {w.ndim}D")
    w_axis = -min(w.ndim, 2)
    if self.shape[-1] != w.shape[w_axis]: raise RuntimeError(f"cannot dot {self.shape} and {w.shape}")
    spacer = [1] * min(self.ndim - 1, w.ndim - 1, 1)
    x = self.reshape(*self.shape[:-1], *spacer, self.shape[-1])
    w = w.reshape(*w.shape[:-2], *spacer, *w.shape[w_axis:]).transpose(-1, w_axis)
    out_dtype = least_upper_dtype(x.dtype, w.dtype) if dtype is None else to_dtype(dtype)
    return (x * w).sum(-1, dtype=dtype).cast(out_dtype)

  def matmul(self, x, reverse=False, dtype=None): return x.dot(self, dtype=dtype) if reverse else self.dot(x, dtype=dtype)
  def __matmul__(self, x): return self.matmul(x)
  def __rmatmul__(self, x): return self.matmul(x, True)

  def linear(self, weight, bias: Optional = None):
    out = self.mul(weight) if weight.ndim == 1 else self.dot(weight)
    return out if bias is None else out.add(bias)
