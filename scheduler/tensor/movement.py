"""Movement and indexing: reshape, permute, expand, pad, shrink, flip, and what is built from them
(indexing with ints, slices, None, ... and integer tensors; cat, stack, split, repeat, gather).

A mixin of `Tensor`. Movement ops only change the view of a value: they never make a kernel by
themselves. Indexing with a tensor becomes a one-hot mask per indexed axis, multiplied and summed away.
"""
from __future__ import annotations
import functools, itertools
from typing import Optional
import numpy as np
from scheduler.dtype import dtypes
from scheduler.helpers import argfix, all_int, ceildiv, flatten, prod, round_up
from scheduler.ops import UOp, resolve, smax, smin
from scheduler.tensor.base import TensorBase, broadcast_shape, left_pad_shapes


class Movement:
  def _resolve_dim(self, dim: int, *, extra: bool = False) -> int:
    """A possibly negative axis as an index in [0, ndim) (or ndim + 1 with `extra`, for inserting)."""
    total = self.ndim + int(extra)
    rank = max(1, total)
    if not -rank <= dim < rank: raise IndexError(f"dim={dim} out of range {[-rank, rank - 1]}")
    return dim + total if dim < 0 else dim

  def view(self, *shape): return self.reshape(shape)

  def reshape(self, shape, *args):
    wanted = tuple(self.shape[i] if s is None else s for i, s in enumerate(argfix(shape, *args)))
    inferred = [i for i, s in enumerate(wanted) if s == -1]
    if len(inferred) > 1: raise RuntimeError(f"only one dimension can be inferred using -1, getting {wanted}")
    if inferred:
      known = prod(s for s in wanted if s != -1)
      wanted = tuple(prod(self.shape) // known if s == -1 else s for s in wanted)
    if all_int(self.shape) and all_int(wanted) and prod(self.shape) != prod(wanted):
      raise ValueError(f"size mismatched, can't reshape {self.shape} -> {wanted}")
    return self if wanted == self.shape else self._apply_uop(UOp.reshape, arg=wanted)

  def expand(self, shape, *args):
    old, new = left_pad_shapes(self.shape, argfix(shape, *args))
    return self._broadcast_to(tuple(o if n in (-1, None) else n for o, n in zip(old, new)))

  def permute(self, order, *args):
    axes = tuple(self._resolve_dim(a) for a in argfix(order, *args))
    if sorted(axes) != list(range(self.ndim)): raise RuntimeError(f"order is not a valid permutation, getting {axes}")
    return self._apply_uop(UOp.permute, arg=axes)

  def flip(self, axis, *args):
    axes = [self._resolve_dim(a) for a in argfix(axis, *args)]
    if len(set(axes)) != len(axes): raise RuntimeError(f"dim can appear at most once, getting {tuple(axes)}")
    return self._apply_uop(UOp.flip, arg=tuple(a in axes for a in range(self.ndim)))

  def shrink(self, arg: tuple):
    if len(arg) != self.ndim: raise ValueError(f"shrink needs one (start, end) or None per axis, got {arg} for shape {self.shape}")
    bounds = tuple((0, extent) if b is None else tuple(b) for b, extent in zip(arg, self.shape))
    if all(b == (0, extent) for b, extent in zip(bounds, self.shape)): return self
    return self._apply_uop(UOp.shrink, arg=bounds)

  def pad(self, padding, mode: str = "constant", value: float = 0.0):
    """Pad with `value`; padding is ((before, after) or None per axis) or flat (last axis first, torch style).
    Negative amounts cut instead."""
    if mode != "constant": raise NotImplementedError(f"pad mode {mode!r} is not supported (only 'constant')")
    if all(isinstance(p, (int, UOp)) for p in padding):
      if len(padding) % 2: raise ValueError("flat padding must have an even number of pads")
      flat = [*padding, *([0] * (2 * self.ndim - len(padding)))]
      pairs = tuple((flat[2 * k], flat[2 * k + 1]) for k in range(self.ndim))[::-1]
    else: pairs = tuple((0, 0) if p is None else tuple(p) for p in padding)
    if len(pairs) != self.ndim: raise ValueError(f"padding length is improper, padding={padding} ndim={self.ndim}")
    x = self
    if not all(resolve(amount >= 0) for amount in flatten(pairs)):
      x = x.shrink(tuple((-smin(before, 0), smin(after + extent, extent)) for (before, after), extent in zip(pairs, x.shape)))
      pairs = tuple((smax(before, 0), smax(after, 0)) for before, after in pairs)
    if all(p == (0, 0) for p in pairs): return x
    padded = x._apply_uop(UOp.pad, arg=pairs)
    if value == 0: return padded
    return padded + x.ones_like()._apply_uop(UOp.pad, arg=pairs).where(0, value)

  # ***** indexing *****

  def __getitem__(self, indices): return self._getitem(indices)

  def __setitem__(self, indices, v):
    raise NotImplementedError("setitem is not supported; use assign on a contiguous tensor")

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
        if not -extent <= int(item) < extent: raise IndexError(f"index {int(item)} is out of bounds for dimension {axis} with size {extent}")
        start = int(item) % extent
        bounds.append((start, start + 1)); flips.append(False); steps.append(1)
        dropped.append(axis)
        out_axis -= 1
      elif isinstance(item, slice):
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
    x = self.pad(tuple((0, round_up(extent, step) - extent) for extent, step in zip(self.shape, steps)))
    x = x.reshape(flatten((extent // step, step) for extent, step in zip(x.shape, steps)))
    x = x.shrink(tuple(flatten(((0, extent), (0, 1)) for extent in x.shape[::2])))
    return x.reshape(x.shape[::2])

  def _gather_by_tensors(self, axes: list, index_tensors: list):
    """Advanced indexing: each (axis, int tensor) pair picks positions; numpy's placement rules."""
    indices = [(t < 0).where(t + self.shape[a], t) for a, t in zip(axes, index_tensors)]
    index_shape = broadcast_shape(*(t.shape for t in indices))
    first = axes[0]
    full = self.shape[:first] + index_shape + self.shape[first:]
    masks = []
    for a, t in zip(axes, indices):
      try: spread = t.reshape(t.shape + (1,) * (self.ndim - first)).expand(full)
      except ValueError as e: raise IndexError(f"cannot broadcast indices: {e}") from e
      masks.append(spread._one_hot_along_dim(num_classes=self.shape[a], dim=a - self.ndim))
    mask = functools.reduce(lambda a, b: a.mul(b), masks)
    values = self.reshape(self.shape[:first] + (1,) * len(index_shape) + self.shape[first:])
    x = mask.where(values, 0).sum(tuple(a + len(index_shape) for a in axes), dtype=self.dtype)
    if first != 0 and axes != list(range(first, axes[-1] + 1)):   # split indexed axes go to the front
      k = len(index_shape)
      x = x.permute(*range(first, first + k), *range(0, first), *range(first + k, x.ndim))
    return x

  def gather(self, dim: int, index):
    if index.ndim != self.ndim: raise ValueError(f"self.ndim must equal index.ndim, self.ndim={self.ndim}, index.ndim={index.ndim}")
    dim = self._resolve_dim(dim)
    if any(s < i for d, (s, i) in enumerate(zip(self.shape, index.shape)) if d != dim):
      raise RuntimeError("requires self.shape[d] >= index.shape[d] for all d != dim")
    index = index.to(self.device)
    window = self.shrink(tuple(None if d == dim else (0, i) for d, i in enumerate(index.shape)))
    picked = index.unsqueeze(-1)._one_hot_along_dim(self.shape[dim])
    return picked.where(window.unsqueeze(-1).transpose(-1, dim), 0).sum(-1, dtype=self.dtype)

  # ***** joining and splitting *****

  def cat(self, *others, dim: int = 0):
    """Each input padded with zeros to the full length along dim, then all added."""
    dim = self._resolve_dim(dim)
    parts = [self, *others]
    for t in others:
      if t.ndim != self.ndim or any(a != b for d, (a, b) in enumerate(zip(self.shape, t.shape)) if d != dim):
        raise ValueError(f"cannot cat {self.shape} with {t.shape} along dim {dim}")
    ends = list(itertools.accumulate(t.shape[dim] for t in parts))
    starts, total = [0, *ends[:-1]], ends[-1]
    padded = [t.pad(tuple((s, total - e) if d == dim else None for d in range(t.ndim))) for t, s, e in zip(parts, starts, ends)]
    return functools.reduce(lambda a, b: a.add(b), padded)

  def stack(self, *others, dim: int = 0):
    first, *rest = [t.unsqueeze(dim) for t in (self, *others)]
    return first.cat(*rest, dim=dim)

  def repeat(self, repeats, *args):
    repeats = argfix(repeats, *args)
    shape = left_pad_shapes(self.shape, repeats)[0]
    spread = self.reshape(flatten((1, s) for s in shape)).expand(flatten((r, s) for r, s in zip(repeats, shape)))
    return spread.reshape(tuple(r * s for r, s in zip(repeats, shape)))

  def split(self, sizes, dim: int = 0) -> tuple:
    dim = self._resolve_dim(dim)
    length = self.shape[dim]
    if isinstance(sizes, int): sizes = [min(sizes, length - start) for start in range(0, max(1, length), max(1, sizes))]
    if sum(sizes) != length: raise ValueError(f"expect sizes to sum exactly to {length}, but got {sum(sizes)}")
    starts = [0, *itertools.accumulate(sizes)]
    return tuple(self[(slice(None),) * dim + (slice(starts[k], starts[k + 1]),)] for k in range(len(sizes)))

  def chunk(self, chunks: int, dim: int = 0) -> list:
    if chunks <= 0: raise ValueError(f"expect chunks to be greater than 0, got: {chunks}")
    dim = self._resolve_dim(dim)
    length = self.shape[dim]
    return list(self.split(ceildiv(length, chunks) if length else [0] * chunks, dim=dim))

  # ***** axes *****

  def squeeze(self, dim: Optional[int] = None):
    if dim is None: return self.reshape(tuple(s for s in self.shape if s != 1))
    dim = self._resolve_dim(dim)
    if not self.ndim or self.shape[dim] != 1: return self
    return self.reshape(self.shape[:dim] + self.shape[dim + 1:])

  def unsqueeze(self, dim: int):
    dim = self._resolve_dim(dim, extra=True)
    return self.reshape(self.shape[:dim] + (1,) + self.shape[dim:])

  @property
  def T(self): return self.transpose()

  def transpose(self, dim0=1, dim1=0):
    order = list(range(self.ndim))
    order[dim0], order[dim1] = order[dim1], order[dim0]
    return self.permute(order)

  def flatten(self, start_dim=0, end_dim=-1):
    first, last = self._resolve_dim(start_dim), self._resolve_dim(end_dim)
    return self.reshape(self.shape[:first] + (prod(self.shape[first:last + 1]),) + self.shape[last + 1:])

  def unflatten(self, dim: int, sizes: tuple):
    dim = self._resolve_dim(dim)
    return self.reshape(self.shape[:dim] + tuple(sizes) + self.shape[dim + 1:])
