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
FORMAT = b"PRPL1\n"  # bump when the payload layout changes
PROTOCOL = 4


class UnsafePickleError(pickle.UnpicklingError):
  """The payload names something replay refuses to build."""


class PayloadFormatError(ValueError):
  """The payload is not a capture payload of a format this harness reads."""


def dumps(obj: Any) -> bytes: return FORMAT + pickle.dumps(obj, protocol=PROTOCOL)


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
  if not data.startswith(FORMAT):
    head = data[:len(FORMAT)]
    if head.startswith(b"PRPL"): raise PayloadFormatError(f"payload format {head.strip()!r} is not the {FORMAT.strip()!r} this harness reads")
    raise PayloadFormatError("payload is not a capture payload (no format header)")
  return RestrictedUnpickler(io.BytesIO(data[len(FORMAT):])).load()
