"""One strided, optionally masked and offset view of a flat buffer: the unit the ShapeTracker stacks.

Sits under `shapetracker.py`. A View maps an index (i0, i1, ...) of `shape` to the buffer position
`offset + sum(i_k * strides[k])`, valid where every i_k lies in `mask[k] = (begin, end)`. Every movement
op maps a View to a View, except a reshape that one view cannot express (it returns None and the
tracker stacks a second view). `View.create` keeps views canonical so that equal views compare equal.
"""
from __future__ import annotations
import functools
from dataclasses import dataclass
from typing import Optional
from scheduler.dtype import dtypes
from scheduler.helpers import prod, all_int, flatten, ceildiv, RECONSTRUCTORS
from scheduler.ops import UOp, Ops, resolve, smax, smin, sint_to_uop, sym_infer, _stable_repr


def _is_one(extent) -> bool: return isinstance(extent, int) and extent == 1


@functools.cache
def strides_for_shape(shape: tuple) -> tuple:
  """Row-major strides of `shape`, 0 on axes of extent 1 (they never move)."""
  strides, step = [], 1
  for extent in reversed(shape):
    strides.append(0 if _is_one(extent) else step)
    step = step * extent
  return tuple(reversed(strides))


def unravel(shape: tuple, position) -> list:
  """The row-major index of flat `position` in `shape`."""
  index = []
  for extent in reversed(shape):
    index.append(position % extent)
    position = position // extent
  return index[::-1]


@dataclass(frozen=True)
class _Run:
  """Consecutive axes that walk memory as one axis: `size` elements `stride` apart, valid in [lo, hi)."""
  size: int
  stride: int
  lo: int
  hi: int


def _runs(shape: tuple, strides: tuple, mask: tuple) -> list[_Run]:
  """Group the axes of an integer view into runs (axes of extent 1 are skipped). Axes join a run when they
  continue its stride and their valid ranges combine into one range."""
  runs: list[_Run] = []
  for extent, stride, (lo, hi) in zip(shape, strides, mask):
    if extent == 1: continue
    if runs and runs[-1].stride == stride * extent:
      outer = runs[-1]
      if (lo, hi) == (0, extent): combined = (outer.lo * extent, outer.hi * extent)
      elif outer.hi - outer.lo == 1: combined = (outer.lo * extent + lo, outer.lo * extent + hi)
      else: combined = None
      if combined is not None:
        runs[-1] = _Run(outer.size * extent, stride, *combined)
        continue
    runs.append(_Run(extent, stride, lo, hi))
  return runs


def _split_run(run: _Run, dims: list) -> Optional[tuple[list, list]]:
  """Strides and valid ranges of `dims` (row-major, product run.size) laid over `run`, or None when the run's
  valid range is not a product of ranges of `dims`."""
  strides, masks = [], []
  step, lo, hi = run.stride, run.lo, run.hi
  for extent in reversed(dims):
    strides.append(step)
    step = step * extent
    if lo % extent == 0 and hi % extent == 0: masks.append((0, extent)); lo, hi = lo // extent, hi // extent
    elif lo // extent == (hi - 1) // extent:
      masks.append((lo % extent, (hi - 1) % extent + 1)); lo, hi = lo // extent, lo // extent + 1
    else: return None
  return strides[::-1], masks[::-1]


def _fold_mask(shape: tuple, strides: tuple, offset, mask: tuple) -> tuple:
  """(strides, offset, mask) with the mask canonical: None if it keeps all, all-(0, 0) if it keeps nothing,
  and each axis that keeps one element read at a fixed position (stride 0, its position in the offset)."""
  if all(valid == (0, extent) for extent, valid in zip(shape, mask)): return strides, offset, None
  if any(resolve(end <= begin, False) for begin, end in mask):
    return tuple(0 for _ in shape), 0, tuple((0, 0) for _ in shape)
  folded = list(strides)
  for axis, (begin, end) in enumerate(mask):
    if resolve(begin + 1 < end): continue
    offset, folded[axis] = offset + strides[axis] * begin, 0
  return tuple(folded), offset, mask


def _check_reshape(old: tuple, new: tuple) -> None:
  bad = [s for s in new if not isinstance(s, UOp) and not (isinstance(s, int) and s >= 0)]
  if bad: raise ValueError(f"shape must be non-negative ints or variables, got {new}")
  if all_int(old) and all_int(new) and prod(old) != prod(new):
    raise ValueError(f"size mismatched, can't reshape {old} -> {new}")


@dataclass(frozen=True)
class View:
  shape: tuple
  strides: tuple
  offset: int
  mask: Optional[tuple]
  contiguous: bool

  def __reduce__(self):
    return RECONSTRUCTORS["view"], (self.shape, self.strides, self.offset, self.mask, self.contiguous)

  def stable_repr(self) -> str:
    return "View(" + ",".join(_stable_repr(x) for x in (self.shape, self.strides, self.offset, self.mask)) + ")"

  @staticmethod
  @functools.cache
  def create(shape: tuple, strides: Optional[tuple] = None, offset=0, mask: Optional[tuple] = None) -> View:
    """The canonical view: strides 0 on extent-1 axes, no mask when it covers everything, an empty mask when it
    covers nothing, and axes whose mask keeps one element folded into the offset."""
    if any(isinstance(extent, int) and extent < 0 for extent in shape):
      raise ValueError(f"shape can't contain negative numbers {shape}")
    shape = tuple(extent.ssimplify() if isinstance(extent, UOp) else extent for extent in shape)
    if 0 in shape: return View(shape, tuple(0 for _ in shape), 0, None, True)
    strides = tuple(0 if _is_one(extent)
                    else stride for extent, stride in zip(shape, strides)) if strides else strides_for_shape(shape)
    if mask is not None: strides, offset, mask = _fold_mask(shape, strides, offset, mask)
    if isinstance(offset, UOp): offset = offset.ssimplify()
    is_contiguous = mask is None and offset == 0 and strides == strides_for_shape(shape)
    return View(shape, strides, offset, mask, is_contiguous)

  def size(self) -> int:
    total = prod(self.shape)
    return total.ssimplify() if isinstance(total, UOp) else total

  def vars(self) -> set[UOp]:
    found: set[UOp] = set()
    for value in (*self.shape, *self.strides, self.offset, *(flatten(self.mask) if self.mask is not None else ())):
      if isinstance(value, UOp): found |= value.vars()
    return found

  def unbind(self) -> tuple[View, dict[UOp, int]]:
    """The view with bound variables replaced by bare ones, and the values they were bound to."""
    bindings = {v: v.unbind() for v in self.vars() if v.op is Ops.BIND}
    bare = {v: var for v, (var, _) in bindings.items()}
    def strip(x): return x.substitute(bare) if isinstance(x, UOp) else x
    mask = None if self.mask is None else tuple((strip(b), strip(e)) for b, e in self.mask)
    unbound = View.create(tuple(map(strip, self.shape)), tuple(map(strip, self.strides)), strip(self.offset), mask)
    return unbound, dict(bindings.values())

  def to_indexed_uops(self, idxs: list[UOp], vexpr: UOp = UOp.const(dtypes.bool, True)) -> tuple[UOp, UOp]:
    """(buffer position, validity) of the logical index `idxs`."""
    position, valid = sint_to_uop(self.offset), vexpr
    for axis, (idx, extent, stride) in enumerate(zip(idxs, self.shape, self.strides)):
      if resolve(extent != 1) and resolve(stride != 0): position = position + idx * stride
      if self.mask is None: continue
      begin, end = self.mask[axis]
      if resolve(begin != 0): valid = valid.alu(Ops.AND, (idx < begin).logical_not())
      if resolve(extent - end != 0): valid = valid.alu(Ops.AND, idx < end)
    return position, valid

  # ***** composing two views *****

  @functools.cache
  def __add__(self, top: View) -> Optional[View]:
    """The single view equal to reading `top` out of this view's elements, or None when there is none."""
    if self.contiguous: return top
    if top.contiguous:
      if top.shape == self.shape: return self
      if top.size() == self.size() and (reshaped := self.reshape(top.shape)) is not None: return reshaped
    if top.mask is not None:   # compose the valid part, then pad back around it
      around = tuple((begin, extent - end) for extent, (begin, end) in zip(top.shape, top.mask))
      valid_part = top.shrink(top.mask)
      core = self + valid_part if valid_part != top else None
      return core.pad(around) if core is not None else None
    if not (all_int(top.shape) and all_int(self.shape) and all_int(top.strides) and isinstance(top.offset, int)):
      return None
    if (composed := self._compose(top)) is not None: return composed
    merged = self.reshape(self._merged_shape()) if self.mask is None else None
    return merged._compose(top) if merged is not None and merged.shape != self.shape else None

  def _compose(self, top: View) -> Optional[View]:
    """`top` (unmasked, integer) over this view, when every digit of this view's index moves linearly with
    top's index (no carries): then each top axis has one stride in memory."""
    origin = unravel(self.shape, top.offset)
    moves = [[a - b for a, b in zip(unravel(self.shape, top.offset + stride), origin)] if stride
             else [0] * len(self.shape)
             for stride in top.strides]
    low, high = list(origin), list(origin)
    for extent, move in zip(top.shape, moves):
      for k, step in enumerate(move):
        reach = step * (extent - 1)
        low[k], high[k] = low[k] + min(0, reach), high[k] + max(0, reach)
    if any(lo < 0 or hi >= extent for lo, hi, extent in zip(low, high, self.shape)): return None
    strides = tuple(sum(step * s for step, s in zip(move, self.strides)) for move in moves)
    offset = self.offset + sum(o * s for o, s in zip(origin, self.strides))
    if self.mask is None: return View.create(top.shape, strides, offset)
    begins, ends = [0] * len(top.shape), list(top.shape)
    for k, (begin, end) in enumerate(self.mask):
      if begin <= low[k] and high[k] < end: continue
      movers = [d for d, move in enumerate(moves) if move[k] != 0]
      if not movers:   # nothing of top is valid; a view of no axes has no mask to say so
        return View.create(top.shape, strides, offset, tuple((0, 0) for _ in top.shape)) if top.shape else None
      if len(movers) > 1: return None
      d, step = movers[0], moves[movers[0]][k]
      # origin[k] + i*step must lie in [begin, end)
      first, last = (ceildiv(begin - origin[k], step), (end - 1 - origin[k]) // step) if step > 0 else \
                    (ceildiv(end - 1 - origin[k], step), (begin - origin[k]) // step)
      begins[d], ends[d] = max(begins[d], first), min(ends[d], last + 1)
    return View.create(top.shape, strides, offset, tuple(zip(begins, ends)))

  def invert(self, out_shape: tuple) -> Optional[View]:
    """The view that undoes this one (a flip and permute of its elements), when it has `out_shape`'s size."""
    flips = tuple(stride < 0 for stride in self.strides)
    by_stride = tuple(sorted(range(len(self.strides)), key=lambda axis: -abs(self.strides[axis])))
    start = View.create(self.shape)
    undo = (start.shrink(self.mask) if self.mask else start).flip(flips).permute(by_stride)
    return None if prod(undo.shape) != prod(out_shape) else undo

  def minify(self) -> View:
    """The same view with as few axes as possible."""
    if not all_int(self.shape) or not all_int(self.strides) or self.mask is not None: return self
    return self.reshape(self._merged_shape()) or self

  def _merged_shape(self) -> tuple:
    """The extents of this (unmasked, integer) view's runs: its shape with mergeable axes merged."""
    return tuple(run.size for run in _runs(self.shape, self.strides, tuple((0, e) for e in self.shape)))

  # ***** movement ops *****

  def _window(self, bounds: tuple, valid: Optional[tuple] = None) -> View:
    """The view of elements bounds[k][0] <= i_k < bounds[k][1] (bounds may reach outside: padding)."""
    offset = self.offset + sum(stride * begin for stride, (begin, _) in zip(self.strides, bounds))
    if self.mask is not None:
      def clip(x, begin, end): return smax(0, smin(x - begin, end - begin))   # a mask bound seen from inside the window
      kept = tuple((clip(lo, begin, end), clip(hi, begin, end)) for (lo, hi), (begin, end) in zip(self.mask, bounds))
      valid = kept if valid is None else tuple((smax(k[0], v[0]), smin(k[1], v[1])) for k, v in zip(kept, valid))
    return View.create(tuple(e - b for b, e in bounds), self.strides, offset, valid)

  def pad(self, arg: tuple) -> View:
    if len(arg) != len(self.shape): raise ValueError(f"invalid pad {arg} for {self.shape}")
    if any(resolve(b < 0, False) or resolve(e < 0, False) for b, e in arg):
      raise ValueError(f"pad must be non-negative, got {arg}")
    if not any(resolve(b != 0) or resolve(e != 0) for b, e in arg): return self
    bounds = tuple((-before, extent + after) for extent, (before, after) in zip(self.shape, arg))
    valid = tuple((before, extent + before) for extent, (before, _) in zip(self.shape, arg))
    return self._window(bounds, valid)

  def shrink(self, arg: tuple) -> View:
    if len(arg) != len(self.shape) or not all(resolve(0 <= b) and resolve(b <= e)
                                              and resolve(e <= s) for s, (b, e) in zip(self.shape, arg)):
      raise ValueError(f"invalid shrink {arg} for {self.shape}")
    return self._window(arg)

  def expand(self, new_shape: tuple) -> View:
    if len(new_shape) != len(self.shape):
      raise ValueError(f"expand arg {new_shape} must have the same number of dims as {self.shape}")
    if 0 in self.shape:
      if not all((s == x == 0) or (s > 0 and x % s == 0) for s, x in zip(self.shape, new_shape)):
        raise ValueError(f"can't expand {self.shape} into {new_shape}")
      return View.create(new_shape)
    if not all(s == 1 or resolve(s == x, False) for s, x in zip(self.shape, new_shape)):
      raise ValueError(f"can't expand {self.shape} into {new_shape}")
    mask = self.mask
    if mask is not None:   # a broadcast axis is valid everywhere or nowhere
      mask = tuple(valid if not resolve(old != new, False) else ((0, new) if valid == (0, 1) else (0, 0))
                   for valid, old, new in zip(mask, self.shape, new_shape))
    return View.create(new_shape, self.strides, self.offset, mask)

  def permute(self, axis: tuple) -> View:
    if sorted(axis) != list(range(len(self.shape))):
      raise ValueError(f"invalid permutation {axis} of len {len(self.shape)}")
    def pick(values): return None if values is None else tuple(values[a] for a in axis)
    return View.create(pick(self.shape), pick(self.strides), self.offset, pick(self.mask))

  def flip(self, arg: tuple) -> View:
    flipped = [axis for axis, f in enumerate(arg) if f]
    strides, offset = list(self.strides), self.offset
    mask = None if self.mask is None else list(self.mask)
    for axis in flipped:
      extent = self.shape[axis]
      offset = offset + strides[axis] * (extent - 1)
      strides[axis] = -strides[axis]
      if mask is not None: mask[axis] = (extent - mask[axis][1], extent - mask[axis][0])
    return View.create(self.shape, tuple(strides), offset, None if mask is None else tuple(mask))

  def reshape(self, new_shape: tuple) -> Optional[View]:
    """This view in `new_shape`, or None when that needs a second view."""
    if new_shape == self.shape: return self
    _check_reshape(self.shape, new_shape)
    if self.contiguous or 0 in self.shape: return View.create(new_shape)
    if new_shape == () and self.mask and any(b == e for b, e in self.mask): return None   # () cannot hold an empty mask
    if all_int(self.shape) and not all_int(new_shape): return self._bind_symbolic_shape(new_shape)
    if not all_int(self.shape) or (self.mask is not None and not all_int(flatten(self.mask))): return None
    return self._regroup(new_shape)

  def _bind_symbolic_shape(self, new_shape: tuple) -> View:
    """A concrete view renamed to the same shape written with bound variables."""
    if len(new_shape) != len(self.shape):
      raise ValueError(f"cannot symbolic reshape non-contiguous {self.shape} -> {new_shape}")
    for concrete, symbolic in zip(self.shape, new_shape):
      value = symbolic if isinstance(symbolic, int) else sym_infer(symbolic,
                                                                   dict(v.unbind() for v in symbolic.vars()
                                                                        if v.op is Ops.BIND))
      if concrete != value: raise ValueError(f"cannot symbolic reshape non-contiguous {self.shape} -> {new_shape}")
    return View(new_shape, self.strides, self.offset, self.mask, self.contiguous)

  def _regroup(self, new_shape: tuple) -> Optional[View]:
    """Reshape by runs: from the right, the new axes must fill each run of the old axes exactly."""
    mask = self.mask if self.mask is not None else tuple((0, extent) for extent in self.shape)
    if any(lo >= hi for lo, hi in mask): return View.create(new_shape, mask=tuple((0, 0) for _ in new_shape))
    # an axis whose mask keeps one element had its stride folded into the offset; any stride is right for it
    # as long as the offset compensates, so give it the one that continues the axis after it
    strides, offset = list(self.strides), self.offset
    for axis in reversed(range(len(self.shape))):
      lo, hi = mask[axis]
      if hi - lo == 1 and self.shape[axis] != 1 and strides[axis] == 0:
        after = next((k for k in range(axis + 1, len(self.shape)) if self.shape[k] != 1), None)
        strides[axis] = 1 if after is None else self.shape[after] * strides[after]
        offset = offset - lo * strides[axis]
    new_strides: list = []
    new_masks: list = []
    pending = list(new_shape)
    for run in reversed(_runs(self.shape, tuple(strides), mask)):
      dims: list = []
      while prod(dims) < run.size and pending: dims.insert(0, pending.pop())
      if prod(dims) != run.size or (split := _split_run(run, dims)) is None: return None
      new_strides, new_masks = split[0] + new_strides, split[1] + new_masks
    if any(extent != 1 for extent in pending): return None
    new_strides, new_masks = [0] * len(pending) + new_strides, [(0, 1)] * len(pending) + new_masks
    return View.create(new_shape, tuple(new_strides), offset, tuple(new_masks) if self.mask is not None else None)
