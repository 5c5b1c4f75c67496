"""PYTHON device: evaluates kernel ASTs directly with numpy, vectorized over whole views.

An independent oracle for the C path (it shares nothing with it below the AST) and the fallback
device where no C compiler exists. Integer division, modulo, casts and comparisons follow C; bfloat16 is computed
in float32 and rounded after each op, as the C device does.
"""
from __future__ import annotations
import functools
from typing import Any, Callable, Optional
import numpy as np
from scheduler.dtype import (DType, dtypes, to_np_dtype, value_np_dtype, bf16_to_float32, float32_to_bf16,
                             round_bf16)
from scheduler.device import HostDevice, Buffer
from scheduler.ops import UOp, Ops, sym_infer
from scheduler.shape.shapetracker import ShapeTracker


def open_device(name: str) -> "PythonDevice": return PythonDevice(name)


class PythonDevice(HostDevice):
  def compile(self, ast: UOp, name: str) -> Callable:
    return functools.partial(run_ast, ast)


# ***** C semantics on numpy arrays *****

def c_idiv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """C's quotient, rounded toward zero; by zero it is 0. The magnitudes are divided as unsigned ints: |INT_MIN| does
  not fit the signed type (numpy's abs leaves it negative, which made 1 // INT_MIN come out 1), and INT_MIN // -1
  wraps back to INT_MIN, as on the CPU device."""
  a, b = np.asarray(a), np.asarray(b)
  dtype = np.result_type(a, b)
  b_safe = np.where(b == 0, 1, b).astype(dtype)
  if dtype.kind != "i": return np.where(b == 0, 0, a.astype(dtype) // b_safe).astype(dtype)
  unsigned = np.dtype(f"u{dtype.itemsize}")
  magnitude = np.abs(a.astype(dtype)).astype(unsigned) // np.abs(b_safe).astype(unsigned)
  quotient = np.where((a < 0) != (b_safe < 0), np.zeros_like(magnitude) - magnitude, magnitude).astype(dtype)
  return np.where(b == 0, 0, quotient).astype(dtype)


def c_mod(a, b):
  """C's remainder (the dividend's sign); by zero it is 0, as x // 0 is (the CPU device's semantics)."""
  return np.where(b == 0, 0, a - c_idiv(a, b) * b).astype(np.result_type(a, b))


def threefry2x32(x: np.ndarray, key: np.ndarray) -> np.ndarray:
  """Threefry-2x32 with 20 rounds on uint64 counters and keys (the key schedule the reference uses)."""
  x, key = x.astype(np.uint64), key.astype(np.uint64)
  m32 = np.uint64(0xffffffff)
  x0, x1 = (x & m32).astype(np.uint32), ((x >> np.uint64(32)) & m32).astype(np.uint32)
  k0, k1 = (key & m32).astype(np.uint32), ((key >> np.uint64(32)) & m32).astype(np.uint32)
  ks = [k1, k0 ^ k1 ^ np.uint32(0x1BD11BDA), k0]
  rot = [[13, 15, 26, 6], [17, 29, 16, 24]]
  a, b = x0 + ks[2], x1 + ks[0]
  for i in range(5):
    for r in rot[i % 2]:
      a = a + b
      b = a ^ ((b << np.uint32(r)) | (b >> np.uint32(32 - r)))
    a, b = a + ks[i % 3], b + ks[(i + 1) % 3] + np.uint32(i + 1)
  return (b.astype(np.uint64) << np.uint64(32)) | a.astype(np.uint64)


def _cast(x: np.ndarray, dtype: DType) -> np.ndarray:
  if dtype == dtypes.bfloat16: return round_bf16(x.astype(np.float32))
  npdt = to_np_dtype(dtype)
  if dtype == dtypes.bool: return x != 0
  if dtypes.is_int(dtype) and x.dtype.kind == "f":
    # C truncates toward zero; out-of-range values are undefined there, wrap them here
    with np.errstate(all="ignore"):
      return np.trunc(np.nan_to_num(x, nan=0, posinf=0, neginf=0)).astype(np.int64).astype(npdt)
  return x.astype(npdt)


_alu: dict[Ops, Callable] = {
  Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.MAX: lambda a, b: np.where(a > b, a, b),
  Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.XOR: np.bitwise_xor, Ops.OR: np.bitwise_or, Ops.AND: np.bitwise_and,
  Ops.SHL: np.left_shift, Ops.SHR: np.right_shift, Ops.IDIV: c_idiv, Ops.MOD: c_mod,
  Ops.NEG: np.negative, Ops.RECIP: lambda x: np.reciprocal(x), Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin,
  Ops.SQRT: np.sqrt,
  Ops.WHERE: np.where, Ops.THREEFRY: threefry2x32, Ops.FDIV: np.divide,
}


# ***** index expressions *****

def eval_index(u: UOp, ranges: dict[int, np.ndarray], var_vals: dict[UOp, int], cache: dict) -> Any:
  """The value of an index expression over the loop positions, its sources first (from the bottom: no recursion)."""
  # a BIND's value is its own: its sources are not evaluated
  for node in u.sources_first(lambda n: n not in cache,
                              lambda n: n.op not in (Ops.BIND, Ops.CONST, Ops.RANGE, Ops.DEFINE_VAR)):
    _eval_index_node(node, ranges, var_vals, cache)
  return cache[u]


def _eval_index_node(u: UOp, ranges: dict[int, np.ndarray], var_vals: dict[UOp, int], cache: dict) -> None:
  if u.op is Ops.CONST: ret = u.arg
  elif u.op is Ops.RANGE: ret = ranges[u.arg]
  elif u.op is Ops.DEFINE_VAR: ret = var_vals[u] if u in var_vals else _var_by_name(u, var_vals)
  elif u.op is Ops.BIND: ret = u.src[1].arg
  else:
    srcs = [cache[s] for s in u.src]
    if u.op in (Ops.AND, Ops.OR) and u.dtype == dtypes.bool:
      ret = np.logical_and(*srcs) if u.op is Ops.AND else np.logical_or(*srcs)
    elif u.op is Ops.CAST: ret = srcs[0]
    else: ret = _alu[u.op](*[np.asarray(s, dtype=np.int64) if not isinstance(s, (bool, np.bool_)) and
                            (not isinstance(s, np.ndarray) or s.dtype != np.bool_) else s for s in srcs])
  cache[u] = ret


def _var_by_name(u: UOp, var_vals: dict[UOp, int]) -> int:
  for k, v in var_vals.items():
    if k.arg == u.arg: return v
  raise KeyError(f"no value for variable {u.arg[0]}")


def concrete(x, var_vals: dict[UOp, int]) -> int:
  if not isinstance(x, UOp): return x
  return int(sym_infer(x.substitute({k: k.const_like(v) for k, v in var_vals.items()}), {}))


def view_positions(st: ShapeTracker, var_vals: dict[UOp, int], window: Optional[tuple] = None) -> tuple[tuple, list]:
  """(shape, first index per axis) of the positions of a view a kernel visits: all of them, or with `window`
  (axis, start, stop) only those of that axis, unless the view broadcasts it."""
  shape = [concrete(s, var_vals) for s in st.shape]
  starts = [0] * len(shape)
  if window is not None and window[0] < len(shape) and shape[window[0]] != 1:
    axis, starts[axis], stop = window
    shape[axis] = stop - starts[axis]
  return tuple(shape), starts


def indexed_view(st: ShapeTracker, var_vals: dict[UOp, int], window: Optional[tuple] = None
                 ) -> tuple[tuple, np.ndarray, np.ndarray]:
  """(shape, flat index, valid) arrays for every position of a view (of the `window`, see `view_positions`)."""
  shape, starts = view_positions(st, var_vals, window)
  idx_u, valid_u = st.to_indexed_uops()
  ranges = {i: np.arange(b, b + s).reshape((1,) * i + (s,) + (1,) * (len(shape) - i - 1))
            for i, (b, s) in enumerate(zip(starts, shape))}
  cache: dict = {}
  idx = np.broadcast_to(np.asarray(eval_index(idx_u, ranges, var_vals, cache), dtype=np.int64), shape)
  valid = np.broadcast_to(np.asarray(eval_index(valid_u, ranges, var_vals, cache), dtype=np.bool_), shape)
  return shape, idx, valid


# ***** kernels *****

# a kernel whose loops visit more positions than this runs in slices of one output axis (numpy materializes the
# whole loop space: a cumsum of 2^21 elements needed 24 GB in one piece)
SLICE_POSITIONS = 1 << 22


def run_ast(ast: UOp, bufs: list[Buffer], var_vals: dict[UOp, int]) -> None:
  arrays = [b.as_array() for b in bufs]
  with np.errstate(all="ignore"):
    for window in _windows(ast, var_vals):
      values: dict[UOp, Any] = {}
      for u in ast.toposort: values[u] = _eval(u, values, arrays, var_vals, window)


def _windows(ast: UOp, var_vals: dict[UOp, int]) -> list:
  """[None] (the whole loop space at once), or (axis, start, stop) slices of the first axis that no reduce runs over
  and no view of the kernel broadcasts partially."""
  shapes = [tuple(concrete(s, var_vals) for s in u.arg.shape) for u in ast.toposort if u.op is Ops.VIEW]
  if not shapes or len({len(s) for s in shapes}) != 1: return [None]
  loop = tuple(max(extents) for extents in zip(*shapes))
  if int(np.prod(loop, dtype=np.int64)) <= SLICE_POSITIONS: return [None]
  reduced = {a for u in ast.toposort if u.op is Ops.REDUCE_AXIS for a in u.arg[1]}
  for axis, extent in enumerate(loop):
    if axis in reduced or extent == 1 or any(s[axis] not in (1, extent) for s in shapes): continue
    step = max(1, SLICE_POSITIONS * extent // int(np.prod(loop, dtype=np.int64)))
    return [(axis, start, min(start + step, extent)) for start in range(0, extent, step)]
  return [None]


def _eval(u: UOp, values: dict[UOp, Any], arrays: list[np.ndarray], var_vals: dict[UOp, int], window=None) -> Any:
  op = u.op
  if op in (Ops.SINK, Ops.DEFINE_GLOBAL, Ops.VIEW): return None
  if op is Ops.CONST:
    val = np.array(u.arg, dtype=value_np_dtype(u.dtype))
    if u.dtype == dtypes.bfloat16: val = round_bf16(val)   # a constant is a bfloat16 value too
    if u.src: return np.broadcast_to(val, view_positions(u.src[0].arg, var_vals, window)[0])
    return val
  if op is Ops.DEFINE_VAR:
    return np.array(_var_by_name(u, var_vals) if u not in var_vals else var_vals[u], dtype=to_np_dtype(u.dtype))
  if op is Ops.VALID:
    _, _, valid = indexed_view(u.src[0].arg, var_vals, window)
    return valid
  if op is Ops.LOAD:
    shape, idx, valid = indexed_view(u.src[1].arg, var_vals, window)
    data = arrays[u.src[0].arg]
    if data.size == 0: return np.zeros(shape, dtype=value_np_dtype(u.dtype))
    loaded = np.where(valid, data[np.where(valid, idx, 0)], np.zeros((), dtype=data.dtype))
    return bf16_to_float32(loaded) if u.dtype == dtypes.bfloat16 else loaded
  if op is Ops.STORE:
    shape, idx, valid = indexed_view(u.src[1].arg, var_vals, window)
    val = np.asarray(values[u.src[2]])
    if u.src[2].dtype == dtypes.bfloat16: val = float32_to_bf16(val)   # the stored form: its bits
    # views of one element may differ in rank within a kernel ((1,) loads into a () store): same element
    if val.ndim > len(shape) and val.size == 1: val = val.reshape(shape)
    val = np.broadcast_to(val, shape)
    arrays[u.src[0].arg][idx[valid]] = val[valid]
    return None
  if op is Ops.REDUCE_AXIS:
    x = values[u.src[0]]
    axes = u.arg[1]
    if u.arg[0] in (Ops.ADD, Ops.MUL):
      ufunc = np.add if u.arg[0] is Ops.ADD else np.multiply
      total = ufunc.reduce(x, axis=axes, keepdims=True, dtype=x.dtype)
      return round_bf16(total) if u.dtype == dtypes.bfloat16 else total   # rounded once, not after every step
    # MAX like C's (a > b ? a : b) accumulation, starting from the lowest value
    return np.max(x, axis=axes,
                  keepdims=True) if x.dtype.kind != "f" or not np.isnan(x).any() else _c_max_reduce(x, axes)
  if op is Ops.CAST: return _cast(np.asarray(values[u.src[0]]), u.dtype)
  if op is Ops.BITCAST:
    source = np.asarray(values[u.src[0]])
    if u.src[0].dtype == dtypes.bfloat16: source = float32_to_bf16(source)
    bits = np.ascontiguousarray(source).view(to_np_dtype(u.dtype))
    return bf16_to_float32(bits) if u.dtype == dtypes.bfloat16 else bits
  if op in _alu:
    srcs = [values[s] for s in u.src]
    if op is Ops.WHERE: return np.where(srcs[0], srcs[1], srcs[2]).astype(value_np_dtype(u.dtype), copy=False)
    if op in (Ops.SHL, Ops.SHR): srcs[1] = np.asarray(srcs[1]).astype(np.asarray(srcs[0]).dtype)
    result = np.asarray(_alu[op](*srcs)).astype(value_np_dtype(u.dtype), copy=False)
    return round_bf16(result) if u.dtype == dtypes.bfloat16 else result
  raise NotImplementedError(f"PYTHON device cannot run {op}")


def _c_max_reduce(x: np.ndarray, axes: tuple) -> np.ndarray:
  moved = np.moveaxis(x, axes, tuple(range(x.ndim - len(axes), x.ndim)))
  flat = moved.reshape(moved.shape[:x.ndim - len(axes)] + (-1,))
  acc = np.full(flat.shape[:-1], -np.inf, dtype=x.dtype)
  for i in range(flat.shape[-1]): acc = np.where(flat[..., i] > acc, flat[..., i], acc)
  out_shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
  return acc.reshape(out_shape)
