"""Model state: parameters and state dicts by attribute path, safetensors files (written with plain file I/O, read
back through the DISK device), PyTorch checkpoints (read only, `nn/torch_file.py`) and tar archives (read only)."""
from __future__ import annotations
import io, json, os, pathlib, struct, tarfile
from typing import Any, Iterable, Optional
from scheduler.tensor import Tensor
from scheduler.dtype import dtypes
from scheduler.nn import torch_file

_ST_DTYPES = {"F64": dtypes.float64, "F32": dtypes.float32, "F16": dtypes.float16, "BF16": dtypes.bfloat16,
              "I64": dtypes.int64,
              "I32": dtypes.int32,
              "I16": dtypes.int16, "I8": dtypes.int8, "U64": dtypes.uint64, "U32": dtypes.uint32, "U16": dtypes.uint16,
              "U8": dtypes.uint8,
              "BOOL": dtypes.bool}
_ST_NAMES = {v: k for k, v in _ST_DTYPES.items()}


def _children(obj: Any) -> Optional[Iterable[tuple[Any, Any]]]:
  """(name, value) pairs of a container or object, or None for a leaf that holds no tensors."""
  if hasattr(obj, "_asdict"): obj = obj._asdict()   # namedtuples by field name
  if isinstance(obj, dict): return obj.items()
  if isinstance(obj, (list, tuple)): return enumerate(obj)
  return vars(obj).items() if hasattr(obj, "__dict__") else None


def get_state_dict(obj: Any, prefix: str = "") -> dict[str, Tensor]:
  """Every Tensor reachable from obj by attributes, dict keys and list indices, named by its dotted path."""
  found: dict[str, Tensor] = {}
  todo: list[tuple[str, Any]] = [(prefix.rstrip("."), obj)]
  while todo:
    path, value = todo.pop()
    if isinstance(value, Tensor):
      found[path] = value
      continue
    children = _children(value)
    if children is None: continue
    todo.extend(reversed([(f"{path}.{name}" if path else str(name), child) for name, child in children]))
  return found


def get_parameters(obj: Any) -> list[Tensor]: return list(get_state_dict(obj).values())


def load_state_dict(model: Any, state_dict: dict[str, Tensor], strict: bool = True) -> None:
  model_state = get_state_dict(model)
  if strict and (missing := sorted(set(model_state) - set(state_dict))):
    raise KeyError(f"state dict is missing {missing}")
  for k, v in model_state.items():
    if k not in state_dict: continue
    if v.shape != state_dict[k].shape:
      raise ValueError(f"shape mismatch for {k}: model {v.shape} vs state dict {state_dict[k].shape}")
    v.replace(state_dict[k].to(v.device).cast(v.dtype).contiguous()).realize()


def safe_save(tensors: dict[str, Tensor], fn: str | os.PathLike, metadata: Optional[dict[str, str]] = None) -> None:
  header: dict[str, Any] = {}
  offset, blobs = 0, []
  for name, t in tensors.items():
    if t.dtype not in _ST_NAMES: raise ValueError(f"safetensors has no dtype for {t.dtype} ({name})")
    data = (t.bitcast(dtypes.uint16) if t.dtype == dtypes.bfloat16 else t).numpy().tobytes()   # bfloat16's bits
    header[name] = {"dtype": _ST_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
    blobs.append(data)
    offset += len(data)
  if metadata: header["__metadata__"] = metadata
  j = json.dumps(header, separators=(",", ":"))
  j += " " * ((8 - len(j) % 8) % 8)
  with open(fn, "wb") as f:
    f.write(struct.pack("<Q", len(j)) + j.encode())
    for b in blobs: f.write(b)


def safe_load_metadata(fn: str | os.PathLike) -> tuple[Tensor, int, dict[str, Any]]:
  t = Tensor(pathlib.Path(fn), dtype=dtypes.uint8)
  if t.shape[0] < 8: raise ValueError(f"{fn} is too short to be a safetensors file")
  json_len = t[0:8].bitcast(dtypes.int64).item()
  if json_len > t.shape[0] - 8: raise ValueError(f"{fn}: header length {json_len} exceeds the file")
  return t, json_len, json.loads(t[8:8 + json_len].numpy().tobytes())


def safe_load(fn: str | os.PathLike) -> dict[str, Tensor]:
  t, json_len, metadata = safe_load_metadata(fn)
  out = {}
  for k, v in metadata.items():
    if k == "__metadata__": continue
    dtype = _ST_DTYPES[v["dtype"]]
    start, end = v["data_offsets"]
    out[k] = t[8 + json_len + start:8 + json_len + end].bitcast(dtype).reshape(v["shape"])
  return out


def torch_load(fn: str | os.PathLike) -> dict[str, Tensor]:
  """The tensors of a `torch.save` checkpoint (a state dict, or whatever dict was saved), without torch."""
  return torch_file.load(fn)


def tar_extract(source: "Tensor | str | os.PathLike") -> dict[str, Tensor]:
  """The regular files of an uncompressed tar archive by name, as uint8 tensors: views of the file on the DISK device
  when `source` is a path (or a DISK tensor of one), slices of the tensor otherwise."""
  if isinstance(source, Tensor):
    data = source if source.dtype == dtypes.uint8 else source.bitcast(dtypes.uint8)
    name, opened = "the tensor", lambda: tarfile.open(fileobj=io.BytesIO(data.numpy().tobytes()), mode="r:")
  else:
    data = Tensor(pathlib.Path(source), dtype=dtypes.uint8)
    name, opened = os.fspath(source), lambda: tarfile.open(os.fspath(source), mode="r:")
  try:
    with opened() as archive: members = archive.getmembers()
  except tarfile.TarError as e: raise ValueError(f"{name} is not an uncompressed tar archive ({e})") from None
  return {m.name: data[m.offset_data:m.offset_data + m.size] for m in members if m.isfile()}
