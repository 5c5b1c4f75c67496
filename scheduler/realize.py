"""Running a schedule: each ScheduleItem becomes a runnable item (a compiled kernel, a COPY, a
BUFFER_VIEW) and runs in order. Lowered programs are cached by device and AST key.

Sits between the scheduler and the runtimes.
"""
from __future__ import annotations
from typing import Callable
from scheduler.device import Device, Buffer
from scheduler.helpers import collection_paused
from scheduler.ops import UOp, Ops
from scheduler.codegen.naming import kernel_name


class KernelError(RuntimeError):
  """A kernel failed to compile or run; the message names the kernel and the device."""


_program_cache: dict[tuple[str, bytes], Callable] = {}
# counts of what ran in this process (the corpus runner prints them)
stats = {"kernels": 0}


def get_program(device: str, ast: UOp) -> Callable:
  key = (device, ast.key)
  if (prg := _program_cache.get(key)) is None:
    name = kernel_name(ast)
    try: prg = Device[device].compile(ast, name)
    except KernelError: raise
    except Exception as e:
      raise KernelError(f"kernel {name} failed to compile on {device}: {type(e).__name__}: {e}") from e
    _program_cache[key] = prg
  return prg


def _run_copy(dest: Buffer, src: Buffer) -> None:
  if dest.nbytes != src.nbytes:
    raise KernelError(f"COPY between buffers of different sizes: {src} -> {dest}")
  dest.ensure_allocated()
  dest.mem[:] = src.mem


def compile_ahead(schedule: list) -> None:
  """Build every kernel of the schedule that is not built yet before the first one runs, all of a device at once
  (the CPU device runs one compiler per core). A kernel that fails to build is left out: it fails, with its own
  message, when its turn comes."""
  todo: dict[str, dict[bytes, UOp]] = {}
  for si in schedule:
    if si.ast.op is Ops.SINK and (si.bufs[0].device, si.ast.key) not in _program_cache:
      todo.setdefault(si.bufs[0].device, {})[si.ast.key] = si.ast
  for device, asts in todo.items():
    if len(asts) < 2 or not hasattr(Device[device], "compile_many"): continue
    for ast, prg in zip(asts.values(), Device[device].compile_many(list(asts.values()))):
      if not isinstance(prg, Exception): _program_cache[(device, ast.key)] = prg


def run_schedule(schedule: list, var_vals: dict[UOp, int] | None = None) -> None:
  with collection_paused(): _run_schedule(schedule, var_vals or {})


def _run_schedule(schedule: list, var_vals: dict[UOp, int]) -> None:
  compile_ahead(schedule)
  written_here = {id(si.bufs[0]) for si in schedule}   # an item may read a buffer's old contents before its writer
  for si in schedule:
    if (pending := next((b for b in si.bufs[1:] if b.pending_write and id(b) not in written_here), None)) is not None:
      # a tensor's frontend names what the buffer is (the random generator's counter) where it knows
      what = pending.pending_write if isinstance(pending.pending_write, str) else "a buffer"
      raise RuntimeError(f"{kernel_name(si.ast) if si.ast.op is Ops.SINK else si.ast.op.name} reads {what}, which "
                         "another schedule computes, and that schedule has not run yet: run it first (run_schedule), "
                         "or use realize() instead of schedule()")
    stats["kernels"] += 1
    for b in si.bufs: b.ensure_allocated()
    ast = si.ast
    if ast.op is Ops.COPY: _run_copy(si.bufs[0], si.bufs[1])
    elif ast.op in (Ops.BUFFER_VIEW, Ops.EMPTY): pass  # views share their base's memory; EMPTY needs nothing
    elif ast.op is Ops.SINK:
      device = si.bufs[0].device
      prg = get_program(device, ast)
      try: prg(list(si.bufs), {k: v for k, v in var_vals.items()})
      except KernelError: raise
      except Exception as e:
        raise KernelError(f"kernel {kernel_name(ast)} failed on {device}: {type(e).__name__}: {e}") from e
    else: raise KernelError(f"cannot run a schedule item of kind {ast.op}")
    si.bufs[0].pending_write = False
