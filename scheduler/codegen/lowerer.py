"""Lowering a kernel AST to a linear program: loops over the output axes, accumulator loops for each
REDUCE_AXIS, and loads and stores whose index and valid expressions come from the ShapeTracker,
simplified with the symbolic rules.

Sits between the scheduler (which makes the AST) and a renderer (`runtimes/cpu.py` renders C). The
program depends on nothing about the device: the same AST always lowers to the same instructions.
"""
from __future__ import annotations
import functools, math
from dataclasses import dataclass
from typing import Any, Optional
from scheduler.dtype import DType, dtypes
from scheduler.helpers import unwrap
from scheduler.ops import UOp, Ops, GroupOp, exact_key, identity_element, sint_to_uop
from scheduler.codegen.naming import kernel_name
from scheduler.shape.shapetracker import ShapeTracker


@dataclass(frozen=True)
class Instr:
  """One instruction; `src` holds the indices of earlier instructions."""
  op: Ops
  dtype: DType
  src: tuple[int, ...] = ()
  arg: Any = None


@dataclass
class Program:
  name: str
  instrs: list[Instr]
  globals: list[tuple[int, DType, int]]  # (index, element dtype, size)
  variables: list[tuple[str, int, int]]  # (name, min, max), the order of the kernel arguments after the buffers
  steps: float = math.inf                # iterations of the largest loop nest (inf when an extent is symbolic)

  def listing(self) -> str:
    return "\n".join(f"{i:4d} {x.op.name:<13} {x.dtype!r:<22} {list(x.src)!s:<16} {x.arg!r}"
                     for i, x in enumerate(self.instrs))


REDUCE_UNROLL = 4  # partial accumulators in the innermost reduce loop (a power of two)


class LoweringError(RuntimeError):
  """The AST has a form the lowerer does not know."""


class _Lowerer:
  def __init__(self, ast: UOp, vector_width: int):
    self.ast = ast
    self.vector_width = vector_width
    self.instrs: list[Instr] = []
    self.consts: dict[tuple, int] = {}
    self.scopes: list[dict[UOp, int]] = [{}]
    self.ranges: list[dict[int, int]] = [{}]
    self.vars: dict[str, int] = {}
    self.globals: dict[int, int] = {}
    self.bounds: dict[int, tuple[int, int]] = {}   # output axis -> (start, end) of the region being lowered
    self.computed: list[dict[tuple, int]] = [{}]    # pure instructions by content, one level per open loop
    self.accumulators: set[int] = set()

  def emit(self, op: Ops, dtype: DType, src: tuple[int, ...] = (), arg: Any = None) -> int:
    """Append an instruction; a pure one already computed in an open loop (and reading no accumulator) is reused:
    the lanes of an upcast compute the same index expressions and loads many times over."""
    key = None
    if op in _PURE and not any(s in self.accumulators for s in src):
      key = (op, dtype, src, exact_key(arg))   # one instruction for -0.0 and 0.0 made -0.0 + 0.0 into -0.0 + -0.0
      for level in reversed(self.computed):
        if (got := level.get(key)) is not None: return got
    self.instrs.append(Instr(op, dtype, src, arg))
    i = len(self.instrs) - 1
    if key is not None: self.computed[-1][key] = i
    if op is Ops.RANGE: self.computed.append({})
    elif op is Ops.ENDRANGE: self.computed.pop()
    elif op is Ops.DEFINE_ACC: self.accumulators.add(i)
    elif op is Ops.STORE:   # a later read of the stored buffer must load again
      for level in self.computed:
        for k in [k for k in level if k[0] is Ops.LOAD]: del level[k]
    return i

  def const(self, val, dtype: DType) -> int:
    key = (exact_key(val), dtype, type(val))
    if key not in self.consts: self.consts[key] = self.emit(Ops.CONST, dtype, (), val)
    return self.consts[key]

  def lookup(self, u: UOp) -> Optional[int]:
    for scope in reversed(self.scopes):
      if u in scope: return scope[u]
    return None

  def range_of(self, axis: int) -> int:
    for scope in reversed(self.ranges):
      if axis in scope: return scope[axis]
    raise LoweringError(f"axis {axis} has no loop in scope")

  # ***** index math *****

  def index_expr(self, u: UOp) -> int:
    """Emit an already simplified integer or bool expression over RANGEs and variables."""
    if (got := self.lookup(u)) is not None: return got
    for node in u.sources_first(lambda n: self.lookup(n) is None, lambda n: n.op in _INDEX_INNER):
      self._index_node(node)
    return unwrap(self.lookup(u))

  def _index_node(self, u: UOp) -> int:
    """One node of an index expression, whose sources are emitted already."""
    if u.op is Ops.CONST: ret = self.const(u.arg, u.dtype)
    elif u.op is Ops.RANGE: ret = self.range_of(u.arg)
    elif u.op is Ops.DEFINE_VAR: ret = self.variable(u)
    elif u.op in GroupOp.ALU or u.op is Ops.CAST:
      ret = self.emit(u.op, u.dtype, tuple(self.index_expr(s) for s in u.src), None)
    else: raise LoweringError(f"{u.op} in an index expression")
    self.scopes[-1][u] = ret
    return ret

  def variable(self, u: UOp) -> int:
    name = u.arg[0]
    if name not in self.vars: self.vars[name] = self.emit(Ops.DEFINE_VAR, u.dtype, (), u.arg)
    return self.vars[name]

  def view_uops(self, st: ShapeTracker) -> tuple[UOp, UOp]: return view_uops(st, tuple(self.bounds.items()))

  def view_exprs(self, st: ShapeTracker) -> tuple[int, int]:
    idx, valid = self.view_uops(st)
    return self.index_expr(idx), self.index_expr(valid)

  def define_global(self, g: UOp) -> int:
    if g.arg not in self.globals: self.globals[g.arg] = self.emit(Ops.DEFINE_GLOBAL, g.dtype, (), g.arg)
    return self.globals[g.arg]

  # ***** loops *****

  def open_loops(self, axes: list[int], shape: tuple) -> list[int]:
    self.scopes.append({})
    self.ranges.append({})
    opened = []
    for a in axes:
      start, end = self.bounds.get(a, (0, shape[a]))
      end_id = self.const(end, dtypes.int32) if isinstance(end, int) else self.index_expr(end.simplify())
      rng = self.emit(Ops.RANGE, dtypes.int32, (self.const(start, dtypes.int32), end_id), a)
      self.ranges[-1][a] = rng
      opened.append(rng)
    return opened

  def close_loops(self, opened: list[int]) -> None:
    for rng in reversed(opened): self.emit(Ops.ENDRANGE, dtypes.void, (rng,))
    self.scopes.pop()
    self.ranges.pop()

  # ***** values *****

  def value(self, u: UOp) -> int:
    if (got := self.lookup(u)) is not None: return got
    # elementwise chains emit sources first without recursion (in the order a recursive walk would emit them)
    for node in u.sources_first(lambda n: self.lookup(n) is None, lambda n: n.op in _VALUE_INNER):
      self._value_node(node)
    return unwrap(self.lookup(u))

  def _value_node(self, u: UOp) -> int:
    """One node of a kernel's expression, whose elementwise sources are emitted already."""
    op = u.op
    if op is Ops.CONST: ret = self.const(u.arg, u.dtype)
    elif op is Ops.DEFINE_VAR: ret = self.variable(u)
    elif op is Ops.VALID: ret = self.view_exprs(u.src[0].arg)[1]
    elif op is Ops.LOAD:
      idx, valid = self.view_exprs(u.src[1].arg)
      ret = self.emit(Ops.LOAD, u.dtype, (self.define_global(u.src[0]), idx, valid))
    elif op is Ops.REDUCE_AXIS: ret = self.reduce(u)
    elif op in GroupOp.ALU or op in (Ops.CAST, Ops.BITCAST):
      ret = self.emit(op, u.dtype, tuple(self.value(s) for s in u.src))
    else: raise LoweringError(f"cannot lower {op} inside a kernel")
    self.scopes[-1][u] = ret
    return ret

  def reduce(self, u: UOp) -> int: return self.reduce_lanes(u, [None])[0]

  def in_lane(self, lane: Optional["_Lane"], fn, ranges: Optional[dict[int, int]] = None,
              iteration: Optional[dict] = None):
    """Run fn with a lane's scope and ranges on top (None: the current ones), then, with `ranges`, a scope for
    values that hold only inside the current loop iteration (`iteration`, else a fresh one)."""
    pushed = 0
    if lane is not None:
      self.scopes.append(lane.scope)
      self.ranges.append(lane.ranges)
      pushed += 1
    if ranges is not None:
      self.scopes.append({} if iteration is None else iteration)
      self.ranges.append(ranges)
      pushed += 1
    try: return fn()
    finally:
      for _ in range(pushed):
        self.scopes.pop()
        self.ranges.pop()

  def reduce_lanes(self, u: UOp, lanes: list[Optional["_Lane"]],
                   vector: Optional[tuple[int, int]] = None) -> "list[int] | _Runs":
    """The reduce for each lane (one output element per lane, see `store_upcast`), in one loop nest: every lane
    keeps its own accumulators (one per unroll step; with many lanes only one, which changes the summation order
    of floats, not the sum). With `vector` (axis, width): the lanes come in runs of `width` along that axis, and a
    reduce that loads some input that differs along it accumulates each run as one vector (see `vector_value`):
    then the result is the runs' vectors (`_Runs`), which `lane_results` splits into lanes."""
    red_op, axes = u.arg
    in_shape = u.src[0].shape
    loop_axes = [a for a in axes if not _is_one(in_shape[a])]
    if red_op is Ops.ADD and len(loop_axes) == 1 and (counted := valid_count(u, loop_axes[0], in_shape)) is not None:
      return [self.in_lane(lane, lambda: self.counted(u.dtype, *counted)) for lane in lanes]
    runs = None
    if vector is not None and self.vectorizes(u, vector[0]):
      width = vector[1]
      runs = [lanes[i:i + width] for i in range(0, len(lanes), width)]
    dtype = u.dtype.vec(len(runs[0])) if runs else u.dtype
    identity = self.const(identity_element(red_op, u.dtype), u.dtype)
    if runs: identity = self.emit(Ops.VECTORIZE, dtype, (identity,) * dtype.count)
    inner = in_shape[loop_axes[-1]] if loop_axes else None
    unroll = REDUCE_UNROLL if isinstance(inner,
                                         int) and inner % REDUCE_UNROLL == 0 and inner >= 2 * REDUCE_UNROLL else 1
    if len(lanes) > MAX_UNROLLED_LANES: unroll = 1
    # the innermost reduce loop keeps `unroll` independent accumulators, so consecutive adds do not wait on each other
    accs = [[self.emit(Ops.DEFINE_ACC, dtype, (identity,)) for _ in range(unroll)] for _ in (runs or lanes)]

    def step(k: int, ranges: dict) -> None:
      """One step of the reduce into accumulator k of every lane (or run of lanes)."""
      if runs:
        for run, mine in zip(runs, accs):
          value = self.vector_value(u.src[0], run, ranges)
          self.emit(Ops.ASSIGN, dtype, (mine[k], self.emit(red_op, dtype, (mine[k], value))))
      else:
        for lane, mine in zip(lanes, accs): self.in_lane(lane, lambda: self.accumulate(u, red_op, mine[k]), ranges)
    opened = self.open_loops(loop_axes[:-1] if unroll > 1 else loop_axes, in_shape)
    if unroll == 1: step(0, {})
    else:
      last = loop_axes[-1]
      rng = self.emit(Ops.RANGE, dtypes.int32, (self.const(0, dtypes.int32), self.const(inner // unroll, dtypes.int32)),
                      last)
      base = self.emit(Ops.MUL, dtypes.int32, (rng, self.const(unroll, dtypes.int32)))
      for k in range(unroll): step(k, {last: self.emit(Ops.ADD, dtypes.int32, (base, self.const(k, dtypes.int32)))})
      self.emit(Ops.ENDRANGE, dtypes.void, (rng,))
    self.close_loops(opened)
    out = []
    for mine in accs:
      while len(mine) > 1: mine = [self.emit(red_op, dtype, (a, b)) for a, b in zip(mine[::2], mine[1::2])]
      out.append(mine[0])
    return _Runs(out) if runs else out

  def lane_results(self, red: UOp, runs: list[list["_Lane"]], vectors: list[int]) -> None:
    """Each lane's result of a reduce accumulated in vectors: its element of its run's vector."""
    for run, vector in zip(runs, vectors):
      for k, lane in enumerate(run): lane.scope[red] = self.emit(Ops.GEP, red.dtype, (vector,), k)

  def vectorizes(self, u: UOp, axis: int) -> bool:
    """Whether a reduce accumulates runs of lanes along `axis` as vectors: a float32 sum or product whose value
    loads some input that differs along that axis (contiguously: one vector load; else one load per lane, and the
    arithmetic still in vectors)."""
    if u.arg[0] not in (Ops.ADD, Ops.MUL) or u.dtype != dtypes.float32: return False
    return any(self.load_form(n, axis) != "same" for n in _vector_nodes(u.src[0]) if n.op is Ops.LOAD)

  def load_form(self, load: UOp, axis: int) -> str: return self.view_form(load.src[1].arg, axis)

  def view_form(self, st: ShapeTracker, axis: int) -> str:
    """How lanes along `axis` address a view: "same" (one element for all), "contiguous" (neighbouring elements, one
    validity for all) or "gather" (each lane its own)."""
    if axis >= len(st.shape) or _is_one(st.shape[axis]): return "same"
    idx, valid = self.view_uops(st)
    rng = _ranges(st.shape, self.bounds)[axis]
    if rng in valid.toposort: return "gather"
    if rng not in idx.toposort: return "same"
    terms = _terms(idx)
    if sum(1 for t in terms if t is rng) == 1 and not any(rng in t.toposort for t in terms if t is not rng):
      return "contiguous"
    return "gather"

  def vector_value(self, value: UOp, run: list["_Lane"], ranges: Optional[dict],
                   known: Optional[dict[UOp, int]] = None) -> int:
    """`value` for a run of lanes along the vector axis, as one vector: loads by their form along the axis, float32
    arithmetic, comparisons and choices as vector ops (see `_is_vector_op`), the vectors in `known` as they are,
    anything else per lane and put together. `ranges`: those of the reduce step (None outside reduce loops)."""
    axis = run[0].vector_axis
    iterations = [{} for _ in run]
    def per_lane(node: UOp) -> list[int]:
      return [self.in_lane(lane, lambda: self.value(node), ranges, it) for lane, it in zip(run, iterations)]
    done: dict[UOp, int] = dict(known or {})
    width = len(run)
    for node in _vector_nodes(value):
      if node in done: continue
      vector = node.dtype.vec(width)
      # one load for the run: an element all lanes share, or neighbouring float32 (a bool vector is one of ints)
      if node.op is Ops.LOAD and (form := self.load_form(node, axis)) != "gather" and (
          form == "same" or node.dtype == dtypes.float32):
        first = self.in_lane(run[0], lambda: self.value(node) if form == "same" else self.view_exprs(node.src[1].arg),
                             ranges, iterations[0])
        if form == "same": done[node] = self.emit(Ops.VECTORIZE, vector, (first,) * width)
        else: done[node] = self.emit(Ops.LOAD, vector, (self.define_global(node.src[0]), *first))
      elif node.op is Ops.CONST:
        done[node] = self.emit(Ops.VECTORIZE, vector, (self.const(node.arg, node.dtype),) * width)
      elif _is_vector_op(node): done[node] = self.emit(node.op, vector, tuple(done[s] for s in node.src))
      else: done[node] = self.emit(Ops.VECTORIZE, vector, tuple(per_lane(node)))
    return done[value]

  def counted(self, dtype: DType, count: UOp, value) -> int:
    """The closed form of a sum of `value` over `count` valid positions (see `valid_count`), in this lane's scope."""
    n = self.index_expr(count)
    if dtypes.is_int(dtype):
      n = self.emit(Ops.CAST, dtype, (n,)) if dtype != dtypes.int32 else n
      return n if value == 1 else self.emit(Ops.MUL, dtype, (n, self.const(value, dtype)))
    n = self.emit(Ops.CAST, dtype, (n,))
    return n if value == 1.0 else self.emit(Ops.MUL, dtype, (n, self.const(value, dtype)))

  def accumulate(self, u: UOp, red_op: Ops, acc: int) -> None:
    self.emit(Ops.ASSIGN, u.dtype, (acc, self.emit(red_op, u.dtype, (acc, self.value(u.src[0])))))

  def store(self, s: UOp) -> None:
    st: ShapeTracker = s.src[1].arg
    idx, valid = self.view_exprs(st)
    val = self.value(s.src[2])
    self.emit(Ops.STORE, dtypes.void, (self.define_global(s.src[0]), idx, valid, val))

  def store_upcast(self, s: UOp, axes: list[int], upcasts: list[tuple[int, int]]) -> None:
    """Output upcasting: the loops over the upcast axes step by their lane counts, and one iteration computes the
    whole tile of neighbouring outputs. Their reduces share one loop nest (an operand load that does not depend on
    an upcast axis serves every lane of it; the lanes' independent adds and loads along the unit-stride axis
    vectorize); then each lane stores."""
    shape = s.src[1].arg.shape
    upcast_axes = [axis for axis, _ in upcasts]
    opened = self.open_loops([a for a in axes if a not in upcast_axes], shape)
    lane_indices: list[list[tuple[int, int]]] = [[]]
    loops = []
    # the first upcast axis (unit stride) innermost: its lanes sit next to each other
    for axis, lanes in reversed(upcasts):
      start, end = self.bounds.get(axis, (0, shape[axis]))
      rng = self.emit(Ops.RANGE, dtypes.int32,
                      (self.const(0, dtypes.int32), self.const((end - start) // lanes, dtypes.int32)), axis)
      loops.append(rng)
      base = self.emit(Ops.MUL, dtypes.int32, (rng, self.const(lanes, dtypes.int32)))
      if start: base = self.emit(Ops.ADD, dtypes.int32, (base, self.const(start, dtypes.int32)))
      steps = [self.emit(Ops.ADD, dtypes.int32, (base, self.const(k, dtypes.int32))) for k in range(lanes)]
      lane_indices = [done + [(axis, step)] for done in lane_indices for step in steps]
    first_axis, first_lanes = upcasts[0]
    # runs as wide as the vectors allow and the lanes along the first axis divide (a wide vector of 8 serves 8 lanes)
    width = next((w for w in (self.vector_width, VECTOR_WIDTH) if first_lanes % w == 0), None)
    lane_list = [_Lane({}, dict(index), first_axis if width else None) for index in lane_indices]
    runs = [lane_list[i:i + width] for i in range(0, len(lane_list), width)] if width else []
    vectors: dict[UOp, list[int]] = {}
    reduces = [u for u in s.src[2].toposort if u.op is Ops.REDUCE_AXIS]
    for red in reduces:
      result = self.reduce_lanes(red, lane_list, (first_axis, width) if width else None)
      if isinstance(result, _Runs): vectors[red] = result.vectors
      else:
        for lane, scalar in zip(lane_list, result): lane.scope[red] = scalar
    if len(vectors) == len(reduces) and self.stores_runs(s, first_axis, set(vectors)):
      for i, run in enumerate(runs): self.store_run(s, run, {red: v[i] for red, v in vectors.items()})
    else:
      for red, run_vectors in vectors.items(): self.lane_results(red, runs, run_vectors)
      for lane in lane_list: self.in_lane(lane, lambda: self.store(s))
    for rng in reversed(loops): self.emit(Ops.ENDRANGE, dtypes.void, (rng,))
    self.close_loops(opened)


  def stores_runs(self, s: UOp, axis: int, reduces: set[UOp]) -> bool:
    """Whether each run of lanes stores one vector: the output is contiguous along the run, and what is stored is
    float32 vector arithmetic on the reduces' vectors and loads (nothing evaluated per lane reads a reduce)."""
    if s.src[2].dtype != dtypes.float32 or self.view_form(s.src[1].arg, axis) != "contiguous": return False
    leaves = [n for n in _vector_nodes(s.src[2]) if n not in reduces and not _is_vector_op(n)]
    return not any(u.op is Ops.REDUCE_AXIS for n in leaves for u in n.toposort)

  def store_run(self, s: UOp, run: list["_Lane"], known: dict[UOp, int]) -> None:
    """One run's outputs stored as one vector (see `stores_runs`), at the first lane's index."""
    idx, valid = self.in_lane(run[0], lambda: self.view_exprs(s.src[1].arg))
    value = self.vector_value(s.src[2], run, None, known)
    self.emit(Ops.STORE, dtypes.void, (self.define_global(s.src[0]), idx, valid, value))


@dataclass
class _Runs:
  """A reduce's result for runs of lanes: one vector per run, in the order of the runs."""
  vectors: list[int]


@dataclass
class _Lane:
  """One of the outputs an upcast loop iteration computes: its values so far and its index along each upcast axis."""
  scope: dict
  ranges: dict
  vector_axis: Optional[int] = None   # the axis along which runs of lanes accumulate as one vector


UPCAST_LANES = (8, 4)        # outputs per iteration along the first upcast axis: the first that divides its extent
SECOND_UPCAST_LANES = (4, 2)  # along a second output axis (a tile of up to 32 outputs)
MAX_UNROLLED_LANES = 8        # with more lanes than this, reduces keep one accumulator per lane (registers run out)
# Lanes per vector: four float32 are 16 bytes, the vector registers every x86-64 (SSE2) and arm64 (NEON) host has.
# A renderer may ask for wider vectors (`lower(ast, vector_width=8)`) for a host that has them (AVX2).
VECTOR_WIDTH = 4
# Upcasting multiplies a kernel's C source (and the compiler's time on it) by its lanes, and pays back only in run time:
# a kernel doing less work than this per run (output elements times reduce extent) is not upcast, as its loop runs in
# well under a millisecond either way while its build grows by 0.1-0.7 s. Nor is a kernel that draws random numbers:
# each lane would inline its own hash rounds, which no vectorizer packs.
UPCAST_MIN_WORK = 1 << 20


def upcast_choice(s: UOp, axes: list[int], bounds: Optional[dict[int, tuple[int, int]]] = None,
                  inside: bool = False) -> list[tuple[int, int]]:
  """[(axis, lanes)] to upcast for a store, at most two axes, or []: only stores that reduce, and only when every
  reduce's result varies along output axes alone (a reduce nested in another's loop is lowered where it is used).
  The first axis is the output's unit-stride axis when its extent allows, else the innermost axis that does; the
  second is the innermost other axis whose extent allows it. Not for small or random-drawing kernels (see
  UPCAST_MIN_WORK). `bounds` are the parts of axes being lowered (see `regions`): lanes must divide the part; when
  `inside` the interior, no read is masked along them."""
  bounds = bounds or {}
  shape = s.src[1].arg.shape
  value = s.src[2].toposort
  reduces = [u for u in value if u.op is Ops.REDUCE_AXIS]
  if not reduces or any(len(r.shape) != len(shape)
                        or any(not _is_one(d) and d != shape[a] for a, d in enumerate(r.shape)) for r in reduces):
    return []
  if any(u.op is Ops.THREEFRY for u in value) or max(_work(r.src[0].shape) for r in reduces) < UPCAST_MIN_WORK:
    return []
  def lanes_for(axis: int, choices: tuple) -> int:
    extent = bounds[axis][1] - bounds[axis][0] if axis in bounds else shape[axis]
    return next((n for n in choices if isinstance(extent, int) and extent % n == 0 and extent >= n), 1)
  strides = s.src[1].arg.real_strides()
  masked = _masked_axes(s.src[2], len(shape)) - (set(bounds) if inside else set())
  axes = [a for a in axes if a not in masked]
  chosen: list[tuple[int, int]] = []
  for axis in sorted(axes, key=lambda a: (strides[a] != 1, -a)):
    if (n := lanes_for(axis, UPCAST_LANES)) > 1:
      chosen.append((axis, n))
      break
  if chosen:
    for axis in sorted((a for a in axes if a != chosen[0][0]), key=lambda a: -a):
      if (n := lanes_for(axis, SECOND_UPCAST_LANES)) > 1:
        chosen.append((axis, n))
        break
  return chosen


@functools.lru_cache(maxsize=256)
def _masked_axes(value: UOp, ndim: int) -> frozenset[int]:
  """Output axes along which some read's validity changes (a padded input): each lane of such an axis would test its
  own mask on every step of the reduce, which keeps the lanes from sharing loads and from vectorizing."""
  views = [u.arg for u in value.toposort if u.op is Ops.VIEW and isinstance(u.arg, ShapeTracker) and
           any(v.mask is not None for v in u.arg.views)]
  return frozenset(axis for st in views for axis in range(min(ndim, len(st.shape))) if st.axis_is_masked(axis))


def regions(s: UOp, axes: list[int]) -> list[tuple[dict[int, tuple[int, int]], bool]]:
  """The parts of a store's output axes to lower one after another, as (bounds, inside the interior). The whole
  output, unless the unit-stride axis of an upcast-worthy store cannot be upcast as a whole: a padded read masks it,
  or no lane count divides its extent. Then its interior (where no mask cuts in), in runs of as many upcast lanes as
  fit, is lowered apart from the parts before and after it: the runs load without masks and upcast along the axis,
  the parts beside them are lowered as the whole output would be, so every element is computed the same way."""
  whole = [({}, False)]
  shape, strides = s.src[1].arg.shape, s.src[1].arg.real_strides()
  unit = [a for a in axes if strides[a] == 1 and isinstance(shape[a], int)]
  if not unit or ((chosen := upcast_choice(s, axes)) and chosen[0][0] == unit[0]): return whole
  axis = unit[0]
  span = interior(s, axis) if axis in _masked_axes(s.src[2], len(shape)) else (0, shape[axis])
  if span is None: return whole
  start, end = span
  # the interior in runs of the most lanes that fit, then of fewer lanes, so that the masked parts stay narrow
  inner, at = [], start
  for lanes in UPCAST_LANES:
    if (runs := (end - at) // lanes) and upcast_choice(s, axes, {axis: (at, at + runs * lanes)}, inside=True):
      inner.append(({axis: (at, at + runs * lanes)}, True))
      at += runs * lanes
  if not inner: return whole
  parts = [({axis: (0, start)}, False), *inner, ({axis: (at, shape[axis])}, False)]
  return [(bounds, inside) for bounds, inside in parts if bounds[axis][1] > bounds[axis][0]]


def interior(s: UOp, axis: int) -> Optional[tuple[int, int]]:
  """The indices along an output axis at which every masked read of the store is valid whatever the other indices
  are, as [start, end); None when a mask is no interval along the axis or the interval is empty."""
  extent = s.src[1].arg.shape[axis]
  start, end = 0, extent
  for st in {u.arg for u in s.src[2].toposort if u.op is Ops.VIEW and isinstance(u.arg, ShapeTracker)}:
    if axis >= len(st.shape) or all(v.mask is None for v in st.views): continue
    ranges = _ranges(st.shape)
    _, valid = view_uops(st)
    if ranges[axis].op is not Ops.RANGE or ranges[axis] not in valid.toposort: continue
    if (interval := _interval_of(valid, ranges[axis], sint_to_uop(extent))) is None: return None
    low, high, _ = interval
    if not (isinstance(low.vmax, int) and isinstance(high.vmin, int)): return None
    start, end = max(start, low.vmax), min(end, high.vmin)
  return (start, end) if start < end else None


def _is_one(s) -> bool: return isinstance(s, int) and s == 1


_INDEX_INNER = frozenset({*GroupOp.ALU, Ops.CAST})
_VALUE_INNER = frozenset({*GroupOp.ALU, Ops.CAST, Ops.BITCAST})
_PURE = frozenset({*GroupOp.ALU, Ops.CAST, Ops.BITCAST, Ops.LOAD, Ops.VECTORIZE, Ops.GEP})
_VECTOR_ALU = frozenset({Ops.ADD, Ops.MUL, Ops.SUB, Ops.NEG, Ops.FDIV, Ops.MAX, Ops.WHERE})


def _is_vector_op(n: UOp) -> bool:
  """Whether a node is computed on whole vectors: float32 arithmetic, a choice between float32 values (relu), and a
  comparison of float32 values (a vector of masks)."""
  if n.op in (Ops.CMPLT, Ops.CMPNE): return n.src[0].dtype == dtypes.float32
  return n.op in _VECTOR_ALU and n.dtype == dtypes.float32


def _vector_nodes(value: UOp) -> list[UOp]:
  """The nodes of `value` a vector evaluation visits, sources first: float32 vector ops and their sources; a node of
  any other op is a leaf (evaluated per lane)."""
  return list(value.sources_first(lambda n: True, _is_vector_op))




def _work(shape: tuple) -> float:
  """Iterations of a loop nest over `shape`; unbounded when an extent is symbolic (its value is known only at run)."""
  return math.prod(d if isinstance(d, int) else math.inf for d in shape)


@functools.lru_cache(maxsize=4096)
def view_uops(st: ShapeTracker, bounds: tuple = ()) -> tuple[UOp, UOp]:
  """A view's index and valid expressions over the RANGE nodes of its axes (see `_ranges`; `bounds`: (axis, (start,
  end)) pairs), simplified. The same for every lane, unroll step, part of the output and vector width of a kernel
  (and for kernels that share views): each is simplified once."""
  idx, valid = st.to_indexed_uops(_ranges(st.shape, dict(bounds)))
  return idx.simplify(), valid.simplify()


def _ranges(shape: tuple, bounds: Optional[dict[int, tuple[int, int]]] = None) -> list[UOp]:
  """The index of each axis of a view: the loop over it (RANGE with the axis as arg, from 0 to the extent or over the
  axis's `bounds`), or 0 for an axis of size 1."""
  bounds = bounds or {}
  return [UOp.const(dtypes.int32, 0) if _is_one(s)
          else UOp(Ops.RANGE, dtypes.int32, tuple(sint_to_uop(b) for b in bounds.get(i, (0, s))), i)
          for i, s in enumerate(shape)]


def valid_count(u: UOp, axis: int, shape: tuple) -> Optional[tuple[UOp, Any]]:
  """A sum over one axis of a constant where a view is valid (arange, cumsum and tril masks are such sums) is the
  constant times the number of valid positions: (that count as an index expression, the constant), to emit in
  closed form instead of a loop (linear, not quadratic, work). Only where that is exact: integer and bool constants,
  and float constants that are powers of two (or zero) over fewer than 2**24 positions; the valid range must be an
  interval of the reduce index. None for any other reduce."""
  src = u.src[0]
  if src.op is not Ops.WHERE or src.dtype != u.dtype: return None
  cond, value, zero = src.src
  if cond.op is not Ops.VALID or value.op is not Ops.CONST or zero.op is not Ops.CONST or zero.arg != 0: return None
  extent = shape[axis]
  if dtypes.is_float(u.dtype) and not (_exact_multiplier(value.arg) and isinstance(extent, int) and extent < 2 ** 24):
    return None
  if not (dtypes.is_int(u.dtype) or dtypes.is_float(u.dtype)): return None
  st: ShapeTracker = cond.src[0].arg
  ranges = _ranges(st.shape)
  if ranges[axis].op is not Ops.RANGE: return None
  _, valid = st.to_indexed_uops(ranges)
  interval = _interval_of(valid.simplify(), ranges[axis], sint_to_uop(extent))
  if interval is None: return None
  low, high, elsewhere = interval
  count = (high.minimum(sint_to_uop(extent)) - low.maximum(0)).maximum(0)
  if elsewhere is not None: count = elsewhere.where(count, 0)
  return count.simplify(), value.arg


def _exact_multiplier(value) -> bool:
  """Whether value * n equals n additions of value for every integer n < 2**24 (in float32 and wider)."""
  if value == 0: return True
  mantissa, _ = math.frexp(abs(value))
  return mantissa == 0.5 and math.isfinite(value)


def _flattened(x: UOp, op: Ops) -> list[UOp]:
  """The operands of a tree of `op` (an AND of conditions, an ADD of terms), left to right, without recursion."""
  out, todo = [], [x]
  while todo:
    u = todo.pop()
    if u.op is op: todo.extend(reversed(u.src[:2]))
    else: out.append(u)
  return out


def _conjuncts(cond: UOp) -> list[UOp]: return _flattened(cond, Ops.AND)


def _interval_of(valid: UOp, index: UOp, extent: UOp) -> Optional[tuple[UOp, UOp, Optional[UOp]]]:
  """`valid` as `low <= index < high` (and a condition not involving index), when every clause that involves the
  index is `index + rest < k` or its negation; None for any other shape."""
  lows, highs, others = [UOp.const(dtypes.int32, 0)], [extent], []
  for clause in _conjuncts(valid):
    if clause.op is Ops.CONST:
      if clause.arg: continue
      return UOp.const(dtypes.int32, 0), UOp.const(dtypes.int32, 0), None
    if index not in clause.toposort:
      others.append(clause)
      continue
    negated = clause.op is Ops.CMPNE and clause.src[1].op is Ops.CONST and clause.src[1].arg is True
    compare = clause.src[0] if negated else clause
    if compare.op is not Ops.CMPLT or index in compare.src[1].toposort: return None
    terms = _terms(compare.src[0])
    if sum(1 for t in terms if t is index) != 1 or any(index in t.toposort for t in terms if t is not index):
      return None
    bound = compare.src[1]
    for t in terms:
      if t is not index: bound = bound - t
    (lows if negated else highs).append(bound)
  low, high = lows[0], highs[0]
  for b in lows[1:]: low = low.maximum(b)
  for b in highs[1:]: high = high.minimum(b)
  elsewhere = None
  for clause in others: elsewhere = clause if elsewhere is None else (elsewhere & clause)
  return low, high, elsewhere


def _terms(x: UOp) -> list[UOp]: return _flattened(x, Ops.ADD)


def lower(ast: UOp, vector_width: int = VECTOR_WIDTH) -> Program:
  """The program of a kernel AST; runs of lanes accumulate in vectors of at most `vector_width` float32."""
  if ast.op is not Ops.SINK: raise LoweringError(f"only SINK kernels lower to programs, got {ast.op}")
  lw = _Lowerer(ast, vector_width)
  for g in sorted((u for u in ast.toposort if u.op is Ops.DEFINE_GLOBAL), key=lambda g: g.arg): lw.define_global(g)
  stores = [s for s in ast.src if s.op is Ops.STORE]
  for s in stores:
    out_shape = s.src[1].arg.shape
    axes = [i for i, d in enumerate(out_shape) if not _is_one(d)]
    for bounds, inside in regions(s, axes):
      lw.bounds = bounds
      if (upcasts := upcast_choice(s, axes, bounds, inside)):
        lw.store_upcast(s, axes, upcasts)
        continue
      opened = lw.open_loops(axes, out_shape)
      lw.store(s)
      lw.close_loops(opened)
    lw.bounds = {}
  globals_ = [(g.arg, g.dtype.base,
               g.dtype.size) for g in sorted({u for u in ast.toposort if u.op is Ops.DEFINE_GLOBAL},
                                             key=lambda g: g.arg)]
  variables = sorted({u.arg for u in ast.toposort if u.op is Ops.DEFINE_VAR} |
                     {v.arg for u in ast.toposort if u.op is Ops.VIEW for v in u.arg.vars() if v.op is Ops.DEFINE_VAR})
  steps = max((_work(u.arg.shape) for u in ast.toposort if u.op is Ops.VIEW), default=1)
  return Program(kernel_name(ast), lw.instrs, globals_, variables, steps)
