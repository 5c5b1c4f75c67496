"""Small shared utilities at the bottom of the compiler: environment flags, list helpers.

Every flag the compiler reads is a `ContextVar`; they register themselves so that a capture can
snapshot all of them and a replay can restore them with `Context(**flags)`.
"""
from __future__ import annotations
import functools, operator, os
from typing import Any, Iterable, TypeVar

T = TypeVar("T")


@functools.cache
def getenv(key: str, default: Any = 0) -> Any:
  return type(default)(os.getenv(key, default))


class ContextVar:
  """A named integer flag read from the environment once, overridable for a block with `Context`."""
  _cache: dict[str, "ContextVar"] = {}
  value: int
  key: str

  def __init__(self, key: str, default_value: int):
    if key in ContextVar._cache: raise RuntimeError(f"attempt to recreate ContextVar {key}")
    self.key, self.default = key, default_value
    self.value = getenv(key, default_value)
    ContextVar._cache[key] = self

  def __bool__(self): return bool(self.value)
  def __ge__(self, x): return self.value >= x
  def __gt__(self, x): return self.value > x
  def __lt__(self, x): return self.value < x
  def __le__(self, x): return self.value <= x
  def __eq__(self, x): return self.value == x
  def __hash__(self): return hash(self.key)
  def __int__(self): return int(self.value)
  def __repr__(self): return f"ContextVar({self.key}={self.value})"

  @staticmethod
  def snapshot() -> dict[str, int]:
    """Every registered flag and its current value, sorted by name."""
    return {k: v.value for k, v in sorted(ContextVar._cache.items())}


class Context:
  """Set flags for a block; the previous values come back on exit, also when the block raises."""
  def __init__(self, **kwargs: int): self.kwargs = kwargs

  def __enter__(self):
    unknown = [k for k in self.kwargs if k not in ContextVar._cache]
    if unknown: raise KeyError(f"unknown flag(s) for Context: {', '.join(unknown)}")
    self.old = {k: ContextVar._cache[k].value for k in self.kwargs}
    for k, v in self.kwargs.items(): ContextVar._cache[k].value = v
    return self

  def __exit__(self, *exc):
    for k, v in self.old.items(): ContextVar._cache[k].value = v
    return False


DEBUG = ContextVar("DEBUG", 0)
SPLIT_REDUCEOP = ContextVar("SPLIT_REDUCEOP", 1)
FUSE_ARANGE = ContextVar("FUSE_ARANGE", 0)
FUSE_CONV_BW = ContextVar("FUSE_CONV_BW", 0)
DONT_REALIZE_EXPAND = ContextVar("DONT_REALIZE_EXPAND", 0)
DONT_GROUP_REDUCES = ContextVar("DONT_GROUP_REDUCES", 0)
CAPTURE_PROCESS_REPLAY = ContextVar("CAPTURE_PROCESS_REPLAY", 0)
TRACK_MATCH_STATS = ContextVar("TRACK_MATCH_STATS", 0)
PICKLE_BUFFERS = ContextVar("PICKLE_BUFFERS", 1)
TRACEMETA = ContextVar("TRACEMETA", 1)
CAST_AFTER_EXPAND = ContextVar("CAST_AFTER_EXPAND", 0)
REDUCEOP_SPLIT_THRESHOLD = ContextVar("REDUCEOP_SPLIT_THRESHOLD", 32768)
REDUCEOP_SPLIT_SIZE = ContextVar("REDUCEOP_SPLIT_SIZE", 22)
VIZ = ContextVar("VIZ", 0)


def prod(x: Iterable[T], start: Any = 1) -> Any: return functools.reduce(operator.mul, x, start)
def dedup(x: Iterable[T]) -> list[T]: return list(dict.fromkeys(x))
def flatten(xs: Iterable[Iterable[T]]) -> list[T]: return [item for sub in xs for item in sub]
def all_int(t: Iterable[Any]) -> bool: return all(isinstance(s, int) for s in t)
def argfix(*x):
  if x and isinstance(x[0], (tuple, list)):
    if len(x) != 1: raise ValueError(f"bad arg {x}")
    return tuple(x[0])
  return x
def make_tuple(x, cnt: int) -> tuple: return (x,) * cnt if isinstance(x, int) else tuple(x)
def argsort(x): return type(x)(sorted(range(len(x)), key=x.__getitem__))
def round_up(num: int, amt: int) -> int: return (num + amt - 1) // amt * amt
def ceildiv(num, amt): return -(num // -amt)
def fully_flatten(lst):
  if hasattr(lst, "__len__") and hasattr(lst, "__getitem__") and not isinstance(lst, str):
    if hasattr(lst, "shape") and lst.shape == (): return [lst[()]]
    return [x for item in lst for x in fully_flatten(item)]
  return [lst]


def all_same(items: list[Any] | tuple[Any, ...]) -> bool: return all(x == items[0] for x in items)


def unwrap(x: T | None) -> T:
  if x is None: raise ValueError("unexpected None")
  return x


def pluralize(st: str, cnt: int) -> str: return f"{cnt} {st}" + ("" if cnt == 1 else "s")


class Metadata:
  """Which tensor function produced an op; rides on schedule items for the reader."""
  __slots__ = ("name", "caller", "backward")
  def __init__(self, name: str, caller: str = "", backward: bool = False):
    self.name, self.caller, self.backward = name, caller, backward
  def __hash__(self): return hash((self.name, self.backward))
  def __eq__(self, o): return isinstance(o, Metadata) and (self.name, self.backward) == (o.name, o.backward)
  def __repr__(self): return self.name + ("_bw" if self.backward else "")
  def __reduce__(self): return (Metadata, (self.name, self.caller, self.backward))
