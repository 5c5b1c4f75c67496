"""ShapeTracker: a stack of Views mapping a logical shape onto a flat buffer.

Sits on `view.py`; the tensor frontend applies movement ops to it, the scheduler merges and pushes
it through kernels, and lowering turns it into index and valid expressions (`to_indexed_uops`).
"""
from __future__ import annotations
from dataclasses import dataclass
from typing import Optional
from scheduler.dtype import dtypes
from scheduler.ops import UOp, Ops, sint_to_uop
from scheduler.shape.view import View, strides_for_shape, unravel


@dataclass(frozen=True)
class ShapeTracker:
  views: tuple[View, ...]

  def stable_repr(self) -> str: return "ST(" + ",".join(v.stable_repr() for v in self.views) + ")"

  def __add__(self, st: ShapeTracker) -> ShapeTracker:
    ret = self
    for v in st.views: ret = ShapeTracker(ret.views + (v,)).simplify()
    return ret

  def invert(self, out_shape: tuple) -> Optional[ShapeTracker]:
    inverted_views: list[View] = []
    for v, s in zip(self.views[::-1], [x.shape for x in self.views[::-1][1:]] + [out_shape]):
      if (inverted := v.invert(s)) is None: return None
      inverted_views.append(inverted)
    return ShapeTracker(tuple(inverted_views)).reshape(out_shape)

  @staticmethod
  def from_shape(shape: tuple) -> ShapeTracker: return ShapeTracker((View.create(shape),))

  @property
  def contiguous(self) -> bool: return len(self.views) == 1 and self.views[0].contiguous

  @property
  def consecutive(self) -> bool: return len(self.views) == 1 and (v := self.views[0]).mask is None and v.strides == strides_for_shape(v.shape)

  @property
  def shape(self) -> tuple: return self.views[-1].shape

  @property
  def size(self) -> int: return self.views[-1].size()

  def reduce(self, axis: tuple) -> tuple: return tuple(1 if i in axis else s for i, s in enumerate(self.shape))

  def to_uop(self) -> UOp: return UOp(Ops.VIEW, dtypes.void, (), self)

  def to_indexed_uops(self, idxs: Optional[list[UOp]] = None) -> tuple[UOp, UOp]:
    """(index, valid) expressions of the flat buffer position read at the logical position `idxs`."""
    if idxs is None: idxs = [UOp(Ops.RANGE, dtypes.int32, (sint_to_uop(0), sint_to_uop(s)), i) for i, s in enumerate(self.shape)]
    idx, valid = self.views[-1].to_indexed_uops(idxs)
    for view in reversed(self.views[0:-1]):
      view = view.minify()
      idx, valid = view.to_indexed_uops([sint_to_uop(i) for i in unravel(view.shape, idx)], valid)
    return idx, valid

  def real_size(self) -> int:
    if 0 in self.shape: return 0
    idx, valid = self.to_indexed_uops()
    if not valid.vmax: return 0
    return int(idx.vmax + 1)

  def vars(self) -> set[UOp]: return set().union(*[v.vars() for v in self.views])

  @property
  def var_vals(self) -> dict[UOp, int]: return dict(x.unbind() for x in self.vars() if x.op is Ops.BIND)

  def unbind(self) -> tuple[ShapeTracker, dict[UOp, int]]:
    unbound_views, var_vals = zip(*[v.unbind() for v in self.views])
    return ShapeTracker(tuple(unbound_views)), {k: v for vv in var_vals for k, v in vv.items()}

  def real_strides(self, ignore_valid: bool = False) -> tuple:
    """Per axis, the stride in the flat buffer, or None when the axis is not a plain stride (merged views, masks)."""
    if len(self.views) == 1 and self.views[-1].mask is None: return self.views[-1].strides
    ret: list = [None] * len(self.shape)
    idx, valid = self.to_indexed_uops([UOp.variable(f"idx{i}", 0, max(int(s) - 1, 0) if isinstance(s, int) else 1 << 30)
                                        for i, s in enumerate(self.shape)])
    idx = idx.simplify()
    terms = _split_add(idx)
    for this_dim in terms:
      if this_dim.op is Ops.DEFINE_VAR and this_dim.arg[0].startswith("idx"): ret[int(this_dim.arg[0][3:])] = 1
      elif this_dim.op is Ops.MUL and this_dim.src[0].op is Ops.DEFINE_VAR and this_dim.src[1].op is Ops.CONST \
           and this_dim.src[0].arg[0].startswith("idx"):
        ret[int(this_dim.src[0].arg[0][3:])] = this_dim.src[1].arg
    used = {x for t in terms for x in t.toposort if x.op is Ops.DEFINE_VAR}
    for i, s in enumerate(self.shape):
      if not any(v.arg[0] == f"idx{i}" for v in used) and ret[i] is None: ret[i] = 0
    if not ignore_valid:
      for v in valid.toposort:
        if v.op is Ops.DEFINE_VAR and v.arg[0].startswith("idx"): ret[int(v.arg[0][3:])] = None
    return tuple(ret)

  def unit_stride_axes(self, ignore_valid=False) -> list[int]: return [i for i, st in enumerate(self.real_strides(ignore_valid)) if st == 1]

  def axis_is_masked(self, axis: int) -> bool:
    _, valid = self.to_indexed_uops()
    return any(x.op is Ops.RANGE and x.arg == axis for x in valid.simplify().toposort)

  def simplify(self) -> ShapeTracker:
    if len(self.views) >= 2 and (new_view := self.views[-2] + self.views[-1]) is not None:
      return ShapeTracker(self.views[:-2] + (new_view,)).simplify()
    return self

  # ***** movement ops *****

  def reshape(self, new_shape: tuple) -> ShapeTracker:
    if (new_view := self.views[-1].reshape(new_shape)) is not None: return ShapeTracker(self.views[0:-1] + (new_view,))
    return ShapeTracker(self.views + (View.create(new_shape),))

  def pad(self, arg: tuple) -> ShapeTracker: return ShapeTracker(self.views[0:-1] + (self.views[-1].pad(arg),))
  def shrink(self, arg: tuple) -> ShapeTracker: return ShapeTracker(self.views[0:-1] + (self.views[-1].shrink(arg),))
  def expand(self, new_shape: tuple) -> ShapeTracker: return ShapeTracker(self.views[0:-1] + (self.views[-1].expand(new_shape),))
  def permute(self, axis: tuple) -> ShapeTracker: return ShapeTracker(self.views[0:-1] + (self.views[-1].permute(axis),))
  def flip(self, mul: tuple) -> ShapeTracker: return ShapeTracker(self.views[0:-1] + (self.views[-1].flip(mul),))

  def mop(self, op: Ops, arg) -> ShapeTracker:
    return {Ops.RESHAPE: self.reshape, Ops.PERMUTE: self.permute, Ops.EXPAND: self.expand, Ops.PAD: self.pad,
            Ops.SHRINK: self.shrink, Ops.FLIP: self.flip}[op](arg)


def _split_add(x: UOp) -> list[UOp]:
  return _split_add(x.src[0]) + _split_add(x.src[1]) if x.op is Ops.ADD else [x]
