"""Scheduler phases 2 and 3 (SCHEDULER.md S33-S50): which nodes of the simplified graph get a buffer.

`decide_realizes(sink)` walks the graph once, sources first (S33), records who uses whom, and realizes
what must be realized (S34-S40). `group_reduces` then gives every reduce that is still unrealized exactly
one realized node that ends its kernel (S41-S50). The result is a `Realizes`: the realized set, in
traversal order, plus the relations kernel formation needs.
"""
from __future__ import annotations
from dataclasses import dataclass, field
from scheduler.helpers import prod, DONT_REALIZE_EXPAND, DONT_GROUP_REDUCES, FUSE_ARANGE, FUSE_CONV_BW
from scheduler.ops import UOp, Ops, GroupOp, resolve, record_decision
from scheduler.shape.shapetracker import ShapeTracker

BOUNDARY_OPS = frozenset({Ops.BUFFER, Ops.CONST, Ops.BIND, Ops.DEVICE, Ops.ASSIGN, Ops.SINK, Ops.CONTIGUOUS, Ops.COPY})
ALWAYS_REALIZED = frozenset({Ops.ASSIGN, Ops.CONTIGUOUS, Ops.COPY, Ops.BUFFER_VIEW})


def is_computed(u: UOp) -> bool:
  """A node that is neither a VIEW nor a boundary op: its value only exists if some kernel computes it."""
  return u.op is not Ops.VIEW and u.op not in BOUNDARY_OPS


@dataclass
class Realizes:
  order: list[UOp]                                                   # the simplified graph, sources first (S33)
  realized: dict[UOp, None] = field(default_factory=dict)            # the realized set, in the order nodes joined it
  releasable: set[UOp] = field(default_factory=set)                  # realized only before an expand or by grouping
  children: dict[UOp, dict[UOp, None]] = field(default_factory=dict)  # node -> users (directly or through one VIEW)
  assign_of_buffer: dict[UOp, UOp] = field(default_factory=dict)     # BUFFER -> the ASSIGN that writes it

  def realize(self, u: UOp, rule: str, releasable: bool = False) -> None:
    """Realize u by `rule` (its id and words, for the trace). Only nodes realized before an expand (S39) or by grouping
    (S48) may be released again (D3)."""
    if u in self.realized:
      if not releasable: self.releasable.discard(u)
      return
    self.realized[u] = None
    if releasable: self.releasable.add(u)
    record_decision(u, "realize", depth=2, rule=rule)

  def release(self, u: UOp, rule: str) -> None:
    self.realized.pop(u, None)
    self.releasable.discard(u)
    record_decision(u, "release", depth=2, rule=rule)


def _reads_of(user: UOp, node: UOp) -> list[ShapeTracker]:
  """The distinct view chains through which `user` reads `node` (its plain view when read directly)."""
  chains: dict[ShapeTracker, None] = {}
  for s in user.src:
    if s is node: chains[ShapeTracker.from_shape(node.shape)] = None
    elif s.op is Ops.VIEW and s.src[0] is node: chains[s.st] = None
  return list(chains)


# ***** S33-S40: realize decisions during one traversal *****

def _is_pad_safe(t: UOp, realized: dict[UOp, None]) -> bool:
  """S37: no pad-unsafe op under t, looking through views; the walk stops at nodes realized by now (Q1, Q2)."""
  seen: set[UOp] = set()
  todo = [t]
  while todo:
    u = todo.pop()
    if u in seen: continue
    seen.add(u)
    if u.op in GroupOp.UnsafePad: return False
    if u in realized: continue
    todo.extend(s.base for s in u.src)
  return True


def _view_decision(state: Realizes, view: UOp) -> None:
  """S37-S39 for a VIEW over a computed op."""
  t = view.src[0]
  chain = view.st
  if any(v.mask is not None for v in chain.views) and not _is_pad_safe(t, state.realized):
    state.realize(t, "S37 (unsafe padding)")
    return
  mask = chain.views[0].mask if len(chain.views) == 1 else None
  if mask is not None and all(isinstance(s, int) for s in t.shape):
    if resolve(prod(t.shape) >= prod(end - begin for begin, end in mask)): return   # S38
  if resolve(prod(t.shape) < prod(view.shape)) and not DONT_REALIZE_EXPAND:
    state.realize(t, "S39 (realize before expand)", releasable=True)


def decide_realizes(sink: UOp) -> Realizes:
  state = Realizes(order=list(sink.toposort))
  for u in state.order:
    if u.op is Ops.SINK:
      for s in u.src:
        if s.op not in BOUNDARY_OPS or s.op in ALWAYS_REALIZED: state.realize(s, "S34 (outputs)")
      continue
    if u.op is not Ops.VIEW:
      for s in u.src:
        used = s.src[0] if s.op is Ops.VIEW and s.src else s
        state.children.setdefault(used, {})[u] = None
    if u.op is Ops.ASSIGN: state.assign_of_buffer[u.src[0].base] = u
    if u.op in ALWAYS_REALIZED: state.realize(u, "S35 (always realized)")
    if u.op is Ops.COPY and is_computed(u.src[1]): state.realize(u.src[1], "S36 (copy source)")
    if u.op is Ops.VIEW and u.src and is_computed(u.src[0]): _view_decision(state, u)
  return state


# ***** S41-S50: reduce grouping *****

@dataclass
class _Search:
  """S43: the consumer search of one reduce."""
  reduce: UOp
  state: Realizes
  owner: dict[UOp, UOp]
  members: dict[UOp, None] = field(default_factory=dict)
  visited: set[tuple[UOp, ShapeTracker]] = field(default_factory=set)

  def run(self) -> None:
    r, n = self.reduce, self.reduce.size
    todo: list[tuple[UOp, ShapeTracker]] = [(r, ShapeTracker.from_shape(r.shape))]
    while todo:
      t, chain = todo.pop()
      if (t, chain) in self.visited: continue
      self.visited.add((t, chain))
      if t in self.state.realized and t is not r:
        self.members[t] = None
        if not chain.contiguous or chain.size != n or t in self.owner: self.members[r] = None
        continue
      next_steps = []
      for child in self.state.children.get(t, {}):
        reads = _reads_of(child, t)
        if child.op is Ops.REDUCE_AXIS or len(reads) > 1:
          self.members[r] = None
          break
        next_steps.append((child, chain + reads[0]))
      todo.extend(reversed(next_steps))   # depth first, children in order


def _input_reads_other_assign_target(r: UOp, member: UOp, state: Realizes) -> bool:
  """S45: r's own input reaches a BUFFER that an ASSIGN other than `member` overwrites."""
  seen: set[UOp] = set()
  todo = [r.src[0].base]
  while todo:
    u = todo.pop()
    if u in seen: continue
    seen.add(u)
    if u.op is Ops.BUFFER and (writer := state.assign_of_buffer.get(u)) is not None and writer is not member:
      return True
    if u in state.realized: continue
    todo.extend(s.base for s in u.src)
  return False


def _chase(r: UOp, state: Realizes) -> UOp:
  """S46, S47: follow single consumers over a contiguous same-size path; never store a widening cast."""
  current, chain = r, ShapeTracker.from_shape(r.shape)
  while len(users := state.children.get(current, {})) == 1:
    child = next(iter(users))
    reads = _reads_of(child, current)
    if len(reads) != 1 or reads[0].size != chain.size or child.op is Ops.REDUCE_AXIS: break
    composed = chain + reads[0]
    if not composed.contiguous: break
    current, chain = child, composed
  widening_cast = current.op is Ops.CAST and current.src[0].dtype.itemsize < current.dtype.itemsize
  return current.src[0].base if widening_cast else current


def group_reduces(state: Realizes) -> None:
  if DONT_GROUP_REDUCES: return                                                          # S41
  owner: dict[UOp, UOp] = {}                                  # member -> the reduce whose kernel it ends
  double_reduces: list[UOp] = []
  for r in (u for u in state.order if u.op is Ops.REDUCE_AXIS):                          # S42
    if FUSE_CONV_BW and r.src[0].op is Ops.VIEW and r.src[0].base.op is Ops.REDUCE_AXIS: double_reduces.append(r)
    if r in state.realized: continue
    search = _Search(r, state, owner)
    search.run()
    members = list(search.members)
    forced = r in search.members or len(members) > 1                                     # S44
    why = "S44 (forced)" if forced else "S46 (no member: chase)"
    can_chase = all(m not in owner for m in members)
    if (not forced and members and members[0].op is Ops.ASSIGN
        and _input_reads_other_assign_target(r, members[0], state)):
      forced, can_chase, why = True, False, "S45 (assign conflict)"
    if forced or not members:
      end = _chase(r, state) if can_chase else r
      state.realize(end, why, releasable=True)                                           # S48
      members = [end]
    owner[members[0]] = r
    if FUSE_ARANGE and r.arg[0] is Ops.ADD and r.src[0].base.op is Ops.CONST and state.children.get(members[0]):
      if members[0] in state.releasable: state.release(members[0], "S49 (FUSE_ARANGE)")   # (fixed D3)
  for outer in double_reduces:                                                           # S50
    inner = outer.src[0].base
    if len(state.children.get(inner, {})) == 1 and inner in state.releasable:
      state.release(inner, "S50 (FUSE_CONV_BW)")   # D4
