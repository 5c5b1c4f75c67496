"""The replay contract: the whole surface the replay harness (`replay/`) uses of this compiler, in one module.

The harness imports this module and nothing else of the compiler (a test reads its imports). Everything it needs goes
through here: the flag registry, the reconstructors that capture payloads name when they are pickled, rebuilding a
captured graph's buffers, scheduling, rendering and realizing a captured graph, naming kernels and tracing the rules
of a schedule. Internal modules can be renamed or split freely; this module's names are the stable part, and a
capture records `VERSION` so that a revision that cannot read it says so (`READS`).

Imports of the compiler are inside the functions: this module registers the reconstructors its types pickle as
(`helpers.RECONSTRUCTORS`, read by the lower layers, which never import upward), so it loads before them.
"""
from __future__ import annotations
import contextlib, os, tempfile
from typing import Any, Callable, Iterator, Optional
# the bottom layer: it loads nothing else of the compiler
from scheduler.helpers import RECONSTRUCTORS, Context, ContextVar

# the contract's version: bump when a name below changes meaning; `READS` lists the versions this revision can replay
VERSION = 1
READS = frozenset({1})
# the reconstructors a capture payload may name (the restricted unpickler builds nothing else of the compiler)
PICKLABLE = frozenset({"uop", "op", "dtype", "ptr_dtype", "view", "shape_tracker", "metadata", "buffer"})


# ***** reconstructors: what the compiler's types pickle as *****

def uop(op_name: str, dtype, src: tuple, arg: Any, buffer: Any = None):
  from scheduler.ops import UOp, Ops
  return UOp(Ops[op_name], dtype, src, arg, _buffer=buffer)


def op(name: str):
  from scheduler.ops import Ops
  return Ops[name]


def dtype(name: str, fields: Optional[tuple] = None):
  """A dtype by name; one the registry does not know (a vector type) from its fields."""
  from scheduler.dtype import DType, _dtype_by_name
  return _dtype_by_name(name) if fields is None else DType(*fields)


def ptr_dtype(fields: tuple, base, size: int):
  from scheduler.dtype import PtrDType
  return PtrDType(*fields, base, size)


def view(shape: tuple, strides: tuple, offset, mask: Optional[tuple], contiguous: bool):
  from scheduler.shape.view import View
  return View(shape, strides, offset, mask, contiguous)


def shape_tracker(views: tuple):
  from scheduler.shape.shapetracker import ShapeTracker
  return ShapeTracker(views)


def metadata(name: str, caller: str = "", backward: bool = False):
  from scheduler.helpers import Metadata
  return Metadata(name, caller, backward)


def buffer(device: str, size: int, dtype_name: str, data):
  from scheduler.device import Buffer
  from scheduler.dtype import _dtype_by_name
  import numpy as np
  buf = Buffer(device, size, _dtype_by_name(dtype_name))
  if data is not None: buf.allocate(np.array(data, copy=True))
  return buf


RECONSTRUCTORS.update({name: globals()[name] for name in PICKLABLE})


def graph_rows(nodes: list) -> tuple[str, int, list[tuple]]:
  """Graph nodes listed sources first, as a capture payload's flat node table: (the reconstructor above that builds
  every row, the position of a row's sources, the rows: each node's reconstructor arguments with its sources as
  distances back in the list). Optional: the harness pickles node by node for a compiler without it."""
  from scheduler.ops import graph_rows as rows
  return rows(nodes)


# ***** flags *****

def flag_defaults() -> dict[str, int]:
  """Every flag and its default (what it is without an environment variable)."""
  return {name: var.default for name, var in sorted(ContextVar._cache.items())}


def flag_values() -> dict[str, int]:
  """Every flag and its value now (in this thread)."""
  return ContextVar.snapshot()


def flag_items() -> tuple[tuple[str, int], ...]:
  """`flag_values` as (name, value) pairs sorted by name, the same tuple object until a flag changes."""
  return ContextVar.frozen()


def flags_applied(flags: dict[str, int]):
  """A context manager that sets the flags this revision knows for a block (unknown names are skipped: a flag the
  capturing revision had and this one has not)."""
  return Context(**{name: value for name, value in flags.items() if name in ContextVar._cache})


def without_pickled_buffers():
  """A block in which pickling a graph leaves out buffer contents (a capture stores them apart)."""
  return Context(PICKLE_BUFFERS=0)


def enable_capture() -> None:
  """Turn capture on in a process that has already imported the compiler (the pytest plugin)."""
  from scheduler.helpers import CAPTURE_PROCESS_REPLAY
  CAPTURE_PROCESS_REPLAY.value = 1


# ***** graphs and buffers *****

def graph_buffers(graph) -> Iterator[tuple[Any, int, str, int, Callable]]:
  """The realized buffers a graph reads: (node, elements, dtype name, bytes, read() -> flat numpy array). The array is
  the buffer's own memory, not a copy: the harness copies what it keeps before anything runs. A DISK buffer holds its
  file's bytes even before anything maps it."""
  from scheduler.ops import Ops
  for u in graph.toposort:
    if u.op is not Ops.BUFFER: continue
    if u.device.startswith("DISK:") and u.realized is None: u.buffer.ensure_allocated()
    if (buf := u.realized) is not None: yield u, buf.size, buf.dtype.name, buf.nbytes, buf.as_array


def structural_key(node) -> str:
  """A key that graphs built alike share, in any process: the key the compiler finds its compiled programs by."""
  return node.key.hex()


def fresh_buffers(graph, contents: Optional[dict] = None, decode: Optional[Callable] = None,
                  tmpdir: Optional[str] = None):
  """The graph with every BUFFER replaced by a new one of this process (captured numbering would collide), filled with
  `decode(contents[node], elements)` where there are contents. DISK files become temporary files in `tmpdir`: a replay
  never touches a path the capture chose."""
  from scheduler.ops import UOp, Ops
  contents = contents or {}
  mapping: dict = {}
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
    if u in contents and decode is not None:
      data = decode(contents[u], u.size)
      new.buffer.allocate()
      new.buffer.copyin(data)
    mapping[u] = new
  return graph.substitute(mapping) if mapping else graph


# ***** the three captured calls, run again *****

def schedule(graph) -> tuple[list, dict]:
  """The kernel ASTs and variable values of scheduling a tensor graph."""
  from scheduler.schedule import create_schedule_with_vars
  items, var_vals, _ = create_schedule_with_vars(graph)
  return [si.ast for si in items], var_vals


def render(device_name: str, ast) -> dict:
  """The source a device renders for a kernel AST: {src, name, options (the compiler's command line, if any)}."""
  from scheduler.device import Device
  device = Device[device_name]
  src, program = device.render(ast)
  out = {"src": src, "name": program.name}
  if hasattr(device, "compile_options"): out["options"] = device.compile_options()
  return out


def realize(graph) -> list:
  """Realize every output of a captured exec graph (a SINK of the outputs): their values as numpy arrays."""
  from scheduler.tensor import Tensor
  tensors = [Tensor(s, device=s.device) for s in graph.src]
  Tensor.realize(*tensors)
  return [t.numpy() for t in tensors]


# ***** reading what the compiler did *****

def kernel_name(ast) -> str:
  from scheduler.codegen.naming import kernel_name as name_of
  return name_of(ast)


def kernel_kind(ast) -> str:
  from scheduler.codegen.naming import kernel_kind as kind_of
  return kind_of(ast)


def describe(node) -> str:
  """One line about a graph node for a trace: op, dtype, shape, and the arg where it says what the node is."""
  if isinstance(node, str): return node
  try: shape = f" shape={tuple(node.shape)}" if node.st is not None else ""
  except Exception: shape = ""
  arg = f" {node.arg!r}" if node.op.name in ("CONST", "REDUCE_AXIS", "DEFINE_VAR") else ""
  return f"{node.op.name} {node.dtype!r}{shape}{arg}"


@contextlib.contextmanager
def traced_rules() -> Iterator[list]:
  """A block whose rule applications and realize decisions are recorded: the list yielded is filled, when the block
  ends, with (file, line, rule, node, result) in order; `rule` is the rule's id (`S17`) where it has one, else ''."""
  from scheduler import ops
  from scheduler.helpers import Context
  found: list = []
  ops.tracked_rewrites.append(("trace", []))
  try:
    with Context(TRACK_MATCH_STATS=1): yield found
  finally:
    for where, node, result in ops.tracked_rewrites.pop()[1]:
      found.append((str(where[0]), int(where[1]), str(where[2]) if len(where) > 2 else "", node, result))


# ***** reducing a graph (`replay reduce`) *****

def reduction():
  """The primitives that cut a graph down and write it as a program (`scheduler/reproducer.py`): cut_points,
  as_input, refilled, bypasses, outputs, with_outputs, substitute, size, elements, extents, resized,
  constants, with_constant, program."""
  from scheduler import reproducer
  return reproducer
