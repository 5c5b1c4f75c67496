"""The UOp graph IR and the pattern-rewrite engine: the one mechanism every compiler pass uses.

`UOp` nodes are immutable and hash-consed (building the same structure twice gives the same
object). `UPat`/`PatternMatcher` describe rewrite rules, `graph_rewrite` applies them to a fixed
point. Sits on top of `dtype.py` and `helpers.py`; the shape tracker and symbolic rules build on it.
"""
from __future__ import annotations
import enum, functools, hashlib, inspect, itertools, math, threading, weakref
from typing import Any, Callable, Iterable, Optional, TYPE_CHECKING
from scheduler.dtype import DType, dtypes, ConstType
from scheduler.helpers import (Context, computed_once, computed_from_sources, prod, unwrap, TRACK_MATCH_STATS,
                               PICKLE_BUFFERS, Metadata, RECONSTRUCTORS)
from scheduler.device import Buffer   # the device layer sits below the IR: it knows dtypes, not UOps
if TYPE_CHECKING:
  from scheduler.shape.shapetracker import ShapeTracker


class Ops(enum.IntEnum):
  """Every op of the IR. Captures store ops by name, so members may be added or reordered freely."""
  def __str__(self) -> str: return f"Ops.{self.name}"
  def __repr__(self) -> str: return f"Ops.{self.name}"
  def __reduce_ex__(self, protocol): return (RECONSTRUCTORS["op"], (self.name,))

  # graph roots and kernels
  SINK = enum.auto(); KERNEL = enum.auto()
  # buffers and devices
  UNIQUE = enum.auto(); DEVICE = enum.auto(); BUFFER = enum.auto(); BUFFER_VIEW = enum.auto()
  DEFINE_GLOBAL = enum.auto(); DEFINE_ACC = enum.auto(); DEFINE_VAR = enum.auto(); BIND = enum.auto()
  # views and movement
  VIEW = enum.auto()
  RESHAPE = enum.auto()
  PERMUTE = enum.auto()
  EXPAND = enum.auto()
  PAD = enum.auto()
  SHRINK = enum.auto()
  FLIP = enum.auto()
  # constants and memory
  CONST = enum.auto(); VALID = enum.auto(); INDEX = enum.auto(); LOAD = enum.auto(); STORE = enum.auto()
  # tensor-level meta ops
  CONTIGUOUS = enum.auto()
  CONTIGUOUS_BACKWARD = enum.auto()
  DETACH = enum.auto()
  COPY = enum.auto()
  EMPTY = enum.auto()
  ASSIGN = enum.auto()
  # reduce
  REDUCE_AXIS = enum.auto()
  # unary
  CAST = enum.auto()
  BITCAST = enum.auto()
  EXP2 = enum.auto()
  LOG2 = enum.auto()
  SIN = enum.auto()
  SQRT = enum.auto()
  RECIP = enum.auto(); NEG = enum.auto()
  # binary
  ADD = enum.auto()
  MUL = enum.auto()
  IDIV = enum.auto()
  MAX = enum.auto()
  MOD = enum.auto()
  CMPLT = enum.auto()
  CMPNE = enum.auto()
  XOR = enum.auto()
  SHL = enum.auto()
  SHR = enum.auto()
  OR = enum.auto()
  AND = enum.auto()
  THREEFRY = enum.auto()
  SUB = enum.auto()
  FDIV = enum.auto()
  # ternary
  WHERE = enum.auto(); MULACC = enum.auto()
  # lowering
  RANGE = enum.auto(); ENDRANGE = enum.auto(); SPECIAL = enum.auto()
  # vector lanes of a lowered program: a vector made of scalars, and one scalar of a vector (arg: its lane)
  VECTORIZE = enum.auto(); GEP = enum.auto()




def _ops(names: str) -> frozenset[Ops]: return frozenset(Ops[name] for name in names.split())


class GroupOp:
  """Named sets of ops that rules and passes test membership in."""
  Unary = _ops("EXP2 LOG2 SIN SQRT RECIP NEG")
  Binary = _ops("ADD MUL IDIV MAX MOD CMPLT CMPNE XOR SHL SHR OR AND THREEFRY SUB FDIV")
  Ternary = _ops("WHERE MULACC")
  ALU = Unary | Binary | Ternary
  Irreducible = _ops("CONST DEFINE_VAR SPECIAL RANGE")
  Movement = _ops("RESHAPE EXPAND PERMUTE PAD SHRINK FLIP")
  Buffer = _ops("LOAD STORE VALID")
  Commutative = _ops("ADD MUL MAX CMPNE XOR AND OR")
  Associative = _ops("ADD MUL AND OR MAX")
  Idempotent = _ops("OR AND MAX")
  Comparison = _ops("CMPLT CMPNE")
  # these ops turn a padded zero into something that is not zero, so a pad cannot move past them
  UnsafePad = _ops("RECIP LOG2 EXP2 IDIV")
  Meta = _ops("COPY EMPTY BUFFER_VIEW")
  All = frozenset(Ops)


def identity_element(op: Ops, dt: DType) -> ConstType:
  """The value a reduce with `op` starts from: 0 for ADD, 1 for MUL, the dtype's minimum for MAX."""
  if op is Ops.ADD: start = 0
  elif op is Ops.MUL: start = 1
  elif op is Ops.MAX: start = dtypes.min(dt)
  else: raise ValueError(f"{op} is not a reduce op")
  return dtypes.as_const(start, dt)


# ***** symbolic ints *****

sint = int  # an int or a UOp; annotated loosely for speed of reading


def resolve(x, default: bool = True) -> bool:
  """Decide a (possibly symbolic) condition; `default` when the value ranges cannot decide it."""
  if not isinstance(x, UOp): return bool(x)
  if x.dtype != dtypes.bool: raise ValueError(f"resolve needs a bool, got {x.dtype}")
  lo, hi = x.vmin, x.vmax
  return bool(lo) if lo == hi else default


def _values(args: tuple) -> tuple:
  return tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else args


def smax(*args):
  """The largest of ints and symbolic values (a symbolic value counts as its upper bound)."""
  return max(_values(args), key=lambda v: v.vmax if isinstance(v, UOp) else v)


def smin(*args):
  """The smallest of ints and symbolic values (a symbolic value counts as its lower bound)."""
  return min(_values(args), key=lambda v: v.vmin if isinstance(v, UOp) else v)


def ssimplify(x): return x.ssimplify() if isinstance(x, UOp) else x


def sym_infer(x, var_vals: dict[UOp, int]) -> int:
  """The value of a symbolic int once its variables take `var_vals`."""
  if not isinstance(x, UOp): return x
  return x.substitute({var: var.const_like(value) for var, value in var_vals.items()}).ssimplify()


def sint_to_uop(x, dtype=dtypes.int32) -> UOp: return UOp.const(dtype, x) if isinstance(x, int) else x


# ***** the UOp *****

def exact_key(arg: Any) -> Any:
  """An argument as a dict key that tells -0.0 from 0.0: they are equal and hash alike, but 1/-0.0 is -inf."""
  return (arg, math.copysign(1.0, arg)) if type(arg) is float and arg == 0 else arg


class UOpMetaClass(type):
  """Hash-consing: building a UOp that exists already returns the existing object.

  The cache holds weak references without callbacks (a callback per node costs more than the node's creation);
  entries of dead UOps are swept whenever the cache has doubled since the last sweep, so it stays linear in the
  number of live UOps."""
  ucache: dict[tuple, weakref.ReferenceType[UOp]] = {}
  sweep_at: int = 1 << 14

  def __call__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None,
               _buffer: Optional[Buffer] = None):
    identity = (op, dtype, src, arg, type(arg))
    # exact_key, inlined: the hottest call of the compiler
    if type(arg) is float and arg == 0: identity += (math.copysign(1.0, arg),)
    cache = UOpMetaClass.ucache
    existing_ref = cache.get(identity)
    existing = existing_ref() if existing_ref is not None else None
    if existing is not None: return existing
    # threads that build the same node at once must get one object, and a sweep must not race an insert
    with _UCACHE_LOCK:
      existing_ref = cache.get(identity)
      if existing_ref is not None and (existing := existing_ref()) is not None: return existing
      created = super().__call__(op, dtype, src, arg)
      created.serial = next(_SERIALS)   # creation order: a node's sources are always older than the node
      cache[identity] = weakref.ref(created)
      if len(cache) > UOpMetaClass.sweep_at: _sweep_dead(cache)
      if _buffer is not None: buffers[created] = _buffer
    return created


_UCACHE_LOCK = threading.RLock()
_SERIALS = itertools.count()


def _sweep_dead(cache: dict) -> None:
  """Drop the entries of dead UOps. An entry's key holds the node's sources, so dropping it can free them: their
  entries go in the same sweep, level by level. (Otherwise a dead graph lost one level per sweep, and a long
  program kept most of its old graphs in memory.)"""
  doomed = [key for key, ref in cache.items() if ref() is None]
  while doomed:
    sources = _drop_entries(cache, doomed)
    doomed = [key for key in sources if (ref := cache.get(key)) is not None and ref() is None]
  UOpMetaClass.sweep_at = max(1 << 14, 2 * len(cache))


def _drop_entries(cache: dict, keys: list) -> dict:
  """Delete `keys` from the cache, emptying the list (a key holds its node's sources: nothing here may keep them
  alive once it is gone); return the cache keys of those sources, which hold the sources' own sources, not them."""
  sources: dict = {}
  while keys:
    key = keys.pop()
    for node in key[2]: sources[_identity(node)] = None
    del cache[key]
  return sources


def _identity(node: UOp) -> tuple:
  """The key the cache holds `node` under (`UOpMetaClass.__call__` builds the same tuple inline)."""
  identity = (node.op, node.dtype, node.src, node.arg, type(node.arg))
  return identity + (math.copysign(1.0, node.arg),) if type(node.arg) is float and node.arg == 0 else identity


class _Above:
  """What the modules above the IR provide to it. ops.py is the bottom layer of the compiler: the shape tracker,
  the symbolic rules import it, never the reverse. The few UOp methods that need them (a node's view chain,
  simplification and value ranges) call through this table, which each of those
  modules fills with `provide(...)` when it is imported; importing the `scheduler` package imports them all."""
  ShapeTracker: Any = None
  symbolic: Any = None
  render_expr: Any = None
  min_max: Any = None


def provide(**implementations: Any) -> None:
  for name, impl in implementations.items():
    if not hasattr(_Above, name): raise AttributeError(f"the IR has no use for {name!r}")
    setattr(_Above, name, impl)


# UOps of realized buffers map to the Buffer objects that hold their memory
buffers: weakref.WeakKeyDictionary[UOp, Buffer] = weakref.WeakKeyDictionary()
# tensor-level metadata (which Tensor function built an op)
all_metadata: weakref.WeakKeyDictionary[UOp, Metadata] = weakref.WeakKeyDictionary()

_buffer_num = [0]
_BUFFER_NUM_LOCK = threading.Lock()


def _next_buffer_num() -> int:
  """A number no other buffer of this process has, also when threads ask at once (two equal numbers would be one
  hash-consed BUFFER node: two tensors sharing memory)."""
  with _BUFFER_NUM_LOCK:
    _buffer_num[0] += 1
    return _buffer_num[0]


class MathMixin:
  """Python operators on UOps, UPats and Tensors, each building an ALU op through `alu` and `ufix`."""
  __slots__ = ()

  def _binop(self, op: Ops, other, reverse: bool):
    return self.ufix(other).alu(op, self) if reverse else self.alu(op, self.ufix(other))

  # derived operators: subtraction adds the negation, division multiplies by the reciprocal,
  # comparisons are CMPLT/CMPNE with swapped operands or a logical not
  def __neg__(self): return self.neg()
  def __sub__(self, x): return self + (-x if isinstance(x, MathMixin) else self.ufix(-x))
  def __rsub__(self, x): return self.ufix(x) + (-self)
  def __truediv__(self, x): return self * self.ufix(x).reciprocal()
  def maximum(self, x): return self.alu(Ops.MAX, self.ufix(x))
  def minimum(self, x): return -((-self).maximum(-x))
  def ne(self, x): return self.alu(Ops.CMPNE, self.ufix(x))
  def logical_not(self): return self.ne(True)
  def eq(self, x): return self.ne(x).logical_not()
  def __gt__(self, x): return self.ufix(x) < self
  def __le__(self, x): return (self > x).logical_not()
  def __ge__(self, x): return (self < x).logical_not()

  def neg(self):
    dtype = getattr(self, "dtype", None)
    if dtype is None: raise TypeError(f"cannot negate {self!r}: it has no dtype")
    return self.logical_not() if dtype.scalar == dtypes.bool else self * (-1)

  def where(self, x, y):
    if isinstance(x, UOp): y = x.ufix(y)
    elif isinstance(y, UOp): x = y.ufix(x)
    else: x, y = UOp.const(dtypes.from_py(x), x), UOp.const(dtypes.from_py(y), y)
    return self.alu(Ops.WHERE, x, y)

  def reciprocal(self): return self.alu(Ops.RECIP)
  def sqrt(self): return self.alu(Ops.SQRT)
  def sin(self): return self.alu(Ops.SIN)
  def log2(self): return self.alu(Ops.LOG2)
  def exp2(self): return self.alu(Ops.EXP2)


# dunder name -> (op, operands swapped); installed on MathMixin below
_OPERATORS = {"add": Ops.ADD, "mul": Ops.MUL, "floordiv": Ops.IDIV, "mod": Ops.MOD}
_ONE_SIDED = {"and": Ops.AND, "or": Ops.OR, "xor": Ops.XOR, "lshift": Ops.SHL, "rshift": Ops.SHR, "lt": Ops.CMPLT}


def _operator(op: Ops, reverse: bool):
  def apply(self, other): return self._binop(op, other, reverse)
  return apply


for _name, _op in {**_OPERATORS, **_ONE_SIDED}.items(): setattr(MathMixin, f"__{_name}__", _operator(_op, False))
for _name, _op in _OPERATORS.items(): setattr(MathMixin, f"__r{_name}__", _operator(_op, True))


_OP_NAMES = {op: op.name for op in Ops}
_SHAPELESS = frozenset({Ops.DEVICE, Ops.DEFINE_GLOBAL, Ops.KERNEL, Ops.SINK, Ops.RANGE, Ops.UNIQUE})


class UOp(MathMixin, metaclass=UOpMetaClass):
  __slots__ = ("op", "dtype", "src", "arg", "__weakref__", "__dict__")

  def __init__(self, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = tuple(), arg: Any = None):
    self.op, self.dtype, self.src, self.arg = op, dtype, src, arg

  def __reduce__(self): return RECONSTRUCTORS["uop"], _reduced(self, self.src)

  def index(self, idx: UOp, valid: Optional[UOp] = None) -> UOp:
    """An INDEX into this buffer at `idx`, gated by `valid` when given (the address of a load or a store)."""
    return UOp(Ops.INDEX, self.dtype, (self, idx) if valid is None else (self, idx, valid))

  def replace(self, **changes) -> UOp:
    """This UOp with some of op, dtype, src, arg changed (itself when nothing changes)."""
    unknown = set(changes) - {"op", "dtype", "src", "arg"}
    if unknown: raise TypeError(f"replace got unknown fields {sorted(unknown)}")
    fields = {"op": self.op, "dtype": self.dtype, "src": self.src, "arg": self.arg, **changes}
    if all(fields[k] is getattr(self, k) or fields[k] == getattr(self, k) for k in ("op", "dtype", "src")) and \
       type(fields["arg"]) is type(self.arg) and fields["arg"] == self.arg: return self
    return UOp(fields["op"], fields["dtype"], fields["src"], fields["arg"])

  @computed_from_sources
  def key(self) -> bytes:
    h = hashlib.sha256(f"{self.op.name}|{self.dtype!r}|{_stable_repr(self.arg)}".encode())
    for s in self.src: h.update(s.key)
    return h.digest()

  def __repr__(self): return pretty_print(self)
  def argstr(self): return f"({', '.join(map(str, self.arg))})" if self.op is Ops.REDUCE_AXIS else repr(self.arg)

  # ***** graph walking *****

  @computed_once
  def toposort(self) -> dict[UOp, None]:
    out: dict[UOp, None] = {}
    stack: list[tuple[UOp, bool]] = [(self, False)]
    while stack:
      node, visited = stack.pop()
      if node in out: continue
      if visited: out[node] = None
      else:
        stack.append((node, True))
        for s in reversed(node.src):
          if s not in out: stack.append((s, False))
    return out

  def sources_first(self, include: Callable[[UOp], bool], descend: Callable[[UOp], bool] = lambda u: True) -> list[UOp]:
    """The nodes of this graph that `include` accepts, each after its sources, in the order a recursive walk (sources
    left to right) reaches them, without recursion; the walk goes below accepted nodes that `descend` accepts."""
    order: list[UOp] = []
    seen: set[UOp] = set()
    stack: list[tuple[UOp, bool]] = [(self, False)]
    while stack:
      node, expanded = stack.pop()
      if expanded:
        order.append(node)
        continue
      if node in seen: continue
      seen.add(node)
      if not include(node): continue
      stack.append((node, True))
      if descend(node): stack.extend((s, False) for s in reversed(node.src) if s not in seen)
    return order

  def substitute(self, dvars: dict[UOp, UOp]) -> UOp:
    """Each node that is a key of `dvars` replaced by its value, whose own sources are substituted the same way."""
    return _Rewriter(None, step=dvars.get).node_first(self)

  def sink(self, *srcs: UOp) -> UOp: return UOp(Ops.SINK, dtypes.void, (self,) + srcs)

  # ***** shape *****

  @computed_from_sources
  def st(self) -> Optional[ShapeTracker]:
    """The view chain of this node: its own for VIEW, movement ops and constants, else contiguous of its shape."""
    ShapeTracker = _Above.ShapeTracker
    op = self.op
    if op is Ops.VIEW: return self.arg
    if op in GroupOp.Movement: return unwrap(self.src[0].st).mop(op, self.arg)
    if op in (Ops.BUFFER, Ops.BUFFER_VIEW):
      return ShapeTracker.from_shape((self.arg[1] if op is Ops.BUFFER else self.arg[0],))
    if op in (Ops.CONST, Ops.DEFINE_VAR): return self.src[0].st if self.src else None
    if op in _SHAPELESS: return None
    shaped = [chain.shape for chain in (s.st for s in self.src) if chain is not None]
    if not shaped: return None
    if any(shape != shaped[0] for shape in shaped[1:]):
      raise ValueError(f"{op} has sources of different shapes {shaped}")
    return ShapeTracker.from_shape(self._output_shape(shaped[0]))

  def _output_shape(self, shape: tuple) -> tuple:
    if self.op is Ops.REDUCE_AXIS:
      return tuple(1 if axis in self.arg[1] else extent for axis, extent in enumerate(shape))
    old_size, new_size = self.src[0].dtype.itemsize, self.dtype.itemsize
    if self.op is Ops.BITCAST and shape and old_size != new_size: return (*shape[:-1], shape[-1] * old_size // new_size)
    return shape

  @property
  def shape(self) -> tuple:
    st = self.st
    if st is None: raise ValueError(f"{self.op} has no shape")
    return st.shape

  @property
  def size(self) -> int: return self.arg[1] if self.op is Ops.BUFFER else unwrap(self.st).size

  @property
  def ndim(self) -> int: return len(self.shape)

  @property
  def base(self) -> UOp:
    node = self
    while node.op in GroupOp.Movement or (node.op is Ops.VIEW and len(node.src) == 1): node = node.src[0]
    return node

  @property
  def axis_arg(self) -> tuple[int, ...]:
    if self.op is not Ops.REDUCE_AXIS: raise ValueError(f"axis_arg of {self.op}")
    return self.arg[1]

  # ***** devices and buffers *****

  @computed_from_sources
  def _device(self) -> Optional[str]:
    if self.op is Ops.DEVICE: return self.arg
    return next((d for s in self.src if (d := s._device) is not None), None)

  @property
  def device(self) -> str: return unwrap(self._device)

  @property
  def buf_uop(self) -> UOp:
    node = self
    while (base := node.base).op is not Ops.BUFFER:
      if base.op not in {*GroupOp.Buffer, Ops.ASSIGN, Ops.BUFFER_VIEW}: raise ValueError(f"buf_uop called on {node.op}")
      node = node.src[0]
    return base

  @property
  def buffer(self) -> Buffer:
    if self.op is Ops.VIEW:
      if not self.st.contiguous: raise ValueError("VIEW of a buffer must be contiguous to get its Buffer")
      return self.src[0].buffer
    if self.op is not Ops.BUFFER: raise ValueError(f"{self.op} has no buffer")
    if (cret := buffers.get(self)) is not None: return cret
    buffers[self] = ret = Buffer(self.device, self.size, self.dtype)
    return ret

  @property
  def realized(self) -> Optional[Buffer]:
    """The allocated Buffer of a BUFFER node, else None."""
    if self.op is not Ops.BUFFER: return None
    memory = buffers.get(self)
    return memory if memory is not None and memory.is_allocated() else None

  @property
  def is_realized(self) -> bool:
    base = self.base
    if base.op is Ops.MULACC: return all(s.base.realized is not None for s in base.src)
    return base.realized is not None

  # ***** builders *****

  @staticmethod
  def new_buffer(device: str, size: int, dtype: DType) -> UOp:
    """A BUFFER node with a fresh number: two new buffers are never the same node."""
    return UOp(Ops.BUFFER, dtype, (UOp(Ops.DEVICE, arg=device),), (_next_buffer_num(), size))

  @staticmethod
  def const(dtype: DType, b, device: Optional[str] = None, shape: Optional[tuple] = None) -> UOp:
    if isinstance(b, UOp): return b.unbind()[0] if b.op is Ops.BIND else b
    ret = UOp(Ops.CONST, dtype, arg=dtypes.as_const(b, dtype))
    if shape is not None:
      # a constant of any shape is a broadcast scalar: every stride is 0
      st = _Above.ShapeTracker.from_shape(()).reshape((1,) * len(shape)).expand(tuple(shape))
      ret = ret.replace(src=(UOp(Ops.VIEW, dtypes.void, (UOp(Ops.DEVICE, arg=device),) if device else (), st),))
    return ret

  def const_like(self, b) -> UOp:
    if self._device is not None and self.st is not None: return UOp.const(self.dtype, b, self.device, self.shape)
    if self.st is not None: return UOp.const(self.dtype, b, None, self.shape)
    return UOp.const(self.dtype, b)

  def ufix(self, x) -> UOp:
    if isinstance(x, UOp): return x
    dtype = self.dtype if not (dtypes.is_int(self.dtype) and isinstance(x, float)) else dtypes.default_float
    return self.const_like(x) if dtype == self.dtype else UOp.const(dtype, x)

  @staticmethod
  def metaop(op: Ops, shape: tuple, dtype: DType, device: str, arg=None) -> UOp:
    ShapeTracker = _Above.ShapeTracker
    if op is Ops.CONST:
      if not isinstance(arg, UOp): return UOp.const(dtype, arg, device, ()).reshape((1,) * len(shape)).expand(shape)
      # a bound variable used as a tensor value
      var, val = arg.unbind()
      return var.replace(src=(UOp(Ops.VIEW, dtypes.void, (UOp(Ops.DEVICE, arg=device),),
                                  ShapeTracker.from_shape(shape)),)).bind(val)
    if op is Ops.EMPTY:
      return UOp.new_buffer(device, prod(shape), dtype).reshape(shape)
    raise ValueError(f"unknown metaop {op}")

  def alu(self, op: Ops, *src: UOp) -> UOp:
    """An ALU op over self and src; the result has the last operand's dtype (bool for comparisons)."""
    last = src[-1].dtype if src else self.dtype
    if op in GroupOp.Comparison: last = dtypes.bool if last.count == 1 else dtypes.bool.vec(last.count)
    return UOp(op, last, (self, *src))

  def _wrapped(self, op: Ops, arg=None) -> UOp: return UOp(op, self.dtype, (self,), arg)
  def cast(self, dtype: DType) -> UOp: return UOp(Ops.CAST, dtype, (self,)) if dtype != self.dtype else self
  def bitcast(self, dtype: DType) -> UOp: return UOp(Ops.BITCAST, dtype, (self,))
  def r(self, op: Ops, axis: tuple[int, ...]) -> UOp:
    """Reduce over `axis`; axes of extent 1 are dropped, and with none left this is a no-op."""
    reduced = tuple(sorted(a for a in axis if resolve(self.shape[a] != 1)))
    return self._wrapped(Ops.REDUCE_AXIS, (op, reduced)) if reduced else self
  def threefry(self, seed: UOp) -> UOp: return UOp(Ops.THREEFRY, dtypes.uint64, (self, seed))
  def contiguous(self) -> UOp: return self._wrapped(Ops.CONTIGUOUS)
  def contiguous_backward(self) -> UOp: return self._wrapped(Ops.CONTIGUOUS_BACKWARD)
  def detach(self) -> UOp: return self._wrapped(Ops.DETACH)
  def assign(self, x: UOp) -> UOp: return UOp(Ops.ASSIGN, self.dtype, (self, x))
  def copy_to_device(self, device: str, clone: bool = False) -> UOp:
    return UOp(Ops.COPY, self.dtype, (UOp(Ops.DEVICE, arg=device), self), clone)
  def clone(self) -> UOp: return self.copy_to_device(self.device, clone=True)

  # ***** views and movement ops (all movement ops become one VIEW on the base) *****

  def view(self, new_st: ShapeTracker) -> UOp: return UOp(Ops.VIEW, self.dtype, (self.base,), new_st)

  def _mop(self, op: Ops, arg) -> UOp:
    ret = UOp(op, self.dtype, (self,), arg)
    return self if self.st == ret.st else ret  # computing ret.st also validates the movement

  def reshape(self, arg: tuple) -> UOp: return self._mop(Ops.RESHAPE, arg)
  def pad(self, arg: tuple) -> UOp: return self._mop(Ops.PAD, arg)
  def expand(self, arg: tuple) -> UOp: return self._mop(Ops.EXPAND, arg)
  def permute(self, arg: tuple) -> UOp: return self._mop(Ops.PERMUTE, arg)
  def shrink(self, arg: tuple) -> UOp: return self._mop(Ops.SHRINK, arg)
  def flip(self, arg: tuple) -> UOp: return self._mop(Ops.FLIP, arg)

  # ***** symbolic *****

  @staticmethod
  def variable(name: str, min_val, max_val, dtype: DType = dtypes.int32) -> UOp:
    return UOp(Ops.DEFINE_VAR, dtype, arg=(name, min_val, max_val))

  @property
  def expr(self) -> str:
    if self.op is not Ops.DEFINE_VAR: raise ValueError(f"expr of {self.op}")
    return self.arg[0]

  def bind(self, val: int) -> UOp:
    if self.op is not Ops.DEFINE_VAR: raise ValueError(f"cannot bind {self.op}")
    if not (self.arg[1] <= val <= self.arg[2]):
      raise ValueError(f"value {val} out of range of {self.arg[0]} [{self.arg[1]}, {self.arg[2]}]")
    return UOp(Ops.BIND, self.dtype, (self, self.const_like(val)))

  def unbind(self) -> tuple[UOp, int]:
    """(variable, value) of a BIND."""
    if self.op is Ops.BIND:
      var, value = self.src
      if var.op is Ops.DEFINE_VAR and value.op is Ops.CONST: return var, value.arg
    raise ValueError(f"can't unbind {self}")

  @property
  def val(self) -> int: return self.unbind()[1]

  def vars(self) -> set[UOp]:
    bound = {x.src[0]: x for x in self.toposort if x.op is Ops.BIND}
    return set(bound.values()) | {x for x in self.toposort if x.op is Ops.DEFINE_VAR and x not in bound}

  def variables(self) -> list[UOp]:
    st_vars: list[set[UOp]] = [x.st.vars() for x in self.toposort if x.st is not None and x.op is Ops.VIEW]
    return sorted(set.union(*st_vars, {x.unbind()[0] if x.op is not Ops.DEFINE_VAR else x for x in self.vars()}),
                  key=lambda v: v.arg)

  def simplify(self) -> UOp:
    with _no_tracking(): return graph_rewrite(self, _Above.symbolic)

  def ssimplify(self):
    ret = self.simplify()
    return ret.arg if ret.op is Ops.CONST else ret

  def render(self, simplify=True) -> str:
    return _Above.render_expr(self.simplify() if simplify else self)

  @computed_from_sources
  def _min_max(self) -> tuple:
    return _Above.min_max(self)

  @property
  def vmin(self): return self._min_max[0]
  @property
  def vmax(self): return self._min_max[1]

  def __bool__(self): raise TypeError(f"a UOp is not a python bool; use resolve() on {self.op}")

  def __index__(self):
    if self.op is Ops.CONST and isinstance(self.arg, int): return self.arg
    raise TypeError(f"cannot use symbolic {self.op} as a python int")

  def __int__(self): return self.__index__()



def _pickle_buffers() -> bool: return bool(PICKLE_BUFFERS)


def _reduced(u: UOp, src: tuple) -> tuple:
  """The arguments `uop` is rebuilt from, with `src` for the sources: a BUFFER holds its contents when pickling them
  is on."""
  if u.op is Ops.BUFFER and u in buffers and buffers[u].is_allocated() and _pickle_buffers():
    return (u.op.name, u.dtype, src, u.arg, buffers[u])
  # the op's name from a table: an enum's `name` is a descriptor call, and capture pickles every node of a graph
  return (_OP_NAMES[u.op], u.dtype, src, u.arg)


def graph_rows(nodes: list[UOp]) -> tuple[str, int, list[tuple]]:
  """Nodes listed sources first as the rows of a flat table (`replay/serialize.py`): the reconstructor each row is
  built with, the position of the sources in a row, and for each node the arguments of its `__reduce__` with its
  sources as distances back in the list (small numbers that repeat: a table compresses to about 60% of a pickle)."""
  where: dict[UOp, int] = {}
  rows: list[tuple] = []
  append, buffer, names = rows.append, Ops.BUFFER, _OP_NAMES   # locals: this loop runs for every node a capture holds
  for i, u in enumerate(nodes):
    where[u] = i
    src = u.src
    # most nodes have one or two sources: built directly, they take half the time of a list made into a tuple
    if len(src) == 1: back: tuple = (i - where[src[0]],)
    elif len(src) == 2: back = (i - where[src[0]], i - where[src[1]])
    else: back = tuple([i - where[s] for s in src])
    append(_reduced(u, back) if u.op is buffer else (names[u.op], u.dtype, back, u.arg))
  return "uop", 2, rows


def _stable_repr(arg) -> str:
  """A repr of a UOp arg that is the same in every process (no ids, sets sorted)."""
  if isinstance(arg, (set, frozenset)): return "{" + ",".join(sorted(_stable_repr(a) for a in arg)) + "}"
  if isinstance(arg, tuple): return "(" + ",".join(_stable_repr(a) for a in arg) + ")"
  if isinstance(arg, float): return repr(arg) if not math.isnan(arg) else "nan"
  if hasattr(arg, "stable_repr"): return arg.stable_repr()
  return repr(arg)


def _no_tracking(): return Context(TRACK_MATCH_STATS=0)


def pretty_print(x: UOp) -> str:
  lines: list[str] = []
  seen: dict[UOp, int] = {}
  todo = [(x, 0)]   # a stack, not recursion: graphs may be thousands of nodes deep
  while todo:
    u, depth = todo.pop()
    pad = "  " * min(depth, 40) + (f"[{depth}] " if depth > 40 else "")
    if u in seen:
      lines.append(pad + f"<ref {seen[u]}>")
      continue
    seen[u] = len(seen)
    lines.append(pad + f"{seen[u]}: UOp({u.op}, {u.dtype}, arg={u.argstr()}, src=({len(u.src)}))")
    todo.extend((s, depth + 1) for s in reversed(u.src))
  return "\n".join(lines)


# ***** pattern matching *****

class UPat(MathMixin):
  """A pattern over UOps. `src` is a tuple (sources in that order), a list (in any order, for commutative
  ops) or one UPat (every source matches it, any count). `name` binds the matched UOp for the rule."""
  __slots__ = ("op", "dtype", "arg", "name", "src", "allowed_len", "custom_early_reject", "location")

  def __init__(self, op: Ops | Iterable[Ops] | None = None, dtype: DType | Iterable[DType] | None = None,
               src: UPat | tuple[UPat, ...] | list[UPat] | None = None, arg: Any = None, name: str | None = None,
               allow_any_len: bool = False, location=None, custom_early_reject: set[Ops] | None = None):
    self.op: Optional[tuple[Ops, ...]] = None if op is None else ((op,) if isinstance(op, Ops) else tuple(op))
    self.dtype: Optional[tuple[DType, ...]] = None if dtype is None else ((dtype,) if isinstance(dtype, DType)
                                                                          else tuple(dtype))
    self.arg, self.name = arg, name
    # src holds the alternative source tuples to try; a single UPat is stored as itself and repeats
    if src is None: self.src: Any = None
    elif isinstance(src, UPat): self.src = src
    elif isinstance(src, list): self.src = list(dict.fromkeys(itertools.permutations(src)))
    else: self.src = [tuple(src)]
    fixed_count = isinstance(src, (tuple, list)) and not allow_any_len
    self.allowed_len = len(src) if fixed_count else -1
    self.location = location or _caller_location()
    if custom_early_reject is None:
      first = [src] if isinstance(src, UPat) else (list(src) if src is not None else [])
      custom_early_reject = {p.op[0] for p in first if p.op is not None and len(p.op) == 1}
    self.custom_early_reject = custom_early_reject

  @staticmethod
  def any(*alternatives: UPat) -> UPat: return _UPatAny(src=alternatives, custom_early_reject=set())
  @staticmethod
  def var(name: str | None = None, dtype=None) -> UPat: return UPat(dtype=dtype, name=name)
  @staticmethod
  def cvar(name: str | None = None, dtype=None, vec=True) -> UPat: return UPat(Ops.CONST, dtype, name=name)
  @staticmethod
  def const(dtype, b) -> UPat: return UPat(Ops.CONST, dtype=dtype, arg=b)
  @staticmethod
  def assign(target: UPat, value: UPat, name: str | None = None) -> UPat:
    return UPat(Ops.ASSIGN, src=(target, value), name=name)

  # builders, so that patterns read like the graphs they match
  def cast(self, dtype=None) -> UPat: return UPat(Ops.CAST, dtype, (self,))
  def view(self, st=None, **kwargs) -> UPat: return UPat(Ops.VIEW, src=(self,), arg=st, **kwargs)
  def alu(self, op: Ops, *src: UPat) -> UPat:
    operands = (self, *src)
    return UPat(op, dtypes.bool if op in GroupOp.Comparison else None, list(operands) if op in GroupOp.Commutative
                else operands)
  def ufix(self, x) -> UPat: return x if isinstance(x, UPat) else UPat.const(None, x)
  def where(self, x, y) -> UPat: return UPat(Ops.WHERE, None, (self, self.ufix(x), self.ufix(y)))

  def __repr__(self): return f"UPat({self.op}, name={self.name})"

  def _node_fits(self, uop: UOp) -> bool:
    if self.op is not None and uop.op not in self.op: return False
    if self.dtype is not None and uop.dtype not in self.dtype and uop.dtype.scalar not in self.dtype: return False
    if self.arg is not None and self.arg != uop.arg: return False
    return self.allowed_len == -1 or len(uop.src) == self.allowed_len

  def match(self, uop: UOp, bound: dict[str, UOp]) -> list[dict[str, UOp]]:
    """Every way this pattern matches `uop`, each as the names bound (extending `bound`)."""
    if not self._node_fits(uop): return []
    if self.name is not None:
      if bound.get(self.name, uop) is not uop: return []
      bound = {**bound, self.name: uop}
    if self.src is None: return [bound]
    if isinstance(self.src, UPat): return _match_sources((self.src,) * len(uop.src), uop.src, bound)
    return [found for option in self.src for found in _match_sources(option, uop.src, bound)]


def _match_sources(patterns: tuple, sources: tuple, bound: dict[str, UOp]) -> list[dict[str, UOp]]:
  partial = [bound]
  for pattern, source in zip(patterns, sources):
    partial = [found for b in partial for found in pattern.match(source, b)]
    if not partial: break
  return partial


class _UPatAny(UPat):
  """Matches when any of its alternatives does."""
  def match(self, uop: UOp, bound: dict[str, UOp]) -> list[dict[str, UOp]]:
    return [found for alternative in self.src[0] for found in alternative.match(uop, bound)]


def _caller_location() -> tuple[str, int]:
  """file:line of the code that built the pattern (skipping this module), for rewrite tracing."""
  frame = inspect.currentframe()
  while frame is not None and frame.f_code.co_filename == __file__: frame = frame.f_back
  return ("?", 0) if frame is None else (frame.f_code.co_filename, frame.f_lineno)


def _ops_of(pattern: UPat) -> tuple[Ops, ...]:
  if isinstance(pattern, _UPatAny): return tuple(dict.fromkeys(op for alt in pattern.src[0] for op in _ops_of(alt)))
  return tuple(Ops) if pattern.op is None else pattern.op


class PatternMatcher:
  """Rewrite rules, indexed by the op they can match; the first rule that returns a new UOp wins.

  A rule is (pattern, function); the function gets the pattern's named UOps as keyword arguments, plus
  `ctx` when it asks for it. Returning None (or the node itself) means the rule does not apply."""
  def __init__(self, patterns: list[tuple[UPat, Callable]],
               _compiled: Optional[list[tuple[UPat, Callable, bool]]] = None):
    self.patterns = patterns
    if _compiled is None:
      for pattern, _ in patterns:
        if not isinstance(pattern, UPat): raise TypeError(f"pattern must be a UPat, got {pattern!r}")
      _compiled = [(pattern, fn, "ctx" in inspect.signature(fn).parameters) for pattern, fn in patterns]
    self.compiled = _compiled
    self.by_op: dict[Ops, list[tuple[UPat, Callable, set[Ops], bool]]] = {}
    for pattern, fn, wants_ctx in _compiled:
      for op in _ops_of(pattern):
        self.by_op.setdefault(op, []).append((pattern, fn, pattern.custom_early_reject, wants_ctx))

  def __add__(self, more: PatternMatcher) -> PatternMatcher:
    # reuses the signatures already inspected: adding matchers is cheap enough to do per call
    return PatternMatcher(self.patterns + more.patterns, self.compiled + more.compiled)

  def rewrite(self, uop: UOp, ctx=None) -> Optional[UOp]:
    rules = self.by_op.get(uop.op)
    if rules is None: return None
    source_ops = {s.op for s in uop.src}
    for pattern, fn, needs_ops, wants_ctx in rules:
      if not needs_ops <= source_ops: continue
      for bound in pattern.match(uop, {}):
        out = fn(ctx=ctx, **bound) if wants_ctx else fn(**bound)
        if out is None or out is uop: continue
        if TRACK_MATCH_STATS and tracked_rewrites:
          tracked_rewrites[-1][1].append((pattern.location + (getattr(fn, 'rule', ''),), uop, out))
        return out
    return None


# ***** rewrite tracking *****

tracked_rewrites: list[tuple[str, list[tuple[tuple[str, int], UOp, UOp]]]] = []


def named_rule(rule_id: str, title: str) -> Callable[[Callable], Callable]:
  """Decorator: a rewrite rule's id in SCHEDULER.md and a few words; the rewrite trace (`replay show --why`) names
  it."""
  def mark(fn: Callable) -> Callable:
    fn.rule = f"{rule_id} ({title})"   # type: ignore[attr-defined]
    return fn
  return mark


def record_decision(node: UOp, what: str, depth: int = 1, rule: str = "") -> None:
  """A scheduling decision that is not a pattern rewrite (realizing a node, releasing it), traced like one while
  TRACK_MATCH_STATS is on: under the rule that made it and the file:line of the code `depth` frames up."""
  if not (TRACK_MATCH_STATS and tracked_rewrites): return
  frame = inspect.currentframe()
  for _ in range(depth):
    if frame is not None: frame = frame.f_back
  where = ("?", 0, rule) if frame is None else (frame.f_code.co_filename, frame.f_lineno, rule)
  tracked_rewrites[-1][1].append((where, node, what))


def track_rewrites(name_fxn: Optional[Callable] = None):
  """Decorator: with TRACK_MATCH_STATS on, records every rule that fired inside the call under its name."""
  def decorator(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
      if not TRACK_MATCH_STATS: return func(*args, **kwargs)
      tracked_rewrites.append((func.__name__, []))
      out = func(*args, **kwargs)
      if name_fxn is not None: tracked_rewrites[-1] = (name_fxn(out), tracked_rewrites[-1][1])
      return out
    return wrapper
  return decorator


# ***** graph rewrite (iterative: no recursion, whatever the depth of the graph) *****

class _Rewriter:
  """Applies a PatternMatcher (or any function of a node: its replacement or None) to a graph to a fixed point;
  `done` remembers what every node became."""
  def __init__(self, pm: PatternMatcher | None, ctx=None, step: Optional[Callable[[UOp], Optional[UOp]]] = None):
    self.step = step if step is not None else (lambda u: pm.rewrite(u, ctx))   # type: ignore[union-attr]
    self.done: dict[UOp, UOp] = {}

  def _rebuilt(self, u: UOp) -> UOp:
    new_src = tuple(self.done[s] for s in u.src)
    return u if new_src == u.src else UOp(u.op, u.dtype, new_src, u.arg)

  def sources_first(self, root: UOp) -> UOp:
    """Rewrite the sources, then the node; whatever a rule returns is rewritten the same way."""
    # stack entries: (node, stage, result to wait for); stage 0 = visit sources, 1 = rewrite, 2 = adopt result
    stack: list[tuple[UOp, int, Optional[UOp]]] = [(root, 0, None)]
    while stack:
      u, stage, pending = stack.pop()
      if u in self.done: continue
      if stage == 0:
        stack.append((u, 1, None))
        stack.extend((s, 0, None) for s in reversed(u.src) if s not in self.done)
      elif stage == 1:
        rebuilt = self._rebuilt(u)
        result = self.step(u) if rebuilt is u else rebuilt
        if result is None: self.done[u] = u
        elif result in self.done: self.done[u] = self.done[result]
        else: stack.extend(((u, 2, result), (result, 0, None)))
      else: self.done[u] = self.done[pending]
    return self.done[root]

  def node_first(self, root: UOp) -> UOp:
    """Rewrite the node to a fixed point, then its sources; a node whose sources changed is rewritten again."""
    # stack entries: (original node, node after its own rules, whether its sources are done)
    stack: list[tuple[UOp, Optional[UOp], bool]] = [(root, None, False)]
    while stack:
      u, settled, sources_done = stack.pop()
      if u in self.done: continue
      if settled is None:
        settled, step = u, u
        while (step := self.step(settled)) is not None: settled = step
      if not sources_done:
        stack.append((u, settled, True))
        stack.extend((s, None, False) for s in reversed(settled.src) if s not in self.done)
        continue
      rebuilt = self._rebuilt(settled)
      if rebuilt is settled: self.done[u] = settled
      elif rebuilt in self.done: self.done[u] = self.done[rebuilt]
      else: stack.extend(((u, settled, True), (rebuilt, None, False)))
    return self.done[root]


def graph_rewrite(sink: UOp, pm: PatternMatcher, ctx=None, bottom_up: bool = False, name: str | None = None) -> UOp:
  rewriter = _Rewriter(pm, ctx)
  return rewriter.node_first(sink) if bottom_up else rewriter.sources_first(sink)


def graph_rewrite_map(sink: UOp, pm: PatternMatcher, ctx=None, bottom_up: bool = False,
                      name: str | None = None) -> dict[UOp, UOp]:
  """Rewrite the graph and return what every node of the input graph became."""
  rewriter = _Rewriter(pm, ctx)
  if not bottom_up:   # rewriting the sink visits every node of the graph once, sources first
    rewriter.sources_first(sink)
    return {u: rewriter.done[u] for u in reversed(list(sink.toposort))}
  return {u: rewriter.node_first(u) for u in reversed(list(sink.toposort))}


