"""Reductions and what is built on them: sum/prod/max and friends, softmax, arg-max, cumulative ops,
sliding windows (pooling, convolution) and matrix products.

A mixin of `Tensor`. Every reduction goes through `_reduce` (one REDUCE_AXIS UOp). Windows are made by
`_pool` from movement ops only, so pooling and convolution are a single reduce over a view of the input.
"""
from __future__ import annotations
from typing import Optional, Sequence
from scheduler.dtype import dtypes, least_upper_dtype, sum_acc_dtype, to_dtype
from scheduler.helpers import argfix, ceildiv, make_tuple, prod
from scheduler.ops import UOp, Ops, resolve, smax, identity_element

CUMULATIVE_BLOCK = 256   # cumulative ops over longer axes work in blocks (two small reduces, not one quadratic one)


class _Windows:
  """Movement ops on the last axes of a tensor whose leading axes stay as they are; per-axis arguments
  are given as one item (or a tuple of items, for axes that were split) per pooled axis."""
  def __init__(self, x, lead: int): self.x, self.lead = x, lead

  def _flat(self, per_axis: list) -> list:
    return [part for item in per_axis for part in (item if isinstance(item[0], tuple) else (item,))]

  def pad(self, per_axis: list) -> None: self.x = self.x.pad(tuple([None] * self.lead + per_axis))
  def shrink(self, per_axis: list) -> None: self.x = self.x.shrink(tuple([None] * self.lead + self._flat(per_axis)))
  def reshape(self, per_axis: list) -> None:
    self.x = self.x.reshape(tuple(self.x.shape[:self.lead]) + tuple(d for item in per_axis for d in item))

  def order(self, outer_first: bool):
    """(..., a0, b0, a1, b1, ...) -> (..., a0, a1, ..., b0, b1, ...) when outer_first,
    else (..., b0, b1, ..., a0, a1, ...)."""
    pooled = (self.x.ndim - self.lead) // 2
    firsts = [self.lead + 2 * a for a in range(pooled)]
    seconds = [self.lead + 2 * a + 1 for a in range(pooled)]
    return self.x.permute(*range(self.lead), *(firsts + seconds if outer_first else seconds + firsts))


class Reduce:
  def _reduce(self, op: Ops, axis=None, keepdim=False):
    """One REDUCE_AXIS over `axis` (all axes when None); without keepdim the reduced axes are dropped."""
    if self.ndim == 0: axes: tuple = ()
    else:
      axes = tuple(self._resolve_dim(a) for a in make_tuple(axis, 1)) if axis is not None else tuple(range(self.ndim))
    reduced = self._apply_uop(UOp.r, op=op, axis=axes)
    if keepdim: return reduced
    return reduced.reshape(tuple(extent for a, extent in enumerate(self.shape) if a not in axes))

  def _reduced_count(self, axis) -> int:
    """How many elements each output of a reduction over `axis` combines."""
    kept = self._reduce(Ops.ADD, axis, keepdim=True).shape
    return prod(before for before, after in zip(self.shape, kept) if resolve(before != after))

  # max first: min, any and all are built on it
  def max(self, axis=None, keepdim=False): return self._reduce(Ops.MAX, axis=axis, keepdim=keepdim)
  def min(self, axis=None, keepdim=False): return self._inverse().max(axis=axis, keepdim=keepdim)._inverse()
  def any(self, axis=None, keepdim=False): return self.cast(dtypes.bool).max(axis=axis, keepdim=keepdim)
  def all(self, axis=None, keepdim=False): return self.logical_not().any(axis=axis, keepdim=keepdim).logical_not()

  def sum(self, axis=None, keepdim=False, dtype=None, acc_dtype=None):
    """Sums accumulate in at least 32 bits (float16 and bfloat16 sums come back in their dtype); with `acc_dtype`
    (or `dtype`) they accumulate in that dtype and come back in it."""
    dtype = dtype if dtype is not None else acc_dtype
    accumulate = to_dtype(dtype) if dtype is not None else sum_acc_dtype(self.dtype)
    total = self.cast(accumulate)._reduce(Ops.ADD, axis=axis, keepdim=keepdim)
    narrow_back = dtype is None and self.dtype in (dtypes.float16, dtypes.bfloat16)
    return total.cast(self.dtype) if narrow_back else total

  def prod(self, axis=None, keepdim=False, dtype=None, acc_dtype=None):
    dtype = dtype if dtype is not None else acc_dtype
    as_dtype = self.dtype if dtype is None else to_dtype(dtype)
    return self.cast(as_dtype)._reduce(Ops.MUL, axis=axis, keepdim=keepdim)

  def mean(self, axis=None, keepdim=False):
    """The sum (in the accumulator dtype) divided by the count; ints average to float32."""
    total = self.cast(sum_acc_dtype(self.dtype)).sum(axis=axis, keepdim=keepdim)
    result_dtype = dtypes.float32 if not dtypes.is_float(self.dtype) else self.dtype
    return total.div(self._reduced_count(axis)).cast(result_dtype)

  def var(self, axis=None, keepdim=False, correction=1):
    deviation = self - self.mean(axis=axis, keepdim=True)
    squared = deviation.square()
    dof = smax([0, squared._reduced_count(axis) - correction])
    return squared.sum(axis=axis, keepdim=keepdim).div(dof)

  def std(self, axis=None, keepdim=False, correction=1):
    return self.var(axis=axis, keepdim=keepdim, correction=correction).sqrt()

  def std_mean(self, axis=None, keepdim=False, correction=1):
    return self.std(axis=axis, keepdim=keepdim, correction=correction), self.mean(axis=axis, keepdim=keepdim)

  def var_mean(self, axis=None, keepdim=False, correction=1):
    return self.var(axis=axis, keepdim=keepdim, correction=correction), self.mean(axis=axis, keepdim=keepdim)

  # ***** softmax family *****

  def _shifted_exp(self, axis, dtype=None):
    """(x - max, exp of that, its sum): the max is detached, it only keeps exp from overflowing."""
    peak = self.max(axis=axis, keepdim=True).detach()
    shifted = self - peak
    if dtype is not None: shifted = shifted.cast(to_dtype(dtype))
    exps = shifted.exp()
    total = exps.sum(axis=axis, keepdim=True)
    return shifted, exps, total

  def logsumexp(self, axis=None, keepdim=False):
    peak = self.max(axis=axis, keepdim=True)
    summed = (self - peak).exp().sum(axis=axis, keepdim=keepdim).log()
    if keepdim: return summed + peak
    return summed + (peak.reshape(()) if axis is None else peak.squeeze(axis))

  def softmax(self, axis=-1, dtype=None):
    parts = self._shifted_exp(axis, dtype)
    return parts[1].div(parts[2])

  def log_softmax(self, axis=-1, dtype=None):
    parts = self._shifted_exp(axis, dtype)
    return parts[0] - parts[2].log()

  def argmax(self, axis=None, keepdim=False):
    """The first position of the maximum (a NaN counts as +inf): max over (is peak) * (n, n-1, ..., 1), subtracted
    from n."""
    if axis is None: return self.reshape(-1).argmax(0)
    dim = self._resolve_dim(axis)
    n = self.shape[dim]
    countdown = type(self).arange(n, 0, -1, requires_grad=False,
                                  device=self.device).reshape(n, *([1] * (self.ndim - dim - 1)))
    # a NaN ranks as +inf: a NaN maximum equals no position, and the index would run past the axis
    key = (self != self).where(float("inf"), self) if dtypes.is_float(self.dtype) else self
    is_peak = key == key.max(axis=dim, keepdim=True)
    first = (is_peak * countdown).max(axis=dim, keepdim=keepdim)
    return (n - first).cast(dtypes.int32)

  def sort(self, dim: int = -1, descending: bool = False):
    """(values, indices) along `dim`, ascending (descending with `descending`); equal values keep their order. Each
    element's rank is the count of elements before it in the order; the sorted values are gathered by rank."""
    dim = self._resolve_dim(dim)
    x = self.transpose(dim, -1) if dim != self.ndim - 1 else self
    n = x.shape[-1]
    position = type(self).arange(n, requires_grad=False, device=self.device)
    mine, theirs = x.unsqueeze(-1), x.unsqueeze(-2)                     # (..., i, 1) against (..., 1, j)
    before = (theirs > mine) if descending else (theirs < mine)
    earlier_tie = (theirs == mine) & (position.reshape(1, n) < position.reshape(n, 1))
    rank = (before | earlier_tie).sum(-1, dtype=dtypes.int32)          # (..., i): where element i goes
    lands = rank.unsqueeze(-2) == position.reshape(n, 1)              # (..., k, i): element i lands at k
    values = lands.where(x.unsqueeze(-2), 0).sum(-1, dtype=x.dtype)
    indices = lands.where(position.reshape(1, n), 0).sum(-1, dtype=dtypes.int32)
    if dim != self.ndim - 1: values, indices = values.transpose(dim, -1), indices.transpose(dim, -1)
    return values, indices

  def topk(self, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True):
    """The k largest (smallest with largest=False) values along `dim` and their indices, in sorted order."""
    dim = self._resolve_dim(dim)
    if not 0 <= k <= self.shape[dim]:
      raise ValueError(f"topk k={k} is out of range for a dimension of {self.shape[dim]}")
    values, indices = self.sort(dim, descending=largest)
    window = tuple((0, k) if d == dim else None for d in range(self.ndim))
    return values.shrink(window), indices.shrink(window)

  def argsort(self, dim: int = -1, descending: bool = False):
    """The indices that sort the tensor along `dim` (stable: equal values keep their order)."""
    return self.sort(dim, descending)[1]

  def argmin(self, axis=None, keepdim=False):
    return self._inverse_for_order().argmax(axis=axis, keepdim=keepdim)

  def _inverse_for_order(self):
    """An order-reversing map for arg-min: ~x for ints and bools, -x for floats."""
    return ~self if (dtypes.is_int(self.dtype) or self.dtype == dtypes.bool) else -self

  # ***** cumulative ops *****

  def _cumalu(self, axis: int, op: Ops, _include_initial=False):
    """Cumulative op along one axis: output k reduces a window that ends at input k, over the input padded
    in front with n - 1 identities (with _include_initial: n identities, and the last input dropped)."""
    n = self.shape[axis]
    if n == 0 or op not in (Ops.ADD, Ops.MUL, Ops.MAX): raise ValueError(f"cannot cumulate {op} over an empty axis")
    front, back = (n, -1) if _include_initial else (n - 1, 0)
    last_axis = self.transpose(axis, -1)
    windows = last_axis.pad((front, back), value=identity_element(op, self.dtype))._pool((n,))
    reduced = windows.max(-1) if op is Ops.MAX else windows.prod(-1) if op is Ops.MUL else windows.sum(-1)
    return reduced.transpose(axis, -1)

  def cummax(self, axis: int = 0): return self._split_cumalu(axis=axis, op=Ops.MAX)
  def cummin(self, axis: int = 0):
    return self._inverse_for_order()._split_cumalu(axis=axis, op=Ops.MAX)._inverse_for_order()
  def cumsum(self, axis: int = 0): return self._split_cumalu(axis=axis, op=Ops.ADD)
  def cumprod(self, axis: int = 0): return self._split_cumalu(axis=axis, op=Ops.MUL)

  def logcumsumexp(self, axis: int = 0):
    """log of the running sum of e^x along `axis`: element i is the logsumexp of elements 0..i, each shifted by its
    own maximum (one shift for the whole axis would lose small prefixes next to a large later value)."""
    if self.ndim == 0: return self
    axis = self._resolve_dim(axis)
    x = self.transpose(axis, -1) if axis != self.ndim - 1 else self
    n = x.shape[-1]
    prefixes = x.unsqueeze(-2).expand(*x.shape[:-1], n, n)   # row i holds the whole axis; keep j <= i
    kept = type(self).ones(n, n, dtype=dtypes.bool, device=self.device).tril()
    peak = kept.where(prefixes, float("-inf")).max(-1, keepdim=True).detach()
    peak = peak.isinf().where(0, peak)   # a prefix of -inf (or +inf): shift by nothing
    out = (kept.where((prefixes - peak).exp(), 0).sum(-1, keepdim=True).log() + peak).squeeze(-1)
    return out.transpose(axis, -1) if axis != self.ndim - 1 else out

  def _split_cumalu(self, axis: int, op: Ops):
    """Long axes work in blocks: cumulate inside each block, then add (or max) the running totals of the
    blocks before it, so no window is longer than 2 * CUMULATIVE_BLOCK."""
    if 0 in self.shape or self.ndim == 0: return self
    dim = self._resolve_dim(axis)
    n = self.shape[dim]
    short = not isinstance(n, int) or n <= 2 * CUMULATIVE_BLOCK
    return self._cumalu(dim, op) if short else self._blockwise_cumulate(dim, op, n)

  def _blockwise_cumulate(self, dim: int, op: Ops, n: int):
    padded = n + (-n) % CUMULATIVE_BLOCK
    rows = self.transpose(dim, -1).pad((padded - n, 0), value=identity_element(op, self.dtype))
    within = rows.unflatten(-1, (padded // CUMULATIVE_BLOCK, CUMULATIVE_BLOCK))._cumalu(-1, op)
    totals = within[..., CUMULATIVE_BLOCK - 1]._cumalu(-1, op, _include_initial=True)   # what each block starts from
    carried = totals.reshape(*totals.shape, 1).expand(*totals.shape, CUMULATIVE_BLOCK)
    parts = [t.flatten(start_dim=-2)[..., padded - n:].transpose(dim, -1) for t in (within, carried)]
    if op is Ops.MAX: return parts[0].maximum(parts[1])
    return parts[0] * parts[1] if op is Ops.MUL else parts[0] + parts[1]

  # ***** sliding windows *****

  def _pool(self, kernel: tuple, stride=1, dilation=1):
    """Windows over the last len(kernel) axes, as shape (..., *out, *kernel), from movement ops only."""
    nk = len(kernel)
    if self.ndim < nk: raise ValueError(f"can't pool {self.shape} with {kernel}")
    lead, sizes = self.shape[:-nk], self.shape[-nk:]
    steps, gaps = make_tuple(stride, nk), make_tuple(dilation, nk)
    spans = [g * (k - 1) + 1 for k, g in zip(kernel, gaps)]            # input extent one window covers
    if not all(resolve(span <= size) for span, size in zip(spans, sizes)):
      raise ValueError("kernel size cannot be greater than actual input size")
    outs = [ceildiv(size - span + 1, step) for size, span, step in zip(sizes, spans, steps)]
    w = _Windows(self, len(lead))
    if all(not resolve(k > step) for k, step in zip(kernel, steps)) and all(g == 1 for g in gaps):
      # windows that do not overlap: cut each axis into (out, stride) blocks and keep the first k of each
      shortfall = [o * step - size for o, step, size in zip(outs, steps, sizes)]
      w.pad([(0, max(0, missing)) for missing in shortfall])
      w.shrink([(0, o * step) for o, step in zip(outs, steps)])
      w.reshape([(o, step) for o, step in zip(outs, steps)])
      w.shrink([((0, o), (0, k)) for o, k in zip(outs, kernel)])
      return w.order(outer_first=True)
    # overlapping or dilated windows: tile the input k times per axis, then read the tiles diagonally
    grow = [1 + int(resolve(o * step > size - span + 1)) for o, step, size, span in zip(outs, steps, sizes, spans)]
    rows = [size * g + gap for size, g, gap in zip(sizes, grow, gaps)]  # one tile row: the input (repeated) plus a gap
    w.x = w.x.repeat([1] * len(lead) + [ceildiv(k * row, size) for k, row, size in zip(kernel, rows, sizes)])
    w.shrink([(0, k * row) for k, row in zip(kernel, rows)])
    w.reshape([(k, row) for k, row in zip(kernel, rows)])
    w.shrink([((0, k), (0, o * step)) for k, o, step in zip(kernel, outs, steps)])
    w.reshape([(k, o, step) for k, o, step in zip(kernel, outs, steps)])
    w.shrink([((0, k), (0, o), (0, 1)) for k, o in zip(kernel, outs)])
    w.reshape([(k, o) for k, o in zip(kernel, outs)])
    return w.order(outer_first=False)

  def _resolve_pool_pads(self, padding, dims: int) -> Sequence[int]:
    """Flat pads (last axis first) from an int, one pad per axis, or two per axis."""
    if isinstance(padding, int): return [padding] * (2 * dims)
    if len(padding) == 2 * dims: return padding
    if len(padding) != dims:
      raise ValueError(f"padding must be an int or a sequence of length {dims} or {2 * dims}, got {padding}")
    return [p for p in reversed(padding) for _ in range(2)]

  def _pool_arguments(self, kernel_size, stride, dilation, padding) -> tuple[tuple, tuple, tuple, Sequence[int]]:
    """(kernel, strides, dilations, flat pads) of a pooling over the last len(kernel_size) axes (two for an int);
    the stride defaults to the kernel."""
    dims = len(kernel_size) if isinstance(kernel_size, (tuple, list)) else 2
    kernel = make_tuple(kernel_size, dims)
    steps, gaps = make_tuple(kernel if stride is None else stride, dims), make_tuple(dilation, dims)
    if not len(kernel) == len(steps) == len(gaps):
      raise ValueError(f"stride {stride} and dilation {dilation} must give one value per kernel axis {kernel}")
    return kernel, steps, gaps, self._resolve_pool_pads(padding, dims)

  def _windows_of(self, kernel_size, stride, dilation, padding, value=0.0, ceil_mode=False, ceil_value=None):
    """Pooling windows of the last len(kernel_size) axes (two for an int), padded with `value`; with ceil_mode the
    last, partial window of each axis is kept too (torch's rule: it must start inside the input or its left
    padding), the overhang filled with `ceil_value` (default `value`)."""
    kernel, steps, gaps, pads = self._pool_arguments(kernel_size, stride, dilation, padding)
    dims = len(kernel)
    padded = self.pad(pads, value=value)
    if ceil_mode:
      extra = []   # flat pads are last axis first: axis a of the window's before-pad is pads[2 * (dims - 1 - a)]
      for axis, (k, step, gap) in enumerate(zip(kernel, steps, gaps)):
        n, left = self.shape[axis - dims], pads[2 * (dims - 1 - axis)]
        span, size = gap * (k - 1) + 1, padded.shape[axis - dims]
        out = ceildiv(size - span, step) + 1
        if (out - 1) * step >= n + left: out -= 1
        extra.append(max(0, (out - 1) * step + span - size))
      overhang = value if ceil_value is None else ceil_value
      padded = padded.pad([p for e in reversed(extra) for p in (0, e)], value=overhang)
    return padded._pool(kernel, steps, gaps), tuple(range(-len(kernel), 0))

  def avg_pool2d(self, kernel_size=(2, 2), stride=None, dilation=1, padding=0, ceil_mode=False, count_include_pad=True):
    """Mean of each window. The divisor counts the padding with count_include_pad (as torch, never the overhang of
    ceil_mode's last window), else only the input's elements."""
    windows, axes = self._windows_of(kernel_size, stride, dilation, padding, ceil_mode=ceil_mode)
    if count_include_pad and not ceil_mode: return windows.mean(axis=axes)
    counted, _ = self.ones_like()._windows_of(kernel_size, stride, dilation, padding, value=1.0 if count_include_pad
                                              else 0.0,
                                              ceil_mode=ceil_mode, ceil_value=0.0)
    return windows.sum(axis=axes) / counted.sum(axis=axes)

  def max_pool2d(self, kernel_size=(2, 2), stride=None, dilation=1, padding=0, ceil_mode=False, return_indices=False):
    """The maximum of each window; with return_indices also where it is (the first one of a window), as a position
    in the flattened pooled axes of the input (torch's indices, which max_unpool2d takes)."""
    windows, axes = self._windows_of(kernel_size, stride, dilation, padding, value=dtypes.min(self.dtype),
                                     ceil_mode=ceil_mode)
    pooled = windows.max(axes)
    if not return_indices: return pooled
    spatial = self.shape[len(self.shape) - len(axes):]
    positions = type(self).arange(prod(spatial), dtype=dtypes.int32, device=self.device, requires_grad=False)
    positions = positions.reshape(spatial).expand(self.shape)
    places, _ = positions._windows_of(kernel_size, stride, dilation, padding, value=-1, ceil_mode=ceil_mode)
    flat_windows, flat_places = windows.flatten(-len(axes)), places.flatten(-len(axes))
    first = flat_windows.argmax(-1, keepdim=True)
    return pooled, flat_places.gather(-1, first).squeeze(-1)

  def max_unpool2d(self, indices, kernel_size=(2, 2), stride=None, dilation=1, padding=0, output_size=None):
    """The inverse of max_pool2d with return_indices: zeros with each pooled value put back at its index. The
    output's pooled axes are (n - 1) * stride - 2 * padding + dilation * (k - 1) + 1, or the last ones of
    `output_size`."""
    kernel, steps, gaps, pads = self._pool_arguments(kernel_size, stride, dilation, padding)
    dims = len(kernel)
    if indices.shape != self.shape:
      raise ValueError(f"max_unpool2d indices of shape {indices.shape} do not match the input's {self.shape}")
    lead, pooled = self.shape[:-dims], self.shape[-dims:]
    if output_size is None:
      out = tuple((n - 1) * step - pads[2 * (dims - 1 - a)] - pads[2 * (dims - 1 - a) + 1] + gap * (k - 1) + 1
                  for a, (n, step, gap, k) in enumerate(zip(pooled, steps, gaps, kernel)))
    else: out = tuple(output_size)[-dims:]
    lands = indices.flatten(-dims).unsqueeze(-1)._one_hot_along_dim(prod(out))   # (..., pooled, targets)
    # overlapping windows may pick one position twice: its value is put there once (a max of equal values)
    placed = lands.where(self.flatten(-dims).unsqueeze(-1), dtypes.min(self.dtype)).max(-2)
    return lands.any(-2).where(placed, 0).reshape(*lead, *out)

  def conv2d(self, weight, bias=None, groups=1, stride=1, dilation=1, padding=0, dtype=None):
    """Convolution as one reduce: input windows (bs, groups, cin, 1, *out, *k) times weights, summed over cin and k."""
    bs, channels = self.shape[:2]
    cout, cin = weight.shape[:2]
    kernel = weight.shape[2:]
    if groups * cin != channels or self.ndim != weight.ndim:
      raise ValueError(f"input shape {self.shape} does not match the shape of the weights {weight.shape} "
                       f"({groups * cin} vs. {channels})")
    if isinstance(padding, str): padding = _named_conv_padding(padding, kernel, stride, dilation)
    windows = self.pad(self._resolve_pool_pads(padding, len(kernel)))._pool(kernel, stride, dilation)
    out = windows.shape[2:2 + len(kernel)]
    per_group, no, nk = cout // groups, len(out), len(kernel)
    grouped = windows.reshape(bs, groups, cin, 1, *out, *kernel)
    spread = grouped.expand(bs, groups, cin, per_group, *out, *kernel)
    # -> (bs, groups, per_group, *out, cin, *kernel): the reduced axes last
    order = [0, 1, 3] + [4 + a for a in range(no)] + [2] + [4 + no + a for a in range(nk)]
    products = spread.permute(order) * weight.reshape(1, groups, per_group, *([1] * no), cin, *kernel)
    reduced_axes = [-(a + 1) for a in range(no + 1)]
    result = products.sum(reduced_axes, keepdim=True, dtype=dtype).reshape(bs, cout, *out)
    if bias is None: return result
    return result.add(bias.reshape(1, -1, *([1] * nk)))

  def conv_transpose2d(self, weight, bias=None, groups=1, stride=1, dilation=1, padding=0, output_padding=0):
    """The gradient of conv2d with respect to its input, as a convolution: the input spread out by `stride` (zeros
    between its elements), padded by dilation * (k - 1) - padding (plus output_padding after), convolved with the
    weights (cin, cout / groups, *k) swapped to (cout, cin / groups, *k) and flipped."""
    kernel = weight.shape[2:]
    nk = len(kernel)
    if self.ndim != weight.ndim or self.shape[1] != weight.shape[0]:
      raise ValueError(f"input shape {self.shape} does not match the shape of the weights {weight.shape}")
    steps, gaps, pads, extra = (make_tuple(v, nk) for v in (stride, dilation, padding, output_padding))
    if any(e >= max(s_, g) for e, s_, g in zip(extra, steps, gaps)):
      raise ValueError("output_padding must be smaller than stride or dilation")
    cin, per_group = weight.shape[:2]
    w = weight.reshape(groups, cin // groups, per_group, *kernel).transpose(1, 2).reshape(groups * per_group,
                                                                                          cin // groups, *kernel)
    w = w.flip(*range(2, 2 + nk))
    x, lead = self, self.ndim - nk
    for a, step in enumerate(steps):
      if step == 1: continue
      axis, n = lead + a, x.shape[lead + a]
      x = x.unsqueeze(axis + 1).pad([None] * (axis + 1) + [(0, step - 1)] + [None] * (x.ndim - axis - 1))
      x = x.flatten(axis,
                    axis + 1).shrink(tuple((0, (n - 1) * step + 1) if d == axis else None for d in range(x.ndim - 1)))
    around = [(g * (k - 1) - p, g * (k - 1) - p + e) for k, g, p, e in zip(kernel, gaps, pads, extra)]
    x = x.pad([p for pair in reversed(around) for p in pair])
    return x.conv2d(w, bias, groups=groups, dilation=dilation)

  # ***** products *****

  @staticmethod
  def einsum(formula: str, *operands, dtype=None):
    """Sums of products over named axes ("ij,jk->ik"); without "->" the output is the letters used once, in
    alphabetical order. A letter repeated in one operand takes its diagonal. `...` stands for the leading axes
    (right-aligned across operands, kept first in an implicit output); its sizes must match, not broadcast."""
    operands = argfix(*operands)
    spec = formula.replace(" ", "")
    if "." in spec: spec = Reduce._einsum_expand_ellipsis(spec, operands)
    inputs, arrow, output = spec.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(operands):
      raise ValueError(f"einsum {formula!r} names {len(terms)} operands, got {len(operands)}")
    letters = "".join(terms)
    if not all(c.isalpha() for c in letters + output):
      raise ValueError(f"einsum subscripts must be letters: {formula!r}")
    if not arrow: output = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    if len(set(output)) != len(output) or set(output) - set(letters):
      raise ValueError(f"einsum output {output!r} is not valid for {formula!r}")
    summed = sorted(set(letters) - set(output))
    order = list(output) + summed                                  # every operand is laid out along these axes
    sizes: dict[str, int] = {}
    aligned = []
    for term, t in zip(terms, operands):
      if len(term) != t.ndim:
        raise ValueError(f"einsum term {term!r} has {len(term)} letters for a tensor of {t.ndim} axes")
      t, term = Reduce._einsum_diagonals(t, term)
      for c, n in zip(term, t.shape):
        if sizes.setdefault(c, n) != n: raise ValueError(f"einsum letter {c!r} stands for sizes {sizes[c]} and {n}")
      present = [c for c in order if c in term]
      t = t.permute([term.index(c) for c in present]).reshape([sizes[c] if c in term else 1 for c in order])
      aligned.append(t)
    product = aligned[0]
    for t in aligned[1:]: product = product * t
    if not summed: return product.cast(dtype) if dtype is not None else product
    return product.sum(tuple(range(len(output), len(order))), dtype=dtype)

  @staticmethod
  def _einsum_expand_ellipsis(spec: str, operands) -> str:
    """The formula with each `...` written as letters of its own (upper case letters the formula does not use)."""
    inputs, arrow, output = spec.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(operands):
      raise ValueError(f"einsum {spec!r} names {len(terms)} operands, got {len(operands)}")
    if any(term.count("...") > 1 or term.replace("...", "").count(".") for term in terms + [output]):
      raise ValueError(f"einsum {spec!r}: an ellipsis is written `...`, at most once per term")
    spans = [t.ndim - len(term.replace("...", "")) if "..." in term else 0 for term, t in zip(terms, operands)]
    if min(spans) < 0: raise ValueError(f"einsum {spec!r} has more letters than axes in an operand")
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in spec][:max(spans)]
    if len(free) < max(spans): raise ValueError(f"einsum {spec!r}: too many axes under the ellipsis")
    terms = [term.replace("...", "".join(free[len(free) - span:])) for term, span in zip(terms, spans)]
    if arrow: output = output.replace("...", "".join(free))
    else:
      letters = "".join(t.replace("...", "") for t in inputs.split(","))
      output = "".join(free) + "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    return ",".join(terms) + "->" + output

  @staticmethod
  def _einsum_diagonals(t, term: str):
    """(t, term) with each letter once: a repeated letter keeps the diagonal of its two axes."""
    while len(set(term)) != len(term):
      c = next(c for c in term if term.count(c) > 1)
      first, second = term.index(c), term.index(c, term.index(c) + 1)
      n = t.shape[first]
      if t.shape[second] != n: raise ValueError(f"einsum letter {c!r} stands for sizes {n} and {t.shape[second]}")
      eye = type(t).eye(n, dtype=dtypes.bool,
                        device=t.device).reshape([n if a in (first, second) else 1 for a in range(t.ndim)])
      t = eye.where(t, 0).sum(second, dtype=t.dtype)
      term = term[:second] + term[second + 1:]
    return t, term

  def dot(self, w, dtype=None):
    """Matrix product by broadcast multiply and sum over the shared axis."""
    if self.ndim == 0 or w.ndim == 0:
      raise RuntimeError(f"both tensors need to be at least 1D, got {self.ndim}D and {w.ndim}D")
    w_axis = -min(w.ndim, 2)
    if self.shape[-1] != w.shape[w_axis]: raise RuntimeError(f"cannot dot {self.shape} and {w.shape}")
    spacer = [1] * min(self.ndim - 1, w.ndim - 1, 1)
    x = self.reshape(*self.shape[:-1], *spacer, self.shape[-1])
    w = w.reshape(*w.shape[:-2], *spacer, *w.shape[w_axis:]).transpose(-1, w_axis)
    out_dtype = least_upper_dtype(x.dtype, w.dtype) if dtype is None else to_dtype(dtype)
    return (x * w).sum(-1, dtype=dtype).cast(out_dtype)

  def matmul(self, x, reverse=False, dtype=None):
    left, right = (x, self) if reverse else (self, x)
    return left.dot(right, dtype=dtype)
  def __matmul__(self, x): return self.matmul(x)
  def __rmatmul__(self, x): return self.matmul(x, True)

  def linear(self, weight, bias: Optional = None):
    out = self.mul(weight) if weight.ndim == 1 else self.dot(weight)
    return out if bias is None else out.add(bias)

  def sequential(self, layers) -> "Tensor":
    """This tensor passed through each callable in turn (`x.sequential([l1, Tensor.relu, l2])`)."""
    out = self
    for layer in layers: out = layer(out)
    return out


def _named_conv_padding(name: str, kernel: tuple, stride, dilation) -> list[int]:
  """torch's padding names as flat pads (last axis first): 'valid' none, 'same' the output as large as the input
  (dilation * (k - 1) in all, the odd one after), for stride 1 only."""
  if name == "valid": return [0] * (2 * len(kernel))
  if name != "same": raise ValueError(f"padding must be 'same', 'valid', an int or a sequence of ints, got {name!r}")
  if any(s != 1 for s in make_tuple(stride, len(kernel))):
    raise ValueError(f"padding='same' needs stride 1, got stride={stride}")
  pads = []
  for k, d in reversed(list(zip(kernel, make_tuple(dilation, len(kernel))))):
    total = d * (k - 1)
    pads += [total // 2, total - total // 2]
  return pads
