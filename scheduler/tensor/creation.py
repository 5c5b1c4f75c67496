"""Making tensors: filled, ranges, identity, and random numbers.

A mixin of `Tensor` (see `scheduler/tensor/__init__.py`). Constants are CONST UOps broadcast to the
shape, so they cost no buffer and no kernel until something stores them.

Random numbers: each device has a key (two uint32: a hash of how many devices were seeded before it, and
the seed from `manual_seed`) and a counter. `rand` hashes consecutive counter values with threefry-2x32 and
turns the 32-bit words into floats in [0, 1) by filling the mantissa (exponent of 1.0, then minus 1); the
counter then advances by the words used. The same seed gives the same numbers in every process and on every
device, so a captured program replays the same values.
"""
from __future__ import annotations
import hashlib, math
from typing import Optional
from scheduler.device import Device
from scheduler.dtype import MANTISSA_BITS, dtypes, to_dtype
from scheduler.helpers import argfix, all_int, ceildiv, prod
from scheduler.ops import UOp, Ops

_UINT_OF_SIZE = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}


class Creation:
  _seed: int = 0
  _device_seeds: dict = {}
  _device_rng_counters: dict = {}

  @classmethod
  def empty(cls, *shape, **kwargs):
    """An unallocated buffer of the shape (its contents are whatever memory holds)."""
    device = Device.canonicalize(kwargs.pop("device", None))
    dtype = to_dtype(kwargs.pop("dtype", dtypes.default_float))
    buffer = UOp.metaop(Ops.EMPTY, argfix(*shape), dtype, device)
    return cls(buffer, device, dtype, **kwargs)

  @classmethod
  def from_uop(cls, y: UOp, **kwargs):
    """A tensor for a symbolic int expression (variables, constants, + and *)."""
    if y.op in (Ops.BIND, Ops.CONST): return cls(y if y.op is Ops.BIND else y.arg, requires_grad=False, **kwargs)
    if y.op in (Ops.ADD, Ops.MUL):
      left, right = (cls.from_uop(s) for s in y.src)
      return left + right if y.op is Ops.ADD else left * right
    raise RuntimeError(f"unhandled UOp {y.op}")

  @classmethod
  def full(cls, shape: tuple, fill_value, **kwargs):
    shape = argfix(shape)
    if any(not (isinstance(s, UOp) or (isinstance(s, int) and s >= 0)) for s in shape):
      raise ValueError(f"invalid shape {shape}")
    return cls(fill_value, **kwargs).reshape(tuple(1 for _ in shape)).expand(shape)

  @classmethod
  def zeros(cls, *shape, **kwargs): return cls.full(argfix(*shape), 0.0, **kwargs)
  @classmethod
  def ones(cls, *shape, **kwargs): return cls.full(argfix(*shape), 1.0, **kwargs)

  def full_like(self, fill_value, **kwargs):
    """`fill_value` in this tensor's shape, dtype and device (the last two can be overridden)."""
    options = {"dtype": self.dtype, "device": self.device, **kwargs}
    return type(self).full(self.shape, fill_value, **options)

  def ones_like(self, **kwargs): return self.full_like(fill_value=1, **kwargs)
  def zeros_like(self, **kwargs): return self.full_like(fill_value=0, **kwargs)

  @classmethod
  def arange(cls, start, stop=None, step=1, **kwargs):
    """start, start+step, ... below stop: a cumulative sum of `step`s, so it is one reduce kernel (W15)."""
    if stop is None: start, stop = 0, start
    if step == 0: raise ValueError("arange step must not be 0")
    floats = any(isinstance(v, float) for v in (start, stop, step))
    dtype = to_dtype(kwargs.pop("dtype", dtypes.default_float if floats else dtypes.default_int))
    count = int(ceildiv(stop - start, step))
    if count <= 0: return cls([], dtype=dtype, **kwargs)
    steps = cls.full((count,), step, dtype=dtype, **kwargs)
    return (steps._cumalu(0, Ops.ADD) + (start - step)).cast(dtype)

  @classmethod
  def eye(cls, n: int, m: Optional[int] = None, **kwargs):
    """Ones on the diagonal, from movement ops on a constant: rows of (1, 0 * n) laid end to end."""
    if min(n, n if m is None else m) < 0: raise ValueError(f"cannot have negative n={n}, m={m}")
    one_then_zeros = cls.ones((n, 1), **kwargs).pad(((0, 0), (0, n)))   # (n, n + 1)
    square = one_then_zeros.flatten()[:n * n].reshape(n, n)
    cols = n if m is None else m
    if cols > n: return square.pad((None, (0, cols - n)))
    return square if cols == n else square.shrink((None, (0, cols)))

  # ***** random numbers *****

  @classmethod
  def manual_seed(cls, seed=0):
    """Restart every device's generator from `seed`."""
    cls._device_rng_counters = {}
    cls._device_seeds = {}
    cls._seed = seed

  @classmethod
  def _rng_state(cls, device: str, words: int):
    """(key, counter) of `device`'s generator, reserving `words` 32-bit words."""
    seeds, counters = cls._device_seeds, cls._device_rng_counters
    if device in seeds:
      counters[device].assign(counters[device] + words).contiguous()
      return seeds[device], counters[device]
    stream = int.from_bytes(hashlib.sha256(len(seeds).to_bytes(4, "big")).digest(), "big") % 2 ** 32
    def words_on_device(values): return cls(values, device=device, dtype=dtypes.uint32, requires_grad=False)
    seeds[device], counters[device] = words_on_device([stream, cls._seed]), words_on_device([0])
    return seeds[device], counters[device]

  @staticmethod
  def _threefry_random_bits(key, low_counts, high_counts):
    """threefry-2x32 of the 64-bit counters (high << 32 | low), returned as the low words then the high words."""
    def joined(high, low): return (high.cast(dtypes.uint64) << 32) | low.cast(dtypes.uint64)
    counters = joined(high_counts, low_counts)
    wide_key = joined(key[1]._broadcast_to(counters.shape), key[0]._broadcast_to(counters.shape))
    hashed = counters._apply_uop(UOp.threefry, wide_key)
    words = [(part & 0xffffffff).cast(dtypes.uint32) for part in (hashed, hashed >> 32)]
    return words[0].cat(words[1])

  @classmethod
  def rand(cls, *shape, device: Optional[str] = None, dtype=None, contiguous: bool = True, **kwargs):
    """Uniform floats in [0, 1) from the device's generator."""
    dtype = to_dtype(dtype or dtypes.default_float)
    if not dtypes.is_float(dtype): raise ValueError(f"rand only supports float dtypes, got {dtype}")
    shape = argfix(*shape)
    if not all_int(shape) or any(s < 0 for s in shape): raise ValueError(f"invalid input shape={shape}")
    device = Device.canonicalize(device)
    count = prod(shape)
    if count == 0: return cls.zeros(shape, device=device, dtype=dtype, **kwargs)
    words = ceildiv(count * dtype.itemsize, 4)
    half = ceildiv(words, 2)
    key, counter = cls._rng_state(device, words)
    low_counts = cls.arange(half, device=device, dtype=dtypes.uint32, requires_grad=False) + counter
    bits = cls._threefry_random_bits(key, low_counts, low_counts + half)[:words]
    uint = _UINT_OF_SIZE[dtype.itemsize]
    mantissa = bits.bitcast(uint) >> (8 * dtype.itemsize - MANTISSA_BITS[dtype])
    exponent_of_one = cls.ones_like(mantissa, device=mantissa.device, dtype=dtype).bitcast(uint)
    floats = (mantissa | exponent_of_one).bitcast(dtype)            # in [1, 2)
    out = floats[:count].sub(1).reshape(shape)
    out.requires_grad = kwargs.get("requires_grad")
    if not contiguous: return out
    return out.contiguous()

  @classmethod
  def randperm(cls, n: int, device=None, dtype=dtypes.int32, requires_grad: Optional[bool] = None):
    """A random permutation of 0..n-1: the order that sorts n uniform draws (the sort compares n^2 pairs)."""
    return cls.rand(n, device=device).argsort().cast(to_dtype(dtype)).requires_grad_(requires_grad)

  def multinomial(self, num_samples: int = 1, replacement: bool = False):
    """Category indices (int32) drawn with probability proportional to the weights along the last axis of a 1-D
    (`(num_samples,)`) or 2-D (`(rows, num_samples)`) tensor: a draw u in [0, 1) lands on the first category whose
    cumulative share of the weight exceeds u (a category of weight 0 is never drawn)."""
    if self.ndim not in (1, 2):
      raise ValueError(f"multinomial takes a 1-D or 2-D tensor of weights, got shape {self.shape}")
    if not isinstance(num_samples, int) or num_samples < 1:
      raise ValueError(f"num_samples must be a positive int, got {num_samples!r}")
    if not replacement and num_samples != 1:
      raise ValueError("multinomial without replacement draws one sample per row (pass replacement=True for more)")
    weights = (self if self.ndim == 2 else self.unsqueeze(0)).float()
    cumulative = weights.cumsum(1)
    shares = cumulative / cumulative[:, -1:]
    draws = type(self).rand(weights.shape[0], num_samples, 1, device=self.device)
    indices = (draws >= shares.unsqueeze(1)).sum(2).cast(dtypes.int32)
    return indices if self.ndim == 2 else indices.squeeze(0)

  def rand_like(self, **kwargs):
    """Uniform numbers in [0, 1) of this tensor's shape, device and dtype (`Tensor.rand_like(t)` works as well)."""
    return type(self).rand(*self.shape, **{"device": self.device, "dtype": self.dtype, **kwargs})

  def randn_like(self, **kwargs):
    """Standard normal numbers of this tensor's shape, device and dtype."""
    return type(self).randn(*self.shape, **{"device": self.device, "dtype": self.dtype, **kwargs})

  @classmethod
  def randn(cls, *shape, dtype=None, requires_grad: Optional[bool] = None, **kwargs):
    """Standard normal numbers by the Box-Muller transform of two uniform draws."""
    kwargs["dtype"] = dtypes.float32
    pair = cls.rand((2, *argfix(*shape)), **kwargs)
    angle, radius = pair[0].mul(2 * math.pi), (1 - pair[1]).log().mul(-2).sqrt()
    return angle.cos().mul(radius).cast(to_dtype(dtype or dtypes.default_float)).requires_grad_(requires_grad)

  # uniform draws in [low, high) and the initialisations built on them

  @classmethod
  def uniform(cls, *shape, low=0.0, high=1.0, **kwargs):
    out_dtype = to_dtype(kwargs.pop("dtype", dtypes.default_float))
    spread = (high - low) * cls.rand(*shape, **kwargs)
    return spread.cast(out_dtype) + low

  @classmethod
  def randint(cls, *shape, low=0, high=10, **kwargs):
    if not (isinstance(low, int) and isinstance(high, int)):
      raise TypeError(f"low={low} and high={high} must be integers")
    out_dtype = to_dtype(kwargs.pop("dtype", dtypes.int32))
    if not dtypes.is_int(out_dtype): raise TypeError(f"dtype={out_dtype} must be int")
    return cls.uniform(*shape, low=low, high=high, dtype=out_dtype, **kwargs)

  @classmethod
  def _symmetric(cls, shape: tuple, limit: float, **kwargs):
    return cls.uniform(*shape, low=-limit, high=limit, **kwargs)

  @classmethod
  def scaled_uniform(cls, *shape, **kwargs):
    return cls._symmetric(shape, 1.0, **kwargs).mul(prod(argfix(*shape)) ** -0.5)

  @classmethod
  def glorot_uniform(cls, *shape, **kwargs):
    dims = argfix(*shape)
    fan_sum = dims[0] + prod(dims[1:])
    return cls._symmetric(shape, 1.0, **kwargs).mul((6 / fan_sum) ** 0.5)

  @classmethod
  def kaiming_normal(cls, *shape, a: float = 0.01, **kwargs):
    fan_in = prod(argfix(*shape)[1:])
    return cls.normal(*shape, std=math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(fan_in), **kwargs)

  @classmethod
  def normal(cls, *shape, mean=0.0, std=1.0, requires_grad: Optional[bool] = None, **kwargs):
    return ((std * cls.randn(*shape, **kwargs)) + mean).requires_grad_(requires_grad)

  @classmethod
  def linspace(cls, start, stop, steps: int, **kwargs):
    """`steps` values from start to stop (both included), evenly spaced; stop exactly at the end."""
    if steps < 0: raise ValueError("number of steps must be non-negative")
    dtype = to_dtype(kwargs.pop("dtype", dtypes.default_float))
    if steps == 0: return cls([], dtype=dtype, **kwargs)
    if steps == 1: return cls([start], dtype=dtype, **kwargs)
    step = (stop - start) / (steps - 1)
    values = cls.arange(steps, dtype=dtypes.default_float, **kwargs) * step + start
    return (cls.arange(steps, **kwargs) == steps - 1).where(stop, values).cast(dtype)

  @classmethod
  def kaiming_uniform(cls, *shape, a: float = 0.01, **kwargs):
    fan_in = prod(argfix(*shape)[1:])
    gain = math.sqrt(2.0 / (1 + a ** 2))
    return cls._symmetric(shape, math.sqrt(3.0) * gain / math.sqrt(fan_in), **kwargs)
