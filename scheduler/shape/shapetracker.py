"""ShapeTracker: a chain of Views mapping a logical shape onto a flat buffer.

Sits on `view.py`. The last view gives the shape; each view reads the elements of the one before it in
row-major order, and the first view reads the buffer. Movement ops change the last view (a reshape it
cannot express stacks a new one); `simplify` merges neighbouring views where one view can say both. The
frontend applies movement ops, the scheduler composes and inverts chains, and lowering turns a chain into
index and valid expressions (`to_indexed_uops`).
"""
from __future__ import annotations
from dataclasses import dataclass
from typing import Optional
from scheduler.dtype import dtypes
from scheduler.helpers import RECONSTRUCTORS
from scheduler import ops
from scheduler.ops import UOp, Ops, resolve, sint_to_uop
from scheduler.shape.view import View, strides_for_shape, unravel


@dataclass(frozen=True)
class ShapeTracker:
  views: tuple[View, ...]

  def __reduce__(self): return RECONSTRUCTORS["shape_tracker"], (self.views,)

  def stable_repr(self) -> str: return "ST(" + ",".join(v.stable_repr() for v in self.views) + ")"

  @staticmethod
  def from_shape(shape: tuple) -> ShapeTracker: return ShapeTracker((View.create(shape),))

  shape = property(lambda self: self.views[-1].shape, doc="The logical shape: the last view's.")
  size = property(lambda self: self.views[-1].size(), doc="The number of logical elements.")
  contiguous = property(lambda self: len(self.views) == 1 and self.views[0].contiguous,
                        doc="One view reading the buffer in order from position 0.")

  def to_uop(self) -> UOp: return UOp(Ops.VIEW, dtypes.void, (), self)

  # ***** composing chains *****

  def __add__(self, other: ShapeTracker) -> ShapeTracker:
    """`other` applied on top of this chain (its first view reads this chain's elements)."""
    views = self.views
    for view in other.views: views = _merged_tail(views + (view,))
    return ShapeTracker(views)

  def simplify(self) -> ShapeTracker:
    """Merge the last two views while one view can express both."""
    views = _merged_tail(self.views)
    return self if views is self.views else ShapeTracker(views)

  def invert(self, out_shape: tuple) -> Optional[ShapeTracker]:
    """The chain that puts this chain's elements back in place (None when it drops or repeats elements)."""
    inverses = []
    for j in range(len(self.views) - 1, -1, -1):   # last view first; view j reads the elements of view j-1
      inverse = self.views[j].invert(self.views[j - 1].shape if j else out_shape)
      if inverse is None: return None
      inverses.append(inverse)
    return ShapeTracker(tuple(inverses)).reshape(out_shape)

  # ***** index expressions *****

  def to_indexed_uops(self, idxs: Optional[list[UOp]] = None) -> tuple[UOp, UOp]:
    """(buffer position, validity) of the logical index `idxs` (one RANGE per axis by default)."""
    if idxs is None: idxs = _loop_indices(self.shape)
    position, valid = self.views[-1].to_indexed_uops(idxs)
    for earlier in self.views[-2::-1]:
      reader = earlier.minify()   # fewer axes give shorter index math
      digits = [sint_to_uop(d) for d in unravel(reader.shape, position)]
      position, valid = reader.to_indexed_uops(digits, valid)
    return position, valid

  def real_size(self) -> int:
    """One past the highest buffer position the chain reads (0 when it reads nothing): positions outside the last
    view's mask are not read, so each axis only ranges over its valid part."""
    if 0 in self.shape: return 0
    mask = self.views[-1].mask
    if mask is not None and any(resolve(end <= begin, False) for begin, end in mask): return 0
    bounds = mask if mask is not None else tuple((0, extent) for extent in self.shape)
    if not all(isinstance(b, int) and isinstance(e, int) for b, e in bounds): bounds = None
    idxs = None if bounds is None else [UOp.variable(f"axis{i}", b, e - 1) for i, (b, e) in enumerate(bounds)]
    position, valid = self.to_indexed_uops(idxs)
    return 0 if not valid.vmax else int(position.vmax + 1)

  @property
  def consecutive(self) -> bool:
    """One unmasked view that reads the buffer in order from some offset (contiguous but for the offset)."""
    view = self.views[0]
    return len(self.views) == 1 and view.mask is None and view.strides == strides_for_shape(view.shape)

  def axis_is_masked(self, axis: int) -> bool:
    """Whether the validity of a read depends on the index along `axis` (a pad or a masked view on it)."""
    axes = [UOp.variable(f"axis{i}", 0, (extent - 1) if isinstance(extent, int) else 1 << 30)
            for i, extent in enumerate(self.shape)]
    _, valid = self.to_indexed_uops(axes)
    return axes[axis] in valid.simplify().toposort

  def real_strides(self, ignore_valid: bool = False) -> tuple:
    """Per axis, how far one step moves in the buffer: an int, or None when it is not a plain stride (an axis
    the index uses non-linearly, or one the validity depends on unless `ignore_valid`)."""
    if len(self.views) == 1 and self.views[0].mask is None: return self.views[0].strides
    axes = [UOp.variable(f"axis{i}", 0, (extent - 1) if isinstance(extent, int)
                         else 1 << 30) for i, extent in enumerate(self.shape)]
    position, valid = self.to_indexed_uops(axes)
    axis_of = {v: i for i, v in enumerate(axes)}
    strides: list = [0] * len(axes)
    for term in _terms(position.simplify()):
      if term in axis_of: strides[axis_of[term]] = 1
      elif term.op is Ops.MUL and term.src[0] in axis_of and term.src[1].op is Ops.CONST:
        strides[axis_of[term.src[0]]] = term.src[1].arg
      else:
        for u in term.toposort:
          if u in axis_of: strides[axis_of[u]] = None
    if not ignore_valid:
      for u in valid.simplify().toposort:
        if u in axis_of: strides[axis_of[u]] = None
    return tuple(strides)

  def unit_stride_axes(self, ignore_valid: bool = False) -> list[int]:
    strides = self.real_strides(ignore_valid)
    return [axis for axis in range(len(strides)) if strides[axis] == 1]

  # ***** variables *****

  def vars(self) -> set[UOp]:
    found: set[UOp] = set()
    for view in self.views: found |= view.vars()
    return found

  def unbind(self) -> tuple[ShapeTracker, dict[UOp, int]]:
    """The chain with bound variables replaced by bare ones, and their values."""
    views, values = [], {}
    for view in self.views:
      unbound, bound = view.unbind()
      views.append(unbound)
      values.update(bound)
    return ShapeTracker(tuple(views)), values

  # ***** movement ops *****

  def _moved(self, method: str, arg) -> ShapeTracker:
    """The chain with View.`method`(arg) applied to its last view."""
    return ShapeTracker((*self.views[:-1], getattr(self.views[-1], method)(arg)))

  def reshape(self, new_shape: tuple) -> ShapeTracker:
    reshaped = self.views[-1].reshape(new_shape)
    if reshaped is None: return ShapeTracker((*self.views, View.create(new_shape)))
    return ShapeTracker((*self.views[:-1], reshaped))

  def mop(self, op: Ops, arg) -> ShapeTracker:
    """Apply the movement op `op` (a RESHAPE, PERMUTE, EXPAND, PAD, SHRINK or FLIP UOp's op and arg)."""
    return self.reshape(arg) if op is Ops.RESHAPE else self._moved(op.name.lower(), arg)


for _method in ("pad", "shrink", "expand", "permute", "flip"):
  setattr(ShapeTracker, _method, lambda self, arg, _m=_method: self._moved(_m, arg))


def _loop_indices(shape: tuple) -> list[UOp]:
  """One RANGE per axis, numbered by axis: the index lowering loops over."""
  zero = sint_to_uop(0)
  return [UOp(Ops.RANGE, dtypes.int32, (zero, sint_to_uop(extent)), axis) for axis, extent in enumerate(shape)]


def _merged_tail(views: tuple) -> tuple:
  while len(views) >= 2 and (merged := views[-2] + views[-1]) is not None: views = (*views[:-2], merged)
  return views


def _terms(expr: UOp) -> list[UOp]:
  """The summands of a sum, in order."""
  terms, todo = [], [expr]
  while todo:
    u = todo.pop()
    if u.op is Ops.ADD: todo.extend(reversed(u.src))
    else: terms.append(u)
  return terms


ops.provide(ShapeTracker=ShapeTracker)
