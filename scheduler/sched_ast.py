"""Scheduler phase 7 (SCHEDULER.md S62-S75): the AST of one kernel, built when its item is emitted.

`KernelAst.build()` evaluates the kernel's expression *under a view chain*: `_lower(u, chain)` returns
u's value seen through `chain` (whose input is u's contiguous layout), pushing the chain down to the
leaves (S63), where it becomes the view of a LOAD, a CONST or a VALID guard (S69, S71). A reduce seen
through anything but its own shape is swizzled (S65), also for contiguous reshapes, which is what makes
D1 and D2 come out right (S66). A swizzled reduce adds extent-1 axes at the end of the iteration space;
every result therefore lives in a *frame*: the requested shape plus trailing 1s. Sources of one op are
brought into one frame (S67) and the store view takes the final frame (S70).
"""
from __future__ import annotations
from typing import Optional
from scheduler.dtype import dtypes
from scheduler.helpers import prod, evaluate
from scheduler.ops import UOp, Ops, GroupOp
from scheduler.shape.shapetracker import ShapeTracker
from scheduler.shape.view import View, strides_for_shape
from scheduler.sched_kernels import Kernel, ScheduleError, buffer_of

SELF_OPERAND_ERROR = ("self operand of augmented assign must be contiguous.\nhelp: consider using .contiguous():\n"
                      "\x1b[31m   - a += a.T\x1b[0m\n\x1b[32m   + a += a.T.contiguous()\x1b[0m")
ELEMENTWISE = frozenset({*GroupOp.ALU, Ops.CAST, Ops.BITCAST})
Frame = tuple


def _is_identity(chain: ShapeTracker, shape: tuple) -> bool: return chain.contiguous and chain.shape == shape


def _trailing_ones(shape: tuple) -> int:
  count = 0
  for extent in reversed(shape):
    if not (isinstance(extent, int) and extent == 1): break
    count += 1
  return count


def _extend_with_axes(chain: ShapeTracker, extents: tuple) -> ShapeTracker:
  """S65 step 2: every view gains `extents` as trailing axes, laid out row-major inside each old element."""
  block = prod(extents)
  inner_strides = strides_for_shape(extents)
  views = []
  for v in chain.views:
    mask = None if v.mask is None else v.mask + tuple((0, e) for e in extents)
    views.append(View.create(v.shape + extents, tuple(s * block for s in v.strides) + inner_strides, v.offset * block,
                             mask))
  return ShapeTracker(tuple(views))


def _memory_range(chain: ShapeTracker) -> Optional[tuple[int, int]]:
  """Lowest and highest buffer position the chain can touch (None when symbolic)."""
  first = chain.views[0]
  low = high = first.offset
  for axis, (extent, stride) in enumerate(zip(first.shape, first.strides)):
    begin, end = first.mask[axis] if first.mask is not None else (0, extent)
    if not all(isinstance(x, int) for x in (begin, end, stride, low)): return None
    if end <= begin: return None
    low, high = low + min(stride * begin, stride * (end - 1)), high + max(stride * begin, stride * (end - 1))
  return low, high


class KernelAst:
  """Builds the AST of one kernel; bindings met on the way go into `var_vals` (S72)."""

  def __init__(self, kernel: Kernel, kernels: dict[UOp, Kernel], var_vals: dict[UOp, int]):
    self.kernel, self.kernels, self.var_vals = kernel, kernels, var_vals
    self.buffers: list[UOp] = [kernel.buffer] + [buffer_of(u, kernels) for u in kernel.inputs]
    self.index_of_input = {kernel.buffer: 0, **{u: i + 1 for i, u in enumerate(kernel.inputs)}}
    self.cache: dict[tuple[UOp, ShapeTracker], tuple[UOp, Frame]] = {}

  # ***** leaves *****

  def record_binding(self, var: UOp, value: int) -> None:
    """D9: one variable, one value per schedule."""
    if (known := self.var_vals.get(var)) is not None and known != value:
      raise ScheduleError(f"variable {var.arg[0]!r} is bound to both {known} and {value} in one schedule")
    self.var_vals[var] = value

  def view(self, chain: ShapeTracker) -> UOp:
    """A bare VIEW leaf: simplified, with bound variables replaced by their DEFINE_VAR (S72)."""
    unbound, bindings = chain.simplify().unbind()
    for var, value in bindings.items(): self.record_binding(var, value)
    return unbound.to_uop()

  def global_buffer(self, index: int) -> UOp:
    buf = self.buffers[index]
    return UOp(Ops.DEFINE_GLOBAL, buf.dtype.ptr(buf.arg[1]), (), index)

  def load(self, u: UOp, chain: ShapeTracker) -> UOp:
    """S62, S69: an input read through `chain` (an ASSIGN input reads its target's buffer through the target view)."""
    index = self.index_of_input[u]
    if u.op is Ops.ASSIGN: base_chain = u.src[0].st
    elif u.op is Ops.BUFFER: base_chain = ShapeTracker.from_shape((u.arg[1],))
    else: base_chain = ShapeTracker.from_shape(u.shape)
    return UOp(Ops.LOAD, u.dtype, (self.global_buffer(index), self.view(base_chain + chain)))

  def constant(self, u: UOp, chain: ShapeTracker) -> UOp:
    """S71: a CONST or variable under a chain; a masked chain becomes a VALID guard."""
    value = u.replace(src=()) if u.op is Ops.DEFINE_VAR else u
    if not u.src: return value
    composed = u.src[0].st + chain
    if any(v.mask is not None for v in composed.views):
      scalar = u.replace(src=())
      return UOp(Ops.VALID, dtypes.bool, (self.view(composed),)).where(scalar, scalar.const_like(0))
    return value if u.op is Ops.DEFINE_VAR else u.replace(src=(self.view(composed),))

  # ***** the expression under a chain *****

  def lower(self, u: UOp, chain: ShapeTracker) -> tuple[UOp, Frame]:
    """u's value through `chain` and its frame, memoized per (u, chain); deep expressions need no deep recursion:
    `_lower` yields the (source, chain) pairs it needs and `evaluate` computes them first."""
    return evaluate((u, chain), self._lower, self.cache)

  def _lower(self, request: tuple[UOp, ShapeTracker]):
    u, chain = request
    if u in self.index_of_input: return self.load(u, chain), chain.shape
    if u.op is Ops.VIEW: return (yield (u.src[0], u.st + chain))
    if u.op is Ops.CONTIGUOUS: return (yield (u.src[0], chain))          # S72
    if u.op is Ops.BIND:
      self.record_binding(u.src[0].replace(src=()), u.src[1].arg)
      return (yield (u.src[0], chain))
    if u.op in (Ops.CONST, Ops.DEFINE_VAR): return self.constant(u, chain), chain.shape
    if u.op is Ops.REDUCE_AXIS: return (yield from self.reduce(u, chain))
    if u.op in ELEMENTWISE: return (yield from self.elementwise(u, chain))
    raise ScheduleError(f"{u.op} cannot be computed inside a kernel (kernel for {self.kernel.node.op})")

  def reduce(self, r: UOp, chain: ShapeTracker):
    source, (combine, axes) = r.src[0], r.arg
    if _is_identity(chain, r.shape):
      inner, frame = yield (source, ShapeTracker.from_shape(source.shape))
      extra = len(frame) - len(source.shape)
      return self.combine(inner, combine, axes), r.shape + (1,) * extra
    # S65: reduce the same elements, but with the reduced axes appended to `chain`'s shape
    extents = tuple(source.shape[a] for a in axes)
    if _trailing_ones(chain.shape) >= len(axes):
      outer = chain.reshape(chain.shape[:len(chain.shape) - len(axes)])   # reuse trailing 1s for the new axes
    else: outer = chain
    kept = tuple(i for i in range(len(source.shape)) if i not in axes)
    moved = ShapeTracker.from_shape(source.shape).permute(kept + tuple(axes))
    inner, frame = yield (source, moved + _extend_with_axes(outer, extents))
    new_axes = tuple(range(len(outer.shape), len(outer.shape) + len(axes)))
    return self.combine(inner, combine, new_axes), outer.shape + (1,) * len(axes) + frame[len(outer.shape) + len(axes):]

  def combine(self, inner: UOp, combine: Ops, axes: tuple) -> UOp:
    """A REDUCE_AXIS; one directly over another with the same op is a single reduce (S68)."""
    if inner.op is Ops.REDUCE_AXIS and inner.arg[0] is combine:
      return UOp(Ops.REDUCE_AXIS, inner.dtype, inner.src, (combine, tuple(sorted(set(inner.arg[1]) | set(axes)))))
    return UOp(Ops.REDUCE_AXIS, inner.dtype, (inner,), (combine, tuple(axes)))

  def elementwise(self, u: UOp, chain: ShapeTracker):
    if u.op in GroupOp.UnsafePad and any(v.mask is not None for v in chain.views):
      raise ScheduleError(f"a padded view reached {u.op} inside a kernel, which does not map 0 to 0 (S37, S64)")
    parts = []
    for s in u.src: parts.append((yield (s, chain)) if s.st is not None else (s, chain.shape))
    rounds = 0
    while len(frames := {frame for _, frame in parts}) > 1:   # S67: bring every source into the longest frame
      if (rounds := rounds + 1) > 8:
        raise ScheduleError(f"the sources of {u.op} cannot be brought into one iteration space")
      target = max(frames, key=len)
      reframed = chain.reshape(target)
      moved = []
      for s, p in zip(u.src, parts):
        moved.append(p if p[1] == target else (yield (s, reframed)) if s.st is not None else (s, target))
      parts = moved
    return u.replace(src=tuple(expr for expr, _ in parts)), parts[0][1]

  # ***** the whole kernel *****

  def build(self) -> UOp:
    node = self.kernel.node
    if node.op in (Ops.COPY, Ops.BUFFER_VIEW):   # S70: meta items are the op itself over the load of buffer 1
      source = self.buffers[1]
      loaded = UOp(Ops.LOAD, source.dtype,
                   (self.global_buffer(1), self.view(ShapeTracker.from_shape((source.arg[1],)))))
      if node.op is Ops.COPY: return UOp(Ops.COPY, node.dtype, (node.src[0], loaded), node.arg)
      return UOp(Ops.BUFFER_VIEW, node.dtype, (loaded,), node.arg)
    if node.op is Ops.ASSIGN: value, store_chain = node.src[1], node.src[0].st
    else: value, store_chain = (node.src[0] if node.op is Ops.CONTIGUOUS else node), ShapeTracker.from_shape(node.shape)
    expr, frame = self.lower(value, ShapeTracker.from_shape(value.shape))
    if frame != store_chain.shape: store_chain = store_chain.reshape(frame)   # S70: fold the frame into the store view
    store_view = self.view(store_chain)
    ast = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (self.global_buffer(0), store_view, expr)),))
    if node.op is Ops.ASSIGN: self.check_self_reads(ast, store_view.arg)
    devices = [b.device for b in self.buffers]
    if any(d != devices[0] for d in devices):
      raise ScheduleError(f"all buffers must be on the same device: {devices} (S74)")
    return ast

  def check_self_reads(self, ast: UOp, store: ShapeTracker) -> None:
    """S73 as D6 asks: an assign may read its own buffer through the store's view, or where it never writes."""
    written = _memory_range(store)
    for u in ast.toposort:
      if u.op is not Ops.LOAD or u.src[0].arg != 0: continue
      read = u.src[1].arg
      if read == store: continue
      read_range = _memory_range(read)
      if written is not None and read_range is not None and (read_range[1] < written[0] or written[1] < read_range[0]):
        continue
      raise ScheduleError(SELF_OPERAND_ERROR)
