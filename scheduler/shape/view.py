"""One strided, optionally masked and offset view of a flat buffer: the unit the ShapeTracker stacks.

Sits under `shapetracker.py`. Every movement op (reshape, permute, expand, pad, shrink, flip) maps a
View to a View, or says (by returning None) that a reshape needs a second view.
"""
from __future__ import annotations
import functools, itertools
from dataclasses import dataclass
from typing import Optional
from scheduler.dtype import dtypes
from scheduler.helpers import prod, all_int, argsort, flatten, ceildiv
from scheduler.ops import UOp, Ops, resolve, smax, smin, sint_to_uop, sym_infer


@functools.cache
def canonicalize_strides(shape: tuple, strides: tuple) -> tuple:
  return tuple(0 if s == 1 else st for s, st in zip(shape, strides))


@functools.cache
def strides_for_shape(shape: tuple) -> tuple:
  if not shape: return ()
  strides = [1]
  for d in reversed(shape[1:]): strides.append(d * strides[-1])
  return canonicalize_strides(shape, tuple(reversed(strides)))


def merge_dims(shape: tuple, strides: tuple, mask: Optional[tuple] = None) -> tuple[tuple[int, int, int], ...]:
  """Group axes that are contiguous with each other (or broadcast): (merged size, stride, size before expansion)."""
  if not shape: return ()
  ret = [(shape[0], strides[0], shape[0] if strides[0] != 0 else 0)]
  merging = (mask[0][1] - mask[0][0] == 1) if mask is not None else shape[0] == 1
  for i, (s, st) in enumerate(zip(shape[1:], strides[1:]), start=1):
    last_size, last_stride, last_real = ret[-1]
    if s == 1: continue
    if merging or last_stride == s * st: ret[-1] = (last_size * s, st, (s if merging else last_real * s) if st != 0 else 0)
    else: ret.append((s, st, s if st != 0 else 0))
    merging = (mask[i][1] - mask[i][0] == 1) if mask is not None else s == 1
  return tuple(ret)


def _reshape_mask(mask: Optional[tuple], old_shape: tuple, new_shape: tuple) -> Optional[tuple]:
  """The mask in the new shape, or None when the reshape would cut a masked region in a way one view cannot express."""
  if mask is None: return tuple((0, s) for s in new_shape)
  if not all_int(flatten(mask)): return None
  new_mask: list[tuple[int, int]] = []
  r_masks, r_shape, r_new_shape = reversed(mask), reversed(old_shape), reversed(new_shape)
  curr_stride, old_dim, new_dim, cur = 1, next(r_shape, 1), next(r_new_shape, 1), next(r_masks, (0, 1))
  while len(new_mask) < len(new_shape):
    (lo, hi), next_stride = cur, new_dim * curr_stride
    if old_dim == next_stride:
      new_mask.append((lo // curr_stride, (hi - 1) // curr_stride + 1))
      curr_stride, old_dim, new_dim, cur = 1, next(r_shape, 1), next(r_new_shape, 1), next(r_masks, (0, 1))
    elif old_dim > next_stride:
      if old_dim % next_stride != 0: return None
      if (lo % next_stride != 0 or hi % next_stride != 0) and lo // next_stride != (hi - 1) // next_stride: return None
      new_mask.append((lo % next_stride // curr_stride, (hi - 1) % next_stride // curr_stride + 1))
      curr_stride, new_dim = next_stride, next(r_new_shape, 1)
    else:
      next_mask = next(r_masks, (0, 1))
      if cur != (0, old_dim) and lo != hi and next_mask[1] - next_mask[0] != 1: return None
      cur, old_dim = (next_mask[0] * old_dim + lo, (next_mask[1] - 1) * old_dim + hi), old_dim * next(r_shape, 1)
  return tuple(reversed(new_mask))


def unravel(shape: tuple, offset) -> list:
  """Split a flat offset into per-axis indices of `shape` (row-major)."""
  idxs = []
  for s in reversed(shape):
    idxs.append(offset % s)
    offset //= s
  return idxs[::-1]


@dataclass(frozen=True)
class View:
  shape: tuple
  strides: tuple
  offset: int
  mask: Optional[tuple]
  contiguous: bool

  def stable_repr(self) -> str:
    from scheduler.ops import _stable_repr
    return f"View({_stable_repr(self.shape)},{_stable_repr(self.strides)},{_stable_repr(self.offset)},{_stable_repr(self.mask)})"

  @staticmethod
  @functools.cache
  def create(shape: tuple, strides: Optional[tuple] = None, offset=0, mask: Optional[tuple] = None) -> View:
    if not all(s >= 0 for s in shape if isinstance(s, int)): raise ValueError(f"shape can't contain negative numbers {shape}")
    strides = canonicalize_strides(shape, strides) if strides else strides_for_shape(shape)
    if 0 in shape: return View(shape, (0,) * len(shape), 0, None, True)
    if mask is not None:
      if all(m == (0, s) for m, s in zip(mask, shape)): mask = None
      elif any(resolve(b >= e, False) for b, e in mask): strides, offset, mask = (0,) * len(shape), 0, ((0, 0),) * len(shape)
      elif any(elim := [not resolve(b + 1 < e) for b, e in mask]):
        # an axis whose mask keeps one element reads one fixed position: fold it into the offset
        offset += sum(strides[i] * mask[i][0] for i, e in enumerate(elim) if e)
        strides = tuple(0 if e else st for st, e in zip(strides, elim))
    if isinstance(offset, UOp): offset = offset.ssimplify()
    shape = tuple(s.ssimplify() if isinstance(s, UOp) else s for s in shape)
    contiguous = offset == 0 and mask is None and strides == strides_for_shape(shape)
    return View(shape, tuple(strides), offset, mask, contiguous)

  def size(self) -> int:
    ret = prod(self.shape)
    return ret.ssimplify() if isinstance(ret, UOp) else ret

  def vars(self) -> set[UOp]:
    found: set[UOp] = set()
    for x in (*self.shape, *self.strides, self.offset, *(flatten(self.mask) if self.mask is not None else ())):
      if isinstance(x, UOp): found |= x.vars()
    return found

  def unbind(self) -> tuple[View, dict[UOp, int]]:
    var_unboundvar_val = [(v, v.unbind()) for v in self.vars() if v.op is Ops.BIND]
    unbound = {v: uv for v, (uv, _) in var_unboundvar_val}
    def sub(x): return x.substitute(unbound) if isinstance(x, UOp) else x
    new_mask = tuple((sub(a), sub(b)) for a, b in self.mask) if self.mask is not None else None
    return View.create(tuple(sub(s) for s in self.shape), tuple(sub(s) for s in self.strides), sub(self.offset), new_mask), \
      dict(x[1] for x in var_unboundvar_val)

  def to_indexed_uops(self, idxs: list[UOp], vexpr: UOp = UOp.const(dtypes.bool, True)) -> tuple[UOp, UOp]:
    iexpr = sint_to_uop(self.offset)
    for idx, sh, st, m in zip(idxs, self.shape, self.strides, self.mask if self.mask is not None else itertools.repeat(None)):
      if resolve(sh != 1) and resolve(st != 0): iexpr = iexpr + idx * st
      if m is not None:
        if resolve(m[0] != 0): vexpr = vexpr.alu(Ops.AND, (idx < m[0]).logical_not())
        if resolve(sh - m[1] != 0): vexpr = vexpr.alu(Ops.AND, idx < m[1])
    return iexpr, vexpr

  # ***** merging two views *****

  @functools.cache
  def __add__(self, vm1: View) -> Optional[View]:
    """The single view equal to applying `vm1` on top of `self`, or None when there is none."""
    vm2 = self
    if vm2.contiguous: return vm1
    if vm1.contiguous and vm1.shape == vm2.shape: return vm2
    if vm1.contiguous and vm1.size() == vm2.size() and (ret := vm2.reshape(vm1.shape)) is not None: return ret
    if vm1.mask:
      if (new_vm1 := vm1.shrink(vm1.mask)) == vm1 or (merged := vm2 + new_vm1) is None: return None
      return merged.pad(tuple((b, s - e) for (b, e), s in zip(vm1.mask, vm1.shape)))
    if not all_int(vm1.shape) or not all_int(vm2.shape) or not all_int(vm1.strides) or not isinstance(vm1.offset, int): return None
    # project vm1's offset and strides onto vm2's axes
    origin = unravel(vm2.shape, vm1.offset)
    terms: list[list[tuple[int, int]]] = [[] for _ in vm2.shape]
    strides: list = [0] * len(vm1.shape)
    for d1, st in enumerate(vm1.strides):
      if st == 0: continue
      for d2, (o, s1) in enumerate(zip(origin, unravel(vm2.shape, vm1.offset + st))):
        if (s1 := s1 - o) == 0: continue
        terms[d2].append((d1, s1))
        strides[d1] += s1 * vm2.strides[d2]
    # merge vm2 axes only where vm1 walks across them
    idxs = [UOp.variable(f"idx{i}", 0, s - 1) for i, s in enumerate(vm1.shape)]
    merged_size, merged_term = 1, UOp.const(dtypes.int32, 0)
    extents: list[tuple[int, UOp]] = []
    for term, s, o in zip(reversed(terms), reversed(vm2.shape), reversed(origin)):
      merged_term = merged_term + (sum([idxs[d1] * s1 for d1, s1 in term], UOp.const(dtypes.int32, 0)) + o) * merged_size
      merged_size *= s
      if resolve(merged_term < merged_size, False) and resolve(merged_term >= 0, False):
        extents.append((merged_size, merged_term))
        merged_size, merged_term = 1, UOp.const(dtypes.int32, 0)
    if resolve(merged_term.ne(0)): return None
    if (vm2_shape := tuple(s for s, _ in reversed(extents))) != vm2.shape:
      if (reshaped_vm2 := vm2.reshape(vm2_shape)) is None: return None
      if reshaped_vm2.shape != vm2.shape: return reshaped_vm2 + vm1
    if vm2.mask:
      newb, newe, bad = [0] * len(vm1.shape), list(vm1.shape), False
      for (b, e), o, term, (_, t) in zip(vm2.mask, origin, terms, reversed(extents)):
        if resolve(b <= t.vmin and t.vmax < e, False): continue
        if len(term) != 1:
          if not term and newe: newe[0] = 0
          else: bad = True
          continue
        d1, s1 = term[0]
        newb[d1] = max(newb[d1], ceildiv(b - o if s1 > 0 else e - o - 1, s1))
        newe[d1] = min(newe[d1], (b - o if s1 < 0 else e - o - 1) // s1 + 1)
      if any((b, e) != (0, s) for b, e, s in zip(newb, newe, vm1.shape)):
        return vm2 + View.create(vm1.shape, vm1.strides, vm1.offset, tuple(zip(newb, newe)))
      if bad: return None
    return View.create(vm1.shape, tuple(strides), sum(o * s for o, s in zip(origin, vm2.strides)) + vm2.offset)

  def invert(self, out_shape: tuple) -> Optional[View]:
    ret = View.create(self.shape)
    if self.mask: ret = ret.shrink(self.mask)
    ret = ret.flip(tuple(x < 0 for x in self.strides)).permute(argsort(tuple(-x if x > 0 else x for x in self.strides)))
    return ret if prod(ret.shape) == prod(out_shape) else None

  def minify(self) -> View:
    min_shape = tuple(x[0] for x in merge_dims(self.shape, self.strides, self.mask))
    return nv if (nv := self.reshape(min_shape)) else self

  # ***** movement ops *****

  def _unsafe_resize(self, arg: tuple, mask: Optional[tuple] = None) -> View:
    offset = sum(s * x[0] for s, x in zip(self.strides, arg))
    if self.mask:
      nmask = tuple((smax(0, smin(mx - ax, ay - ax)), smax(0, smin(my - ax, ay - ax))) for (mx, my), (ax, ay) in zip(self.mask, arg))
      mask = tuple((smax(mx1, mx2), smin(my1, my2)) for (mx1, my1), (mx2, my2) in zip(nmask, mask)) if mask is not None else nmask
    return View.create(tuple(y - x for x, y in arg), self.strides, self.offset + offset, mask)

  def pad(self, arg: tuple) -> View:
    if len(arg) != len(self.shape): raise ValueError(f"invalid pad {arg} for {self.shape}")
    if any(resolve(b < 0, False) or resolve(e < 0, False) for b, e in arg): raise ValueError(f"pad must be non-negative, got {arg}")
    if any(resolve(b != 0) or resolve(e != 0) for b, e in arg):
      zvarg = tuple((-b, s + e) for s, (b, e) in zip(self.shape, arg))
      mask = tuple((b, s + b) for s, (b, _) in zip(self.shape, arg))
      return self._unsafe_resize(zvarg, mask=mask)
    return self

  def shrink(self, arg: tuple) -> View:
    if len(arg) != len(self.shape): raise ValueError(f"invalid shrink {arg} for {self.shape}")
    if not all(resolve(0 <= b) and resolve(b <= e) and resolve(e <= s) for s, (b, e) in zip(self.shape, arg)):
      raise ValueError(f"invalid shrink {arg} for {self.shape}")
    return self._unsafe_resize(arg)

  def expand(self, new_shape: tuple) -> View:
    if len(new_shape) != len(self.shape): raise ValueError(f"expand arg {new_shape} must have the same number of dims as {self.shape}")
    if 0 in self.shape:
      if not all((s == x == 0) or (s > 0 and (x % s) == 0) for s, x in zip(self.shape, new_shape)): raise ValueError(f"can't expand {self.shape} into {new_shape}")
      return View.create(new_shape)
    if not all(resolve(s == x, False) or s == 1 for s, x in zip(self.shape, new_shape)): raise ValueError(f"can't expand {self.shape} into {new_shape}")
    mask = tuple((((0, 0) if m != (0, 1) else (0, ns)) if resolve(s != ns, False) else m) for m, s, ns in zip(self.mask, self.shape, new_shape)) \
      if self.mask else None
    return View.create(new_shape, self.strides, self.offset, mask)

  def permute(self, axis: tuple) -> View:
    if sorted(axis) != list(range(len(self.shape))): raise ValueError(f"invalid permutation {axis} of len {len(self.shape)}")
    return View.create(tuple(self.shape[a] for a in axis), tuple(self.strides[a] for a in axis), self.offset,
                       tuple(self.mask[a] for a in axis) if self.mask is not None else None)

  def flip(self, arg: tuple) -> View:
    offset = sum((s - 1) * z for s, z, f in zip(self.shape, self.strides, arg) if f)
    mask = tuple((s - my, s - mx) if f else (mx, my) for (mx, my), s, f in zip(self.mask, self.shape, arg)) if self.mask is not None else None
    return View.create(self.shape, tuple(-z if f else z for z, f in zip(self.strides, arg)), self.offset + offset, mask)

  def reshape(self, new_shape: tuple) -> Optional[View]:
    if self.shape == new_shape: return self
    if not all(isinstance(s, (int, UOp)) and (not isinstance(s, int) or s >= 0) for s in new_shape):
      raise ValueError(f"shape must be non-negative ints or variables, got {new_shape}")
    self_all_int = all_int(self.shape)
    if self_all_int and all_int(new_shape) and prod(self.shape) != prod(new_shape):
      raise ValueError(f"size mismatched, can't reshape {self.shape} -> {new_shape}")
    if 0 in self.shape: return View.create(new_shape)
    if new_shape == () and self.mask and any(mx == my for (mx, my) in self.mask): return None
    if self.contiguous: return View.create(new_shape)
    if self_all_int and not all_int(new_shape):
      if len(self.shape) != len(new_shape): raise ValueError(f"cannot symbolic reshape non-contiguous {self.shape} -> {new_shape}")
      for si, so in zip(self.shape, new_shape):
        if not isinstance(so, int): so = sym_infer(so, dict(v.unbind() for v in so.vars() if v.op is Ops.BIND))
        if si != so: raise ValueError(f"cannot symbolic reshape non-contiguous {self.shape} -> {new_shape}")
      return View(new_shape, self.strides, self.offset, self.mask, self.contiguous)
    if not self_all_int: return None
    strides: list = []
    r_new_shape = reversed(new_shape)
    for merged_size, new_stride, real_size in reversed(merge_dims(self.shape, self.strides, self.mask)):
      acc = 1
      while acc < merged_size and (new_dim := next(r_new_shape, 0)) > 0:
        strides.append(new_stride)
        if new_dim != 1: new_stride *= (new_dim if (acc := acc * new_dim) < real_size else 0)
      if acc != merged_size: return None
    new_strides = (0,) * (len(new_shape) - len(strides)) + tuple(strides[::-1])
    if (new_mask := _reshape_mask(self.mask, self.shape, new_shape)) is not None:
      extra_offset = (sum(m[0] * s for m, s in zip(self.mask, self.strides)) if self.mask else 0) - \
                     (sum(m[0] * s for m, s in zip(new_mask, new_strides)))
      return View.create(new_shape, new_strides, self.offset + extra_offset, new_mask)
    return None
