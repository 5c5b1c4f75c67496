"""Small shared utilities at the bottom of the compiler: environment flags and sequence helpers.

Nothing in here imports another module of the project. Every flag the compiler reads is a
`ContextVar`; each one registers itself in `ContextVar._cache` (the registry the harness reads), so a
capture can snapshot all flags and a replay can restore them with `Context(**flags)`.
"""
from __future__ import annotations
import gc, os, threading
from functools import cache
from typing import Any, Callable, Generator, Iterable, Sequence, TypeVar

T = TypeVar("T")


@cache
def getenv(key: str, default: Any = 0) -> Any:
  """The environment variable `key` converted to the type of `default` (read once per process)."""
  raw = os.environ.get(key)
  return default if raw is None else type(default)(raw)


# the flag values `Context` blocks set, per thread: a block in one thread (the capture's read-back turning capture
# off, a replay applying captured flags) must not change what another thread's code sees at the same moment
_block_values = threading.local()
# a new token at every change to the process's flags (a new flag, a process value): `ContextVar.frozen` answers by this
# token and the values of the thread's blocks (a new object, not a count: two threads counting at once could both
# write the same number)
_changes = [object()]
# (token, the thread's block values) -> the pairs `ContextVar.frozen` made for them: a block that is left restores the
# flags before it, and with them the tuple object they had (the capture enters a block itself around every graph it
# pickles, and the compiler hundreds a run)
_frozen: dict[tuple, tuple[tuple[str, int], ...]] = {}
FROZEN_KEPT = 256


class ContextVar:
  """A named integer flag: its environment value at import, overridable for a block with `Context` (in the thread
  that runs the block). Assigning `.value` changes the process-wide value.

  It behaves like its integer value in comparisons and truth tests (`if DEBUG >= 2:`)."""
  _cache: dict[str, ContextVar] = {}   # every flag by name; the harness snapshots and restores it
  _ordered: list[tuple[str, ContextVar]] = []   # _cache's items sorted by name (flags only register, never leave)

  def __init__(self, key: str, default_value: int):
    if key in ContextVar._cache: raise RuntimeError(f"flag {key} is defined twice")
    self.key, self.default = key, default_value
    self.process_value: int = getenv(key, default_value)
    ContextVar._cache[key] = self
    _changes[0] = object()

  @property
  def value(self) -> int:
    blocks = getattr(_block_values, "flags", None)
    return blocks[self.key] if blocks and self.key in blocks else self.process_value

  @value.setter
  def value(self, new: int) -> None:
    self.process_value = new
    _changes[0] = object()

  def __int__(self) -> int: return int(self.value)
  def __index__(self) -> int: return int(self.value)
  def __bool__(self) -> bool: return bool(self.value)
  def __hash__(self) -> int: return hash(self.key)
  def __eq__(self, other) -> bool: return self.value == other
  def __lt__(self, other) -> bool: return self.value < other
  def __le__(self, other) -> bool: return self.value <= other
  def __gt__(self, other) -> bool: return self.value > other
  def __ge__(self, other) -> bool: return self.value >= other
  def __repr__(self) -> str: return f"ContextVar({self.key}={self.value})"

  @staticmethod
  def snapshot() -> dict[str, int]:
    """Every registered flag and its current value, sorted by name (taken at every capture: the block's values are
    looked up once, not once per flag, and the flags are sorted once per set of flags)."""
    ordered = ContextVar._ordered
    if len(ordered) != len(ContextVar._cache): ordered = ContextVar._ordered = sorted(ContextVar._cache.items())
    blocks = getattr(_block_values, "flags", None)
    if not blocks: return {name: var.process_value for name, var in ordered}
    return {name: blocks[name] if name in blocks else var.process_value for name, var in ordered}

  @staticmethod
  def frozen() -> tuple[tuple[str, int], ...]:
    """`snapshot` as (name, value) pairs, the same tuple object for the same flags (a capture, taken hundreds of times
    a second, looks up what it derives from the flags by this object instead of rebuilding them)."""
    blocks = getattr(_block_values, "flags", None)
    # the token is read first: a change made while the pairs are built makes them stale at once
    key = (_changes[0], tuple(blocks.items()) if blocks else ())
    try:
      if (pairs := _frozen.get(key)) is not None: return pairs
    except TypeError: return tuple(ContextVar.snapshot().items())   # a block set a flag to a value not hashable
    pairs = tuple(ContextVar.snapshot().items())
    if len(_frozen) >= FROZEN_KEPT: _frozen.clear()   # a replay applies the flags of every capture it runs
    _frozen[key] = pairs
    return pairs


class Context:
  """Set flags for a block, in the thread that runs it; the previous values come back on exit, also when the block
  raises."""
  _UNSET = object()

  def __init__(self, **flags: int): self.flags = flags

  def __enter__(self) -> Context:
    unknown = sorted(set(self.flags) - set(ContextVar._cache))
    if unknown: raise KeyError(f"unknown flag(s) for Context: {', '.join(unknown)}")
    blocks = getattr(_block_values, "flags", None)
    if blocks is None: blocks = _block_values.flags = {}
    self.saved = {name: blocks.get(name, Context._UNSET) for name in self.flags}
    blocks.update(self.flags)
    return self

  def __exit__(self, *exc) -> bool:
    blocks = _block_values.flags
    for name, value in self.saved.items():
      if value is Context._UNSET: blocks.pop(name, None)
      else: blocks[name] = value
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


def prod(values: Iterable[Any], start: Any = 1) -> Any:
  """Product of `values`; works for ints and for symbolic UOps (which is why this is not math.prod)."""
  result = start
  for v in values: result = result * v
  return result

def dedup(items: Iterable[T]) -> list[T]:
  """The items in order of first appearance, each once."""
  return list(dict.fromkeys(items))

def flatten(nested: Iterable[Iterable[T]]) -> list[T]: return [item for inner in nested for item in inner]
def all_int(values: Iterable[Any]) -> bool: return all(isinstance(v, int) for v in values)
def all_same(items: Sequence[Any]) -> bool: return all(v == items[0] for v in items[1:])

def argfix(*args):
  """Accept both `f(1, 2, 3)` and `f((1, 2, 3))`: the arguments as one tuple."""
  if not args or not isinstance(args[0], (tuple, list)): return args
  if len(args) > 1: raise ValueError(f"expected one sequence or several values, got {args}")
  return tuple(args[0])

def make_tuple(value: int | Sequence[int], count: int) -> tuple:
  """`value` repeated `count` times when it is an int, else `value` as a tuple."""
  return tuple(value) if not isinstance(value, int) else tuple(value for _ in range(count))

def argsort(values):
  """The indices that sort `values`, as the same sequence type."""
  order = sorted(range(len(values)), key=lambda i: values[i])
  return type(values)(order)

def ceildiv(num, amt):
  """Division rounding towards +inf (also for symbolic `num`)."""
  return -((-num) // amt)

def fully_flatten(nested) -> list:
  """Every scalar leaf of nested lists, tuples and arrays, depth first (0-d arrays are leaves)."""
  out: list = []
  stack = [nested]
  while stack:
    item = stack.pop()
    if isinstance(item, str) or not (hasattr(item, "__len__") and hasattr(item, "__getitem__")): out.append(item)
    elif getattr(item, "shape", None) == (): out.append(item[()])
    else: stack.extend(item[i] for i in range(len(item) - 1, -1, -1))
  return out

def unwrap(value: T | None) -> T:
  if value is None: raise ValueError("expected a value, got None")
  return value


class collection_paused:
  """A block of the compiler's own work (scheduling, lowering, running a schedule) with Python's cyclic garbage
  collector off, switched on again at its end if it was on when the block began (a block inside another does
  nothing). Graph nodes that cache their own toposort are in reference cycles, which only the collector frees; inside
  a realize it ran every few hundred allocations, re-scanned every live node each time, and found little to free (a
  tenth of the corpus run went to it). Garbage the block leaves is collected after it."""
  __slots__ = ("resume",)

  def __enter__(self) -> None:
    self.resume = gc.isenabled()
    if self.resume: gc.disable()

  def __exit__(self, *exc) -> None:
    if self.resume: gc.enable()


class computed_once:
  """A property computed on first use and stored in the instance's __dict__ (later reads never reach the
  descriptor). functools.cached_property does the same but takes a lock on every first use in Python 3.11,
  which costs more than the scheduler's small computations themselves."""
  def __init__(self, compute): self.compute, self.name, self.__doc__ = compute, compute.__name__, compute.__doc__
  def __set_name__(self, owner, name): self.name = name
  def __get__(self, obj, owner=None):
    if obj is None: return self
    value = obj.__dict__[self.name] = self.compute(obj)
    return value


class computed_from_sources(computed_once):
  """A `computed_once` property of a graph node whose value is computed from the same property of its sources
  (`node.src`). On a miss, the uncomputed part of the graph below is walked first, sources before users, with a
  stack rather than the call stack: a graph 100,000 nodes deep computes it without Python recursion."""
  def __get__(self, obj, owner=None):
    if obj is None: return self
    name, compute = self.name, self.compute
    stack = [(obj, False)]
    while stack:
      node, ready = stack.pop()
      cache = node.__dict__
      if name in cache: continue
      if ready: cache[name] = compute(node)
      else:
        stack.append((node, True))
        stack.extend((s, False) for s in node.src if name not in s.__dict__)
    return obj.__dict__[name]


def evaluate(request: Any, expand: Callable[[Any], Generator], cache: dict) -> Any:
  """The value of `request` under a recursive, memoized definition, without Python recursion: `expand(request)` is
  a generator that yields each request it needs (receiving that request's value back) and returns its own value.
  Values go into `cache` (request -> value); a graph 100,000 nodes deep costs a list of that length, not frames."""
  if request in cache: return cache[request]
  stack = [(request, expand(request))]
  reply: Any = None
  while stack:
    current, generator = stack[-1]
    try: needed = generator.send(reply)
    except StopIteration as finished:
      cache[current] = reply = finished.value
      stack.pop()
      continue
    if needed in cache: reply = cache[needed]
    else:
      stack.append((needed, expand(needed)))
      reply = None
  return cache[request]


# what the compiler's values pickle as: the reconstructors of the replay contract (scheduler/contract.py registers them
# when the package is imported), looked up here so that the lower layers pickle through the contract without importing
# it
RECONSTRUCTORS: dict[str, Callable] = {}


class Metadata:
  """Which tensor function produced an op; rides on schedule items for the reader."""
  __slots__ = ("name", "caller", "backward")

  def __init__(self, name: str, caller: str = "", backward: bool = False):
    self.name, self.caller, self.backward = name, caller, backward

  def _identity(self): return (self.name, self.backward)
  def __hash__(self): return hash(self._identity())
  def __eq__(self, other): return isinstance(other, Metadata) and self._identity() == other._identity()
  def __repr__(self): return f"{self.name}_bw" if self.backward else self.name
  def __reduce__(self): return RECONSTRUCTORS["metadata"], (self.name, self.caller, self.backward)
