"""Replayers: re-run one captured input with the compiler that is on `sys.path` (the working tree, or a
base revision through the overlay) and compare the result with the captured output.

Runs inside a worker process. A capture that this revision cannot load or call is `Incompatible`.
"""
from __future__ import annotations
import os, tempfile, time
from typing import Any, Optional
from replay import buffers, serialize
from replay.compare import Comparison, compare_schedule, compare_kernel, compare_exec
from replay.serialize import NON_COMPILER_FLAGS



class Incompatible(Exception):
  """This revision cannot load or call the capture; the message says why."""


def load_payload(data: bytes) -> Any:
  try: return serialize.loads(data)
  except serialize.UnsafePickleError: raise
  except (ImportError, AttributeError, KeyError, TypeError, ValueError, EOFError) as e:
    raise Incompatible(f"cannot load the capture with this revision: {type(e).__name__}: {e}") from e


def _flag_context(flags: dict[str, int]):
  try: from scheduler.helpers import Context, ContextVar
  except ImportError as e: raise Incompatible(f"this revision has no flag registry: {e}") from e
  known = {k: v for k, v in flags.items() if k not in NON_COMPILER_FLAGS and k in ContextVar._cache}
  return Context(**known)


def flag_defaults() -> Optional[dict[str, int]]:
  """The default of every flag of the compiler under test (None when it cannot be imported)."""
  try:
    from scheduler.helpers import ContextVar
    return {name: var.default for name, var in sorted(ContextVar._cache.items())}
  except Exception: return None


def _fresh_buffers(graph, contents: Optional[dict] = None, tmpdir: Optional[str] = None, shared: Optional[dict[str, bytes]] = None):
  """The graph with every BUFFER replaced by a new one of this process (captured numbering would collide),
  filled with the captured contents where there are any. DISK files are replaced by temporary copies."""
  from scheduler.ops import UOp, Ops
  contents = contents or {}
  mapping: dict = {}
  # every DISK device a capture names (buffers it reads, copies it writes) becomes a temporary file: replaying a
  # database never touches a path the database chose
  disk_devices: dict[str, str] = {}
  for u in graph.toposort:
    if u.op is Ops.DEVICE and isinstance(u.arg, str) and u.arg.startswith("DISK:") and u.arg not in disk_devices:
      fd, path = tempfile.mkstemp(dir=tmpdir, suffix=".disk")
      os.close(fd)
      disk_devices[u.arg] = f"DISK:{path}"
      mapping[u] = u.replace(arg=disk_devices[u.arg])
  captured = [u for u in graph.toposort if u.op is Ops.BUFFER]
  taken = set(captured)
  for u in captured:
    device = disk_devices.get(u.device, u.device)
    # buffers are numbered per process: a new one may coincide with a captured one, which would merge the two
    while (new := UOp.new_buffer(device, u.size, u.dtype)) in taken: pass
    if u in contents:
      try: data = buffers.decode(contents[u], shared, u.size)
      except buffers.BufferEntryError as e: raise Incompatible(str(e)) from None
      new.buffer.allocate()
      new.buffer.copyin(data)
    mapping[u] = new
  return graph.substitute(mapping) if mapping else graph


def graph_of(inp: dict):
  """The tensor graph of a schedule or exec input (pickled once, shared by a realize and its schedule)."""
  return load_payload(inp["graph_pickle"]) if "graph_pickle" in inp else inp["graph"]


def run_schedule_capture(inp: dict) -> dict:
  from scheduler.schedule import create_schedule_with_vars
  sched, var_vals, _ = create_schedule_with_vars(_fresh_buffers(graph_of(inp)))
  return {"asts": [si.ast for si in sched], "var_vals": var_vals}


def run_kernel_capture(inp: dict) -> dict:
  from scheduler.device import Device
  device = Device[inp["device"]]
  src, prg = device.render(inp["ast"])
  out = {"src": src, "name": prg.name}
  if hasattr(device, "compile_options"): out["options"] = device.compile_options()
  return out


def run_exec_capture(inp: dict, shared: Optional[dict[str, bytes]] = None) -> dict:
  from scheduler.tensor import Tensor
  with tempfile.TemporaryDirectory(prefix="replay-disk-") as tmp:
    graph = _fresh_buffers(graph_of(inp), inp["buffers"], tmp, shared)
    tensors = [Tensor(s, device=s.device) for s in graph.src]
    Tensor.realize(*tensors)
    return {"outputs": [t.numpy() for t in tensors]}


def _package_path(filename: str) -> str:
  """A source file as `package/module.py` whatever tree it lives in (a worktree of the base, the current tree)."""
  parts = filename.replace("\\", "/").split("/")
  for i in range(len(parts) - 1, -1, -1):
    if parts[i] in ("scheduler", "runtimes"): return "/".join(parts[i:])
  return parts[-1]


def _node_text(u) -> str:
  if isinstance(u, str): return u
  try: shape = f" shape={tuple(u.shape)}" if u.st is not None else ""
  except Exception: shape = ""
  arg = f" {u.arg!r}" if u.op.name in ("CONST", "REDUCE_AXIS", "DEFINE_VAR") else ""
  return f"{u.op.name} {u.dtype!r}{shape}{arg}"


def trace_schedule(inp: dict) -> list[dict]:
  """Every rewrite rule application and realize decision of scheduling this graph, in order:
  {file, line, node, result}, with files as package paths so two trees compare."""
  from scheduler.schedule import create_schedule_with_vars
  from scheduler.helpers import Context
  from scheduler import ops
  ops.tracked_rewrites.append(("why", []))
  try:
    with Context(TRACK_MATCH_STATS=1): create_schedule_with_vars(_fresh_buffers(graph_of(inp)))
  finally: entries = ops.tracked_rewrites.pop()[1]
  return [{"file": _package_path(str(where[0])), "line": int(where[1]), "node": _node_text(node), "result": _node_text(out)}
          for where, node, out in entries]


RUNNERS = {"schedule": run_schedule_capture, "kernel": run_kernel_capture, "exec": run_exec_capture}
COMPARE = {"schedule": compare_schedule, "kernel": compare_kernel, "exec": compare_exec}


def replay_one(kind: str, input_data: bytes, output_data: bytes, flags: dict[str, int], tolerances: Optional[dict] = None,
               names: Optional[list] = None, trace: bool = False, shared: Optional[dict[str, bytes]] = None) -> dict:
  """One capture's outcome: {status, reason, diff, metrics, compiler_seconds}; with `trace`, a schedule or exec
  capture is scheduled once more with rewrite tracing and the outcome carries the trace."""
  t0 = time.perf_counter()
  if trace:
    try:
      with _flag_context(flags): return {"status": "same", "reason": "", "diff": "", "metrics": {}, "compiler_seconds": 0.0,
                                         "trace": trace_schedule(load_payload(input_data))}
    except Exception as e:
      return {"status": "error", "reason": f"cannot trace this capture: {type(e).__name__}: {e}", "diff": "", "metrics": {}, "compiler_seconds": 0.0}
  try:
    inp, captured = load_payload(input_data), load_payload(output_data)
    if kind == "exec":
      try: captured = buffers.decode_outputs(captured, shared)
      except buffers.BufferEntryError as e: raise Incompatible(f"captured output: {e}") from None
    load_s = time.perf_counter() - t0
    with _flag_context(flags):
      t1 = time.perf_counter()
      try: replayed = run_exec_capture(inp, shared) if kind == "exec" else RUNNERS[kind](inp)
      except (ImportError, AttributeError) as e: raise Incompatible(f"this revision cannot run the capture: {type(e).__name__}: {e}") from e
      compiler_s = time.perf_counter() - t1
    result: Comparison = compare_exec(captured, replayed, tolerances, names) if kind == "exec" else COMPARE[kind](captured, replayed)
    return {"status": result.status, "reason": "", "diff": result.diff, "metrics": result.metrics, "compiler_seconds": compiler_s, "load_seconds": load_s}
  except serialize.UnsafePickleError as e:
    return {"status": "incompatible", "reason": str(e), "diff": "", "metrics": {}, "compiler_seconds": 0.0}
  except serialize.PayloadFormatError as e:
    return {"status": "incompatible", "reason": str(e), "diff": "", "metrics": {}, "compiler_seconds": 0.0}
  except Incompatible as e:
    return {"status": "incompatible", "reason": str(e), "diff": "", "metrics": {}, "compiler_seconds": 0.0}
  except Exception as e:
    return {"status": "error", "reason": f"{type(e).__name__}: {e}", "diff": "", "metrics": {}, "compiler_seconds": 0.0}
