"""The kernel scheduler: the tensor graph of a `realize()` becomes an ordered list of kernels.

`create_schedule_with_vars(big_sink)` is capture point **schedule**. It runs the phases of
`../shared/spec/SCHEDULER.md` (S11) as named passes, each in its own module:

1. simplify the tensor graph (`sched_simplify`, S12-S32);
2. decide what gets a buffer and group reduces (`sched_grouping`, S33-S50);
3. form kernels, map tensors, order kernels (`sched_kernels`, S51-S61);
4. build each kernel's AST as its item is emitted (`sched_ast`, S62-S75).
"""
from __future__ import annotations
from dataclasses import dataclass
from scheduler import hooks
from scheduler.helpers import collection_paused
from scheduler.codegen.naming import kernel_kind
from scheduler.ops import UOp, Ops, buffers
from scheduler.sched_simplify import simplify_tensor_graph
from scheduler.sched_grouping import decide_realizes, group_reduces
from scheduler.sched_kernels import (ScheduleError, form_kernels, tensor_map_after, add_write_after_read_edges,
                                     order_kernels)
from scheduler.sched_ast import KernelAst

__all__ = ["ScheduleItem", "ScheduleError", "create_schedule_with_vars"]


@dataclass(frozen=True)
class ScheduleItem:
  """S3: one kernel (or COPY / BUFFER_VIEW) to run: its AST, its buffers (output first), call-site records."""
  ast: UOp
  bufs: tuple
  metadata: tuple = ()

  @property
  def kind(self) -> str: return kernel_kind(self.ast)


def create_schedule_with_vars(big_sink: UOp) -> tuple[list[ScheduleItem], dict[UOp, int], dict[UOp, UOp]]:
  """S2: (schedule items in order, variable values, what each tensor node becomes)."""
  with collection_paused(), hooks.capture_point("schedule", big_sink) as cap:
    result = _schedule(big_sink)
    cap.set_output(([si.ast for si in result[0]], result[1]))
  return result


def _schedule(big_sink: UOp) -> tuple[list[ScheduleItem], dict[UOp, int], dict[UOp, UOp]]:
  tensor_map = simplify_tensor_graph(big_sink)
  sink = tensor_map[big_sink]
  realizes = decide_realizes(sink)
  group_reduces(realizes)
  kernels = form_kernels(realizes, tensor_map)
  becomes = tensor_map_after(tensor_map, kernels)
  add_write_after_read_edges(kernels)
  var_vals: dict[UOp, int] = {}
  items: list[ScheduleItem] = []
  for kernel in order_kernels(sink, kernels):
    builder = KernelAst(kernel, kernels, var_vals)
    ast = builder.build()
    if ast.op is Ops.BUFFER_VIEW:   # S75: the output is a window into the input's memory
      source = builder.buffers[1].buffer
      buffers[builder.buffers[0]] = source.view(ast.arg[0], ast.dtype, ast.arg[1] * source.dtype.itemsize)
    items.append(ScheduleItem(ast, tuple(b.buffer for b in builder.buffers), kernel.metadata))
  return items, var_vals, becomes
