"""The numpy oracle of generated programs: tinygrad 0.10.2's documented semantics written for numpy arrays.

Used by the numpy half of every generated program (`scripts/fuzz/generate.py` writes calls to these functions),
and by the standalone reproducers it prints. Nothing here imports the compiler: the promotion lattice, integer
division and the NaN rules are restated from the reference's documented behaviour, so that a bug in the
compiler's own tables cannot hide behind the oracle.

Semantics decided here (and documented in the README's fuzzing section):
- integer `a // b` truncates toward zero (C), `a % b` has the divisor's sign (Python); by zero both are 0;
- float to int casts truncate toward zero (the generator only casts values that fit);
- `relu`, `maximum`, `minimum`, `clip` and max/min reductions never see NaN in generated programs (their NaN
  behaviour is comparison-based in the reference and differs from numpy's).
"""
from __future__ import annotations
import math, sys
import numpy as np

# one step widenings of the promotion lattice (JAX's, as the reference uses)
_WIDENS = {
  "bool": ("int8", "uint8"), "int8": ("int16",), "int16": ("int32",), "int32": ("int64",), "int64": ("float16",),
  "uint8": ("int16", "uint16"), "uint16": ("int32", "uint32"), "uint32": ("int64", "uint64"), "uint64": ("float16",),
  "float16": ("float32",), "float32": ("float64",), "float64": (),
}
_ORDER = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32",
          "float64"]
INTS = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")
FLOATS = ("float16", "float32", "float64")
DTYPES = ("bool",) + INTS + FLOATS


def _upward(dtype: str) -> set:
  seen, todo = {dtype}, [dtype]
  while todo:
    for wider in _WIDENS[todo.pop()]:
      if wider not in seen: seen.add(wider); todo.append(wider)
  return seen


def promote(*names: str) -> str:
  """The dtype two or more dtypes promote to."""
  shared = set.intersection(*(_upward(n) for n in names))
  return min(shared, key=_ORDER.index)


def is_float(name: str) -> bool: return name in FLOATS
def is_int(name: str) -> bool: return name in INTS
def float_of(name: str) -> str: return name if is_float(name) else "float32"


def int_range(name: str) -> tuple[int, int]:
  info = np.iinfo(np.dtype(name))
  return int(info.min), int(info.max)


def largest(dtype: str) -> float:
  """The largest finite value of a float dtype (infinity for any other)."""
  if dtype == "bfloat16": return 3.3895313892515355e38
  return float(np.finfo(np.dtype(dtype)).max) if is_float(dtype) else math.inf


def special_big(dtype: str) -> float:
  """The largest finite magnitude among a float dtype's `special` inputs."""
  return float(np.finfo(np.dtype(dtype)).max) / 4


def data(shape: tuple, dtype: str, seed: int, kind: str = "normal") -> np.ndarray:
  """Deterministic input data: `normal` values (floats clipped to +-3, ints in [-5, 5], or [0, 9] unsigned),
  `positive` (floats in [0.5, 3]), `special` (floats mixing NaN, +-inf, -0.0, huge and tiny values; ints at
  their extremes) or `bool`."""
  rng = np.random.default_rng(seed)
  if dtype == "bool": return rng.integers(0, 2, size=shape).astype(bool)
  if is_int(dtype):
    lo, hi = int_range(dtype)
    if kind == "special":
      pool = np.array([lo, hi, 0, 1, -1 if lo < 0 else 2, lo + 1, hi - 1], dtype=object)
      return rng.choice(pool, size=shape).astype(dtype)
    return rng.integers(max(lo, -5), 10 if lo == 0 else 6, size=shape).astype(dtype)
  if kind == "positive": return rng.uniform(0.5, 3.0, size=shape).astype(dtype)
  values = np.clip(rng.standard_normal(size=shape), -3, 3)
  if kind == "special":
    big = special_big(dtype)
    tiny = float(np.finfo(np.dtype(dtype)).tiny)
    pool = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, big, -big, tiny, -tiny, 1.0, -2.5])
    pick = rng.integers(0, len(pool) + 3, size=shape)
    values = np.where(pick < len(pool), pool[np.minimum(pick, len(pool) - 1)], values)
  with np.errstate(all="ignore"): return values.astype(dtype)


def cast(x: np.ndarray, dtype: str) -> np.ndarray:
  x = np.asarray(x)
  if dtype == "bool": return x != 0
  with np.errstate(all="ignore"):
    if is_int(dtype) and x.dtype.kind == "f": return np.trunc(x).astype(np.int64).astype(dtype)
    return x.astype(dtype)


def binary(op: str, a, b, out_dtype: str) -> np.ndarray:
  """a op b computed in the promoted dtype, with the reference's integer division and modulo."""
  a, b = np.asarray(a), np.asarray(b)
  with np.errstate(all="ignore"):
    if op in ("lt", "gt", "eq", "ne", "le", "ge"):
      dtype = promote(str(a.dtype), str(b.dtype))
      a, b = cast(a, dtype), cast(b, dtype)
      return {"lt": np.less, "gt": np.greater, "eq": np.equal, "ne": np.not_equal, "le": np.less_equal,
              "ge": np.greater_equal}[op](a, b)
    a, b = cast(a, out_dtype), cast(b, out_dtype)
    if op == "add": return (a + b).astype(out_dtype)
    if op == "sub": return (a - b).astype(out_dtype)
    if op == "mul": return (a * b).astype(out_dtype)
    if op == "div":
      if not is_float(out_dtype): return (a / b).astype(out_dtype)
      # the reference divides floats as a * (1 / b), the reciprocal rounded to the dtype first: where it overflows
      # (float16 below 2^-16 in magnitude) the quotient is an infinity, and 0 / b is NaN
      reciprocal = (1.0 / b.astype(np.float64)).astype(out_dtype)
      return (a.astype(np.float64) * reciprocal.astype(np.float64)).astype(out_dtype)
    if op == "idiv": return idiv(a, b).astype(out_dtype)
    if op == "mod": return mod(a, b).astype(out_dtype)
    if op == "maximum": return np.maximum(a, b)
    if op == "minimum": return np.minimum(a, b)
    if op == "xor": return a ^ b
    if op == "and": return a & b
    if op == "or": return a | b
  raise ValueError(op)


def idiv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """Integer division truncating toward zero; by zero it is 0. Of floats, the floor of the quotient (x // 0 is an
  infinity, 0 // 0 NaN)."""
  if a.dtype.kind == "f": return np.floor(a / b).astype(a.dtype)
  a64, b64 = a.astype(np.int64) if a.dtype != np.uint64 else a, b.astype(np.int64) if b.dtype != np.uint64 else b
  safe = np.where(b64 == 0, 1, b64)
  q = np.abs(a64) // np.abs(safe) if a.dtype != np.uint64 else a64 // safe
  if a.dtype != np.uint64: q = np.where((a64 < 0) != (safe < 0), -q, q)
  return np.where(b64 == 0, 0, q).astype(a.dtype)


def mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """Remainder with the divisor's sign (Python's); by zero it is 0."""
  if a.dtype.kind == "f": return np.where(b == 0, np.nan, np.mod(a, np.where(b == 0, 1, b))).astype(a.dtype)
  safe = np.where(b == 0, 1, b)
  return np.where(b == 0, 0, np.mod(a, safe)).astype(a.dtype)


def unary(op: str, x, out_dtype: str) -> np.ndarray:
  """A unary function of the reference, computed in float64 and stored as `out_dtype`."""
  x64 = np.asarray(x).astype(np.float64)
  as_float = np.asarray(x).astype(float_of(str(np.asarray(x).dtype)))
  with np.errstate(all="ignore"):
    out = {
      "neg": lambda v: -v, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "sin": np.sin,
      # the reference's cos is sin(pi/2 - x), the difference rounded to x's float dtype (for x = 1e37 that is -x,
      # whose sine has nothing to do with cos(1e37))
      "cos": lambda v: np.sin((as_float.dtype.type(np.pi / 2) - as_float).astype(np.float64)),
      "reciprocal": lambda v: 1 / v, "abs": np.abs, "relu": lambda v: np.where(v > 0, v, 0.0),
      "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "tanh": np.tanh, "square": np.square,
      "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "round": np.round,
      "softplus": lambda v: np.logaddexp(0, v), "silu": lambda v: v / (1 + np.exp(-v)),
      "exp2": np.exp2, "log2": np.log2, "rsqrt": lambda v: 1 / np.sqrt(v),
      "hardsigmoid": lambda v: np.clip(v / 6 + 0.5, 0, 1),
      # at -inf these take their limit 0 (the compiler's documented choice; x * 0 would be NaN)
      "gelu": lambda v: np.where(v == -np.inf, 0.0, 0.5 * v * (1 + np.tanh(0.7978845608 * (v + 0.044715 * v ** 3)))),
      "quick_gelu": lambda v: np.where(v == -np.inf, 0.0, v / (1 + np.exp(-1.702 * v))),
      "elu": lambda v: np.where(v > 0, v, np.expm1(v)), "sign": np.sign,
    # of an int, a float function sees the int made a float first (seed 163: sin(2147483645) is sin(2147483648.0))
    }[op](as_float.astype(np.float64) if is_float(out_dtype) else x64)
    if op == "neg" and is_int(str(np.asarray(x).dtype)): return (-np.asarray(x)).astype(out_dtype)
    if op == "abs" and is_int(str(np.asarray(x).dtype)): return np.abs(np.asarray(x)).astype(out_dtype)
    return out.astype(out_dtype)


def derivative(op: str, x: np.ndarray) -> np.ndarray:
  """d op(x) / dx from the closed form, in float64 (0 where the function is flat, +-inf where it is vertical)."""
  v = np.asarray(x).astype(np.float64)
  with np.errstate(all="ignore"):
    s = 1 / (1 + np.exp(-v))
    t = np.tanh(v)
    inner = 0.7978845608 * (v + 0.044715 * v ** 3)
    return {
      "neg": -np.ones_like(v), "exp": np.exp(v), "log": 1 / v, "sqrt": 0.5 / np.sqrt(v), "sin": np.cos(v),
      "cos": -np.sin(v), "reciprocal": -1 / (v * v), "tanh": 1 - t * t, "sigmoid": s * (1 - s), "square": 2 * v,
      "relu": (v > 0).astype(np.float64), "exp2": np.exp2(v) * np.log(2), "log2": 1 / (v * np.log(2)),
      "rsqrt": -0.5 * v ** -1.5, "softplus": s, "silu": s * (1 + v * (1 - s)),
      "hardsigmoid": np.where((v > -3) & (v < 3), 1 / 6, 0.0),
      "gelu": 0.5 * (1 + np.tanh(inner))
              + 0.5 * v * (1 - np.tanh(inner) ** 2) * 0.7978845608 * (1 + 3 * 0.044715 * v * v),
      "quick_gelu": 1 / (1 + np.exp(-1.702 * v)) + v * 1.702 * np.exp(-1.702 * v) / (1 + np.exp(-1.702 * v)) ** 2,
    }[op]


def _summed_axes(x: np.ndarray, axis) -> tuple[tuple, tuple]:
  """(the axes a sum over `axis` adds along, all the axes it removes): the reference drops an axis of one element
  without adding (its -0.0 stays -0.0), where numpy's sum starts from +0.0."""
  if x.ndim == 0: return (), ()
  axes = tuple(range(x.ndim)) if axis is None else tuple(int(a) % x.ndim for a in np.atleast_1d(axis))
  return tuple(a for a in axes if x.shape[a] != 1), axes


def _sum(x: np.ndarray, axis, keepdim: bool) -> np.ndarray:
  added, removed = _summed_axes(x, axis)
  out = np.sum(x, axis=added, keepdims=True) if added else x.copy()
  return out if keepdim else out.reshape(tuple(n for a, n in enumerate(x.shape) if a not in removed))


def sum_(x, axis, keepdim: bool, out_dtype: str) -> np.ndarray:
  with np.errstate(all="ignore"):
    return np.asarray(_sum(np.asarray(x).astype(_acc(out_dtype)), axis, keepdim)).astype(out_dtype)


def prod_(x, axis, keepdim: bool, out_dtype: str) -> np.ndarray:
  with np.errstate(all="ignore"):
    return np.asarray(np.prod(np.asarray(x).astype(_acc(out_dtype)), axis=axis, keepdims=keepdim)).astype(out_dtype)


def mean_(x, axis, keepdim: bool, out_dtype: str) -> np.ndarray:
  """`mean`: the sum (of ints in `sum_dtype`, wrapping as it does) divided by the count."""
  x = np.asarray(x)
  with np.errstate(all="ignore"):
    if x.dtype.kind not in "biu":
      total = _sum(x.astype(np.float64), axis, keepdim)
    else: total = np.asarray(sum_(x, axis, keepdim, sum_dtype(x.dtype.name)))
    count = x.size // total.size if total.size else 0
    return np.asarray(total.astype(np.float64) / np.float64(count)).astype(out_dtype)


def scan(op: str, x, axis: int, out_dtype: str) -> np.ndarray:
  """cumsum, cumprod, cummax or cummin along `axis`. The reference pads each window with the op's identity by adding
  a masked constant, so every float element goes through x + 0.0 first: a -0.0 comes out +0.0 (cummin works on -x,
  so its zeros come out -0.0)."""
  x = np.asarray(x)
  with np.errstate(all="ignore"):
    if op in ("cummax", "cummin"):
      if x.dtype.kind == "f": x = x + x.dtype.type(0) if op == "cummax" else -(-x + x.dtype.type(0))
      return (np.maximum if op == "cummax" else np.minimum).accumulate(x, axis=axis).astype(out_dtype)
    if not is_float(out_dtype): return getattr(np, op)(x, axis=axis).astype(out_dtype)
    wide = cast(x, "float64")
    if op == "cumprod": return cast(np.cumprod(wide + 0.0, axis=axis), out_dtype)
    return cast(np.cumsum(wide, axis=axis) + 0.0, out_dtype)


def _acc(dtype: str):
  if dtype == "bool": return np.int64
  return np.float64 if is_float(dtype) else np.dtype(dtype)


def sum_dtype(dtype: str) -> str:
  """The dtype `sum` returns: bools and small ints sum as int32 (uint32 for unsigned), as in the reference."""
  if dtype == "bool": return "int32"
  if dtype in ("int8", "int16"): return "int32"
  if dtype in ("uint8", "uint16"): return "uint32"
  return dtype


def concatenate(parts: list, axis: int) -> np.ndarray:
  """`cat`: each part padded with zeros to the whole and the pads summed, so a float -0.0 comes out +0.0."""
  out = np.concatenate(parts, axis=axis)
  return out + out.dtype.type(0) if out.dtype.kind == "f" else out


def stack(parts: list, axis: int) -> np.ndarray:
  """`stack`: a `cat` of the parts with a new axis."""
  return concatenate([np.expand_dims(p, axis) for p in parts], axis)


def einsum(formula: str, *operands) -> np.ndarray:
  """`einsum`; one that sums nothing (an outer product, a transpose, a sum over axes of one element) is the operands'
  product, whose -0.0 numpy's accumulator would turn into +0.0."""
  inputs, out = formula.split("->")
  specs, operands = inputs.split(","), [np.asarray(x) for x in operands]
  for letter in {c for spec in specs for c in spec if c not in out}:
    if all(spec.count(letter) == 1 and x.shape[spec.index(letter)] == 1 for spec, x in zip(specs, operands)
           if letter in spec):
      operands = [x.take(0, axis=spec.index(letter)) if letter in spec else x for spec, x in zip(specs, operands)]
      specs = [spec.replace(letter, "") for spec in specs]
  formula = ",".join(specs) + "->" + out
  if not set("".join(specs)) <= set(out) or any(len(set(spec)) != len(spec) for spec in specs):
    return np.einsum(formula, *operands)
  product = np.ones((), dtype=np.result_type(*operands))
  for spec, x in zip(specs, operands):
    kept = "".join(c for c in out if c in spec)
    product = product * np.transpose(x, [spec.index(c) for c in kept]).reshape(
      [x.shape[spec.index(c)] if c in spec else 1 for c in out])
  return product


def pad(x, pads, value=0.0) -> np.ndarray:
  """Pads of (before, after) per axis; negative amounts cut."""
  x = np.asarray(x)
  cut = tuple(slice(max(-b, 0), x.shape[i] - max(-a, 0)) for i, (b, a) in enumerate(pads))
  x = x[cut]
  return np.pad(x, [(max(b, 0), max(a, 0)) for b, a in pads], constant_values=value)


def pad_mode(x, pads, mode: str) -> np.ndarray:
  x = np.asarray(x)
  cut = tuple(slice(max(-b, 0), x.shape[i] - max(-a, 0)) for i, (b, a) in enumerate(pads))
  x = x[cut]
  return np.pad(x, [(max(b, 0), max(a, 0)) for b, a in pads],
                mode={"reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode])


def matmul(a, b, out_dtype: str) -> np.ndarray:
  """a @ b as the reference computes it: products in the operands' promoted dtype (a float16 product can
  overflow), summed in float64 (a contraction over one element is the product, -0.0 kept), stored as `out_dtype`."""
  a, b = cast(a, out_dtype), cast(b, out_dtype)
  a2 = a[None, :] if a.ndim == 1 else a
  b2 = b[:, None] if b.ndim == 1 else b
  with np.errstate(all="ignore"):
    products = a2[..., :, :, None] * b2[..., None, :, :]
    out = _sum(products.astype(np.float64), -2, keepdim=False)
  if a.ndim == 1: out = out[..., 0, :]
  if b.ndim == 1: out = out[..., 0]
  return cast(out, out_dtype)


def gather(x, dim: int, index: np.ndarray) -> np.ndarray:
  """torch.gather: out[..., i, ...] = x[..., index[..., i, ...], ...] along `dim`, the output of index's shape (on
  the other axes index may be shorter than x, never broadcast). The reference sums a one-hot selection, so a float
  -0.0 comes out +0.0."""
  x = np.asarray(x)
  part = x[tuple(slice(0, n) if a != dim else slice(None) for a, n in enumerate(index.shape))]
  out = np.take_along_axis(part, index.astype(np.int64), axis=dim)
  return out + out.dtype.type(0) if out.dtype.kind == "f" else out


def power(x, exponent, out_dtype: str) -> np.ndarray:
  """x ** c; c = 0.5 and -0.5 are sqrt(x) and 1 / sqrt(x) (the reference specializes them, so (-inf) ** 0.5 is NaN
  and (-0.0) ** -0.5 is -inf, where C's pow gives inf)."""
  v = np.asarray(x).astype(np.float64)
  with np.errstate(all="ignore"):
    if exponent in (0.5, -0.5): return cast(np.sqrt(v) if exponent > 0 else 1 / np.sqrt(v), out_dtype)
    return cast(np.power(v, exponent), out_dtype)


def interpolate(x, size: tuple, mode: str, align_corners: bool) -> np.ndarray:
  """torch.nn.functional.interpolate of the last len(size) axes, computed in float64; linear is the reference's: the
  source position clipped to the axis, its floor and ceiling lerped."""
  out = np.asarray(x).astype(np.float64)
  for axis, m in zip(range(out.ndim - len(size), out.ndim), size):
    n = out.shape[axis]
    i = np.arange(m, dtype=np.float64)
    if mode == "nearest": out = np.take(out, np.minimum(np.floor(i * n / m), n - 1).astype(int), axis=axis)
    elif mode == "nearest-exact":
      out = np.take(out, np.minimum(np.floor((i + 0.5) * n / m), n - 1).astype(int), axis=axis)
    else:
      src = (i * (n - 1) / (m - 1) if m > 1
             else np.zeros(m)) if align_corners else np.maximum((i + 0.5) * n / m - 0.5, 0)
      src = np.minimum(src, n - 1)
      lo, hi = np.floor(src).astype(int), np.ceil(src).astype(int)
      w = (src - lo).reshape([-1 if a == axis else 1 for a in range(out.ndim)])
      # the reference's lerp, a + (b - a) * w: an infinite a gives NaN even where w is 0
      start = np.take(out, lo, axis=axis)
      out = start + (np.take(out, hi, axis=axis) - start) * w
  return cast(out, str(np.asarray(x).dtype))


def conv2d(x, w, stride=1, padding=0, dilation=1, groups=1) -> np.ndarray:
  """Cross-correlation of NCHW `x` with OIHW `w`, computed in float64."""
  x, w = np.asarray(x, dtype=np.float64), np.asarray(w, dtype=np.float64)
  x = np.pad(x, [(0, 0), (0, 0), (padding, padding), (padding, padding)])
  n, cin, h, wd = x.shape
  cout, cin_g, kh, kw = w.shape
  oh, ow = (h - dilation * (kh - 1) - 1) // stride + 1, (wd - dilation * (kw - 1) - 1) // stride + 1
  out = np.zeros((n, cout, oh, ow))
  per_group = cout // groups
  for o in range(cout):
    g = o // per_group
    for i in range(kh):
      for j in range(kw):
        patch = x[:, g * cin_g:(g + 1) * cin_g, i * dilation:i * dilation + stride * oh:stride,
                  j * dilation:j * dilation + stride * ow:stride]
        out[:, o] += np.einsum("nchw,c->nhw", patch, w[o, :, i, j])
  return out


def pool2d(x, kernel: int, stride: int, padding: int, how: str, count_include_pad: bool = True) -> np.ndarray:
  """max or avg pooling over the last two axes, in float64 (max pads with -inf)."""
  x = np.asarray(x, dtype=np.float64)
  lead = x.shape[:-2]
  h, w = x.shape[-2:]
  fill = -np.inf if how == "max" else 0.0
  xp = np.pad(x, [(0, 0)] * len(lead) + [(padding, padding)] * 2, constant_values=fill)
  ones = np.pad(np.ones((h, w)), [(padding, padding)] * 2)
  oh, ow = (h + 2 * padding - kernel) // stride + 1, (w + 2 * padding - kernel) // stride + 1
  out = np.zeros(lead + (oh, ow))
  for a in range(oh):
    for b in range(ow):
      window = xp[..., a * stride:a * stride + kernel, b * stride:b * stride + kernel]
      if how == "max": out[..., a, b] = window.max(axis=(-1, -2))
      else:
        count = kernel * kernel if count_include_pad else ones[a * stride:a * stride + kernel,
                                                               b * stride:b * stride + kernel].sum()
        out[..., a, b] = window.sum(axis=(-1, -2)) / count
  return out


def tolerance(dtype: str) -> tuple[float, float]:
  """(rtol, atol) of a float dtype's comparison."""
  return {"float16": (2e-2, 2e-2), "float32": (2e-4, 1e-5), "float64": (1e-9, 1e-12)}.get(dtype, (0.0, 0.0))


def mismatch(actual: np.ndarray, expected: np.ndarray, dtype: str, rtol: float = None, atol: float = None,
             scaled: bool = False, overflow: bool = False) -> str:
  """'' when `actual` equals `expected` under the dtype's policy (ints and bools exact, floats close, NaN and
  infinities equal to themselves); else a one-line description of the first difference. With `scaled`, atol is
  relative to the largest finite |expected| (finite differences lose digits of small entries next to large ones); with
  `overflow`, an infinity or NaN may stand for a finite expected value (a sum of huge values overflowed on the way), and
  a finite value for an expected infinity or NaN (rounding kept an element at the largest finite value where the
  reference's passed it)."""
  actual, expected = np.asarray(actual), np.asarray(expected)
  if scaled and atol and expected.size and np.isfinite(expected).any():
    atol = atol * max(1.0, float(np.max(np.abs(expected[np.isfinite(expected)]))))
  if actual.shape != expected.shape: return f"shape {actual.shape} != expected {expected.shape}"
  if str(actual.dtype) != dtype: return f"dtype {actual.dtype} != expected {dtype}"
  if not is_float(dtype):
    bad = np.argwhere(actual != expected)
  else:
    dr, da = tolerance(dtype)
    rtol, atol = dr if rtol is None else rtol, da if atol is None else atol
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    with np.errstate(all="ignore"):
      close = (a == e) | (np.isnan(a) & np.isnan(e)) | (np.isfinite(e) & (np.abs(a - e) <= atol + rtol * np.abs(e)))
      # within rtol of the largest finite value, rounding decides between it and infinity
      top = largest(dtype)
      lower, upper = np.minimum(np.abs(a), np.abs(e)), np.maximum(np.abs(a), np.abs(e))
      close |= (np.sign(a) == np.sign(e)) & (lower >= top / (1 + rtol)) & np.isinf(upper)
      # a sum of huge values may overflow in a partial sum that the reference's float64 holds (and an overflowed partial
      # sum meets an infinity of the other sign: NaN where the reference has that infinity); an element rounding kept
      # finite on one side and not on the other went on into later ops
      if overflow:
        close |= (np.isfinite(a) != np.isfinite(e)) | (np.isnan(a) & np.isinf(e)) | (np.isinf(a) & np.isnan(e))
    bad = np.argwhere(~close)
  if len(bad) == 0: return ""
  where = tuple(int(i) for i in bad[0])
  return f"{len(bad)} of {actual.size} elements differ; at {where}: got {actual[where]!r}, expected {expected[where]!r}"


def max_(x, axis, keepdim: bool, out_dtype: str) -> np.ndarray:
  return np.asarray(np.max(np.asarray(x), axis=axis, keepdims=keepdim)).astype(out_dtype)


def argmax(x, axis: int, keepdim: bool) -> np.ndarray:
  """The first index of the maximum along `axis` (bools and ints compared as they are); the design ranks a NaN as
  +inf (numpy ranks it above +inf)."""
  x = np.asarray(x)
  if x.dtype.kind == "f": x = np.where(np.isnan(x), np.inf, x)
  out = np.argmax(x, axis=axis).astype(np.int32)
  return np.expand_dims(out, axis) if keepdim else out


def uniform_like(values: np.ndarray) -> np.ndarray:
  """Random floats are not recomputed here: the check is their range (and, across devices, their equality)."""
  values = np.asarray(values)
  if values.size and not (np.all(values >= 0) and np.all(values < 1)):
    raise AssertionError(f"rand gave values outside [0, 1): {values}")
  return values


def in_range(values: np.ndarray, low: int, high: int) -> np.ndarray:
  values = np.asarray(values)
  if values.size and not (np.all(values >= low) and np.all(values <= high)):
    raise AssertionError(f"randint gave values outside [{low}, {high}]: {values}")
  return values


def central_difference(f, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
  """d f / d x of a scalar function of an array, by central differences, element by element."""
  grad = np.zeros_like(x, dtype=np.float64)
  for index in np.ndindex(x.shape):
    up, down = x.astype(np.float64), x.astype(np.float64)
    up[index] += h; down[index] -= h
    grad[index] = (f(up) - f(down)) / (2 * h)
  return grad


def finite_difference(numpy_source: str, loss: str, wrt: str, h: float = 1e-6) -> np.ndarray:
  """d loss / d wrt of a numpy program (float64): the program is run with `wrt` replaced right after the line
  that defines it."""
  this = sys.modules[__name__]
  def loss_at(value: np.ndarray) -> float:
    env = {"np": np, "ref": this}
    for line in numpy_source.split("\n"):
      exec(line, env)
      if line.startswith(f"{wrt} = "): env[wrt] = value.copy()
    return float(env[loss])
  env = {"np": np, "ref": this}
  exec(numpy_source, env)
  at = np.asarray(env[wrt], dtype=np.float64)
  # Richardson's extrapolation of two step sizes cancels the h^2 error term: sin(exp(x)) at exp(x) = 6000 has a third
  # derivative of 2e11, which puts a plain central difference 2e-4 off (fuzz seeds 61 and 160)
  def richardson(step: float) -> np.ndarray:
    return (4 * central_difference(loss_at, at, step / 2) - central_difference(loss_at, at, step)) / 3
  # a loss that turns within the step is not smooth at that scale (sin(exp(x)) at exp(x) = 2.4e5 turns every 3e-5 in
  # x: 4% off at h = 1e-6, fuzz seed 165): the step shrinks until two estimates agree
  estimate = richardson(h)
  for _ in range(2):
    h /= 8
    finer = richardson(h)
    if np.allclose(finer, estimate, rtol=1e-6, atol=1e-9 * max(1.0, float(np.max(np.abs(estimate), initial=0.0)))):
      return finer
    estimate = finer
  return estimate


def optimizer_steps(kind: str, w: np.ndarray, x: np.ndarray, steps: int, lr: float, momentum: float = 0.0,
                    nesterov: bool = False, weight_decay: float = 0.0, b1: float = 0.9, b2: float = 0.999,
                    eps: float = 1e-8) -> np.ndarray:
  """`steps` updates of w on loss sum(w*x) + sum(w^2)/2 (gradient x + w): torch's SGD and Adam/AdamW rules."""
  w = w.astype(np.float64).copy()
  velocity, m, v = np.zeros_like(w), np.zeros_like(w), np.zeros_like(w)
  for t in range(1, steps + 1):
    g = x.astype(np.float64) + w
    if kind == "SGD":
      g = g + weight_decay * w
      if momentum:
        velocity = momentum * velocity + g if t > 1 else g
        g = g + momentum * velocity if nesterov else velocity
      w = w - lr * g
    else:
      m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
      mhat, vhat = m / (1 - b1 ** t), v / (1 - b2 ** t)
      w = w - lr * (mhat / (np.sqrt(vhat) + eps) + weight_decay * w)
  return w.astype(np.float32)


def assert_close(actual, expected, dtype: str, atol: float = 0.0, rtol: float = None, scaled: bool = False,
                 overflow: bool = False) -> None:
  """Raise AssertionError when a Tensor (or array) differs from `expected` under the dtype's policy."""
  actual = actual.numpy() if hasattr(actual, "numpy") else np.asarray(actual)
  problem = mismatch(actual, np.asarray(expected), dtype, rtol=rtol, atol=atol or None, scaled=scaled,
                     overflow=overflow)
  if problem: raise AssertionError(problem)
