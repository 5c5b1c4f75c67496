"""Reading PyTorch checkpoints (`torch.save`'s zip format) without torch: `nn.state.torch_load` returns their tensors.

A checkpoint is a zip archive: `<name>/data.pkl` pickles the saved object (a state dict, or a dict holding one), its
tensors as calls of `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)`, each storage a persistent
id `("storage", <dtype>Storage, key, device, numel)` whose bytes are the entry `<name>/data/<key>`. The pickle is read
by an unpickler that builds only those calls and plain containers, so a checkpoint cannot run code. Stored entries
(torch does not compress them) become views of the file on the DISK device; compressed ones are read into memory.
"""
from __future__ import annotations
import collections, os, pathlib, pickle, struct, zipfile
from typing import Any
import numpy as np
from scheduler.dtype import DType, dtypes
from scheduler.helpers import prod
from scheduler.tensor import Tensor

STORAGE_DTYPES: dict[str, DType] = {
  "DoubleStorage": dtypes.float64, "FloatStorage": dtypes.float32, "HalfStorage": dtypes.float16,
  "BFloat16Storage": dtypes.bfloat16, "LongStorage": dtypes.int64, "IntStorage": dtypes.int32,
  "ShortStorage": dtypes.int16, "CharStorage": dtypes.int8, "ByteStorage": dtypes.uint8, "BoolStorage": dtypes.bool,
}


class TorchFileError(ValueError):
  """The file is not a PyTorch checkpoint this reader understands; the message says why."""


class _StorageType:
  def __init__(self, name: str): self.dtype = STORAGE_DTYPES[name]


class _Storage:
  """One storage of the archive: its dtype, element count and entry."""
  def __init__(self, dtype: DType, key: str, numel: int): self.dtype, self.key, self.numel = dtype, key, numel


class _TensorRecord:
  """A tensor as the pickle describes it; turned into a Tensor once the archive's entries are known."""
  def __init__(self, storage: _Storage, offset: int, size: tuple, stride: tuple):
    self.storage, self.offset, self.size, self.stride = storage, offset, tuple(size), tuple(stride)


def _rebuild_tensor(storage, storage_offset, size, stride, *_rest) -> _TensorRecord:
  if not isinstance(storage, _Storage): raise TorchFileError("a tensor's storage is not one of the archive's")
  return _TensorRecord(storage, int(storage_offset), size, stride)


def _rebuild_parameter(data, *_rest): return data   # a Parameter is its tensor here


class _OrderedDict(collections.OrderedDict):
  """torch pickles state dicts as OrderedDicts with attributes (`_metadata`); those are dropped."""
  def __setstate__(self, state): pass


_ALLOWED = {("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor, ("torch._utils", "_rebuild_parameter"):
            _rebuild_parameter, ("collections", "OrderedDict"): _OrderedDict}


class _Unpickler(pickle.Unpickler):
  def find_class(self, module: str, name: str):
    if module == "torch" and name in STORAGE_DTYPES: return _StorageType(name)
    if (module, name) in _ALLOWED: return _ALLOWED[(module, name)]
    if module == "torch" and name.endswith("Storage"):
      raise TorchFileError(f"storage type torch.{name} is not supported")
    raise TorchFileError(f"the checkpoint refers to {module}.{name}, which torch_load does not build")

  def persistent_load(self, pid):
    if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
      raise TorchFileError(f"unknown persistent id {pid!r:.80}")
    _, storage_type, key, _device, numel = pid
    if not isinstance(storage_type, _StorageType): raise TorchFileError(f"unknown storage type {storage_type!r:.80}")
    return _Storage(storage_type.dtype, str(key), int(numel))


def _entry_offset(path: str, info: zipfile.ZipInfo) -> int:
  """Where an entry's bytes start in the file: after its local header, whose name and extra field lengths may differ
  from the central directory's."""
  with open(path, "rb") as f:
    f.seek(info.header_offset)
    header = f.read(30)
  if len(header) < 30 or header[:4] != b"PK\x03\x04": raise TorchFileError(f"{info.filename}: damaged local header")
  name_length, extra_length = struct.unpack("<HH", header[26:30])
  return info.header_offset + 30 + name_length + extra_length


def _flat(file: Tensor, archive: zipfile.ZipFile, prefix: str, storage: _Storage, cache: dict) -> Tensor:
  """The storage as a flat Tensor of its dtype (a view of the file when its entry is stored uncompressed)."""
  if storage.key in cache: return cache[storage.key]
  name = f"{prefix}data/{storage.key}"
  try: info = archive.getinfo(name)
  except KeyError: raise TorchFileError(f"the archive has no entry {name}") from None
  nbytes = storage.numel * storage.dtype.itemsize
  if info.file_size < nbytes: raise TorchFileError(f"{name} holds {info.file_size} bytes, its storage needs {nbytes}")
  if info.compress_type == zipfile.ZIP_STORED:
    start = _entry_offset(archive.filename, info)
    raw = file[start:start + nbytes]
  else: raw = Tensor(np.frombuffer(archive.read(name)[:nbytes], dtype=np.uint8))
  flat = raw.bitcast(storage.dtype) if storage.dtype != dtypes.uint8 else raw
  cache[storage.key] = flat
  return flat


def _tensor(record: _TensorRecord, flat: Tensor) -> Tensor:
  """The strided view the record describes: contiguous (or a permutation of a contiguous layout) through movement
  ops, anything else through numpy (on the stored bits: numpy has no bfloat16)."""
  size, stride, count = record.size, record.stride, prod(record.size)
  if count == 0: return Tensor.zeros(*size, dtype=flat.dtype)
  order = sorted(range(len(size)), key=lambda a: -stride[a])
  expected, dense = 1, True
  for axis in reversed(order):
    if size[axis] != 1 and stride[axis] != expected: dense = False
    expected *= size[axis]
  if dense:
    block = flat[record.offset:record.offset + count].reshape(tuple(size[a] for a in order))
    return block.permute(tuple(order.index(a) for a in range(len(size))))
  stored = flat.bitcast(dtypes.uint16) if flat.dtype == dtypes.bfloat16 else flat
  values = stored.numpy()
  view = np.lib.stride_tricks.as_strided(values[record.offset:], size, tuple(s * values.itemsize for s in stride))
  out = Tensor(np.ascontiguousarray(view), dtype=stored.dtype)
  return out if stored is flat else out.bitcast(flat.dtype)


def load(fn: str | os.PathLike) -> dict[str, Any]:
  """The checkpoint's object with every tensor record made a Tensor; a dict at the top (a state dict)."""
  path = os.fspath(fn)
  if not zipfile.is_zipfile(path):
    raise TorchFileError(f"{path} is not a zip archive: only torch.save's zip format (PyTorch 1.6 and later) is read")
  with zipfile.ZipFile(path) as archive:
    pickles = [n for n in archive.namelist() if n.endswith("data.pkl") and n.count("/") == 1]
    if not pickles: raise TorchFileError(f"{path} has no <name>/data.pkl entry: not a PyTorch checkpoint")
    prefix = pickles[0][:-len("data.pkl")]
    if f"{prefix}byteorder" in archive.namelist() and archive.read(f"{prefix}byteorder").strip() != b"little":
      raise TorchFileError(f"{path} was saved big-endian; only little-endian checkpoints are read")
    try: obj = _Unpickler(archive.open(pickles[0])).load()
    except TorchFileError: raise
    except Exception as e:
      raise TorchFileError(f"{path}: its pickle cannot be read ({type(e).__name__}: {e})") from None
    cache: dict = {}
    file = Tensor(pathlib.Path(path), dtype=dtypes.uint8)   # one view of the file for every stored entry

    def build(x):
      if isinstance(x, _TensorRecord): return _tensor(x, _flat(file, archive, prefix, x.storage, cache))
      if isinstance(x, dict): return {k: build(v) for k, v in x.items()}
      if isinstance(x, (list, tuple)): return type(x)(build(v) for v in x)
      return x
    return build(obj)

