"""The lazy Tensor frontend: tinygrad's API, each op building UOps; nothing runs until `realize()`.

Sits on top of the UOp IR and hands graphs to `schedule.py` and `realize.py`. Ops are decomposed the
way tinygrad 0.10.2 decomposes them, which is what makes kernel counts comparable.
"""
from __future__ import annotations
import functools, hashlib, itertools, math, pathlib, weakref
from typing import Callable, Optional, Sequence
import numpy as np
from scheduler.dtype import DType, dtypes, ConstType, least_upper_dtype, least_upper_float, sum_acc_dtype, to_dtype, from_np_dtype, \
  to_np_dtype, truncate_const
from scheduler.helpers import argfix, make_tuple, flatten, prod, all_int, round_up, all_same, fully_flatten, ceildiv, Metadata, \
  TRACEMETA
from scheduler.ops import UOp, Ops, resolve, smax, smin, identity_element, all_metadata, MathMixin
from scheduler.device import Device
from scheduler.gradient import compute_gradient
from scheduler.helpers import Context
from scheduler import hooks

all_tensors: dict[weakref.ref, None] = {}


def _apply_map_to_tensors(applied_map: dict[UOp, UOp]) -> None:
  """Point every live tensor whose graph contains a replaced UOp at the replacement."""
  if not applied_map: return
  keys = set(applied_map)
  fixed = [t for tref in list(all_tensors) if (t := tref()) is not None and any(u in keys for u in t.lazydata.toposort)]
  if not fixed: return
  sink = UOp.sink(*[t.lazydata for t in fixed])
  new_sink = sink.substitute(applied_map)
  for t, s, ns in zip(fixed, sink.src, new_sink.src):
    if s is not ns: t.lazydata = ns


def get_shape(x) -> tuple:
  if not hasattr(x, "__len__") or not hasattr(x, "__getitem__") or isinstance(x, str) or (hasattr(x, "shape") and x.shape == ()): return ()
  if not all_same(subs := [get_shape(xi) for xi in x]): raise ValueError(f"inhomogeneous shape from {x}")
  return (len(subs),) + (subs[0] if subs else ())


def _frompy(x: list | tuple | bytes, dtype: DType) -> UOp:
  if isinstance(x, bytes): ret, data = UOp.new_buffer("PYTHON", len(x) // dtype.itemsize, dtype), x
  else:
    ret = UOp.new_buffer("PYTHON", prod(shape := get_shape(x)), dtype).reshape(shape)
    data = np.array([truncate_const(dtypes.as_const(xi, dtype), dtype) for xi in fully_flatten(x)], dtype=to_np_dtype(dtype)).tobytes()
  ret.base.buffer.allocate(np.frombuffer(data, dtype=np.uint8).copy())
  return ret


def _fromnp(x: np.ndarray) -> UOp:
  ret = UOp.new_buffer("NPY", x.size, from_np_dtype(x.dtype))
  ret.buffer.allocate(np.ascontiguousarray(x))
  return ret.reshape(x.shape)


def _metaop(op: Ops, shape: tuple, dtype: DType, device: str, arg=None) -> UOp:
  return UOp.metaop(op, shape, dtype, Device.canonicalize(device), arg)


def _align_left(*shapes: tuple) -> tuple[tuple, ...]:
  max_dim = max(len(shape) for shape in shapes)
  return tuple((1,) * (max_dim - len(shape)) + shape for shape in shapes)


def _broadcast_shape(*shapes: tuple) -> tuple:
  return tuple(0 if 0 in nth else smax(nth) for nth in zip(*_align_left(*shapes)))


class Tensor(MathMixin):
  """A lazily evaluated multi-dimensional array; see tinygrad's Tensor for the semantics."""
  __slots__ = ("lazydata", "requires_grad", "grad", "__weakref__")
  training: bool = False
  no_grad: bool = False
  _seed: int = 0
  _device_seeds: dict[str, Tensor] = {}
  _device_rng_counters: dict[str, Tensor] = {}

  def __init__(self, data: ConstType | UOp | bytes | list | tuple | np.ndarray | pathlib.Path | None, device: Optional[str] = None,
               dtype: Optional[DType | str] = None, requires_grad: Optional[bool] = None):
    if dtype is not None: dtype = to_dtype(dtype)
    if device is None and isinstance(data, pathlib.Path): device = f"DISK:{data.resolve()}"
    device = Device.canonicalize(device)
    self.grad: Optional[Tensor] = None
    self.requires_grad: Optional[bool] = requires_grad
    if isinstance(data, UOp):
      if dtype is not None and dtype != data.dtype: raise ValueError(f"dtype mismatch: {dtype} vs {data.dtype}")
      if data.op is Ops.BIND: data = _metaop(Ops.CONST, tuple(), dtype or data.dtype, device, data)
    elif data is None: data = _metaop(Ops.EMPTY, (0,), dtype or dtypes.default_float, device)
    elif isinstance(data, (bool, int, float)): data = _metaop(Ops.CONST, tuple(), dtype or dtypes.from_py(data), device, data)
    elif isinstance(data, bytes): data = _frompy(data, dtypes.uint8 if dtype is None else dtype)
    elif isinstance(data, (list, tuple)):
      if dtype is None:
        if (d := fully_flatten(data)) and all(isinstance(s, bool) for s in d): dtype = dtypes.bool
        else: dtype = dtypes.default_int if d and all_int(d) else dtypes.default_float
      data = _frompy(data, dtype)
    elif isinstance(data, np.generic): data = _metaop(Ops.CONST, tuple(), dtype or from_np_dtype(data.dtype), device, data.item())
    elif isinstance(data, np.ndarray):
      if data.shape == (): data = _metaop(Ops.CONST, tuple(), dtype or from_np_dtype(data.dtype), device, data.item())
      else: data = _fromnp(data.astype(to_np_dtype(dtype)) if dtype is not None and to_np_dtype(dtype) != data.dtype else data)
    elif isinstance(data, pathlib.Path):
      dtype = dtype or dtypes.uint8
      if not data.exists(): raise FileNotFoundError(f"no such file for a DISK tensor: {data}")
      data = UOp.new_buffer(f"DISK:{data.resolve()}", data.stat().st_size // dtype.itemsize, dtype)
    if not isinstance(data, UOp): raise TypeError(f"can't create Tensor from {data!r} with type {type(data).__name__}")
    self.lazydata: UOp = data if data.device == device else data.copy_to_device(device)
    all_tensors[weakref.ref(self, _forget_tensor)] = None

  class train:
    """`with Tensor.train():` switches dropout and batchnorm to training for a block (and back on exit)."""
    def __init__(self, mode: bool = True): self.mode = mode
    def __enter__(self): self.prev, Tensor.training = Tensor.training, self.mode
    def __exit__(self, *exc): Tensor.training = self.prev

  def __repr__(self): return f"<Tensor {self.lazydata.device} {self.shape} {self.dtype}" + (" requires_grad" if self.requires_grad else "") + ">"
  def __hash__(self): return id(self)
  def __bool__(self): raise TypeError("__bool__ on Tensor is not defined")
  def __len__(self):
    if not self.shape: raise TypeError("len() of a 0-d tensor")
    return self.shape[0]

  @property
  def device(self) -> str: return self.lazydata.device
  @property
  def shape(self) -> tuple: return self.lazydata.shape
  @property
  def dtype(self) -> DType: return self.lazydata.dtype
  @property
  def ndim(self) -> int: return len(self.shape)
  def numel(self): return prod(self.shape)
  def element_size(self) -> int: return self.dtype.itemsize
  def nbytes(self) -> int: return self.numel() * self.element_size()
  def is_floating_point(self) -> bool: return dtypes.is_float(self.dtype)
  def size(self, dim=None): return self.shape if dim is None else self.shape[dim]

  # ***** building the graph *****

  def _apply_uop(self, fxn: Callable, *x: Tensor, **kwargs) -> Tensor:
    new_uop: UOp = fxn(*[t.lazydata for t in (self,) + x], **kwargs)
    if TRACEMETA and (name := _current_op[0]) is not None and new_uop not in all_metadata: all_metadata[new_uop] = Metadata(name)
    needs_input_grad = [t.requires_grad for t in (self,) + x]
    return Tensor(new_uop, device=new_uop.device,
                  requires_grad=True if any(needs_input_grad) else None if None in needs_input_grad else False)

  def _apply_broadcasted_uop(self, fxn: Callable, x, reverse=False) -> Tensor:
    lhs, rhs = self._broadcasted(x, reverse)
    return lhs._apply_uop(fxn, rhs)

  # the MathMixin operators build ALU ops through these two
  def _binop(self, op, x, reverse): return self._apply_broadcasted_uop(lambda *u: u[0].alu(op, *u[1:]), x, reverse)
  def alu(self, op: Ops, *src: Tensor) -> Tensor: return self._apply_uop(lambda *u: u[0].alu(op, *u[1:]), *src)
  def ufix(self, x) -> Tensor: return x if isinstance(x, Tensor) else Tensor(x, self.device, self.dtype if self.is_floating_point() or
                                                                                   (dtypes.is_int(self.dtype) and isinstance(x, int)) else None)

  def _broadcasted(self, y, reverse: bool = False, match_dtype: bool = True) -> tuple[Tensor, Tensor]:
    x: Tensor = self
    if not isinstance(y, Tensor):
      if isinstance(y, UOp): y = Tensor(y, device=x.device)
      else:
        if not isinstance(y, (bool, int, float)): raise TypeError(f"cannot combine a Tensor with {type(y).__name__}")
        y_dtype = x.dtype if dtypes.is_float(x.dtype) or (dtypes.is_int(x.dtype) and isinstance(y, int)) else dtypes.from_py(y)
        y = Tensor(dtypes.as_const(y, y_dtype), x.device, y_dtype, requires_grad=False)
    if match_dtype and x.dtype != y.dtype:
      output_dtype = least_upper_dtype(x.dtype, y.dtype)
      x, y = x.cast(output_dtype), y.cast(output_dtype)
    if reverse: x, y = y, x
    out_shape = _broadcast_shape(x.shape, y.shape)
    return x._broadcast_to(out_shape), y._broadcast_to(out_shape)

  def _broadcast_to(self, new_shape: tuple) -> Tensor:
    if self.shape == new_shape: return self
    if self.ndim > len(new_shape): raise ValueError(f"cannot broadcast tensor to fewer dimensions. shape={self.shape} to {new_shape=}")
    shape, _ = _align_left(self.shape, new_shape)
    if not all(resolve(s == ns, False) or s == 1 for s, ns in zip(shape, new_shape)): raise ValueError(f"cannot broadcast {self.shape} to {new_shape}")
    return self.reshape(shape)._apply_uop(UOp.expand, arg=tuple(new_shape))

  # ***** creation *****

  @staticmethod
  def empty(*shape, **kwargs) -> Tensor:
    dtype, device = to_dtype(kwargs.pop("dtype", dtypes.default_float)), kwargs.pop("device", None)
    return Tensor(_metaop(Ops.EMPTY, argfix(*shape), dtype, device), device, dtype, **kwargs)

  @staticmethod
  def from_uop(y: UOp, **kwargs) -> Tensor:
    if y.op is Ops.BIND: return Tensor(y, **kwargs, requires_grad=False)
    if y.op is Ops.CONST: return Tensor(y.arg, **kwargs, requires_grad=False)
    if y.op is Ops.MUL: return Tensor.from_uop(y.src[0]) * Tensor.from_uop(y.src[1])
    if y.op is Ops.ADD: return Tensor.from_uop(y.src[0]) + Tensor.from_uop(y.src[1])
    raise RuntimeError(f"unhandled UOp {y.op}")

  @staticmethod
  def full(shape: tuple, fill_value, **kwargs) -> Tensor:
    shape = argfix(shape)
    if not all(isinstance(s, int) and s >= 0 or isinstance(s, UOp) for s in shape): raise ValueError(f"invalid shape {shape}")
    return Tensor(fill_value, **kwargs).reshape((1,) * len(new_shape := argfix(shape))).expand(new_shape)

  @staticmethod
  def zeros(*shape, **kwargs) -> Tensor: return Tensor.full(argfix(*shape), 0.0, **kwargs)
  @staticmethod
  def ones(*shape, **kwargs) -> Tensor: return Tensor.full(argfix(*shape), 1.0, **kwargs)

  @staticmethod
  def arange(start, stop=None, step=1, **kwargs) -> Tensor:
    if stop is None: stop, start = start, 0
    if step == 0: raise ValueError("arange step must not be 0")
    dtype = to_dtype(kwargs.pop("dtype", dtypes.default_float if any(isinstance(x, float) for x in (start, stop, step)) else dtypes.default_int))
    if (output_len := int(ceildiv(stop - start, step))) <= 0: return Tensor([], dtype=dtype, **kwargs)
    return (Tensor.full((output_len,), step, dtype=dtype, **kwargs)._cumalu(0, Ops.ADD) + (start - step)).cast(dtype)

  @staticmethod
  def eye(n: int, m: Optional[int] = None, **kwargs) -> Tensor:
    if n < 0 or (m is not None and m < 0): raise ValueError(f"cannot have negative {n=}, {m=}")
    x = Tensor.ones((n, 1), **kwargs).pad((None, (0, n))).flatten().shrink(((0, n * n),)).reshape(n, n)
    return x if m is None else x.pad((None, (0, m - n))) if m > n else x.shrink((None, (0, m)))

  def full_like(self, fill_value, **kwargs) -> Tensor:
    return Tensor.full(self.shape, fill_value, dtype=kwargs.pop("dtype", self.dtype), device=kwargs.pop("device", self.device), **kwargs)
  def zeros_like(self, **kwargs) -> Tensor: return self.full_like(0, **kwargs)
  def ones_like(self, **kwargs) -> Tensor: return self.full_like(1, **kwargs)

  @staticmethod
  def manual_seed(seed=0):
    Tensor._seed, Tensor._device_seeds, Tensor._device_rng_counters = seed, {}, {}

  @staticmethod
  def _threefry_random_bits(key: Tensor, counts0: Tensor, counts1: Tensor) -> Tensor:
    x = (counts1.cast(dtypes.uint64) << 32) | counts0.cast(dtypes.uint64)
    x = x._apply_uop(UOp.threefry, (key[1]._broadcast_to(x.shape).cast(dtypes.uint64) << 32) | key[0]._broadcast_to(x.shape).cast(dtypes.uint64))
    counts0, counts1 = (x & 0xffffffff).cast(dtypes.uint32), ((x >> 32) & 0xffffffff).cast(dtypes.uint32)
    return counts0.cat(counts1)

  @staticmethod
  def rand(*shape, device: Optional[str] = None, dtype=None, contiguous: bool = True, **kwargs) -> Tensor:
    if not dtypes.is_float(dtype := to_dtype(dtype or dtypes.default_float)): raise ValueError(f"rand only supports float dtypes, got {dtype}")
    if not all_int(shape := argfix(*shape)) or not all(s >= 0 for s in shape): raise ValueError(f"invalid input {shape=}")
    device = Device.canonicalize(device)
    if (numel := prod(shape)) == 0: return Tensor.zeros(shape, device=device, dtype=dtype, **kwargs)
    num = ceildiv(numel * dtype.itemsize, 4)
    if device not in Tensor._device_seeds:
      Tensor._device_seeds[device] = Tensor([int.from_bytes(hashlib.sha256(len(Tensor._device_seeds).to_bytes(4, "big")).digest(), "big") % 2**32,
                                             Tensor._seed], device=device, dtype=dtypes.uint32, requires_grad=False)
      Tensor._device_rng_counters[device] = Tensor([0], device=device, dtype=dtypes.uint32, requires_grad=False)
    else: Tensor._device_rng_counters[device].assign(Tensor._device_rng_counters[device] + num).contiguous()
    counts0 = Tensor.arange(ceildiv(num, 2), device=device, dtype=dtypes.uint32, requires_grad=False) + Tensor._device_rng_counters[device]
    counts1 = counts0 + ceildiv(num, 2)
    bits = Tensor._threefry_random_bits(Tensor._device_seeds[device], counts0, counts1)[:num]
    nmant = {2: 10, 4: 23, 8: 52}[dtype.itemsize]
    uint_dtype = {2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}[dtype.itemsize]
    bits = bits.bitcast(uint_dtype)
    one = Tensor.ones_like(bits, device=bits.device, dtype=dtype).bitcast(uint_dtype)
    bits = (bits >> ((dtype.itemsize * 8) - nmant)) | one
    out = bits.bitcast(dtype)[:numel].sub(1).reshape(shape)
    out.requires_grad = kwargs.get("requires_grad")
    return out.contiguous() if contiguous else out

  @staticmethod
  def randn(*shape, dtype=None, requires_grad: Optional[bool] = None, **kwargs) -> Tensor:
    src = Tensor.rand((2, *argfix(*shape)), **{**kwargs, "dtype": dtypes.float32})
    return (src[0].mul(2 * math.pi).cos().mul((1 - src[1]).log().mul(-2).sqrt()).cast(to_dtype(dtype or dtypes.default_float))
            .requires_grad_(requires_grad))

  @staticmethod
  def randint(*shape, low=0, high=10, **kwargs) -> Tensor:
    if not isinstance(low, int) or not isinstance(high, int): raise TypeError(f"{low=} and {high=} must be integers")
    dtype = to_dtype(kwargs.pop("dtype", dtypes.int32))
    if not dtypes.is_int(dtype): raise TypeError(f"{dtype=} must be int")
    return Tensor.uniform(*shape, low=low, high=high, dtype=dtype, **kwargs)

  @staticmethod
  def uniform(*shape, low=0.0, high=1.0, **kwargs) -> Tensor:
    dtype = to_dtype(kwargs.pop("dtype", dtypes.default_float))
    return ((high - low) * Tensor.rand(*shape, **kwargs)).cast(dtype) + low

  @staticmethod
  def scaled_uniform(*shape, **kwargs) -> Tensor: return Tensor.uniform(*shape, low=-1.0, high=1.0, **kwargs).mul(prod(argfix(*shape)) ** -0.5)
  @staticmethod
  def glorot_uniform(*shape, **kwargs) -> Tensor:
    return Tensor.uniform(*shape, low=-1.0, high=1.0, **kwargs).mul((6 / (argfix(*shape)[0] + prod(argfix(*shape)[1:]))) ** 0.5)
  @staticmethod
  def kaiming_uniform(*shape, a: float = 0.01, **kwargs) -> Tensor:
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(argfix(*shape)[1:]))
    return Tensor.uniform(*shape, low=-bound, high=bound, **kwargs)

  # ***** scheduling and realizing *****

  def schedule_with_vars(self, *lst: Tensor) -> tuple[list, dict[UOp, int]]:
    from scheduler.schedule import create_schedule_with_vars
    big_sink = UOp.sink(*[x.lazydata for x in (self,) + lst])
    schedule, var_vals, becomes_map = create_schedule_with_vars(big_sink)
    _apply_map_to_tensors(becomes_map)
    return schedule, var_vals

  def schedule(self, *lst: Tensor) -> list:
    schedule, var_vals = self.schedule_with_vars(*lst)
    if var_vals: raise RuntimeError("this schedule has variables; use schedule_with_vars")
    return schedule

  def realize(self, *lst: Tensor) -> Tensor:
    from scheduler.realize import run_schedule
    if len(to_realize := [x for x in (self,) + lst if not x.lazydata.is_realized]):
      with hooks.capture_point("exec", UOp.sink(*[x.lazydata for x in to_realize]),
                               name="realize " + " ".join(f"{x.dtype.name}{list(x.shape)}" for x in to_realize)) as cap:
        run_schedule(*Tensor.schedule_with_vars(*to_realize))
        cap.set_output(lambda: _read_back(to_realize))
    return self

  def replace(self, x: Tensor) -> Tensor:
    if self.shape != x.shape: raise ValueError(f"replace shape mismatch {self.shape} != {x.shape}")
    self.lazydata = x.lazydata
    return self

  def assign(self, x) -> Tensor:
    if self.device.startswith("DISK"):
      if not isinstance(x, Tensor): x = Tensor(x, device="PYTHON", dtype=self.dtype)
      self.contiguous().realize().lazydata.base.buffer.copyin(x.numpy().reshape(-1))
      return self
    if not isinstance(x, Tensor): x = Tensor(x, device=self.device, dtype=self.dtype)
    if self.lazydata is x.lazydata: return self
    if self.shape != x.shape: raise ValueError(f"assign shape mismatch {self.shape} != {x.shape}")
    if self.device != x.device: raise ValueError(f"assign device mismatch {self.device} != {x.device}")
    if self.dtype != x.dtype: raise ValueError(f"assign dtype mismatch {self.dtype} != {x.dtype}")
    if x.requires_grad: raise ValueError("cannot assign a tensor that requires grad")
    if not self.lazydata.is_realized: return self.replace(x)
    self.lazydata = self.lazydata.assign(x.lazydata)
    return self

  def detach(self) -> Tensor: return Tensor(self.lazydata.detach(), device=self.device, requires_grad=False)

  def _data_array(self) -> np.ndarray:
    if 0 in self.shape: return np.zeros(self.shape, dtype=to_np_dtype(self.dtype))
    src = self if self.device in ("CPU", "PYTHON", "NPY") else self.to(Device.DEFAULT)
    cpu = src.cast(self.dtype.base).contiguous().realize()
    buf = cpu.lazydata.base.buffer
    return buf.numpy().reshape(self.shape)

  def numpy(self) -> np.ndarray: return self._data_array()
  def tolist(self): return self.numpy().tolist()
  def item(self):
    if self.numel() != 1: raise ValueError("item() only works on a Tensor with one element")
    return self.numpy().reshape(-1)[0].item()
  def data(self): return memoryview(self.numpy().tobytes())

  def to(self, device: Optional[str]) -> Tensor:
    device = Device.canonicalize(device)
    if device == self.device: return self
    ret = Tensor(self.lazydata, device, requires_grad=self.requires_grad)
    if self.grad is not None: ret.grad = self.grad.to(device)
    return ret

  def clone(self) -> Tensor:
    ret = Tensor(self.lazydata.clone(), self.device, requires_grad=self.requires_grad)
    if self.grad is not None: ret.grad = self.grad.clone()
    return ret

  def requires_grad_(self, requires_grad: Optional[bool] = True) -> Tensor:
    self.requires_grad = requires_grad
    return self

  # ***** autograd *****

  def gradient(self, *targets: Tensor, gradient: Optional[Tensor] = None, materialize_grads=False) -> list[Tensor]:
    if gradient is None and self.shape != (): raise RuntimeError("when no gradient is provided, backward must be called on a scalar tensor")
    if gradient is None: gradient = Tensor(1.0, dtype=self.dtype, device=self.device, requires_grad=False)
    target_uops = [x.lazydata for x in targets]
    grads = compute_gradient(self.lazydata, gradient.lazydata, set(target_uops))
    ret = []
    for x in target_uops:
      if (y := grads.get(x)) is None:
        if materialize_grads: y = x.const_like(0)
        else: raise RuntimeError(f"a target of gradient() is not in the graph of this tensor: {x.op} {x.shape}")
      ret.append(y)
    return [Tensor(u, device=t.device) for t, u in zip(targets, ret)]

  def backward(self, gradient: Optional[Tensor] = None) -> Tensor:
    all_uops = self.lazydata.toposort
    tensors_need_grad = [t for tref in list(all_tensors) if (t := tref()) is not None and t.lazydata in all_uops and t.requires_grad
                         and not Tensor.no_grad]
    if not tensors_need_grad: raise RuntimeError("backward() found no tensor with requires_grad=True in the graph")
    for t, g in zip(tensors_need_grad, self.gradient(*tensors_need_grad, gradient=gradient, materialize_grads=True)):
      if g.shape != t.shape: raise RuntimeError(f"grad shape must match tensor shape, {g.shape} != {t.shape}")
      t.grad = g if t.grad is None else (t.grad + g)
    return self

  # ***** movement ops *****

  def view(self, *shape) -> Tensor: return self.reshape(shape)

  def reshape(self, shape, *args) -> Tensor:
    new_shape = tuple(s if s is not None else self.shape[i] for i, s in enumerate(argfix(shape, *args)))
    if (c := new_shape.count(-1)) > 1: raise RuntimeError(f"only one dimension can be inferred using -1, getting {new_shape}")
    if c: new_shape = tuple(-prod(self.shape) // prod(new_shape) if s == -1 else s for s in new_shape)
    if resolve(prod(self.shape) != prod(new_shape), True) and all_int(self.shape) and all_int(new_shape):
      raise ValueError(f"size mismatched, can't reshape {self.shape} -> {new_shape}")
    return self._apply_uop(UOp.reshape, arg=new_shape) if new_shape != self.shape else self

  def expand(self, shape, *args) -> Tensor:
    new_shape = tuple(from_ if to == -1 or to is None else to for from_, to in zip(*(_align_left(self.shape, argfix(shape, *args)))))
    return self._broadcast_to(new_shape)

  def permute(self, order, *args) -> Tensor:
    order_arg = tuple(self._resolve_dim(x) for x in argfix(order, *args))
    if sorted(order_arg) != list(range(self.ndim)): raise RuntimeError(f"order is not a valid permutation, getting {order_arg}")
    return self._apply_uop(UOp.permute, arg=order_arg)

  def flip(self, axis, *args) -> Tensor:
    axis_arg = tuple(self._resolve_dim(x) for x in argfix(axis, *args))
    if len(axis_arg) != len(set(axis_arg)): raise RuntimeError(f"dim can appear at most once, getting {axis_arg}")
    return self._apply_uop(UOp.flip, arg=tuple(i in axis_arg for i in range(len(self.shape))))

  def shrink(self, arg: tuple) -> Tensor:
    if len(arg) != self.ndim: raise ValueError(f"shrink needs one (start, end) or None per axis, got {arg} for shape {self.shape}")
    if (shrink_arg := [x if x is not None else (0, s) for x, s in zip(arg, self.shape)]) == [(0, s) for s in self.shape]: return self
    return self._apply_uop(UOp.shrink, arg=tuple(shrink_arg))

  def pad(self, padding, mode: str = "constant", value: float = 0.0) -> Tensor:
    if mode != "constant": raise NotImplementedError(f"pad mode {mode!r} is not supported (only 'constant')")
    if all(isinstance(p, (int, UOp)) for p in padding):
      if len(padding) % 2 != 0: raise ValueError("flat padding must have an even number of pads")
      flat = tuple(padding) + (0, 0) * (self.ndim - len(padding) // 2)
      pX = tuple(zip(flat[-2::-2], flat[::-2]))
    else: pX = tuple((0, 0) if p is None else tuple(p) for p in padding)
    if len(pX) != self.ndim: raise ValueError(f"padding length is improper, {padding=} {self.ndim=}")
    X, pads = self, tuple((smax(pB, 0), smax(pA, 0)) for pB, pA in pX)
    def _constant(x: Tensor, px, v) -> Tensor:
      if all(p == (0, 0) for p in px): return x
      return x._apply_uop(UOp.pad, arg=px) if v == 0 else \
        (x._apply_uop(UOp.pad, arg=px) + Tensor.ones_like(x)._apply_uop(UOp.pad, arg=px).where(0, v))
    if all(resolve(p >= 0) for p in flatten(pX)): return _constant(X, pX, value)
    return _constant(X.shrink(tuple((-smin(pB, 0), smin(pA + s, s)) for (pB, pA), s in zip(pX, X.shape))), pads, value)

  def __getitem__(self, indices) -> Tensor: return self._getitem(indices)

  def _getitem(self, indices) -> Tensor:
    x = self
    if isinstance(indices, list) and all_int(indices): indices = [Tensor(indices, self.device, requires_grad=False)]
    elif isinstance(indices, (tuple, list)): indices = [Tensor(list(i), self.device, requires_grad=False) if isinstance(i, (tuple, list)) else i for i in indices]
    else: indices = [indices]
    if (num_ellipsis := sum(i is Ellipsis for i in indices)) > 1: raise IndexError("an index can only have a single ellipsis ('...')")
    is_ellipsis = [i is Ellipsis for i in indices]
    num_slices = sum(1 for i in indices if i is not None and i is not Ellipsis)
    if num_slices > self.ndim: raise IndexError(f"too many indices for tensor of dimension {self.ndim}")
    if num_ellipsis == 0: indices, is_ellipsis = indices + [Ellipsis], is_ellipsis + [True]
    ell = is_ellipsis.index(True)
    indices[ell:ell + 1] = [slice(None)] * (self.ndim - num_slices)
    # first pass: ints and slices become shrinks (with a flip and a stride for negative and >1 steps)
    dims_seen, mops_shrink, flips, strides, squeeze, new_axes, tensor_idx = 0, [], [], [], [], [], []
    out_dim = 0
    for idx in indices:
      if idx is None:
        new_axes.append(out_dim)
        out_dim += 1
        continue
      size = self.shape[dims_seen]
      if isinstance(idx, Tensor):
        if not dtypes.is_int(idx.dtype): raise IndexError(f"index tensor dtype {idx.dtype} is not supported")
        tensor_idx.append((dims_seen, out_dim, idx))
        mops_shrink.append((0, size)); flips.append(False); strides.append(1)
      elif isinstance(idx, (int, np.integer)) and not isinstance(idx, bool):
        idx = int(idx)
        if idx >= size or idx < -size: raise IndexError(f"index {idx} is out of bounds for dimension {dims_seen} with size {size}")
        idx = idx + size if idx < 0 else idx
        mops_shrink.append((idx, idx + 1)); flips.append(False); strides.append(1)
        squeeze.append(dims_seen)
        out_dim -= 1
      elif isinstance(idx, slice):
        start, stop, step = idx.indices(size) if all_int([size]) else (0, size, 1)
        if step == 0: raise ValueError("slice step cannot be 0")
        if step > 0: lo, hi = start, max(start, stop)
        else: lo, hi = (stop + 1, start + 1) if start > stop else (0, 0)
        mops_shrink.append((lo, hi)); flips.append(step < 0); strides.append(abs(step))
      else: raise IndexError(f"{type(idx).__name__} is not a valid index")
      dims_seen += 1
      out_dim += 1
    x = x.shrink(tuple(mops_shrink))
    if any(flips): x = x.flip(tuple(i for i, f in enumerate(flips) if f))
    if any(s != 1 for s in strides):
      # strided slice: pad up to a multiple of the stride, split the axis, keep the first of each group
      pads = tuple((0, round_up(s, st) - s) for s, st in zip(x.shape, strides))
      x = x.pad(pads)
      x = x.reshape(flatten([(s // st, st) for s, st in zip(x.shape, strides)]))
      x = x.shrink(tuple(flatten([((0, s), (0, 1)) for s in x.shape[::2]])))
      x = x.reshape(x.shape[::2])
    # remove the int-indexed axes and add the None axes
    keep_shape = [s for i, s in enumerate(x.shape) if i not in squeeze]
    tensor_idx = [(d - sum(1 for q in squeeze if q < d), o, t) for d, o, t in tensor_idx]
    for a in new_axes:
      keep_shape.insert(a, 1)
      tensor_idx = [(d + (1 if d >= a else 0), o, t) for d, o, t in tensor_idx]
    x = x.reshape(tuple(keep_shape))
    if not tensor_idx: return x
    # tensor indices: one-hot masks along each indexed axis, summed away
    dims = [d for d, _, _ in tensor_idx]
    idx_tensors = [t for _, _, t in tensor_idx]
    idx_tensors = [(t < 0).where(t + x.shape[d], t) for d, t in zip(dims, idx_tensors)]
    big_shape = _broadcast_shape(*(t.shape for t in idx_tensors))
    pre_reduce_shape = x.shape[:dims[0]] + big_shape + x.shape[dims[0]:]
    masks = []
    for dim, t in zip(dims, idx_tensors):
      try: i = t.reshape(t.shape + (1,) * (x.ndim - dims[0])).expand(pre_reduce_shape)
      except ValueError as e: raise IndexError(f"cannot broadcast indices: {e}") from e
      masks.append(i._one_hot_along_dim(num_classes=x.shape[dim], dim=(dim - x.ndim)))
    mask = functools.reduce(lambda a, b: a.mul(b), masks)
    reshape_arg = x.shape[:dims[0]] + (1,) * len(big_shape) + x.shape[dims[0]:]
    x = mask.where(x.reshape(reshape_arg), 0).sum(tuple(d + len(big_shape) for d in dims), dtype=x.dtype)
    # consecutive indexed dims stay in place; otherwise they move to the front (numpy's rule)
    if dims[0] != 0 and dims != list(range(dims[0], dims[-1] + 1)):
      x = x.permute(*range(dims[0], dims[0] + len(big_shape)), *range(0, dims[0]), *range(dims[0] + len(big_shape), x.ndim))
    return x

  def __setitem__(self, indices, v):
    raise NotImplementedError("setitem is not supported; use assign on a contiguous tensor")

  def gather(self, dim: int, index: Tensor) -> Tensor:
    if index.ndim != self.ndim: raise ValueError(f"self.ndim must equal index.ndim, {self.ndim=}, {index.ndim=}")
    dim = self._resolve_dim(dim)
    if not all(s >= i for d, (s, i) in enumerate(zip(self.shape, index.shape)) if d != dim): raise RuntimeError("requires self.shape[d] >= index.shape[d] for all d != dim")
    index = index.to(self.device)
    x = self.shrink(tuple((0, i) if d != dim else None for d, i in enumerate(index.shape))).unsqueeze(-1).transpose(-1, dim)
    return (index.unsqueeze(-1)._one_hot_along_dim(self.shape[dim]).where(x, 0)).sum(-1, dtype=self.dtype)

  def cat(self, *args: Tensor, dim: int = 0) -> Tensor:
    dim = self._resolve_dim(dim)
    for arg in args:
      if arg.ndim != self.ndim or not all(a == b for i, (a, b) in enumerate(zip(self.shape, arg.shape)) if i != dim):
        raise ValueError(f"cannot cat {self.shape} with {arg.shape} along dim {dim}")
    tensors = [self, *args]
    dim_cumsum = list(itertools.accumulate([t.shape[dim] for t in tensors], initial=0))
    for i, t in enumerate(tensors): tensors[i] = t.pad([(dim_cumsum[i], dim_cumsum[-1] - dim_cumsum[i + 1]) if j == dim else None for j in range(t.ndim)])
    return functools.reduce(Tensor.add, tensors)

  def stack(self, *args: Tensor, dim: int = 0) -> Tensor:
    return Tensor.cat(*[t.unsqueeze(dim) for t in [self, *args]], dim=dim)

  def repeat(self, repeats, *args) -> Tensor:
    repeats = argfix(repeats, *args)
    base_shape = _align_left(self.shape, repeats)[0]
    unsqueezed_shape = flatten([[1, s] for s in base_shape])
    expanded_shape = flatten([[r, s] for r, s in zip(repeats, base_shape)])
    final_shape = [r * s for r, s in zip(repeats, base_shape)]
    return self.reshape(unsqueezed_shape).expand(expanded_shape).reshape(final_shape)

  def _resolve_dim(self, dim: int, *, extra: bool = False) -> int:
    total = self.ndim + int(extra)
    if not -max(1, total) <= dim <= max(1, total) - 1: raise IndexError(f"dim={dim} out of range {[-max(1, total), max(1, total) - 1]}")
    return dim + total if dim < 0 else dim

  def split(self, sizes, dim: int = 0) -> tuple[Tensor, ...]:
    dim = self._resolve_dim(dim)
    if isinstance(sizes, int): sizes = [min(sizes, self.shape[dim] - i) for i in range(0, max(1, self.shape[dim]), max(1, sizes))]
    if sum(sizes) != self.shape[dim]: raise ValueError(f"expect sizes to sum exactly to {self.shape[dim]}, but got {sum(sizes)}")
    return tuple(self[tuple(sl)] for sl in [[slice(None)] * dim + [slice(sum(sizes[:i]), sum(sizes[:i + 1]))] for i in range(len(sizes))])

  def chunk(self, chunks: int, dim: int = 0) -> list[Tensor]:
    if chunks <= 0: raise ValueError(f"expect chunks to be greater than 0, got: {chunks}")
    dim = self._resolve_dim(dim)
    return list(self.split(ceildiv(self.shape[dim], chunks) if self.shape[dim] else [0] * chunks, dim=dim))

  def squeeze(self, dim: Optional[int] = None) -> Tensor:
    if dim is None: return self.reshape(tuple(dim for dim in self.shape if dim != 1))
    dim = self._resolve_dim(dim)
    return self if not self.ndim or self.shape[dim] != 1 else self.reshape(self.shape[:dim] + self.shape[dim + 1:])

  def unsqueeze(self, dim: int) -> Tensor:
    dim = self._resolve_dim(dim, extra=True)
    return self.reshape(self.shape[:dim] + (1,) + self.shape[dim:])

  @property
  def T(self) -> Tensor: return self.transpose()
  def transpose(self, dim0=1, dim1=0) -> Tensor:
    order = list(range(self.ndim))
    order[dim0], order[dim1] = order[dim1], order[dim0]
    return self.permute(order)

  def flatten(self, start_dim=0, end_dim=-1) -> Tensor:
    start_dim, end_dim = self._resolve_dim(start_dim), self._resolve_dim(end_dim)
    return self.reshape(self.shape[:start_dim] + (prod(self.shape[start_dim:end_dim + 1]),) + self.shape[end_dim + 1:])

  def unflatten(self, dim: int, sizes: tuple) -> Tensor:
    dim = self._resolve_dim(dim)
    return self.reshape(self.shape[:dim] + sizes + self.shape[dim + 1:])

  # ***** reductions *****

  def _reduce(self, op: Ops, axis=None, keepdim=False) -> Tensor:
    axis = tuple(self._resolve_dim(x) for x in (range(self.ndim) if axis is None else make_tuple(axis, 1)))
    if self.ndim == 0: axis = ()
    ret = self._apply_uop(UOp.r, op=op, axis=axis)
    return ret if keepdim else ret.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axis))

  def sum(self, axis=None, keepdim=False, dtype=None) -> Tensor:
    ret = self.cast(sum_acc_dtype(self.dtype) if dtype is None else to_dtype(dtype))._reduce(Ops.ADD, axis, keepdim)
    return ret.cast(self.dtype) if dtype is None and self.dtype == dtypes.float16 else ret

  def prod(self, axis=None, keepdim=False, dtype=None) -> Tensor:
    return self.cast(to_dtype(dtype) if dtype is not None else self.dtype)._reduce(Ops.MUL, axis, keepdim)

  def max(self, axis=None, keepdim=False) -> Tensor: return self._reduce(Ops.MAX, axis, keepdim)

  def min(self, axis=None, keepdim=False) -> Tensor:
    if dtypes.is_int(self.dtype) or self.dtype == dtypes.bool: return ~((~self).max(axis=axis, keepdim=keepdim))
    return -((-self).max(axis=axis, keepdim=keepdim))

  def any(self, axis=None, keepdim=False) -> Tensor: return self.bool().max(axis, keepdim)
  def all(self, axis=None, keepdim=False) -> Tensor: return self.logical_not().any(axis, keepdim).logical_not()

  def mean(self, axis=None, keepdim=False) -> Tensor:
    output_dtype = self.dtype if dtypes.is_float(self.dtype) else dtypes.float32
    numerator = self.cast(sum_acc_dtype(self.dtype)).sum(axis=axis, keepdim=keepdim)
    return numerator.div(prod([si for si, so in zip(self.shape, self.sum(axis=axis, keepdim=True).shape) if resolve(si != so)])).cast(output_dtype)

  def var(self, axis=None, keepdim=False, correction=1) -> Tensor:
    squares = (self - self.mean(axis=axis, keepdim=True)).square()
    n = prod([si for si, so in zip(self.shape, squares.sum(axis=axis, keepdim=True).shape) if resolve(si != so)])
    return squares.sum(axis=axis, keepdim=keepdim).div(smax([0, n - correction]))

  def std(self, axis=None, keepdim=False, correction=1) -> Tensor: return self.var(axis, keepdim, correction).sqrt()

  def _softmax(self, axis, dtype=None):
    m = self - self.max(axis=axis, keepdim=True).detach()
    if dtype is not None: m = m.cast(to_dtype(dtype))
    e = m.exp()
    return m, e, e.sum(axis=axis, keepdim=True)

  def softmax(self, axis=-1, dtype=None) -> Tensor:
    _, e, ss = self._softmax(axis, dtype)
    return e.div(ss)

  def log_softmax(self, axis=-1, dtype=None) -> Tensor:
    m, _, ss = self._softmax(axis, dtype)
    return m - ss.log()

  def logsumexp(self, axis=None, keepdim=False) -> Tensor:
    m = self.max(axis=axis, keepdim=True)
    return (self - m).exp().sum(axis=axis, keepdim=keepdim).log() + (m if keepdim else m.squeeze(axis) if axis is not None else m.reshape(()))

  def argmax(self, axis=None, keepdim=False) -> Tensor:
    if axis is None: return self.flatten().argmax(0)
    axis = self._resolve_dim(axis)
    m = self == self.max(axis=axis, keepdim=True)
    idx = m * Tensor.arange(self.shape[axis], 0, -1, requires_grad=False, device=self.device).reshape(self.shape[axis], *[1] * (self.ndim - axis - 1))
    return (self.shape[axis] - idx.max(axis=axis, keepdim=keepdim)).cast(dtypes.int32)

  def argmin(self, axis=None, keepdim=False) -> Tensor:
    return (~self if dtypes.is_int(self.dtype) or self.dtype == dtypes.bool else -self).argmax(axis=axis, keepdim=keepdim)

  def _cumalu(self, axis: int, op: Ops, _include_initial=False) -> Tensor:
    if self.shape[axis] == 0 or op not in (Ops.ADD, Ops.MAX): raise ValueError(f"cannot cumulate {op} over an empty axis")
    pl_sz = self.shape[axis] - int(not _include_initial)
    pooled = self.transpose(axis, -1).pad((pl_sz, -int(_include_initial)), value=identity_element(op, self.dtype))._pool((self.shape[axis],))
    return (pooled.sum(-1) if op is Ops.ADD else pooled.max(-1)).transpose(axis, -1)

  def _split_cumalu(self, axis: int, op: Ops) -> Tensor:
    axis = self._resolve_dim(axis)
    if self.ndim == 0 or 0 in self.shape: return self
    SPLIT = 256
    if not isinstance(s := self.shape[axis], int) or s <= SPLIT * 2: return self._cumalu(axis, op)
    ret = self.transpose(axis, -1).pad((round_up(s, SPLIT) - s, 0), value=identity_element(op, self.dtype)).unflatten(-1, (-1, SPLIT))._cumalu(-1, op)
    base = ret[..., -1]._cumalu(-1, op, _include_initial=True)
    base = base.unsqueeze(-1).expand(*base.shape, ret.shape[-1])
    def fix(x: Tensor) -> Tensor: return x.flatten(start_dim=-2)[..., -s:].transpose(axis, -1)
    return fix(ret) + fix(base) if op is Ops.ADD else fix(ret).maximum(fix(base))

  def cumsum(self, axis: int = 0) -> Tensor: return self._split_cumalu(axis, Ops.ADD)
  def cummax(self, axis: int = 0) -> Tensor: return self._split_cumalu(axis, Ops.MAX)

  # ***** processing ops *****

  def _pool(self, k_: tuple, stride=1, dilation=1) -> Tensor:
    if len(self.shape) < len(k_): raise ValueError(f"can't pool {self.shape} with {k_}")
    s_, d_ = make_tuple(stride, len(k_)), make_tuple(dilation, len(k_))
    noop, i_ = [None] * (self.ndim - len(k_)), self.shape[-len(k_):]
    if not all(resolve(d * (k - 1) + 1 <= i) for k, d, i in zip(k_, d_, i_)): raise ValueError("kernel size cannot be greater than actual input size")
    o_ = [ceildiv(i - d * (k - 1), s) for i, d, k, s in zip(i_, d_, k_, s_)]
    if any(resolve(k > s) for k, s in zip(k_, s_)) or any(d != 1 for d in d_):
      f_ = [1 + int(resolve(o * s > (i - d * (k - 1)))) for o, s, i, d, k in zip(o_, s_, i_, d_, k_)]
      x = self.repeat([1] * len(noop) + [ceildiv(k * (i * f + d), i) for k, i, d, f in zip(k_, i_, d_, f_)])
      x = x.shrink(tuple(noop + [(0, k * (i * f + d)) for k, i, d, f in zip(k_, i_, d_, f_)])).reshape(noop + flatten((k, (i * f + d)) for k, i, d, f in zip(k_, i_, d_, f_)))
      x = x.shrink(tuple(noop + flatten(((0, k), (0, o * s)) for k, o, s in zip(k_, o_, s_)))).reshape(noop + flatten((k, o, s) for k, o, s in zip(k_, o_, s_)))
      x = x.shrink(tuple(noop + flatten(((0, k), (0, o), (0, 1)) for k, o in zip(k_, o_)))).reshape(noop + flatten((k, o) for k, o in zip(k_, o_)))
      return x.permute(*range(len(noop)), *[len(noop) + i * 2 + 1 for i in range(len(i_))], *[len(noop) + i * 2 for i in range(len(i_))])
    x = self.pad(tuple(noop + [(0, max(0, o * s - i)) for i, o, s in zip(i_, o_, s_)])).shrink(tuple(noop + [(0, o * s) for o, s in zip(o_, s_)]))
    x = x.reshape(noop + flatten(((o, s) for o, s in zip(o_, s_))))
    x = x.shrink(tuple(noop + flatten(((0, o), (0, k)) for o, k in zip(o_, k_))))
    return x.permute(*range(len(noop)), *[len(noop) + i * 2 for i in range(len(i_))], *[len(noop) + i * 2 + 1 for i in range(len(i_))])

  def _resolve_pool_pads(self, padding, dims: int) -> Sequence[int]:
    if not isinstance(padding, int) and not (len(padding) == 2 * dims or len(padding) == dims):
      raise ValueError(f"padding must be an int or a sequence of length {dims} or {2 * dims}, got {padding}")
    return [padding] * 2 * dims if isinstance(padding, int) else (padding if len(padding) == 2 * dims else [p for p in padding for _ in range(2)][::-1])

  def avg_pool2d(self, kernel_size=(2, 2), stride=None, dilation=1, padding=0, count_include_pad=True) -> Tensor:
    k_ = make_tuple(kernel_size, 2)
    pads = self._resolve_pool_pads(padding, len(k_))
    axis = tuple(range(-len(k_), 0))
    pooled = self.pad(pads)._pool(k_, stride if stride is not None else k_, dilation)
    if count_include_pad: return pooled.mean(axis=axis)
    return pooled.sum(axis=axis) / self.ones_like().pad(pads)._pool(k_, stride if stride is not None else k_, dilation).sum(axis=axis)

  def max_pool2d(self, kernel_size=(2, 2), stride=None, dilation=1, padding=0) -> Tensor:
    k_ = make_tuple(kernel_size, 2)
    pads = self._resolve_pool_pads(padding, len(k_))
    return self.pad(pads, value=dtypes.min(self.dtype))._pool(k_, stride if stride is not None else k_, dilation).max(tuple(range(-len(k_), 0)))

  def conv2d(self, weight: Tensor, bias: Optional[Tensor] = None, groups=1, stride=1, dilation=1, padding=0, dtype=None) -> Tensor:
    (bs, cin_), (cout, cin), HW = self.shape[:2], weight.shape[:2], weight.shape[2:]
    padding_ = self._resolve_pool_pads(padding, len(HW))
    if groups * cin != cin_ or len(self.shape) != len(weight.shape):
      raise ValueError(f"input shape {self.shape} does not match the shape of the weights {weight.shape} ({groups * cin} vs. {cin_})")
    x = self.pad(padding_)._pool(HW, stride, dilation)
    rcout, oyx = cout // groups, x.shape[2:-len(HW)]
    x = x.reshape(bs, groups, cin, 1, *oyx, *HW).expand(bs, groups, cin, rcout, *oyx, *HW) \
      .permute(0, 1, 3, *[4 + i for i in range(len(oyx))], 2, *[4 + len(oyx) + i for i in range(len(HW))])
    ret = (x * weight.reshape(1, groups, rcout, *[1] * len(oyx), cin, *HW)).sum([-1 - i for i in range(1 + len(oyx))], keepdim=True, dtype=dtype) \
      .reshape(bs, cout, *oyx)
    return ret if bias is None else ret.add(bias.reshape(1, -1, *[1] * len(HW)))

  def dot(self, w: Tensor, dtype=None) -> Tensor:
    x, dx, dw = self, self.ndim, w.ndim
    if not (dx > 0 and dw > 0): raise RuntimeError(f"both tensors need to be at least 1D, got {dx}D and {dw}D")
    if x.shape[-1] != w.shape[axis_w := -min(w.ndim, 2)]: raise RuntimeError(f"cannot dot {x.shape} and {w.shape}")
    x = x.reshape(*x.shape[0:-1], *[1] * min(dx - 1, dw - 1, 1), x.shape[-1])
    w = w.reshape(*w.shape[0:-2], *[1] * min(dx - 1, dw - 1, 1), *w.shape[axis_w:]).transpose(-1, axis_w)
    return (x * w).sum(-1, dtype=dtype).cast(least_upper_dtype(x.dtype, w.dtype) if dtype is None else to_dtype(dtype))

  def matmul(self, x: Tensor, reverse=False, dtype=None) -> Tensor: return x.dot(self, dtype=dtype) if reverse else self.dot(x, dtype=dtype)
  def __matmul__(self, x) -> Tensor: return self.matmul(x)
  def __rmatmul__(self, x) -> Tensor: return self.matmul(x, True)

  def linear(self, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    x = self.mul(weight) if len(weight.shape) == 1 else self.dot(weight)
    return x.add(bias) if bias is not None else x

  # ***** unary ops *****

  def logical_not(self) -> Tensor: return self.cast(dtypes.bool)._apply_broadcasted_uop(lambda a, b: a.alu(Ops.CMPNE, b), True)
  def neg(self) -> Tensor: return self * -1 if self.dtype != dtypes.bool else self.logical_not()
  def contiguous(self) -> Tensor: return self._apply_uop(UOp.contiguous)
  def contiguous_backward(self) -> Tensor: return self._apply_uop(UOp.contiguous_backward)
  def log(self) -> Tensor: return self.log2() * math.log(2)
  def log2(self) -> Tensor: return self.cast(least_upper_float(self.dtype))._apply_uop(UOp.log2)
  def exp(self) -> Tensor: return self.mul(1 / math.log(2)).exp2()
  def exp2(self) -> Tensor: return self.cast(least_upper_float(self.dtype))._apply_uop(UOp.exp2)
  def relu(self) -> Tensor: return (self > 0).where(self, 0)
  def sigmoid(self) -> Tensor: return (1 + (self * (-1 / math.log(2))).exp2()).reciprocal()
  def hardsigmoid(self, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor: return (alpha * self + beta).relu() - (alpha * self + beta - 1).relu()
  def sqrt(self) -> Tensor: return self.cast(least_upper_float(self.dtype))._apply_uop(UOp.sqrt)
  def rsqrt(self) -> Tensor: return self.reciprocal().sqrt()
  def sin(self) -> Tensor: return self.cast(least_upper_float(self.dtype))._apply_uop(UOp.sin)
  def cos(self) -> Tensor: return ((math.pi / 2) - self).sin()
  def tan(self) -> Tensor: return self.sin() / self.cos()
  def trunc(self) -> Tensor: return self.cast(dtypes.int32).cast(self.dtype) if dtypes.is_float(self.dtype) else self
  def ceil(self) -> Tensor: return (self > (b := self.trunc())).where(b + 1, b)
  def floor(self) -> Tensor: return (self < (b := self.trunc())).where(b - 1, b)
  def round(self) -> Tensor: return ((self > 0) == ((b := self.cast(dtypes.int32) / 2.0).cast(dtypes.int32) == b)).where((self - 0.5).ceil(), (self + 0.5).floor())
  def square(self) -> Tensor: return self * self
  def clip(self, min_=None, max_=None) -> Tensor:
    if min_ is None and max_ is None: raise RuntimeError("at least one of 'min_' or 'max_' must not be None")
    ret = self.maximum(min_) if min_ is not None else self
    return ret.minimum(max_) if max_ is not None else ret
  def clamp(self, min_=None, max_=None) -> Tensor: return self.clip(min_, max_)
  def sign(self) -> Tensor: return self.ne(0).where((self < 0).where(self.full_like(-1), self.full_like(1)), self.full_like(0)) + self * 0
  def abs(self) -> Tensor: return self * self.sign()
  def reciprocal(self) -> Tensor: return self.cast(least_upper_float(self.dtype))._apply_uop(UOp.reciprocal)

  def elu(self, alpha=1.0) -> Tensor: return self.relu() - alpha * (1 - self.exp()).relu()
  def swish(self) -> Tensor: return self * self.sigmoid()
  def silu(self) -> Tensor: return self.swish()
  def relu6(self) -> Tensor: return self.relu() - (self - 6).relu()
  def tanh(self) -> Tensor: return 2.0 * ((2.0 * self).sigmoid()) - 1.0
  def gelu(self) -> Tensor: return 0.5 * self * (1 + (math.sqrt(2 / math.pi) * (self + 0.044715 * self ** 3)).tanh())
  def quick_gelu(self) -> Tensor: return self * (self * 1.702).sigmoid()
  def leakyrelu(self, neg_slope=0.01) -> Tensor: return self.relu() - (-neg_slope * self).relu()
  def softplus(self, beta=1) -> Tensor: return (1 / beta) * (1 + (self * beta).exp()).log()
  def mish(self) -> Tensor: return self * self.softplus().tanh()

  # ***** binary ops *****

  def add(self, x, reverse=False) -> Tensor: return self._binop(Ops.ADD, x, reverse)
  def sub(self, x, reverse=False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    return a + (-b)
  def mul(self, x, reverse=False) -> Tensor: return self._binop(Ops.MUL, x, reverse)
  def idiv(self, x, reverse=False) -> Tensor: return self._binop(Ops.IDIV, x, reverse)

  def div(self, x, reverse=False, rounding_mode=None) -> Tensor:
    numerator, denominator = self._broadcasted(x, reverse)
    d = numerator.cast(least_upper_float(numerator.dtype)) * denominator.cast(least_upper_float(denominator.dtype)).reciprocal()
    output_dtype = numerator.dtype if dtypes.is_int(numerator.dtype) else d.dtype
    if rounding_mode == "trunc": return d.trunc().cast(output_dtype)
    if rounding_mode == "floor": return d.floor().cast(output_dtype)
    if rounding_mode is not None: raise RuntimeError(f"{rounding_mode=} is not supported")
    return d

  def mod(self, x, reverse=False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    return (r := a._apply_uop(lambda u, v: u.alu(Ops.MOD, v), b)) + b * (((r < 0) & (b > 0)) | ((r > 0) & (b < 0)))

  def xor(self, x, reverse=False) -> Tensor: return self._binop(Ops.XOR, x, reverse)
  def bitwise_and(self, x, reverse=False) -> Tensor: return self._binop(Ops.AND, x, reverse)
  def bitwise_or(self, x, reverse=False) -> Tensor: return self._binop(Ops.OR, x, reverse)
  def bitwise_not(self) -> Tensor:
    if self.dtype != dtypes.bool and not dtypes.is_int(self.dtype): raise RuntimeError(f"{self.dtype} is not supported")
    return self.logical_not() if self.dtype == dtypes.bool else self ^ -1

  def lshift(self, x: int) -> Tensor:
    if not dtypes.is_unsigned(self.dtype) or not isinstance(x, int) or x < 0: raise RuntimeError(f"not supported {self.dtype=} {x=}")
    return self.mul(2 ** x)
  def rshift(self, x: int) -> Tensor:
    if not dtypes.is_unsigned(self.dtype) or not isinstance(x, int) or x < 0: raise RuntimeError(f"not supported {self.dtype=} {x=}")
    return self.idiv(2 ** x)

  def pow(self, x, reverse=False) -> Tensor:
    if not isinstance(x, Tensor) and not reverse:
      if x == 0: return self.ones_like()
      if x == 1: return self * 1
      if isinstance(x, int) and 1 < x <= 4: return functools.reduce(lambda a, b: a * b, [self] * x)
      if x == 0.5: return self.sqrt()
      if x == -1: return self.reciprocal()
    base, exponent = self._broadcasted(x, reverse=reverse)
    if not base.is_floating_point() and not exponent.is_floating_point(): base = base.float()
    ret = base.abs().log().mul(exponent).exp()
    negative_base = (base < 0).detach().where(1, 0)
    correct_sign = 1 + negative_base * ((exponent * math.pi).cos() - 1)
    inject_nan = (negative_base * (exponent != exponent.trunc())).detach().where(math.nan, 1)
    return ((base == 0) * (exponent == 0)).detach().where(1, ret * correct_sign * inject_nan)

  def maximum(self, x) -> Tensor: return self._binop(Ops.MAX, x, False)
  def minimum(self, x) -> Tensor:
    t, x = self._broadcasted(x)
    return t._inverse().maximum(x._inverse())._inverse()
  def _inverse(self) -> Tensor: return -self if self.is_floating_point() else ~self if dtypes.is_int(self.dtype) else self.logical_not()

  def where(self, x, y) -> Tensor:
    if isinstance(x, Tensor): x, y = x._broadcasted(y)
    elif isinstance(y, Tensor): y, x = y._broadcasted(x)
    cond, x = self._broadcasted(x, match_dtype=False)
    cond, y = cond._broadcasted(y, match_dtype=False)
    return cond.cast(dtypes.bool)._apply_uop(lambda c, a, b: c.alu(Ops.WHERE, a, b), *x._broadcasted(y))

  def masked_fill(self, mask: Tensor, value) -> Tensor: return mask.where(value, self)

  def __neg__(self) -> Tensor: return self.neg()
  def __add__(self, x) -> Tensor: return self.add(x)
  def __radd__(self, x) -> Tensor: return self.add(x, True)
  def __sub__(self, x) -> Tensor: return self.sub(x)
  def __rsub__(self, x) -> Tensor: return self.sub(x, True)
  def __mul__(self, x) -> Tensor: return self.mul(x)
  def __rmul__(self, x) -> Tensor: return self.mul(x, True)
  def __pow__(self, x) -> Tensor: return self.pow(x)
  def __rpow__(self, x) -> Tensor: return self.pow(x, True)
  def __truediv__(self, x) -> Tensor: return self.div(x)
  def __rtruediv__(self, x) -> Tensor: return self.div(x, True)
  def __floordiv__(self, x) -> Tensor: return self.idiv(x)
  def __rfloordiv__(self, x) -> Tensor: return self.idiv(x, True)
  def __mod__(self, x) -> Tensor: return self.mod(x)
  def __rmod__(self, x) -> Tensor: return self.mod(x, True)
  def __and__(self, x) -> Tensor: return self.bitwise_and(x)
  def __rand__(self, x) -> Tensor: return self.bitwise_and(x, True)
  def __or__(self, x) -> Tensor: return self.bitwise_or(x)
  def __ror__(self, x) -> Tensor: return self.bitwise_or(x, True)
  def __xor__(self, x) -> Tensor: return self.xor(x)
  def __rxor__(self, x) -> Tensor: return self.xor(x, True)
  def __invert__(self) -> Tensor: return self.bitwise_not()
  def __lshift__(self, x) -> Tensor: return self.lshift(x)
  def __rshift__(self, x) -> Tensor: return self.rshift(x)

  def __iadd__(self, x) -> Tensor: return self.assign(self.add(x))
  def __isub__(self, x) -> Tensor: return self.assign(self.sub(x))
  def __imul__(self, x) -> Tensor: return self.assign(self.mul(x))
  def __itruediv__(self, x) -> Tensor: return self.assign(self.div(x))
  def __ipow__(self, x) -> Tensor: return self.assign(self.pow(x))

  def __lt__(self, x) -> Tensor: return self._binop(Ops.CMPLT, x, False)
  def __gt__(self, x) -> Tensor: return self._binop(Ops.CMPLT, x, True)
  def ne(self, x) -> Tensor: return self._binop(Ops.CMPNE, x, False)
  def __ne__(self, x) -> Tensor: return self.ne(x)  # type: ignore[override]
  def __eq__(self, x) -> Tensor: return self.ne(x).logical_not()  # type: ignore[override]
  def eq(self, x) -> Tensor: return self == x
  def __ge__(self, x) -> Tensor: return (self < x).logical_not()
  def __le__(self, x) -> Tensor: return (self > x).logical_not()

  # ***** functional nn ops *****

  def layernorm(self, axis=-1, eps: float = 1e-5) -> Tensor:
    y = (self - self.mean(axis, keepdim=True))
    return y.mul((y * y).mean(axis, keepdim=True).add(eps).rsqrt())

  def batchnorm(self, weight: Optional[Tensor], bias: Optional[Tensor], mean: Tensor, invstd: Tensor, axis=1) -> Tensor:
    axis_ = argfix(axis)
    shape = tuple(s if ax in axis_ else 1 for ax, s in enumerate(self.shape))
    x = self - mean.reshape(shape)
    if weight is not None: x = x * weight.reshape(shape)
    ret = x.mul(invstd.reshape(shape) if len(invstd.shape) == len(axis_) else invstd)
    return (ret + bias.reshape(shape)) if bias is not None else ret

  def dropout(self, p=0.5) -> Tensor:
    if not 0 <= p <= 1: raise ValueError(f"{p=} is out of range [0, 1]")
    if not Tensor.training or p == 0: return self
    if p == 1: return self.zeros_like()
    return (Tensor.rand_like(self, requires_grad=False, dtype=dtypes.default_float, contiguous=False) >= p).contiguous().where(self, 0) / (1.0 - p)

  @staticmethod
  def rand_like(t: Tensor, **kwargs) -> Tensor:
    return Tensor.rand(*t.shape, device=kwargs.pop("device", t.device), dtype=kwargs.pop("dtype", t.dtype), **kwargs)

  def _one_hot_along_dim(self, num_classes: int, dim: int = -1) -> Tensor:
    if not dtypes.is_int(self.dtype): raise RuntimeError(f"_one_hot_along_dim expects int index tensor, getting {self.dtype}")
    offset = self.ndim - self._resolve_dim(dim) - 1
    return self == Tensor.arange(num_classes, device=self.device, requires_grad=False).reshape((num_classes,) + (1,) * offset)

  def one_hot(self, num_classes: int = -1) -> Tensor:
    if not dtypes.is_int(self.dtype): raise RuntimeError(f"expect integer dtype, getting {self.dtype=}")
    if num_classes == -1: num_classes = (self.max() + 1).item()
    return self[..., None]._one_hot_along_dim(num_classes).where(1, 0)

  def scaled_dot_product_attention(self, key: Tensor, value: Tensor, attn_mask: Optional[Tensor] = None, dropout_p: float = 0.0,
                                   is_causal: bool = False) -> Tensor:
    qk = self.matmul(key.transpose(-2, -1), dtype=least_upper_dtype(self.dtype, key.dtype, dtypes.float32)) / math.sqrt(self.shape[-1])
    if is_causal: attn_mask = Tensor.ones(qk.shape[-2], qk.shape[-1], requires_grad=False, device=self.device, dtype=dtypes.bool).tril(0)
    if attn_mask is not None:
      if attn_mask.dtype == dtypes.bool: attn_mask = attn_mask.where(0, -float("inf"))
      qk = qk + attn_mask
    return qk.softmax(-1).cast(self.dtype).dropout(dropout_p) @ value

  def triu(self, diagonal: int = 0) -> Tensor:
    mask = Tensor.arange(self.shape[-2], device=self.device, requires_grad=False).unsqueeze(1) + diagonal <= \
      Tensor.arange(self.shape[-1], device=self.device, requires_grad=False).unsqueeze(0)
    return mask.where(self, self.zeros_like())
  def tril(self, diagonal: int = 0) -> Tensor:
    mask = Tensor.arange(self.shape[-2], device=self.device, requires_grad=False).unsqueeze(1) + diagonal >= \
      Tensor.arange(self.shape[-1], device=self.device, requires_grad=False).unsqueeze(0)
    return mask.where(self, self.zeros_like())

  def binary_crossentropy(self, Y: Tensor, reduction: str = "mean") -> Tensor:
    return self._do_reduction((-Y * self.log() - (1 - Y) * (1 - self).log()), reduction)
  def binary_crossentropy_logits(self, Y: Tensor, reduction: str = "mean") -> Tensor:
    return self._do_reduction(self.maximum(0) - Y * self + (1 + self.abs().neg().exp()).log(), reduction)

  def _do_reduction(self, t: Tensor, reduction: str) -> Tensor:
    if reduction not in ("mean", "sum", "none"): raise ValueError(f"reduction must be one of mean, sum, none, got {reduction!r}")
    return t.mean() if reduction == "mean" else t.sum() if reduction == "sum" else t

  def sparse_categorical_crossentropy(self, Y: Tensor, ignore_index: int = -1, label_smoothing=0.0, reduction: str = "mean") -> Tensor:
    if not 0.0 <= label_smoothing <= 1.0: raise ValueError("label_smoothing must be in [0.0, 1.0]")
    if reduction not in ("mean", "sum", "none"): raise ValueError("reduction must be one of ['mean', 'sum', 'none']")
    log_probs, loss_mask = self.log_softmax(), (Y != ignore_index) if ignore_index != -1 else Y.ones_like(dtype=dtypes.bool)
    y_counted = Y.to(self.device).flatten().reshape(-1, 1)._one_hot_along_dim(self.shape[-1])
    y = (y_counted * loss_mask.reshape(-1, 1)).reshape(*Y.shape, self.shape[-1])
    smoothing = label_smoothing * (log_probs.mean(-1) * loss_mask)
    unreduced = ((1 - label_smoothing) * (log_probs * y).sum(-1) + smoothing)
    return -(unreduced.sum() / loss_mask.sum() if reduction == "mean" else (unreduced.sum() if reduction == "sum" else unreduced))

  # ***** casts *****

  def cast(self, dtype) -> Tensor: return self if self.dtype == (dt := to_dtype(dtype)) else self._apply_uop(UOp.cast, dtype=dt)

  def bitcast(self, dtype) -> Tensor:
    dt = to_dtype(dtype)
    if self.requires_grad: raise RuntimeError("can't backprop through bitcast")
    if (ns := dt.itemsize) != (os_ := self.dtype.itemsize) and (not self.shape or (self.shape[-1] * os_) % ns != 0):
      raise RuntimeError(f"cannot bitcast {self.dtype}{list(self.shape)} to {dt}: the last axis is not a whole number of {dt}")
    if not self.device.startswith("DISK") and ns != os_:
      # different sizes off DISK: regroup the bytes with shifts through unsigned ints
      new_uint, old_uint = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}[ns], \
        {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}[os_]
      tmp = self.bitcast(old_uint)
      if ns > os_: return functools.reduce(Tensor.add, (tmp[..., i::ns // os_].cast(new_uint) * (1 << (8 * i * os_)) for i in range(ns // os_))).bitcast(dt)
      return Tensor.stack(*(tmp // (1 << (8 * i * ns)) for i in range(os_ // ns)), dim=-1).flatten(-2).cast(new_uint).bitcast(dt)
    return self._apply_uop(UOp.bitcast, dtype=dt) if self.dtype != dt else self

  def float(self) -> Tensor: return self.cast(dtypes.float32)
  def half(self) -> Tensor: return self.cast(dtypes.float16)
  def int(self) -> Tensor: return self.cast(dtypes.int32)
  def bool(self) -> Tensor: return self.cast(dtypes.bool)
  def double(self) -> Tensor: return self.cast(dtypes.float64)
  def long(self) -> Tensor: return self.cast(dtypes.int64)


def _forget_tensor(ref: weakref.ref) -> None: all_tensors.pop(ref, None)


def _read_back(tensors: list[Tensor]) -> list[np.ndarray]:
  """The values of realized tensors, read without capturing the read itself."""
  out = []
  with Context(CAPTURE_PROCESS_REPLAY=0):
    for t in tensors:
      u = t.lazydata
      # the usual case, a whole contiguous buffer, is read directly instead of scheduling a copy
      if u.base.op is Ops.BUFFER and u.st is not None and u.st.contiguous and u.base.realized is not None and u.size == u.base.size:
        out.append(u.base.buffer.numpy().reshape(t.shape))
      else: out.append(t.numpy())
  return out


# which Tensor method is building ops right now (for the metadata that rides on schedule items)
_current_op: list[Optional[str]] = [None]


def _with_metadata(name: str, fn: Callable) -> Callable:
  @functools.wraps(fn)
  def wrapper(*args, **kwargs):
    if _current_op[0] is not None: return fn(*args, **kwargs)
    _current_op[0] = name
    try: return fn(*args, **kwargs)
    finally: _current_op[0] = None
  return wrapper


for _name, _fn in list(Tensor.__dict__.items()):
  if callable(_fn) and not _name.startswith("_") and _name not in {"schedule", "schedule_with_vars", "realize", "numpy", "tolist", "item",
                                                                   "backward", "gradient", "assign", "to", "replace", "requires_grad_"} \
     and not isinstance(_fn, (staticmethod, classmethod, property)):
    setattr(Tensor, _name, _with_metadata(_name, _fn))
for _name in ("__add__", "__mul__", "__sub__", "__truediv__", "__matmul__", "__neg__", "__getitem__", "__pow__", "__radd__", "__rmul__", "__rsub__"):
  setattr(Tensor, _name, _with_metadata(_name, Tensor.__dict__[_name]))
