"""How buffer contents sit in exec payloads: inline (small arrays), as one value (a constant fill), or as a
reference to a blob of their own (large arrays, stored once for every capture that holds the same contents: the
training data of every step, the weights one step writes and the next reads).

Inline arrays and fill values are their raw bytes with the dtype's name: pickling a numpy array costs five times as
much (an exec capture holds one entry per buffer it reads or writes), and a payload then holds no numpy object at all.
Payloads captured before hold numpy arrays there, and still decode.

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
  """The payload entry of one array; blobs it refers to are added to `shared` (sha256 -> bytes). The entry and the
  blobs hold copies: the array may be a buffer's own memory, which the next kernel overwrites."""
  if type(data) is not np.ndarray or not data.flags.c_contiguous: data = np.ascontiguousarray(data)
  shape, size, dtype = data.shape, data.size, data.dtype.str
  raw = data.tobytes()
  # a fill: the first value's bytes, found `size` times without overlap (which tiles the whole array with them; bitwise:
  # NaN and -0.0 kept); the second value tells most arrays from a fill before the whole array is searched
  if size > 1:
    first = raw[:len(raw) // size]
    if raw.startswith(first, len(first)) and raw.count(first) == size:
      return {"fill": first, "dtype": dtype, "size": size, "shape": shape}
  if len(raw) < SHARED_BYTES: return {"raw": raw, "dtype": dtype, "size": size, "shape": shape}
  sha = hashlib.sha256(raw).hexdigest()
  shared[sha] = raw
  return {"blob": sha, "dtype": dtype, "size": size, "shape": shape}


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
    fill = entry["fill"]
    if isinstance(fill, bytes): fill = _from_raw(fill, 1, entry, "a constant-fill entry")
    fill = np.asarray(fill).reshape(-1)
    if fill.size != 1: raise BufferEntryError("a constant-fill entry holds more than one value")
    flat = np.full(count, fill[0], dtype=fill.dtype)
  elif isinstance(entry.get("raw"), bytes): flat = _from_raw(entry["raw"], count, entry, "an inline buffer entry")
  elif isinstance(entry.get("blob"), str):
    raw = (shared or {}).get(entry["blob"])
    if raw is None: raise BufferEntryError(f"buffer blob {entry['blob'][:12]} is not in the database")
    flat = _from_raw(raw, count, entry, f"buffer blob {entry['blob'][:12]}")
  else: raise BufferEntryError(f"unknown buffer entry with keys {sorted(map(str, entry))}")
  if size is not None: return flat
  shape = entry.get("shape")
  if not (isinstance(shape, (tuple, list))
          and all(isinstance(d, int) and d >= 0 for d in shape)) or int(np.prod(shape)) != count:
    raise BufferEntryError(f"buffer entry has shape {shape!r} for {count} elements")
  return flat.reshape(tuple(shape))


def _from_raw(raw: bytes, count: int, entry: dict, what: str) -> np.ndarray:
  """`count` values of the entry's dtype from their bytes (read-only: they are the payload's)."""
  dtype = serialize.plain_dtype(entry.get("dtype"))
  if len(raw) != count * dtype.itemsize: raise BufferEntryError(f"{what} does not hold {count} {dtype} values")
  return np.frombuffer(raw, dtype=dtype)


def decode_outputs(payload: dict, shared: Optional[dict[str, bytes]] = None) -> dict:
  """An exec output payload with every output as an array."""
  return {**payload, "outputs": [decode(o, shared) for o in payload.get("outputs", [])]}
