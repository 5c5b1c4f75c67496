"""Serialization of capture payloads: pickle behind a format header, and a restricted unpickler
that builds only the compiler's own types, numpy arrays and plain Python values.

A database from an untrusted branch therefore cannot run code when it is loaded.
"""
from __future__ import annotations
import io, pickle
from typing import Any
import numpy as np

# flags that say how to capture or debug, not how to compile: out of the content key, not re-applied on replay
NON_COMPILER_FLAGS = frozenset({"CAPTURE_PROCESS_REPLAY", "DEBUG", "TRACK_MATCH_STATS", "VIZ", "PICKLE_BUFFERS"})
# bump when the payload layout changes. PRPL2: (the payload's graph nodes in topological order, the payload), so that
# pickling a graph 100,000 nodes deep never recurses (each node's sources are already in pickle's memo); PRPL1: the
# payload alone (still read)
FORMAT = b"PRPL2\n"
READABLE = (FORMAT, b"PRPL1\n")
PROTOCOL = 4


class UnsafePickleError(pickle.UnpicklingError):
  """The payload names something replay refuses to build."""


class PayloadFormatError(ValueError):
  """The payload is not a capture payload of a format this harness reads."""


def dumps(obj: Any) -> bytes: return FORMAT + pickle.dumps((graph_nodes(obj), obj), protocol=PROTOCOL)


def _is_graph_node(x: Any) -> bool: return hasattr(x, "toposort") and isinstance(getattr(x, "src", None), tuple)


def graph_nodes(obj: Any) -> list:
  """Every graph node (UOp) reachable from the payload, sources before users; the payload's containers (dicts,
  lists, tuples, sets) are searched for graphs, without recursion."""
  roots, todo = [], [obj]
  while todo:
    x = todo.pop()
    if _is_graph_node(x): roots.append(x)
    elif isinstance(x, dict): todo.extend(reversed([*x.keys(), *x.values()]))
    elif isinstance(x, (list, tuple, set, frozenset)): todo.extend(reversed(list(x)))
  order: dict = {}
  for root in roots:
    for node in root.toposort:
      if node not in order: order[node] = None
  return list(order)


# the packages whose classes and reconstructors a payload may name; the replay overlay sets these
TRUSTED_PACKAGES: tuple[str, ...] = ("scheduler", "runtimes")
# the compiler's value types and the reconstructors their __reduce__ methods name; nothing that runs code
TRUSTED_NAMES = {"DType", "PtrDType", "View", "ShapeTracker", "Metadata", "Kernel", "ScheduleItem",
                 "_uop_from_name", "_op_by_name", "_dtype_by_name", "_rebuild_buffer"}
_SAFE_BUILTINS = {"set", "frozenset", "slice", "complex", "range", "bytearray", "tuple", "list", "dict", "int", "float", "bool", "str", "bytes"}
_SAFE_NUMPY = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"), ("numpy", "ndarray"), ("numpy", "dtype"),
               ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"), ("numpy.dtypes", None)}


# numpy values a payload may hold: plain numbers only. Object, structured or void dtypes would let crafted bytes
# become pointers (a crash, or worse, when the array is printed or freed), so they are refused before they exist.
_PLAIN_KINDS = frozenset("biufc")


def _plain(dtype: np.dtype) -> np.dtype:
  if dtype.kind not in _PLAIN_KINDS or dtype.fields is not None or dtype.subdtype is not None or dtype.hasobject:
    raise UnsafePickleError(f"capture payload holds numpy dtype {dtype.str!r}; only plain numeric dtypes are loaded")
  return dtype


def plain_dtype(spec, align=False, copy=True) -> np.dtype:
  if not isinstance(spec, str): raise UnsafePickleError(f"capture payload builds a numpy dtype from {type(spec).__name__}")
  try: dtype = np.dtype(spec)
  except TypeError as e: raise UnsafePickleError(f"capture payload names numpy dtype {spec!r}: {e}") from e
  return _plain(dtype)


class _PlainArray(np.ndarray):
  """What a payload's arrays are rebuilt as: the state is checked (dtype, size) before numpy applies it."""
  def __setstate__(self, state):
    if not isinstance(state, tuple) or len(state) != 5: raise UnsafePickleError("capture payload holds a malformed numpy array")
    _version, shape, dtype, _fortran, raw = state
    if not isinstance(dtype, np.dtype) or not isinstance(raw, (bytes, bytearray)): raise UnsafePickleError("malformed numpy array state")
    count = 1
    for extent in shape: count *= int(extent)
    if len(raw) != count * _plain(dtype).itemsize: raise UnsafePickleError("numpy array bytes do not match its shape and dtype")
    super().__setstate__(state)

  def __reduce__(self): return self.view(np.ndarray).__reduce__()   # pickled again, it is a plain array


def _plain_reconstruct(cls, shape, typecode):
  if cls is not np.ndarray: raise UnsafePickleError(f"capture payload rebuilds {cls!r}, not a numpy array")
  return np.ndarray.__new__(_PlainArray, shape, np.uint8)


def _plain_scalar(dtype, raw=b""):
  return np.frombuffer(raw, dtype=_plain(dtype), count=1)[0] if isinstance(dtype, np.dtype) else plain_dtype(dtype)


_NUMPY_FACTORIES = {"dtype": plain_dtype, "_reconstruct": _plain_reconstruct, "scalar": _plain_scalar}


class RestrictedUnpickler(pickle.Unpickler):
  def find_class(self, module: str, name: str) -> Any:
    if module == "builtins" and name in _SAFE_BUILTINS: return super().find_class(module, name)
    if (module, name) in _SAFE_NUMPY and name in _NUMPY_FACTORIES: return _NUMPY_FACTORIES[name]
    if (module, name) in _SAFE_NUMPY or (module == "numpy.dtypes" and name.endswith("DType")): return super().find_class(module, name)
    if module.split(".")[0] in TRUSTED_PACKAGES and name in TRUSTED_NAMES: return super().find_class(module, name)
    raise UnsafePickleError(f"capture payload refers to {module}.{name}, which replay does not load (only compiler types, numpy arrays "
                            "and plain values are allowed)")


def loads(data: bytes) -> Any:
  head = data[:len(FORMAT)]
  if head not in READABLE:
    if head.startswith(b"PRPL"):
      raise PayloadFormatError(f"payload format {head.strip()!r} is not one this harness reads ({', '.join(repr(f.strip()) for f in READABLE)})")
    raise PayloadFormatError("payload is not a capture payload (no format header)")
  value = RestrictedUnpickler(io.BytesIO(data[len(head):])).load()
  if head == b"PRPL1\n": return value
  if not isinstance(value, tuple) or len(value) != 2: raise PayloadFormatError("a PRPL2 payload is not a (nodes, payload) pair")
  return value[1]
