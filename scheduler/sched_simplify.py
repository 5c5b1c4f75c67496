"""Scheduler phase 1, simplification (SCHEDULER.md S12-S32): the tensor graph as the frontend built it
becomes a graph of VIEWs over bases, folded, with zero-size work, autograd markers and no-op copies gone.

`simplify_tensor_graph(big_sink)` returns what every tensor node became (the map S56 needs) and the
simplified SINK. All rules run through the pattern matcher: the view rules (S12, `merge_views`), the
algebraic folds (S13, `symbolic_simple`), then `tensor_rules`: S14-S31 as named patterns (the trace of
`replay show --why` names them) in the priority of S32. S31 is order dependent by design (A1): it remembers
contiguous copies met earlier in the walk.
"""
from __future__ import annotations
from typing import Optional
from scheduler.helpers import all_int, dedup, prod, SPLIT_REDUCEOP, REDUCEOP_SPLIT_THRESHOLD, REDUCEOP_SPLIT_SIZE, \
  CAST_AFTER_EXPAND
from scheduler.ops import (UOp, Ops, GroupOp, UPat, PatternMatcher, graph_rewrite_map, identity_element, resolve,
                           named_rule)
from scheduler.symbolic import symbolic_simple
from scheduler.shape.shapetracker import ShapeTracker

# ***** S12: view rules *****

def _unmasked(chain: ShapeTracker) -> bool: return all(v.mask is None for v in chain.views)


def _view_rules(view: UOp) -> Optional[UOp]:
  """S12: movement ops become one VIEW of their base; stacked views compose; views of unmasked constants fold
  into the constant; a contiguous same-shape view disappears; a view of an empty mask range is zero."""
  if view.op in GroupOp.Movement: return view.src[0].view(view.st)
  source = view.src[0] if view.src else None
  if source is None: return None
  if source.op is Ops.VIEW: return source.replace(arg=source.st + view.st)
  if source.op in (Ops.CONST, Ops.DEFINE_VAR) and source.src and source.src[0].op is Ops.VIEW:
    own = source.src[0]
    if _unmasked(composed := own.st + view.st): return source.replace(src=(own.replace(arg=composed),))
  if source.op is Ops.DEVICE: return None
  if source.st is not None and view.st.contiguous and source.shape == view.shape: return source
  mask = view.st.views[-1].mask
  if mask is not None and any((end - begin) == 0 for begin, end in mask): return view.const_like(0)
  return None


merge_views = PatternMatcher([(UPat((Ops.VIEW, *GroupOp.Movement), name="view"), _view_rules)])


# ***** S13-S31 *****

def _is_zero_const(u: UOp) -> bool: return u.op is Ops.CONST and u.arg == 0


@named_rule("S14", "zero size")
def zero_size_is_zero(ctx: dict, u: UOp) -> Optional[UOp]:
  """S14: a node with a shape and no elements is the constant 0 of its shape."""
  if u.op is Ops.SINK or u.base.st is None or _is_zero_const(u.base): return None
  return u.const_like(0) if isinstance(u.size, int) and u.size == 0 else None


@named_rule("S15", "autograd marker")
def drop_autograd_marker(ctx: dict, u: UOp) -> Optional[UOp]:
  """S15: DETACH and CONTIGUOUS_BACKWARD only matter to autograd."""
  return u.src[0]


@named_rule("S16", "empty reduce")
def empty_reduce_is_identity(ctx: dict, r: UOp) -> Optional[UOp]:
  """S16: a reduce of nothing into something is its op's identity."""
  source_size = r.src[0].size
  if isinstance(source_size, int) and source_size == 0 and not (isinstance(r.size, int) and r.size == 0):
    return r.const_like(identity_element(r.arg[0], r.dtype))
  return None


@named_rule("S17", "broadcast reduce")
def broadcast_reduce_is_arithmetic(ctx: dict, r: UOp) -> Optional[UOp]:
  """S17: reducing along axes the input only broadcasts is a multiply (ADD), a power (MUL) or nothing (MAX)."""
  x, (combine, axes) = r.src[0], r.arg
  views = x.st.views
  if any(v.mask is not None for v in views) or not all_int(x.shape): return None
  if any(views[-1].strides[a] != 0 for a in axes): return None
  one_slice = x.shrink(tuple((0, 1) if i in axes else (0, extent) for i, extent in enumerate(x.shape)))
  count = prod(x.shape[a] for a in axes)
  if combine is Ops.ADD: return one_slice * count
  if combine is Ops.MAX: return one_slice
  return _power(one_slice, count)


def _power(x: UOp, count: int) -> UOp:
  """x ** count for a count >= 1 (0 gives x, as before) by squaring: O(log count) MULs, never a chain of count."""
  result: Optional[UOp] = None
  while count > 1:
    if count & 1: result = x if result is None else result * x
    x, count = x * x, count >> 1
  return x if result is None else result * x


def _split_candidate(r: UOp) -> Optional[tuple[int, int]]:
  """S18: the first (axis, divisor) that qualifies for splitting a big reduce, or None."""
  x = r.src[0]
  if not SPLIT_REDUCEOP or not all_int(x.shape) or not all_int(r.shape): return None
  out_size = prod(r.shape)
  if prod(x.shape) // out_size < REDUCEOP_SPLIT_THRESHOLD.value: return None
  largest = min(256, 2 ** REDUCEOP_SPLIT_SIZE.value // out_size)
  strides = x.st.real_strides(ignore_valid=True)
  for axis in r.arg[1]:
    for divisor in range(largest, 7, -1):
      if x.shape[axis] % divisor == 0 and strides[axis] != 0: return axis, divisor
  return None


@named_rule("S18", "split reduce")
def split_big_reduce(ctx: dict, r: UOp) -> Optional[UOp]:
  """S18: reduce into `divisor` partial results first (inner factor fastest), then reduce those."""
  if (found := _split_candidate(r)) is None: return None
  axis, divisor = found
  x, (combine, axes) = r.src[0], r.arg
  split_shape = x.shape[:axis] + (divisor, x.shape[axis] // divisor) + x.shape[axis + 1:]
  outer_last = tuple(i for i in range(len(split_shape)) if i != axis) + (axis,)
  partial = x.reshape(split_shape).permute(outer_last).r(combine, axes)
  return partial.r(combine, (len(split_shape) - 1,)).reshape(r.shape)


@named_rule("S19", "copy of a constant")
def copy_of_const(ctx: dict, copy: UOp) -> Optional[UOp]:
  """S19: a copied constant is that constant on the destination device."""
  source = copy.src[1]
  return copy.const_like(source.arg) if source.op is Ops.CONST else None


@named_rule("S20", "copy to its own device")
def copy_to_own_device(ctx: dict, copy: UOp) -> Optional[UOp]:
  """S20: copying to the device the value already lives on does nothing, unless it is a clone."""
  source = copy.src[1]
  return source if copy.arg is not True and source.device == copy.device else None


@named_rule("S23", "contiguous whole buffer")
def contiguous_of_whole_buffer(ctx: dict, c: UOp) -> Optional[UOp]:
  """S23: a contiguous view covering a whole buffer already is contiguous (W9)."""
  view = c.src[0]
  if view.op is Ops.VIEW and view.src[0].op is Ops.BUFFER and view.st.contiguous and view.size == view.src[0].size:
    return view
  return None


@named_rule("S24", "contiguous of contiguous")
def contiguous_of_contiguous(ctx: dict, c: UOp) -> Optional[UOp]:
  """S24: CONTIGUOUS of a CONTIGUOUS, a BUFFER or a COPY is its source."""
  return c.src[0] if c.src[0].op in (Ops.CONTIGUOUS, Ops.BUFFER, Ops.COPY) else None


class DiskViewError(RuntimeError):
  """D7: a DISK tensor can only be read as one contiguous range of its file."""


@named_rule("S25", "DISK byte view")
def disk_buffer_view(ctx: dict, u: UOp) -> Optional[UOp]:
  """S25: on DISK, BITCAST and CONTIGUOUS are byte views of the file, not kernels. The reference ignores
  strides and masks here (D7); a view that is not one contiguous range is an error instead."""
  source = u.src[0]
  if not source.device.startswith("DISK"): return None
  chain = source.st
  first = chain.views[0]
  if (len(chain.views) != 1 or first.mask is not None
      or first.strides != ShapeTracker.from_shape(first.shape).views[0].strides):
    raise DiskViewError(f"a strided or masked view of a DISK tensor (shape {source.shape}) cannot be read from the "
                        f"file (D7); "
                        "copy the whole tensor to another device first, then view it there")
  first_offset = first.offset
  return UOp(Ops.BUFFER_VIEW, u.dtype, (source.base,), (u.size, first_offset)).reshape(u.shape)


@named_rule("S26", "clean sink")
def clean_sink(ctx: dict, sink: UOp) -> Optional[UOp]:
  """S26: outputs that are constants or bound variables need no kernel; views of a value realize its base."""
  kept = tuple(dedup(s.base for s in sink.src if s.op not in (Ops.CONST, Ops.BIND)))
  return sink.replace(src=kept) if kept != sink.src else None


def _expands(view: UOp) -> bool: return resolve(prod(view.shape) > view.st.real_size())


@named_rule("S27", "narrow cast before expand")
def narrow_cast_before_expand(ctx: dict, cast: UOp) -> Optional[UOp]:
  """S27: a cast that does not widen is applied before an expanding view, to the smaller base."""
  view = cast.src[0]
  if view.op is not Ops.VIEW or cast.dtype.itemsize > view.dtype.itemsize: return None
  if CAST_AFTER_EXPAND and view.base.op is Ops.BUFFER: return None
  return view.base.cast(cast.dtype).view(view.st) if _expands(view) else None


@named_rule("S28", "copy of a view")
def copy_of_view(ctx: dict, copy: UOp) -> Optional[UOp]:
  """S28: copy only what a smaller view keeps (made contiguous first); else copy the base and view the copy."""
  view = copy.src[1]
  if view.op is not Ops.VIEW: return None
  if resolve(prod(view.shape) < prod(view.base.shape)): return view.contiguous().copy_to_device(copy.device)
  return view.base.copy_to_device(copy.device, clone=copy.arg).view(view.st)


@named_rule("S29", "unary before expand")
def unary_before_expand(ctx: dict, u: UOp) -> Optional[UOp]:
  """S29: a unary op of an expanding view is applied to the view's source, under the same view."""
  view = u.src[0]
  if view.op is not Ops.VIEW or not resolve(prod(u.shape) > view.st.real_size()): return None
  # a masked view reads 0 outside its mask: moving the op under it is right only for ops with op(0) == 0
  if not _unmasked(view.st) and u.op not in (Ops.NEG, Ops.SQRT, Ops.SIN): return None
  return view.src[0].alu(u.op).view(view.st)


@named_rule("S30", "cast after expand")
def view_of_cast_of_buffer(ctx: dict, view: UOp) -> Optional[UOp]:
  """S30 (CAST_AFTER_EXPAND only): an expanding view of a cast buffer value casts after the view."""
  cast = view.src[0]
  if not CAST_AFTER_EXPAND or cast.op is not Ops.CAST: return None
  x = cast.src[0]
  if x.base.op is not Ops.BUFFER or not resolve(prod(view.shape) > prod(x.shape)): return None
  return x.view(x.st + view.st).cast(view.dtype)


@named_rule("S31", "remember contiguous copy")
def remember_contiguous_copy(ctx: dict, c: UOp) -> Optional[UOp]:
  """S31, first half: CONTIGUOUS(VIEW(x)) with an invertible chain makes x readable from that copy."""
  view = c.src[0]
  if view.op is Ops.VIEW and (inverse := view.st.invert(view.base.shape)) is not None: ctx[view.base] = c.view(inverse)
  return None


@named_rule("S31", "read contiguous copy")
def read_contiguous_copy(ctx: dict, u: UOp) -> Optional[UOp]:
  """S31, second half: elementwise ops that read x directly read the remembered copy instead."""
  swapped = tuple(ctx.get(s, s) for s in u.src)
  return u.replace(src=swapped) if swapped != u.src else None


# S32: the rules of S14-S31 in priority order; the matcher tries a node's rules in the order they are listed, so S14
# comes first for every op (S21 and S22 are about image dtypes, which this compiler has not)
tensor_rules = PatternMatcher([
  (UPat(GroupOp.All, name="u"), zero_size_is_zero),
  (UPat((Ops.DETACH, Ops.CONTIGUOUS_BACKWARD), name="u"), drop_autograd_marker),
  (UPat(Ops.REDUCE_AXIS, name="r"), empty_reduce_is_identity),
  (UPat(Ops.REDUCE_AXIS, name="r"), broadcast_reduce_is_arithmetic),
  (UPat(Ops.REDUCE_AXIS, name="r"), split_big_reduce),
  (UPat(Ops.COPY, name="copy"), copy_of_const),
  (UPat(Ops.COPY, name="copy"), copy_to_own_device),
  (UPat(Ops.COPY, name="copy"), copy_of_view),
  (UPat(Ops.CONTIGUOUS, name="c"), contiguous_of_whole_buffer),
  (UPat(Ops.CONTIGUOUS, name="c"), contiguous_of_contiguous),
  (UPat((Ops.CONTIGUOUS, Ops.BITCAST), name="u"), disk_buffer_view),
  (UPat(Ops.CONTIGUOUS, name="c"), remember_contiguous_copy),
  (UPat(Ops.SINK, name="sink"), clean_sink),
  (UPat(Ops.CAST, name="cast"), narrow_cast_before_expand),
  (UPat(Ops.VIEW, name="view"), view_of_cast_of_buffer),
  (UPat(GroupOp.Unary, name="u"), unary_before_expand),
  (UPat(GroupOp.ALU, name="u"), read_contiguous_copy),
])
simplify_rules = merge_views + symbolic_simple + tensor_rules


def simplify_tensor_graph(big_sink: UOp) -> dict[UOp, UOp]:
  """What every node of the tensor graph became after S12-S31 (the SINK maps to the simplified SINK)."""
  return graph_rewrite_map(big_sink, simplify_rules, ctx={})
