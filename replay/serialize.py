"""Serialization of capture payloads: pickle behind a format header, and a restricted unpickler
that builds only the compiler's own types, numpy arrays and plain Python values.

A database from an untrusted branch therefore cannot run code when it is loaded.
"""
from __future__ import annotations
import io, pickle
from typing import Any

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


class RestrictedUnpickler(pickle.Unpickler):
  def find_class(self, module: str, name: str) -> Any:
    if module == "builtins" and name in _SAFE_BUILTINS: return super().find_class(module, name)
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
