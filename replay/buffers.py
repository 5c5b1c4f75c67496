"""How buffer contents sit in exec payloads: inline (small arrays), as one value (a constant fill), or as a
reference to a blob of their own (large arrays, stored once for every capture that holds the same contents: the
training data of every step, the weights one step writes and the next reads).

`encode` is called while capturing (`replay/capture.py`), `decode` wherever a payload is read (the replay
workers, `--rerun`, `replay show`). The blobs a payload refers to are kept per capture by `db/` (`capture_blobs`).
"""
from __future__ import annotations
import hashlib
from typing import Any, Optional
import numpy as np
from replay import serialize

# arrays of at least this many bytes are blobs of their own; below it a blob row costs more than it saves
SHARED_BYTES = 1024


class BufferEntryError(ValueError):
  """A buffer entry that cannot be turned back into an array (missing blob, wrong size, unknown form)."""


def encode(data: np.ndarray, shared: dict[str, bytes]) -> Any:
  """The payload entry of one array; blobs it refers to are added to `shared` (sha256 -> bytes)."""
  flat = np.ascontiguousarray(data).reshape(-1)
  shape = tuple(int(d) for d in np.shape(data))
  # the first two values tell most arrays from a fill before the whole array is compared (which costs more than
  # hashing it)
  if flat.size > 1 and flat[:1].tobytes() == flat[1:2].tobytes():
    rows = flat.view(np.uint8).reshape(flat.size, flat.dtype.itemsize)
    if (rows == rows[0]).all():
      return {"fill": flat[:1].copy(), "size": int(flat.size), "shape": shape}   # bitwise: NaN, -0.0 kept
  if flat.nbytes < SHARED_BYTES: return data
  raw = flat.tobytes()
  sha = hashlib.sha256(raw).hexdigest()
  shared[sha] = raw
  return {"blob": sha, "dtype": flat.dtype.str, "size": int(flat.size), "shape": shape}


def decode(entry: Any, shared: Optional[dict[str, bytes]] = None, size: Optional[int] = None) -> np.ndarray:
  """The array an entry stands for (flat when `size` is given and checked against it, else in its shape)."""
  if not isinstance(entry, dict): return np.asarray(entry).reshape(-1) if size is not None else np.asarray(entry)
  if entry.get("omitted"):
    raise BufferEntryError(f"input buffer of {entry.get('nbytes')} bytes was recorded by hash only (above "
                           f"REPLAY_MAX_EXEC_BYTES)")
  count = entry.get("size")
  if not isinstance(count, int) or count < 0 or (size is not None and count != size):
    raise BufferEntryError(f"buffer entry says {count!r} elements" + (f" for a buffer of {size}" if size is not None
                                                                      else ""))
  if "fill" in entry:
    fill = np.asarray(entry["fill"]).reshape(-1)
    if fill.size != 1: raise BufferEntryError("a constant-fill entry holds more than one value")
    flat = np.full(count, fill[0], dtype=fill.dtype)
  elif isinstance(entry.get("blob"), str):
    raw = (shared or {}).get(entry["blob"])
    if raw is None: raise BufferEntryError(f"buffer blob {entry['blob'][:12]} is not in the database")
    dtype = serialize.plain_dtype(entry.get("dtype"))
    if len(raw) != count * dtype.itemsize:
      raise BufferEntryError(f"buffer blob {entry['blob'][:12]} does not hold {count} {dtype} values")
    flat = np.frombuffer(raw, dtype=dtype)
  else: raise BufferEntryError(f"unknown buffer entry with keys {sorted(map(str, entry))}")
  if size is not None: return flat
  shape = entry.get("shape")
  if not (isinstance(shape, (tuple, list))
          and all(isinstance(d, int) and d >= 0 for d in shape)) or int(np.prod(shape)) != count:
    raise BufferEntryError(f"buffer entry has shape {shape!r} for {count} elements")
  return flat.reshape(tuple(shape))


def decode_outputs(payload: dict, shared: Optional[dict[str, bytes]] = None) -> dict:
  """An exec output payload with every output as an array."""
  return {**payload, "outputs": [decode(o, shared) for o in payload.get("outputs", [])]}
