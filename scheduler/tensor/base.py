"""The Tensor's core: what a tensor holds, how ops become UOps, and the way out (realize, numpy, autograd).

Sits under the other modules of `scheduler/tensor/`, which add ops as mixins; `scheduler/tensor/__init__.py`
assembles the `Tensor` class. A tensor holds one UOp (`lazydata`); every op builds a new UOp through
`_apply_uop` and nothing runs until `realize()`, which schedules the graph (capture point **exec** wraps it).
Methods that make tensors use `type(self)`, so they always make the assembled `Tensor`.
"""
from __future__ import annotations
import functools, pathlib, sys, threading, weakref
from typing import Callable, Optional
import numpy as np
from scheduler import hooks
from scheduler.device import Device
from scheduler.dtype import (DType, dtypes, ConstType, least_upper_dtype, to_dtype, from_np_dtype, to_np_dtype,
                             truncate_const, bf16_to_float32, float32_to_bf16)
from scheduler.gradient import compute_gradient
from scheduler.helpers import (all_int, all_same, fully_flatten, prod, Context, Metadata, TRACEMETA,
                               CAPTURE_PROCESS_REPLAY, collection_paused)
from scheduler.ops import UOp, Ops, resolve, smax, all_metadata

# every live tensor, so that scheduling can point them at the buffers their values now live in (S56)
all_tensors: dict[weakref.ref, None] = {}
# the public Tensor method that is building ops right now, called from outside any other (its name rides on schedule
# items as metadata); while capturing, where the program called it from (found by the first tensor it makes); and the
# thread that called it with the frame it called from, where that search starts. An entry point that is not a named
# method (a creation method, an optimizer's step: `places_tensors`) sets only the last two.
current_op: list = [None, None, None]


def _origin() -> Optional[tuple]:
  """Where the program made a tensor being made now: the place it called the public method or entry point that makes
  it from (found once per call: the walk out of the compiler's frames costs more than the rest of making a tensor),
  else where it made it directly. The place is kept with the thread that found it: another thread's tensors find their
  own."""
  caller = current_op[2]
  if caller is None: return hooks.origin()
  kept, thread = current_op[1], threading.get_ident()
  if kept is None or kept[0] != thread:
    # the search starts where the program called the public method (not inside the compiler's frames below it), in
    # the thread that called it; another thread searches its own frames
    kept = current_op[1] = (thread, hooks.origin(caller[1] if caller[0] == thread else None))
  return kept[1]


def places_tensors(method: Callable) -> Callable:
  """`method` as an entry point of the program into the compiler that is not a named public Tensor method: the tensors
  it makes are placed where the program called it, found once per call (an optimizer's step makes hundreds of tensors
  through public methods it calls, a random initializer dozens: each would search the stack again)."""
  @functools.wraps(method)
  def placing(*args, **kwargs):
    if current_op[2] is not None: return method(*args, **kwargs)
    current_op[1], current_op[2] = None, (threading.get_ident(), sys._getframe(1))
    try: return method(*args, **kwargs)
    finally: current_op[1] = current_op[2] = None
  return placing


def _forget(ref: weakref.ref) -> None: all_tensors.pop(ref, None)


def _live_tensors() -> list:
  return [t for ref in list(all_tensors) if (t := ref()) is not None]


def _reaches(roots: list[UOp], targets) -> dict[UOp, bool]:
  """For every node of the roots' graphs, whether its graph contains one of `targets`: one walk over the union of
  the graphs (sources before users, with a stack), not one walk per root. Nodes older than the oldest target
  cannot hold one (sources are older than their users), so the walk does not enter them: reading a value back
  after a big graph was built costs nothing per node of that graph."""
  oldest = min((t.serial for t in targets), default=0)
  reaches: dict[UOp, bool] = {}
  for root in roots:
    stack = [(root, False)]
    while stack:
      node, expanded = stack.pop()
      if node in reaches: continue
      if node.serial < oldest: reaches[node] = False
      elif expanded: reaches[node] = node in targets or any(reaches[s] for s in node.src)
      else:
        stack.append((node, True))
        stack.extend((s, False) for s in node.src if s not in reaches)
  return reaches


def apply_becomes_map(becomes: dict[UOp, UOp]) -> None:
  """Point every live tensor whose graph contains a replaced UOp at the replacement (linear in the live graphs). A
  tensor computed from others that require grad keeps the graph it had (`_computed_from`), so that a gradient taken
  after realizing it still reaches them (`ret.realize(); ret.sum().backward()`, as the reference's tests do)."""
  if not becomes: return
  live = _live_tensors()
  reaches = _reaches([t.lazydata for t in live], becomes)
  affected = [t for t in live if reaches[t.lazydata]]
  if affected:
    # one substitution over all affected graphs, so shared subgraphs are rewritten once
    rewritten = UOp.sink(*[t.lazydata for t in affected]).substitute(becomes).src
    trainable = {t.lazydata for t in live if t.requires_grad}
    differentiable = _reaches([t.lazydata for t in affected if t.requires_grad], trainable) if trainable else {}
    # not an assigned tensor: a parameter updated in place is a new leaf, not a function of its old value
    kept = [t.requires_grad and t._computed_from is not ASSIGNED and any(differentiable.get(s) for s in t.lazydata.src)
            for t in affected]
    # in a kept graph, what was realized and is not kept is read from its buffer (a leaf stays the target it is)
    as_read = {t.lazydata: new for t, new, keep in zip(affected, rewritten, kept) if not keep and new is not t.lazydata}
    graphs = [t.lazydata for t, keep in zip(affected, kept) if keep]
    # one substitution over all kept graphs, as above (one per tensor would be quadratic in a deep graph kept live)
    computed = iter(UOp.sink(*graphs).substitute(as_read).src if graphs and as_read else graphs)
    for t, new, keep in zip(affected, rewritten, kept):
      if keep: t._computed_from = next(computed)
      elif new is not t.lazydata and t._computed_from is not ASSIGNED: t._computed_from = None
      t.lazydata = new


def _as_computed(u: UOp, realized: dict[UOp, UOp]) -> UOp:
  """`u` with each realized tensor's buffer replaced by the graph that computed it (transitively)."""
  if not realized: return u   # a substitution walks the whole graph even when there is nothing to substitute
  for _ in range(len(realized) + 1):
    expanded = u.substitute(realized)
    if expanded is u: return u
    u = expanded
  return u


def _realized_graphs() -> dict[UOp, UOp]:
  return {t.lazydata: t._computed_from for t in _live_tensors() if isinstance(t._computed_from, UOp)}


# what a Buffer's `pending_write` says when the pending write is a random generator's counter (`Tensor.rand`), with
# the way out a program that dropped the schedule still has
RNG_COUNTER = "the random generator's counter (Tensor.manual_seed() restarts the generator)"


# `_computed_from` of a tensor written by assign (an optimizer's parameter): its gradient is taken as a leaf, never
# through the update that made it (whose buffers the next step overwrites)
ASSIGNED = "assigned"


def _describe(t: TensorBase) -> str:
  """A tensor as a report names it: dtype, shape, the tensor function that made it, and where the program made it."""
  made_by = all_metadata.get(t.lazydata)
  origin = getattr(t, "_origin", None)
  return f"{t.dtype.name}{list(t.shape)}" + (f" {made_by}" if made_by is not None else "") + \
    (f" from {origin[0]}:{origin[1]} {origin[2]}" if origin else "")


def nested_shape(data) -> tuple:
  """The shape of nested python lists (numpy scalars and 0-d arrays are scalars)."""
  if isinstance(data, str) or not (hasattr(data, "__len__")
                                   and hasattr(data, "__getitem__")) or getattr(data, "shape", None) == ():
    return ()
  inner = [nested_shape(item) for item in data]
  if not all_same(inner): raise ValueError(f"inhomogeneous shape from {data}")
  return (len(inner), *(inner[0] if inner else ()))


def _python_buffer(data, dtype: DType) -> UOp:
  """Python data (lists or bytes) uploaded into a PYTHON buffer, shaped like the data."""
  if isinstance(data, bytes): raw, shape = data, (len(data) // dtype.itemsize,)
  else:
    shape = nested_shape(data)
    values = [truncate_const(dtypes.as_const(v, dtype), dtype) for v in fully_flatten(data)]
    array = float32_to_bf16(values) if dtype == dtypes.bfloat16 else np.array(values, dtype=to_np_dtype(dtype))
    raw = array.tobytes()
  buf = UOp.new_buffer("PYTHON", prod(shape), dtype)
  buf.buffer.allocate(np.frombuffer(raw, dtype=np.uint8).copy())
  return buf.reshape(shape)


def _numpy_buffer(array: np.ndarray, dtype: Optional[DType] = None) -> UOp:
  """A numpy array as an NPY buffer (the array itself is the memory; the copy to a device is lazy); bfloat16 is
  rounded from the array's values into bits of its own."""
  bfloat16 = dtype == dtypes.bfloat16
  if bfloat16:
    with np.errstate(over="ignore", invalid="ignore"): array = float32_to_bf16(np.asarray(array, dtype=np.float32))
  flat = np.ascontiguousarray(array)
  uop = UOp.new_buffer("NPY", flat.size, dtypes.bfloat16 if bfloat16 else from_np_dtype(flat.dtype))
  uop.buffer.allocate(flat)
  return uop.reshape(flat.shape)


def _list_dtype(data) -> DType:
  leaves = fully_flatten(data)
  if leaves and all(isinstance(v, bool) for v in leaves): return dtypes.bool
  return dtypes.default_int if leaves and all_int(leaves) else dtypes.default_float


def const_uop(value, shape: tuple, dtype: DType, device: str) -> UOp:
  return UOp.metaop(Ops.CONST, shape, dtype, Device.canonicalize(device), value)


def left_pad_shapes(*shapes: tuple) -> tuple[tuple, ...]:
  """The shapes with leading 1s added so that all have the same number of axes."""
  rank = max(map(len, shapes))
  return tuple(tuple([1] * (rank - len(shape)) + list(shape)) for shape in shapes)


def broadcast_shape(*shapes: tuple) -> tuple:
  """numpy's broadcast of the shapes (an axis of extent 0 stays 0)."""
  out = []
  for extents in zip(*left_pad_shapes(*shapes)): out.append(0 if 0 in extents else smax(extents))
  return tuple(out)


class TensorBase:
  """A lazily evaluated multi-dimensional array; see tinygrad's Tensor for the semantics."""
  __slots__ = ("lazydata", "requires_grad", "grad", "_origin", "_computed_from", "__weakref__")
  training: bool = False
  no_grad: bool = False

  def __init__(self, data: ConstType | UOp | bytes | list | tuple | np.ndarray | pathlib.Path | None,
               device: Optional[str] = None,
               dtype: Optional[DType | str] = None, requires_grad: Optional[bool] = None):
    dtype = to_dtype(dtype) if dtype is not None else None
    if device is None and isinstance(data, pathlib.Path): device = f"DISK:{data.resolve()}"
    device = Device.canonicalize(device)
    self.grad: Optional[TensorBase] = None
    self.requires_grad: Optional[bool] = requires_grad
    self._computed_from: Optional[UOp | str] = None   # a realized tensor's graph, for gradients (apply_becomes_map)
    uop = self._uop_from(data, dtype, device)
    self.lazydata: UOp = uop if uop.device == device else uop.copy_to_device(device)
    # where the program made this tensor (only while capturing: reports name outputs by it)
    self._origin: Optional[tuple] = _origin() if CAPTURE_PROCESS_REPLAY else None
    all_tensors[weakref.ref(self, _forget)] = None

  @staticmethod
  def _uop_from(data, dtype: Optional[DType], device: str) -> UOp:
    if isinstance(data, UOp):
      if dtype is not None and dtype != data.dtype: raise ValueError(f"dtype mismatch: {dtype} vs {data.dtype}")
      return const_uop(data, (), dtype or data.dtype, device) if data.op is Ops.BIND else data
    if data is None: return UOp.metaop(Ops.EMPTY, (0,), dtype or dtypes.default_float, device)
    if isinstance(data, (bool, int, float)): return const_uop(data, (), dtype or dtypes.from_py(data), device)
    if isinstance(data, bytes): return _python_buffer(data, dtype or dtypes.uint8)
    if isinstance(data, (list, tuple)): return _python_buffer(data, dtype or _list_dtype(data))
    if isinstance(data, np.generic) or (isinstance(data, np.ndarray) and data.shape == ()):
      return const_uop(data.item(), (), dtype or from_np_dtype(data.dtype), device)
    if isinstance(data, np.ndarray):
      if dtype == dtypes.bfloat16: return _numpy_buffer(data, dtype)
      wanted = to_np_dtype(dtype) if dtype is not None else data.dtype
      return _numpy_buffer(data if wanted == data.dtype else data.astype(wanted))
    if isinstance(data, pathlib.Path):
      if not data.exists(): raise FileNotFoundError(f"no such file for a DISK tensor: {data}")
      dtype = dtype or dtypes.uint8
      return UOp.new_buffer(f"DISK:{data.resolve()}", data.stat().st_size // dtype.itemsize, dtype)
    raise TypeError(f"can't create Tensor from {data!r} with type {type(data).__name__}")

  # what the tensor is: read off its UOp
  device = property(lambda self: self.lazydata.device)
  shape = property(lambda self: self.lazydata.shape)
  dtype = property(lambda self: self.lazydata.dtype)
  ndim = property(lambda self: len(self.lazydata.shape))

  def size(self, dim=None): return self.shape[dim] if dim is not None else self.shape
  def numel(self): return prod(self.shape)
  def element_size(self) -> int: return self.dtype.itemsize
  def nbytes(self) -> int: return self.dtype.itemsize * self.numel()
  def is_floating_point(self) -> bool: return dtypes.is_float(self.dtype)

  def __len__(self) -> int:
    if self.ndim == 0: raise TypeError("len() of a 0-d tensor")
    return self.shape[0]

  def __bool__(self): raise TypeError("__bool__ on Tensor is not defined")
  def __hash__(self) -> int: return id(self)

  def __repr__(self) -> str:
    grad_note = " requires_grad" if self.requires_grad else ""
    return f"<Tensor {self.lazydata.device} {self.shape} {self.dtype}{grad_note}>"

  # ***** building the graph *****

  def _apply_uop(self, build: Callable, *others: TensorBase, **kwargs) -> TensorBase:
    """A tensor over build(self's UOp, others' UOps, **kwargs); it requires grad when an input does."""
    uop: UOp = build(self.lazydata, *(t.lazydata for t in others), **kwargs)
    if TRACEMETA and current_op[0] is not None and uop not in all_metadata: all_metadata[uop] = Metadata(current_op[0])
    flags = [t.requires_grad for t in (self, *others)]
    requires = True if any(flags) else (None if None in flags else False)
    return type(self)(uop, device=uop.device, requires_grad=requires)

  def _binop(self, op: Ops, other, reverse: bool = False) -> TensorBase:
    lhs, rhs = self._broadcasted(other, reverse)
    return lhs._apply_uop(lambda a, b: a.alu(op, b), rhs)

  def _broadcasted(self, other, reverse: bool = False, match_dtype: bool = True) -> tuple[TensorBase, TensorBase]:
    """self and other as tensors of one shape (and, with match_dtype, one promoted dtype)."""
    x, y = self, other
    if isinstance(y, UOp): y = type(self)(y, device=x.device)
    elif not isinstance(y, TensorBase):
      if not isinstance(y, (bool, int, float)): raise TypeError(f"cannot combine a Tensor with {type(y).__name__}")
      keeps_dtype = dtypes.is_float(x.dtype) or (dtypes.is_int(x.dtype) and isinstance(y, int))
      y_dtype = x.dtype if keeps_dtype else dtypes.from_py(y)
      y = type(self)(dtypes.as_const(y, y_dtype), x.device, y_dtype, requires_grad=False)
    if x.dtype != y.dtype and match_dtype:
      promoted = least_upper_dtype(x.dtype, y.dtype)
      x, y = x.cast(promoted), y.cast(promoted)
    pair = (y, x) if reverse else (x, y)
    common_shape = broadcast_shape(*(t.shape for t in pair))
    return tuple(t._broadcast_to(common_shape) for t in pair)

  def _broadcast_to(self, shape: tuple) -> TensorBase:
    """Expand to `shape` after adding leading axes of extent 1."""
    if shape == self.shape: return self
    if len(shape) < self.ndim:
      raise ValueError(f"cannot broadcast tensor to fewer dimensions. shape={self.shape} to new_shape={shape}")
    with_ones = left_pad_shapes(self.shape, shape)[0]
    for old, new in zip(with_ones, shape):
      if old != 1 and not resolve(old == new, False): raise ValueError(f"cannot broadcast {self.shape} to {shape}")
    return self.reshape(with_ones)._apply_uop(UOp.expand, arg=tuple(shape))

  def cast(self, dtype) -> TensorBase:
    target = to_dtype(dtype)
    return self if target == self.dtype else self._apply_uop(UOp.cast, dtype=target)

  # ***** scheduling and realizing *****

  def schedule_with_vars(self, *more: TensorBase) -> tuple[list, dict[UOp, int]]:
    from scheduler.schedule import create_schedule_with_vars   # schedule.py sits above the frontend
    with collection_paused():   # pointing every live tensor at its result walks them all
      items, var_vals, becomes = create_schedule_with_vars(UOp.sink(*(t.lazydata for t in (self, *more))))
      for si in items: si.bufs[0].pending_write = True   # each item writes its first buffer; tensors point there now
      apply_becomes_map(becomes)
    # a draw advances its device's generator counter: a later draw that reads it before this schedule ran is told so
    for counter in getattr(type(self), "_device_rng_counters", {}).values():
      if (base := counter.lazydata.base).op is Ops.BUFFER and base.buffer.pending_write:
        base.buffer.pending_write = RNG_COUNTER
    return items, var_vals

  def schedule(self, *more: TensorBase) -> list:
    items, var_vals = self.schedule_with_vars(*more)
    if var_vals: raise RuntimeError("this schedule has variables; use schedule_with_vars")
    return items

  def realize(self, *more: TensorBase) -> TensorBase:
    from scheduler.realize import run_schedule
    pending = [t for t in (self, *more) if not t.lazydata.is_realized]
    if pending:
      label = "realize " + " ".join(f"{t.dtype.name}{list(t.shape)}" for t in pending)
      with collection_paused(), hooks.capture_point("exec", UOp.sink(*(t.lazydata for t in pending)), name=label,
                                                    outputs=lambda: [_describe(t) for t in pending]) as cap:
        run_schedule(*pending[0].schedule_with_vars(*pending[1:]))
        cap.set_output(lambda: _read_back(pending))
    return self

  def replace(self, x: TensorBase) -> TensorBase:
    if self.shape != x.shape: raise ValueError(f"replace shape mismatch {self.shape} != {x.shape}")
    self.lazydata, self._computed_from = x.lazydata, None
    return self

  def assign(self, x) -> TensorBase:
    """Write x into this tensor's buffer (an in-place update, scheduled as its own kernel)."""
    if self.device.startswith("DISK"):
      values = x if isinstance(x, TensorBase) else type(self)(x, device="PYTHON", dtype=self.dtype)
      self.contiguous().realize().lazydata.base.buffer.copyin(values.numpy().reshape(-1))
      return self
    if not isinstance(x, TensorBase): x = type(self)(x, device=self.device, dtype=self.dtype)
    if x.lazydata is self.lazydata: return self
    for what, mine, theirs in (("shape", self.shape, x.shape), ("device", self.device, x.device),
                               ("dtype", self.dtype, x.dtype)):
      if mine != theirs: raise ValueError(f"assign {what} mismatch {mine} != {theirs}")
    if x.requires_grad: raise ValueError("cannot assign a tensor that requires grad")
    if self.lazydata.is_realized: self.lazydata = self.lazydata.assign(x.lazydata)
    else: self.lazydata = x.lazydata   # nothing to write into yet: this tensor simply becomes x
    self._computed_from = ASSIGNED
    return self

  def detach(self) -> TensorBase:
    """The same value, cut off from autograd."""
    return type(self)(self.lazydata.detach(), device=self.device, requires_grad=False)

  def numpy(self) -> np.ndarray:
    """The values as a numpy array (bfloat16 as float32: numpy has no bfloat16)."""
    if self.dtype.base == dtypes.bfloat16: return bf16_to_float32(self.bitcast(dtypes.uint16).numpy())
    if 0 in self.shape: return np.zeros(self.shape, dtype=to_np_dtype(self.dtype))
    if (whole := self._whole_realized_buffer()) is not None: return whole.ensure_allocated().numpy().reshape(self.shape)
    readable = self if self.device in ("CPU", "PYTHON", "NPY") else self.to(Device.DEFAULT)
    done = readable.cast(self.dtype.base).contiguous().realize()
    if (buffer := done.lazydata.base.buffer).pending_write:
      raise RuntimeError("this tensor is computed by a schedule that has not run yet: run it first (run_schedule), or "
                         "use realize() instead of schedule()")
    # Tensor.empty's buffer gets memory when first read: its contents are whatever that memory holds
    return buffer.ensure_allocated().numpy().reshape(self.shape)

  def _whole_realized_buffer(self):
    """The Buffer this tensor already is, all of it in order on a host device, or None. Reading it needs no
    schedule (an empty one would still run the scheduler, and be captured, for every value read back)."""
    u = self.lazydata
    base = u.base
    if self.device not in ("CPU", "PYTHON",
                           "NPY") or base.op is not Ops.BUFFER or base.realized is None or u.dtype != base.dtype:
      return None
    if u is not base and not (u.st.contiguous and u.size == base.size):
      return None   # a chain of views or movements of it
    return base.realized

  def tolist(self): return self.numpy().tolist()
  def data(self) -> memoryview:
    """The values as a memoryview of the tensor's shape and element format (`t.data().tolist()`)."""
    return memoryview(np.array(self.numpy(), order="C"))

  def item(self):
    if self.numel() != 1: raise ValueError("item() only works on a Tensor with one element")
    return self.numpy().reshape(-1)[0].item()

  def to(self, device: Optional[str]) -> TensorBase:
    target = Device.canonicalize(device)
    if target == self.device: return self
    return self._carry_grad(type(self)(self.lazydata, target, requires_grad=self.requires_grad), lambda g: g.to(target))

  def to_(self, device: Optional[str]) -> TensorBase:
    """Move this tensor (and its gradient) to `device` in place."""
    if self.grad is not None: self.grad = self.grad.to(device)
    self.lazydata = self.to(device).lazydata
    return self

  def clone(self) -> TensorBase:
    return self._carry_grad(type(self)(self.lazydata.clone(), self.device, requires_grad=self.requires_grad),
                            lambda g: g.clone())

  def _carry_grad(self, new: TensorBase, convert) -> TensorBase:
    if self.grad is not None: new.grad = convert(self.grad)
    return new

  def requires_grad_(self, requires_grad: Optional[bool] = True) -> TensorBase:
    self.requires_grad = requires_grad
    return self

  # ***** autograd *****

  def gradient(self, *targets: TensorBase, gradient: Optional[TensorBase] = None,
               materialize_grads=False) -> list[TensorBase]:
    """d self / d target for each target; self must be a scalar unless `gradient` (d loss / d self) is given."""
    realized = _realized_graphs()
    return self._gradient(targets, gradient, materialize_grads, realized, _as_computed(self.lazydata, realized))

  def _gradient(self, targets, gradient: Optional[TensorBase], materialize_grads: bool, realized: dict[UOp, UOp],
                computed: UOp) -> list[TensorBase]:
    """`gradient()` of `computed`, this tensor's graph through the realized tensors' graphs (`realized`)."""
    if gradient is None and self.shape != ():
      raise RuntimeError("when no gradient is provided, backward must be called on a scalar tensor")
    seed = gradient.lazydata if gradient is not None else UOp.const(self.dtype, 1.0, self.device, ())
    wanted = [realized.get(t.lazydata, t.lazydata) for t in targets]
    grads = compute_gradient(computed, seed, set(wanted))
    out = []
    for t, u in zip(targets, wanted):
      g = grads.get(u)
      if g is None:
        if not materialize_grads:
          raise RuntimeError(f"a target of gradient() is not in the graph of this tensor: {u.op} {u.shape}")
        g = u.const_like(0)
      out.append(type(self)(g, device=t.device))
    return out

  def backward(self, gradient: Optional[TensorBase] = None) -> TensorBase:
    """Accumulate d self / d t into t.grad for every live tensor t in the graph that requires grad."""
    realized = _realized_graphs()
    computed = _as_computed(self.lazydata, realized)
    in_graph = computed.toposort
    needing = [] if type(self).no_grad else [t for t in _live_tensors()
                                             if t.requires_grad and realized.get(t.lazydata, t.lazydata) in in_graph]
    if not needing: raise RuntimeError("backward() found no tensor with requires_grad=True in the graph")
    for t, g in zip(needing, self._gradient(needing, gradient, True, realized, computed)):
      if g.shape != t.shape: raise RuntimeError(f"grad shape must match tensor shape, {g.shape} != {t.shape}")
      t.grad = g if t.grad is None else t.grad + g
    return self


def _read_back(tensors: list) -> list[np.ndarray]:
  """The values of realized tensors, read without capturing the read itself. A whole buffer is returned as its own
  memory, not a copy: what reads it (a capture's output) copies it before anything runs."""
  values = []
  with Context(CAPTURE_PROCESS_REPLAY=0):
    for t in tensors:
      u = t.lazydata
      whole_buffer = u.base.op is Ops.BUFFER and u.st is not None and u.st.contiguous and u.size == u.base.size
      # the usual case, a whole contiguous buffer, is read directly instead of scheduling a copy; a constant that no
      # view masks is its value everywhere (scheduling a kernel to read it took a millisecond), except NaN, whose sign
      # bit is the device's (the PYTHON runtime's is set)
      if whole_buffer and u.base.realized is not None: values.append(u.base.buffer.as_array().reshape(t.shape))
      elif u.op is Ops.CONST and u.arg == u.arg and t.dtype.base != dtypes.bfloat16 and \
          all(v.mask is None for v in u.st.views):
        values.append(np.full(t.shape, u.arg, dtype=to_np_dtype(t.dtype)))
      else: values.append(t.numpy())
  return values
