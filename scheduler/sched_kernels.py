"""Scheduler phases 4-6 (SCHEDULER.md S51-S61): kernels from the realized set, what each tensor becomes,
and the order the kernels run in.

The kernel graph is explicit data, not UOps: a `Kernel` holds its realized node, its output buffer and
its inputs, each input a plain BUFFER (read as it was before the schedule) or the realized node of
another kernel (read as that kernel's result). `order_kernels` adds the write-after-read edges the
reference misses (S57, D5), detects reading old and new contents of one buffer (S59) and assign cycles
(D10), and emits kernels in the reference's breadth-first order (S60).
"""
from __future__ import annotations
from collections import deque
from dataclasses import dataclass, field
from scheduler.helpers import all_int, dedup, DEBUG
from scheduler.ops import UOp, Ops, all_metadata
from scheduler.sched_grouping import Realizes


class ScheduleError(RuntimeError):
  """The tensor graph cannot be scheduled (an unsafe assign, a cycle, a conflicting variable)."""


@dataclass(eq=False)
class Kernel:
  node: UOp                      # the realized node this kernel computes
  buffer: UOp                    # the BUFFER it writes (an ASSIGN writes its target's buffer)
  inputs: list[UOp]              # S53 order: BUFFERs and realized nodes of other kernels
  metadata: tuple = ()
  # S57: kernels that must read `buffer` before this one writes
  readers_first: list[Kernel] = field(default_factory=list)

  @property
  def is_assign(self) -> bool: return self.node.op is Ops.ASSIGN


def _output_buffer(u: UOp) -> UOp:
  """S4: a fresh buffer for a realized node; a symbolic size allocates for the largest value allowed."""
  if u.op is Ops.ASSIGN: return u.src[0].base
  device = u.src[0].arg if u.op is Ops.COPY else u.device
  size = u.size if isinstance(u.size, int) else int(u.size.vmax)
  return UOp.new_buffer(device, size, u.dtype)


def _metadata_by_node(tensor_map: dict[UOp, UOp]) -> dict:
  """S54: frontend call-site records, moved from the tensor nodes to what they became."""
  found = {}
  for original, simplified in tensor_map.items():
    if original.base.op in (Ops.CONST, Ops.DEVICE): continue
    if (record := all_metadata.get(original)) is not None: found[simplified] = record
  return found


def form_kernels(realizes: Realizes, tensor_map: dict[UOp, UOp]) -> dict[UOp, Kernel]:
  """S51-S54: one kernel per realized node, with its buffer list and metadata."""
  records = _metadata_by_node(tensor_map)
  kernels: dict[UOp, Kernel] = {}
  for node in realizes.realized:
    def is_input(u: UOp) -> bool: return u.op in (Ops.BUFFER, Ops.ASSIGN) or (u in realizes.realized and u is not node)
    output = _output_buffer(node)
    metadata = [records[node]] if node in records else []
    entries: list[UOp] = [output, *node.src]
    while True:   # S53: expand every entry that is not an input into its sources, in place, until none is left
      expanded: list[UOp] = []
      for e in entries:
        if e is output or is_input(e): expanded.append(e)
        else:
          expanded.extend(e.src)
          if e in records and e.base.op not in (Ops.CONST, Ops.DEVICE): metadata.append(records[e])
      expanded = dedup(expanded)
      if expanded == entries: break
      entries = expanded
    kernels[node] = Kernel(node, output, [e for e in entries if e is not output], tuple(dedup(metadata)))
  return kernels


def buffer_of(u: UOp, kernels: dict[UOp, Kernel]) -> UOp:
  """The BUFFER holding the value of a kernel input."""
  return kernels[u].buffer if u in kernels else u.base


def tensor_map_after(tensor_map: dict[UOp, UOp], kernels: dict[UOp, Kernel]) -> dict[UOp, UOp]:
  """S56: what each tensor node denotes once the schedule has run."""
  becomes: dict[UOp, UOp] = {}
  for original, s in tensor_map.items():
    kernel = kernels.get(s.base)
    if s.op is Ops.ASSIGN: becomes[original] = s.src[0]          # S56.1: an assign denotes its target
    elif kernel is not None:
      if kernel.is_assign:
        target = kernel.node.src[0]
        becomes[original] = target if s is s.base else target.base.view(target.st + s.st)
      else:
        buf = kernel.buffer
        becomes[original] = buf if s.st == buf.st else buf.view(s.st)
    elif s is not original and (s.base.op is Ops.BUFFER or (s.base.op is Ops.CONST and all_int(s.shape))):
      becomes[original] = s
  return becomes


# ***** ordering *****

def _kernel_inputs(k: Kernel, kernels: dict[UOp, Kernel]) -> list[Kernel]:
  return dedup(kernels[u] for u in k.inputs if u in kernels)


def _depends_on(k: Kernel, target: Kernel, kernels: dict[UOp, Kernel]) -> bool:
  seen: set[int] = set()
  todo = _kernel_inputs(k, kernels)
  while todo:
    d = todo.pop()
    if d is target: return True
    if id(d) in seen: continue
    seen.add(id(d))
    todo.extend(_kernel_inputs(d, kernels))
  return False


def add_write_after_read_edges(kernels: dict[UOp, Kernel]) -> None:
  """S57, S59: a kernel that reads a buffer's old contents runs before the kernel that assigns to it."""
  assign_of = {k.buffer: k for k in kernels.values() if k.is_assign}
  for reader in kernels.values():
    for u in reader.inputs:
      if u.op is not Ops.BUFFER or (writer := assign_of.get(u)) is None or writer is reader: continue
      if _depends_on(reader, writer, kernels):
        raise ScheduleError(f"cycle detected in graph, kernel for {reader.buffer.arg} must either depend on ASSIGN or "
                            f"BUFFER (S59)")
      if reader not in writer.readers_first: writer.readers_first.append(reader)


def _traversal_order(roots: list[Kernel], kernels: dict[UOp, Kernel]) -> list[Kernel]:
  """S60: depth-first post-order: a kernel after its inputs (in buffer order) and its S57 readers."""
  order: list[Kernel] = []
  entered: set[int] = set()
  stack: list[tuple[Kernel, bool]] = [(k, False) for k in reversed(roots)]
  while stack:
    k, expanded = stack.pop()
    if expanded:
      order.append(k)
      continue
    if id(k) in entered: continue
    entered.add(id(k))
    stack.append((k, True))
    for dep in reversed(_kernel_inputs(k, kernels) + k.readers_first):
      if id(dep) not in entered: stack.append((dep, False))
  return order


def order_kernels(sink: UOp, kernels: dict[UOp, Kernel]) -> list[Kernel]:
  """S60, S61: Kahn's algorithm with a FIFO queue, seeded and fed in traversal order."""
  roots = dedup(kernels[s] for s in sink.src if s in kernels)
  traversal = _traversal_order(roots, kernels)
  position = {id(k): i for i, k in enumerate(traversal)}
  waiting_on: dict[int, int] = {}
  dependents: dict[int, list[Kernel]] = {}
  for k in traversal:
    deps = dedup(_kernel_inputs(k, kernels) + k.readers_first)
    waiting_on[id(k)] = len(deps)
    for d in deps: dependents.setdefault(id(d), []).append(k)
  queue = deque(k for k in traversal if waiting_on[id(k)] == 0)
  emitted: list[Kernel] = []
  while queue:
    k = queue.popleft()
    emitted.append(k)
    for child in sorted(dependents.get(id(k), []), key=lambda c: position[id(c)]):
      waiting_on[id(child)] -= 1
      if waiting_on[id(child)] == 0: queue.append(child)
  if len(emitted) != len(kernels):
    stuck = [k for k in traversal if waiting_on[id(k)] > 0 and k.is_assign]
    detail = (f"; these assigns each read what another overwrites: buffers {[k.buffer.arg for k in stuck]}" if stuck
              else "")
    raise ScheduleError(f"cycle detected in graph, created {len(kernels)} kernels but only scheduled "
                        f"{len(emitted)}{detail}")
  if DEBUG >= 1 and len(emitted) >= 10: print(f"scheduled {len(emitted)} kernels")
  return emitted
