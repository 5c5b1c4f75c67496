"""Data types of the compiler: scalar dtypes, pointer dtypes, promotion, and the numpy mapping.

Sits below `ops.py`: every UOp carries a DType.
"""
from __future__ import annotations
import functools, math, struct
from dataclasses import dataclass
from typing import Union
import numpy as np
from scheduler.helpers import RECONSTRUCTORS

ConstType = Union[float, int, bool]


@dataclass(frozen=True, eq=True)
class DType:
  priority: int
  itemsize: int
  name: str
  fmt: str | None
  count: int = 1

  def __repr__(self): return f"dtypes.{'bfloat16' if self.name == '__bf16' else self.name}"   # its C name is __bf16
  def __lt__(self, o: DType): return (self.priority, self.itemsize, self.name) < (o.priority, o.itemsize, o.name)
  @property
  def base(self) -> DType: return self
  @property
  def scalar(self) -> DType: return self
  def ptr(self, size: int = -1) -> PtrDType:
    return PtrDType(self.priority, self.itemsize, self.name, self.fmt, self.count, self, size)
  def vec(self, sz: int) -> DType:
    if sz == 1: return self
    return DType(self.priority, self.itemsize * sz, f"{self.name}{sz}", None, sz)
  def __reduce__(self):
    if self.name in _by_name: return RECONSTRUCTORS["dtype"], (self.name,)
    return RECONSTRUCTORS["dtype"], (self.name, (self.priority, self.itemsize, self.name, self.fmt, self.count))


@dataclass(frozen=True, eq=True)
class PtrDType(DType):
  _base: DType = None  # type: ignore
  size: int = -1
  @property
  def base(self) -> DType: return self._base
  def __repr__(self): return f"{self._base!r}.ptr({self.size})"
  def __reduce__(self):
    return RECONSTRUCTORS["ptr_dtype"], ((self.priority, self.itemsize, self.name, self.fmt, self.count), self._base,
                                         self.size)


class dtypes:
  void = DType(-1, 0, "void", None)
  bool = DType(0, 1, "bool", "?")
  int8 = DType(1, 1, "char", "b")
  uint8 = DType(2, 1, "uchar", "B")
  int16 = DType(3, 2, "short", "h")
  uint16 = DType(4, 2, "ushort", "H")
  int32 = DType(5, 4, "int", "i")
  uint32 = DType(6, 4, "uint", "I")
  int64 = DType(7, 8, "long", "q")
  uint64 = DType(8, 8, "ulong", "Q")
  float16 = DType(11, 2, "half", "e")
  bfloat16 = DType(12, 2, "__bf16", None)   # float32's upper half: stored as 16 bits, computed in float32
  float32 = DType(13, 4, "float", "f")
  float64 = DType(14, 8, "double", "d")
  half, float, double = float16, float32, float64
  char, uchar, short, ushort, int, uint, long, ulong = int8, uint8, int16, uint16, int32, uint32, int64, uint64
  default_float: DType = float32
  default_int: DType = int32

  uints = (uint8, uint16, uint32, uint64)
  sints = (int8, int16, int32, int64)
  ints = uints + sints
  floats = (float16, bfloat16, float32, float64)
  all = (bool,) + ints + floats

  @staticmethod
  def is_float(x: DType) -> bool: return x.scalar in dtypes.floats
  @staticmethod
  def is_int(x: DType) -> bool: return x.scalar in dtypes.ints
  @staticmethod
  def is_unsigned(x: DType) -> bool: return x.scalar in dtypes.uints
  @staticmethod
  def is_bool(x: DType) -> bool: return x.scalar == dtypes.bool

  @staticmethod
  def from_py(x) -> DType:
    if isinstance(x, float): return dtypes.default_float
    if isinstance(x, bool): return dtypes.bool
    if isinstance(x, int): return dtypes.default_int
    if isinstance(x, (list, tuple)): return max((dtypes.from_py(xi) for xi in x), default=dtypes.default_float)
    raise RuntimeError(f"could not infer dtype of {x!r}")

  @staticmethod
  def as_const(val, dtype: DType):
    if isinstance(val, tuple): return tuple(dtypes.as_const(x, dtype) for x in val)
    if not isinstance(val, (int, float, bool)): return val  # symbolic
    if dtypes.is_int(dtype): return truncate_const(int(val), dtype)
    # a float constant holds the value the device stores (16777217 is 16777216.0 in float32): folding it into other
    # constants then computes what a kernel computes
    if dtypes.is_float(dtype): return truncate_const(float(val), dtype)
    return bool(val)

  @staticmethod
  def min(dtype: DType):
    """The smallest value of `dtype` (-inf for floats, False for bool)."""
    return _value_range(dtype)[0]

  @staticmethod
  def max(dtype: DType):
    """The largest value of `dtype` (inf for floats, True for bool)."""
    return _value_range(dtype)[1]

  @staticmethod
  def fields() -> dict[str, DType]: return dict(_by_name)


_by_name: dict[str, DType] = {d.name: d for d in (dtypes.void,) + dtypes.all}
_user_names = {"bool": dtypes.bool, "int8": dtypes.int8, "uint8": dtypes.uint8, "int16": dtypes.int16,
               "uint16": dtypes.uint16,
               "int32": dtypes.int32, "uint32": dtypes.uint32, "int64": dtypes.int64, "uint64": dtypes.uint64,
               "float16": dtypes.float16, "bfloat16": dtypes.bfloat16, "float32": dtypes.float32,
               "float64": dtypes.float64}


def _dtype_by_name(name: str) -> DType: return _by_name[name]


def to_dtype(x: DType | str) -> DType:
  if isinstance(x, DType): return x
  if x in _user_names: return _user_names[x]
  if x in _by_name: return _by_name[x]
  raise ValueError(f"unknown dtype {x!r}")


def _value_range(dtype: DType) -> tuple:
  scalar = dtype.scalar
  if scalar in dtypes.floats: return (-math.inf, math.inf)
  if scalar not in dtypes.ints: return (False, True)
  bits = 8 * scalar.itemsize
  if scalar in dtypes.uints: return (0, (1 << bits) - 1)
  return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)


# Type promotion is a lattice (JAX-style, as the reference's): each dtype names the dtypes it widens to
# in one step; two dtypes promote to the lowest-priority dtype that both can widen to.
_WIDENS_TO: dict[DType, tuple[DType, ...]] = {
  dtypes.bool: (dtypes.int8, dtypes.uint8),
  dtypes.int8: (dtypes.int16,), dtypes.int16: (dtypes.int32,), dtypes.int32: (dtypes.int64,),
  dtypes.int64: (dtypes.float16, dtypes.bfloat16),
  dtypes.uint8: (dtypes.int16, dtypes.uint16), dtypes.uint16: (dtypes.int32, dtypes.uint32),
  dtypes.uint32: (dtypes.int64, dtypes.uint64), dtypes.uint64: (dtypes.float16, dtypes.bfloat16),
  dtypes.float16: (dtypes.float32,), dtypes.bfloat16: (dtypes.float32,), dtypes.float32: (dtypes.float64,),
  dtypes.float64: (),
}


@functools.cache
def _reachable(dtype: DType) -> frozenset[DType]:
  """`dtype` and every dtype it widens to, in any number of steps."""
  seen, todo = {dtype}, [dtype]
  while todo:
    for wider in _WIDENS_TO[todo.pop()]:
      if wider not in seen: seen.add(wider); todo.append(wider)
  return frozenset(seen)


def least_upper_dtype(*ds: DType) -> DType:
  """The narrowest dtype that every one of `ds` promotes to."""
  shared = frozenset.intersection(*(_reachable(d) for d in ds))
  return min(shared)


# stored mantissa bits of the float dtypes
MANTISSA_BITS = {dtypes.float16: 10, dtypes.bfloat16: 7, dtypes.float32: 23, dtypes.float64: 52}


def least_upper_float(dt: DType) -> DType:
  return dt if dtypes.is_float(dt) else least_upper_dtype(dt, dtypes.default_float)


def sum_acc_dtype(dt: DType) -> DType:
  """The accumulator dtype of a sum: at least 32 bits, unsigned stays unsigned, bool sums as int."""
  if dtypes.is_float(dt): floor = dtypes.float32
  elif dtypes.is_unsigned(dt): floor = dtypes.uint32
  else: floor = dtypes.int32
  return least_upper_dtype(dt, floor)


_np_map = {dtypes.bool: np.bool_, dtypes.int8: np.int8, dtypes.uint8: np.uint8, dtypes.int16: np.int16,
           dtypes.uint16: np.uint16,
           dtypes.int32: np.int32, dtypes.uint32: np.uint32, dtypes.int64: np.int64, dtypes.uint64: np.uint64,
           dtypes.float16: np.float16, dtypes.float32: np.float32, dtypes.float64: np.float64}
_from_np_map = {np.dtype(v): k for k, v in _np_map.items()}


def to_np_dtype(dt: DType) -> type:
  """The numpy dtype of a buffer's memory (numpy has no bfloat16: its bits are uint16, `bf16_to_float32` reads them)."""
  if dt.base == dtypes.bfloat16: return np.uint16
  if dt.base not in _np_map: raise ValueError(f"{dt} has no numpy dtype")
  return _np_map[dt.base]


def value_np_dtype(dt: DType) -> type:
  """The numpy dtype values of `dt` are computed in (bfloat16 in float32, rounded to bfloat16 after each op)."""
  return np.float32 if dt.base == dtypes.bfloat16 else to_np_dtype(dt)


def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
  """bfloat16 bits (uint16) as the float32 values they are."""
  return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def float32_to_bf16(values) -> np.ndarray:
  """Values rounded to bfloat16 (to nearest, ties to even; NaN stays NaN), as their bits (uint16)."""
  bits = np.asarray(values, dtype=np.float32).view(np.uint32)
  rounded = ((bits + (0x7FFF + ((bits >> 16) & 1))) >> 16).astype(np.uint16)
  return np.where((bits & 0x7FFFFFFF) > 0x7F800000, ((bits >> 16) | 0x40).astype(np.uint16), rounded)


def round_bf16(values) -> np.ndarray:
  """float32 values rounded to the nearest bfloat16, still float32."""
  return bf16_to_float32(float32_to_bf16(values))


def from_np_dtype(npdt) -> DType:
  npdt = np.dtype(npdt)
  if npdt not in _from_np_map: raise ValueError(f"numpy dtype {npdt} is not supported")
  return _from_np_map[npdt]


def truncate_const(val, dtype: DType):
  """Cast a python constant the way the device would store it."""
  if dtypes.is_float(dtype):
    if dtype == dtypes.float16:
      with np.errstate(over="ignore"): return float(np.float16(val))   # inf, as the device stores it
    if dtype == dtypes.bfloat16:
      with np.errstate(over="ignore"): return float(round_bf16(np.float32(val)))
    if dtype == dtypes.float32:
      try: return struct.unpack("f", struct.pack("f", val))[0]
      except OverflowError: return math.copysign(math.inf, val)
    return float(val)
  if dtypes.is_int(dtype):
    bits = dtype.itemsize * 8
    v = int(val) & ((1 << bits) - 1)
    if not dtypes.is_unsigned(dtype) and v >= 1 << (bits - 1): v -= 1 << bits
    return v
  return bool(val)
