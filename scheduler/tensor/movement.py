"""Movement and indexing: reshape, permute, expand, pad, shrink, flip, and what is built from them
(indexing with ints, slices, None, ... and integer tensors; cat, stack, split, repeat, gather).

A mixin of `Tensor`. Movement ops only change the view of a value: they never make a kernel by
themselves. Indexing with a tensor becomes a one-hot mask per indexed axis, multiplied and summed away.
"""
from __future__ import annotations
from typing import Optional
import numpy as np
from scheduler.dtype import dtypes
from scheduler.helpers import argfix, all_int, ceildiv, flatten, prod
from scheduler.ops import Ops, UOp, resolve, smax, smin
from scheduler.tensor import rearrange as formulas
from scheduler.tensor.base import TensorBase, broadcast_shape, left_pad_shapes


PAD_MODES = ("constant", "reflect", "replicate", "circular")


class Movement:
  def _resolve_dim(self, dim: int, *, extra: bool = False) -> int:
    """A possibly negative axis as an index in [0, ndim) (or ndim + 1 with `extra`, for inserting)."""
    count = self.ndim + (1 if extra else 0)
    valid = range(-max(count, 1), max(count, 1))
    if dim not in valid: raise IndexError(f"dim={dim} out of range {[valid.start, valid.stop - 1]}")
    return count + dim if dim < 0 else dim

  def view(self, *shape): return self.reshape(shape)

  def reshape(self, shape, *args):
    """The same elements in row-major order in a new shape; None keeps an axis, one -1 is inferred."""
    wanted = [self.shape[i] if s is None else s for i, s in enumerate(argfix(shape, *args))]
    if wanted.count(-1) > 1: raise RuntimeError(f"only one dimension can be inferred using -1, getting {tuple(wanted)}")
    if -1 in wanted: wanted[wanted.index(-1)] = prod(self.shape) // prod(s for s in wanted if s != -1)
    new_shape = tuple(wanted)
    if all_int(self.shape) and all_int(new_shape) and prod(new_shape) != prod(self.shape):
      raise ValueError(f"size mismatched, can't reshape {self.shape} -> {new_shape}")
    if new_shape == self.shape: return self
    return self._apply_uop(UOp.reshape, arg=new_shape)

  def expand(self, shape, *args):
    """Broadcast to `shape`; -1 or None keeps an axis."""
    current, target = left_pad_shapes(self.shape, argfix(shape, *args))
    kept = tuple(c if t is None or t == -1 else t for c, t in zip(current, target))
    return self._broadcast_to(kept)

  def flip(self, axis, *args):
    flipped = [self._resolve_dim(a) for a in argfix(axis, *args)]
    if len(flipped) != len(set(flipped)): raise RuntimeError(f"dim can appear at most once, getting {tuple(flipped)}")
    mask = [False] * self.ndim
    for a in flipped: mask[a] = True
    return self._apply_uop(UOp.flip, arg=tuple(mask))

  def permute(self, order, *args):
    """Reorder the axes: output axis k is input axis order[k]."""
    axes = tuple(map(self._resolve_dim, argfix(order, *args)))
    is_permutation = set(axes) == set(range(self.ndim)) and len(axes) == self.ndim
    if not is_permutation: raise RuntimeError(f"order is not a valid permutation, getting {axes}")
    return self._apply_uop(UOp.permute, arg=axes)

  def shrink(self, arg: tuple):
    if len(arg) != self.ndim:
      raise ValueError(f"shrink needs one (start, end) or None per axis, got {arg} for shape {self.shape}")
    bounds = tuple((0, extent) if b is None else tuple(b) for b, extent in zip(arg, self.shape))
    if all(b == (0, extent) for b, extent in zip(bounds, self.shape)): return self
    return self._apply_uop(UOp.shrink, arg=bounds)

  def pad(self, padding, mode: str = "constant", value: float = 0.0):
    """Pad with `value` ("constant"), or with the tensor mirrored without its edge ("reflect"), its edge repeated
    ("replicate"), or wrapped around ("circular"); padding is ((before, after) or None per axis) or flat (last axis
    first, torch style). Negative amounts cut instead."""
    if mode not in PAD_MODES:
      raise NotImplementedError(f"pad mode {mode!r} is not supported (one of {', '.join(PAD_MODES)})")
    if all(isinstance(p, (int, UOp)) for p in padding):
      if len(padding) % 2: raise ValueError("flat padding must have an even number of pads")
      flat = [*padding, *([0] * (2 * self.ndim - len(padding)))]
      pairs = tuple((flat[2 * k], flat[2 * k + 1]) for k in range(self.ndim))[::-1]
    else: pairs = tuple((0, 0) if p is None else tuple(p) for p in padding)
    if len(pairs) != self.ndim: raise ValueError(f"padding length is improper, padding={padding} ndim={self.ndim}")
    if mode != "constant": return self._pad_from_self(pairs, mode)
    x = self
    if any(not resolve(amount >= 0) for amount in flatten(pairs)):   # negative amounts cut first
      keep = []
      for (before, after), extent in zip(pairs, x.shape): keep.append((smax(-before, 0), smin(extent + after, extent)))
      x = x.shrink(tuple(keep))
      pairs = tuple((smax(0, before), smax(0, after)) for before, after in pairs)
    if all(p == (0, 0) for p in pairs): return x
    padded = x._apply_uop(UOp.pad, arg=pairs)
    if value == 0: return padded
    return padded + x.ones_like()._apply_uop(UOp.pad, arg=pairs).where(0, value)

  def _pad_from_self(self, pairs: tuple, mode: str):
    """Pads made of the tensor's own elements, axis by axis, from shrinks, flips and cat (no kernel of their own)."""
    x = self
    for axis, (before, after) in enumerate(pairs):
      if not (isinstance(before, int) and isinstance(after, int)):
        raise ValueError(f"pad mode {mode!r} needs integer pads")
      n = x.shape[axis]
      if before < 0 or after < 0:
        x = x.shrink(tuple((max(-before, 0), n - max(-after, 0)) if a == axis else None for a in range(x.ndim)))
        before, after, n = max(before, 0), max(after, 0), x.shape[axis]
      if before == after == 0: continue
      limit = {"reflect": n - 1, "circular": n}.get(mode)   # the edge repeats any number of times
      if (limit is not None and max(before, after) > limit) or n == 0:
        raise ValueError(f"{mode} padding of {max(before, after)} is too large for an axis of size {n}")
      def part(start: int, end: int): return x.shrink(tuple((start, end) if a == axis else None for a in range(x.ndim)))
      if mode == "reflect": left, right = part(1, before + 1).flip(axis), part(n - 1 - after, n - 1).flip(axis)
      elif mode == "replicate":
        def edge(at: int, count: int):
          shape = list(x.shape)
          shape[axis] = count
          return part(at, at + 1).expand(shape)
        left, right = edge(0, before), edge(n - 1, after)
      else: left, right = part(n - before, n), part(0, after)
      x = type(self).cat(*[t for t in (left, x, right) if t.shape[axis] > 0], dim=axis)
    return x

  # ***** indexing *****

  def __getitem__(self, indices): return self._getitem(indices)

  def __setitem__(self, indices, v):
    """self[indices] = v, as an assign: v (broadcast, cast to self's dtype) written where the index selects. A
    realized tensor is written in place at once (slices and ints through a view of its buffer, tensor indices and
    strides through a mask over the whole tensor); an unrealized one becomes the updated value."""
    if self.requires_grad: raise NotImplementedError("setitem with requires_grad is not supported")
    if not isinstance(v, (TensorBase, int, float, bool)):
      raise TypeError(f"can't set a {type(v).__name__} into a Tensor")
    region_shape = self[indices].shape
    value = (v if isinstance(v, TensorBase)
             else type(self)(v, device=self.device, dtype=self.dtype, requires_grad=False))
    value = value.cast(self.dtype).expand(region_shape) if value.shape != region_shape else value.cast(self.dtype)
    items = [i for i in (indices if isinstance(indices, tuple) else (indices,))]
    plain = all(i is None or i is Ellipsis or isinstance(i, int)
                or (isinstance(i, slice) and i.step in (None, 1)) for i in items)
    if plain and self.lazydata.is_realized and self.lazydata.base is self.lazydata:
      self[indices].assign(value.contiguous() if value.lazydata.base is self.lazydata.base else value).realize()
      return
    was_realized = self.lazydata.is_realized
    size = prod(self.shape)
    positions = type(self).arange(size, device=self.device, requires_grad=False).reshape(self.shape)[indices].flatten()
    hits = positions.unsqueeze(-1)._one_hot_along_dim(size)                            # (selected, size)
    written = hits.any(0)
    placed = hits.where(value.flatten().unsqueeze(-1), 0).sum(0, dtype=self.dtype)   # positions are distinct per axis
    updated = written.reshape(self.shape).where(placed.reshape(self.shape).cast(self.dtype), self)
    self.assign(updated.contiguous())
    if was_realized: self.realize()

  def _normalize_indices(self, indices) -> list:
    """The index as a list with exactly one entry per axis (Ellipsis expanded), plus None entries."""
    make = lambda values: type(self)(list(values), self.device, requires_grad=False)   # noqa: E731
    if isinstance(indices, list) and all_int(indices): items = [make(indices)]
    elif isinstance(indices, (tuple, list)): items = [make(i) if isinstance(i, (tuple, list)) else i for i in indices]
    else: items = [indices]
    ellipses = [k for k, i in enumerate(items) if i is Ellipsis]
    if len(ellipses) > 1: raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(1 for i in items if i is not None and i is not Ellipsis)
    if used > self.ndim: raise IndexError(f"too many indices for tensor of dimension {self.ndim}")
    at = ellipses[0] if ellipses else len(items)
    return items[:at] + [slice(None)] * (self.ndim - used) + items[at + 1:]

  def _getitem(self, indices):
    items = self._normalize_indices(indices)
    bounds, flips, steps, dropped, inserted, by_tensor = [], [], [], [], [], []
    axis = out_axis = 0
    for item in items:
      if item is None:
        inserted.append(out_axis)
        out_axis += 1
        continue
      extent = self.shape[axis]
      if isinstance(item, TensorBase):
        if not dtypes.is_int(item.dtype): raise IndexError(f"index tensor dtype {item.dtype} is not supported")
        by_tensor.append((axis, item))
        bounds.append((0, extent)); flips.append(False); steps.append(1)
      elif isinstance(item, (int, np.integer)) and not isinstance(item, bool):
        if not -extent <= int(item) < extent:
          raise IndexError(f"index {int(item)} is out of bounds for dimension {axis} with size {extent}")
        start = int(item) % extent
        bounds.append((start, start + 1)); flips.append(False); steps.append(1)
        dropped.append(axis)
        out_axis -= 1
      elif isinstance(item, slice):
        if (odd := next((v for v in (item.start, item.stop, item.step)
                         if v is not None and not isinstance(v, (int, np.integer))), None)) is not None:
          raise TypeError(f"only int slicing is supported, not a {type(odd).__name__} bound (a window with symbolic "
                          "bounds is a shrink)")
        start, stop, step = item.indices(extent) if isinstance(extent, int) else (0, extent, 1)
        if step == 0: raise ValueError("slice step cannot be 0")
        if step > 0: bounds.append((start, max(start, stop)))
        else: bounds.append((stop + 1, start + 1) if start > stop else (0, 0))
        flips.append(step < 0); steps.append(abs(step))
      else: raise IndexError(f"{type(item).__name__} is not a valid index")
      axis += 1
      out_axis += 1
    x = self.shrink(tuple(bounds))
    if any(flips): x = x.flip(tuple(a for a, f in enumerate(flips) if f))
    if any(s != 1 for s in steps): x = x._every_nth(steps)
    # drop int-indexed axes, add None axes; tensor-indexed axes move with them
    shape = [extent for a, extent in enumerate(x.shape) if a not in dropped]
    tensor_axes = [a - sum(1 for d in dropped if d < a) for a, _ in by_tensor]
    for position in inserted:
      shape.insert(position, 1)
      tensor_axes = [a + (a >= position) for a in tensor_axes]
    x = x.reshape(tuple(shape))
    return x._gather_by_tensors(tensor_axes, [t for _, t in by_tensor]) if by_tensor else x

  def _every_nth(self, steps: list):
    """Keep every steps[k]-th element along axis k: pad to a multiple, split the axis, keep the first of each group."""
    groups = [ceildiv(extent, step) for extent, step in zip(self.shape, steps)]
    x = self.pad(tuple((0, g * step - extent) for g, step, extent in zip(groups, steps, self.shape)))
    split, first_of_each = [], []
    for g, step in zip(groups, steps):
      split += [g, step]
      first_of_each += [(0, g), (0, 1)]
    return x.reshape(tuple(split)).shrink(tuple(first_of_each)).reshape(tuple(groups))

  def _gather_by_tensors(self, axes: list, index_tensors: list):
    """Advanced indexing: each (axis, int tensor) pair picks positions; numpy's placement rules."""
    first = axes[0]
    # negative counts from the end
    wrapped = [(t < 0).where(t + self.shape[a], t) for a, t in zip(axes, index_tensors)]
    index_shape = broadcast_shape(*(t.shape for t in wrapped))
    full = (*self.shape[:first], *index_shape, *self.shape[first:])
    mask = None
    for a, t in zip(axes, wrapped):
      try: spread = t.reshape(*t.shape, *([1] * (self.ndim - first))).expand(full)
      except ValueError as e: raise IndexError(f"cannot broadcast indices: {e}") from e
      hits = spread._one_hot_along_dim(num_classes=self.shape[a], dim=a - self.ndim)
      mask = hits if mask is None else mask.mul(hits)
    values = self.reshape(self.shape[:first] + (1,) * len(index_shape) + self.shape[first:])
    x = mask.where(values, 0).sum(tuple(a + len(index_shape) for a in axes), dtype=self.dtype)
    if first != 0 and axes != list(range(first, axes[-1] + 1)):   # split indexed axes go to the front
      k = len(index_shape)
      x = x.permute(*range(first, first + k), *range(0, first), *range(first + k, x.ndim))
    return x

  def gather(self, dim: int, index):
    """out[..., i, ...] = self[..., index[..., i, ...], ...] along `dim`, by a one-hot mask summed away."""
    if index.ndim != self.ndim:
      raise ValueError(f"self.ndim must equal index.ndim, self.ndim={self.ndim}, index.ndim={index.ndim}")
    dim = self._resolve_dim(dim)
    for d, (have, want) in enumerate(zip(self.shape, index.shape)):
      if d != dim and have < want: raise RuntimeError("requires self.shape[d] >= index.shape[d] for all d != dim")
    bounds = [(0, want) for want in index.shape]
    bounds[dim] = None
    candidates = self.shrink(tuple(bounds)).unsqueeze(-1).transpose(dim, -1)
    is_index = index.to(self.device).unsqueeze(-1)._one_hot_along_dim(self.shape[dim])
    return is_index.where(candidates, 0).sum(-1, dtype=self.dtype)

  def _scattered(self, dim: int, index, src, gather_op: Ops, counted: bool = False):
    """(part, hit, count) in self's shape: what `src` sends to each position of self along `dim` through `index`,
    reduced with `gather_op` (ADD, MUL or MAX), whether anything landed there, and (when `counted`, else None) how
    many elements did."""
    if index.ndim != self.ndim: raise ValueError(f"index has {index.ndim} axes, self has {self.ndim}")
    dim = self._resolve_dim(dim)
    if not isinstance(src, TensorBase): src = type(self).full(index.shape, src, dtype=self.dtype, device=self.device)
    if any(i > s for i, s in zip(index.shape, src.shape)) or \
       any(i > s for d, (i, s) in enumerate(zip(index.shape, self.shape)) if d != dim):
      raise RuntimeError(f"scatter index {index.shape} must fit src {src.shape} and self {self.shape}")
    src = src.shrink(tuple((0, n) for n in index.shape)).cast(self.dtype)
    n = self.shape[dim]
    lands = index.to(self.device).unsqueeze(-1)._one_hot_along_dim(n)     # index.shape + (n,): element i goes to p
    moved = src.unsqueeze(-1)
    if gather_op is Ops.MAX: part = lands.where(moved, dtypes.min(self.dtype)).max(dim)
    elif gather_op is Ops.MUL: part = lands.where(moved, 1).prod(dim)
    else: part = lands.where(moved, 0).sum(dim, dtype=self.dtype)
    per_target = [part, lands.any(dim)] + ([lands.sum(dim, dtype=dtypes.int32)] if counted else [])
    # the targets (last axis) back in place of `dim`, then padded to self's extent where index is smaller
    padding = tuple((0, s - (n if d == dim else i)) for d, (i, s) in enumerate(zip(index.shape, self.shape)))
    placed = [x.unsqueeze(dim).transpose(dim, -1).squeeze(-1).pad(padding) for x in per_target]
    return placed[0], placed[1], (placed[2] if counted else None)

  def scatter(self, dim: int, index, src, reduce: Optional[str] = None):
    """self with out[..., index[i], ...] = src[..., i, ...] along `dim` (torch's scatter); reduce="add" or
    "multiply" combines with self instead of replacing. Positions no index names keep self's value."""
    if reduce not in (None, "add", "multiply"):
      raise ValueError(f"scatter reduce must be 'add' or 'multiply', got {reduce!r}")
    part, hit, _ = self._scattered(dim, index, src, Ops.MUL if reduce == "multiply" else Ops.ADD)
    if reduce == "add": return self + hit.where(part, 0)
    if reduce == "multiply": return self * hit.where(part, 1)
    return hit.where(part, self)

  def scatter_reduce(self, dim: int, index, src, reduce: str, include_self: bool = True):
    """torch's scatter_reduce: each position of self that `index` names along `dim` becomes the reduction ("sum",
    "prod", "mean", "amax" or "amin") of the src elements sent to it, and of its own value with include_self.
    Positions no index names keep self's value; a mean of ints rounds toward negative infinity."""
    reduces = ("sum", "prod", "mean", "amax", "amin")
    if reduce not in reduces:
      raise ValueError(f"scatter_reduce reduce must be one of {', '.join(reduces)}, got {reduce!r}")
    if reduce == "amin":
      if not isinstance(src, TensorBase): src = type(self).full(index.shape, src, dtype=self.dtype, device=self.device)
      flipped = self._inverse_for_order().scatter_reduce(dim, index, src.cast(self.dtype)._inverse_for_order(), "amax",
                                                         include_self)
      return flipped._inverse_for_order()
    gather_op = {"prod": Ops.MUL, "amax": Ops.MAX}.get(reduce, Ops.ADD)
    part, hit, count = self._scattered(dim, index, src, gather_op, counted=reduce == "mean")
    if include_self:
      if reduce == "amax": part = part.maximum(self)
      elif reduce == "prod": part = part * self
      else: part = part + self
    if reduce == "mean":
      divisor = (count + 1 if include_self else count.maximum(1)).cast(self.dtype)
      part = part.div(divisor, rounding_mode="floor") if dtypes.is_int(self.dtype) else part / divisor
    return hit.where(part, self)

  def unfold(self, dim: int, size: int, step: int):
    """Windows of `size` elements every `step` along `dim`: that axis becomes the window count, and the windows
    run along a new last axis."""
    dim = self._resolve_dim(dim)
    if size < 0 or step <= 0 or size > self.shape[dim]:
      raise RuntimeError(f"unfold size={size}, step={step} does not fit a dimension of {self.shape[dim]}")
    count = (self.shape[dim] - size) // step + 1
    windows = [self.shrink(tuple((k * step, k * step + size) if d == dim else None for d in range(self.ndim)))
               for k in range(count)]
    stacked = windows[0].stack(*windows[1:], dim=dim) if count > 1 else windows[0].unsqueeze(dim)
    order = [d for d in range(stacked.ndim) if d != dim + 1] + [dim + 1]
    return stacked.permute(order)

  # ***** resampling *****

  def interpolate(self, size: tuple, mode: str = "linear", align_corners: bool = False):
    """Resize the last len(size) axes to `size`: "nearest" (source floor(i * in / out)), "nearest-exact" (source
    floor((i + 0.5) * in / out)), or "linear" ("bilinear", "trilinear"; source i * (in - 1) / (out - 1) with
    align_corners, else (i + 0.5) * in / out - 0.5 clamped at 0, weighting its two neighbours), as torch."""
    modes = ("nearest", "nearest-exact", "linear", "bilinear", "trilinear")
    if mode not in modes: raise ValueError(f"interpolate mode must be one of {', '.join(modes)}, got {mode!r}")
    if align_corners and mode.startswith("nearest"): raise ValueError("align_corners only applies to linear modes")
    size = tuple(size)
    if len(size) > self.ndim or not all(isinstance(n, int) and n > 0 for n in size):
      raise ValueError(f"interpolate size {size} does not fit a tensor of shape {self.shape}")
    x = self
    for axis, out in zip(range(self.ndim - len(size), self.ndim), size):
      x = x._resample_axis(axis, out, mode, align_corners)
    return x

  def _resample_axis(self, axis: int, out: int, mode: str, align_corners: bool):
    n = self.shape[axis]
    positions = np.arange(out, dtype=np.float64)
    if mode.startswith("nearest"):
      scaled = (positions + 0.5) * n / out if mode == "nearest-exact" else positions * n / out
      return self._take(axis, np.minimum(np.floor(scaled), n - 1).astype(np.int32))
    if align_corners: source = positions * ((n - 1) / (out - 1)) if out > 1 else np.zeros(out)
    else: source = np.maximum((positions + 0.5) * n / out - 0.5, 0)
    source = np.minimum(source, n - 1)
    # the ceiling, not the next one: at a whole position the weight is 0 and the lerp blends the value with itself
    # (an infinite neighbour would make it NaN)
    low, high = np.floor(source).astype(np.int32), np.ceil(source).astype(np.int32)
    shape = [1] * self.ndim
    shape[axis] = out
    # integers blend in float32 and round back (a uint8 weight would be 0, and above - below could wrap)
    x = self if dtypes.is_float(self.dtype) else self.cast(dtypes.float32)
    # float64 exact
    weight = type(self)(source - low, dtype=x.dtype, device=self.device, requires_grad=False).reshape(shape)
    below, above = x._take(axis, low), x._take(axis, high)
    blended = below + (above - below) * weight
    return blended if x is self else blended.round().cast(self.dtype)

  def _take(self, axis: int, index: np.ndarray):
    """self at `index` (numpy ints) along `axis`."""
    shape = list(self.shape)
    shape[axis] = len(index)
    along = [1] * self.ndim
    along[axis] = len(index)
    positions = type(self)(index, device=self.device, requires_grad=False).reshape(along).expand(shape)
    return self.gather(axis, positions)

  # ***** joining and splitting *****

  def cat(self, *others, dim: int = 0):
    """Each input padded with zeros to the full length along dim, then all added."""
    axis = dim if dim >= 0 else self._resolve_dim(dim)
    if axis >= self.ndim: raise IndexError(f"dim={dim} out of range for {self.ndim} axes")
    others_shapes = [t.shape[:axis] + t.shape[axis + 1:] if t.ndim == self.ndim else None for t in others]
    for t, rest in zip(others, others_shapes):
      if rest != self.shape[:axis] + self.shape[axis + 1:]:
        raise ValueError(f"cannot cat {self.shape} with {t.shape} along dim {axis}")
    dim = axis
    parts, total, offset, out = [self, *others], sum(t.shape[dim] for t in (self, *others)), 0, None
    for t in parts:
      around = [None] * t.ndim
      around[dim] = (offset, total - offset - t.shape[dim])
      offset += t.shape[dim]
      placed = t.pad(tuple(around))
      out = placed if out is None else out.add(placed)
    return out

  def repeat(self, repeats, *args):
    """Tile the tensor repeats[k] times along axis k (leading repeats add axes)."""
    counts = tuple(argfix(repeats, *args))
    shape = left_pad_shapes(self.shape, counts)[0]
    interleaved_ones, interleaved = [], []
    for count, extent in zip(counts, shape):
      interleaved_ones += [1, extent]
      interleaved += [count, extent]
    tiled = self.reshape(interleaved_ones).expand(interleaved)
    return tiled.reshape(tuple(count * extent for count, extent in zip(counts, shape)))

  def split(self, sizes, dim: int = 0) -> tuple:
    dim = self._resolve_dim(dim)
    length = self.shape[dim]
    if isinstance(sizes, int): sizes = [min(sizes, length - start) for start in range(0, max(1, length), max(1, sizes))]
    if sum(sizes) != length: raise ValueError(f"expect sizes to sum exactly to {length}, but got {sum(sizes)}")
    pieces, start = [], 0
    for size in sizes:
      pieces.append(self[(slice(None),) * dim + (slice(start, start + size),)])
      start += size
    return tuple(pieces)

  def stack(self, *others, dim: int = 0):
    """Join along a new axis at `dim`."""
    with_axis = [t.unsqueeze(dim) for t in (self, *others)]
    return with_axis[0].cat(*with_axis[1:], dim=dim)

  def chunk(self, chunks: int, dim: int = 0) -> list:
    if chunks <= 0: raise ValueError(f"expect chunks to be greater than 0, got: {chunks}")
    length = self.shape[self._resolve_dim(dim)]
    sizes = [0] * chunks if length == 0 else ceildiv(length, chunks)
    return list(self.split(sizes, dim=self._resolve_dim(dim)))

  # ***** axes *****

  @property
  def T(self): return self.transpose()

  def transpose(self, dim0=1, dim1=0):
    """Swap two axes."""
    order = [*range(self.ndim)]
    order[dim1], order[dim0] = dim0 if dim0 >= 0 else self.ndim + dim0, dim1 if dim1 >= 0 else self.ndim + dim1
    return self.permute(order)

  def _with_axes(self, start: int, stop: int, middle: tuple):
    """Reshape: axes [start, stop) replaced by `middle`."""
    return self.reshape((*self.shape[:start], *middle, *self.shape[stop:]))

  def roll(self, shifts, dims):
    """Elements shifted along `dims` by `shifts` (ints or tuples of ints), wrapping around."""
    shifts, dims = (shifts, dims) if isinstance(shifts, (tuple, list)) else ((shifts,), (dims,))
    if len(shifts) != len(dims): raise RuntimeError(f"shifts {shifts} and dims {dims} must have the same length")
    out = self
    for shift, dim in zip(shifts, dims):
      dim = out._resolve_dim(dim)
      size = out.shape[dim]
      if size == 0 or shift % size == 0: continue
      cut = size - shift % size
      out = out.shrink(tuple((cut, size) if d == dim else None for d in range(out.ndim))).cat(
        out.shrink(tuple((0, cut) if d == dim else None for d in range(out.ndim))), dim=dim)
    return out

  def rearrange(self, formula: str, **sizes: int):
    """einops-style axis shuffling: `x.rearrange("b c (h w) -> b h w c", h=4)` (`scheduler/tensor/rearrange.py`)."""
    split, order, joined = formulas.plan(formula, tuple(self.shape), sizes)
    return self.reshape(split).permute(order).reshape(joined)

  def meshgrid(self, *others, indexing: str = "ij"):
    """Coordinate grids of 1-D tensors: grid k holds tensor k laid along axis k and expanded over the others;
    "xy" indexing swaps the first two axes (numpy's default)."""
    if indexing not in ("ij", "xy"): raise ValueError(f"meshgrid indexing must be 'ij' or 'xy', got {indexing!r}")
    tensors = [t.flatten() for t in (self, *others)]
    axes = list(range(len(tensors)))
    if indexing == "xy" and len(axes) > 1: axes[0], axes[1] = 1, 0
    shape = [0] * len(tensors)
    for t, axis in zip(tensors, axes): shape[axis] = t.shape[0]
    return tuple(t.reshape(tuple(shape[a] if a == axis else 1 for a in range(len(shape)))).expand(tuple(shape))
                 for t, axis in zip(tensors, axes))

  def masked_select(self, mask):
    """The elements where `mask` (broadcast with self) is true, as a 1-D tensor; the mask is realized to know how
    many there are."""
    shape = broadcast_shape(self.shape, mask.shape)
    picked = np.flatnonzero(mask._broadcast_to(shape).numpy())
    flat = self._broadcast_to(shape).flatten()
    if picked.size == 0: return flat.shrink(((0, 0),))
    return flat[type(self)(picked.astype(np.int32), device=self.device, requires_grad=False)]

  def repeat_interleave(self, repeats: int, dim=None):
    """Each element `repeats` times in a row along `dim` (the flattened tensor when None)."""
    x, dim = (self.flatten(), 0) if dim is None else (self, self._resolve_dim(dim))
    shape = x.shape
    spread = x.reshape(*shape[:dim + 1], 1, *shape[dim + 1:]).expand(*shape[:dim + 1], repeats, *shape[dim + 1:])
    return spread.reshape(*shape[:dim], shape[dim] * repeats, *shape[dim + 1:])

  def flatten(self, start_dim=0, end_dim=-1):
    start, end = self._resolve_dim(start_dim), self._resolve_dim(end_dim) + 1
    return self._with_axes(start, end, (prod(self.shape[start:end]),))

  def unflatten(self, dim: int, sizes: tuple):
    axis = self._resolve_dim(dim)
    return self._with_axes(axis, axis + 1, tuple(sizes))

  def unsqueeze(self, dim: int):
    axis = self._resolve_dim(dim, extra=True)
    return self._with_axes(axis, axis, (1,))

  def squeeze(self, dim: Optional[int | tuple] = None):
    """Drop axis `dim` (each axis of a tuple) if it has extent 1 (all extent-1 axes when dim is None)."""
    if isinstance(dim, (tuple, list)):
      axes = {self._resolve_dim(d) for d in dim}
      return self.reshape(tuple(n for a, n in enumerate(self.shape) if not (a in axes and n == 1)))
    if dim is not None:
      axis = self._resolve_dim(dim)
      return self._with_axes(axis, axis + 1, ()) if self.ndim and self.shape[axis] == 1 else self
    return self.reshape(tuple(extent for extent in self.shape if extent != 1))
