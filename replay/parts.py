"""Parts of capture payloads that are blobs of their own: a tensor graph, which a schedule capture and the exec
capture of the same realize both hold, and each kernel AST, which a schedule capture's output and the kernel capture
that renders it both hold. Stored once, they are pickled once per process and compressed once per database.

`replay/capture.py` splits payloads (a part becomes its sha256 in the payload, its bytes a blob the capture refers
to, kept by `db/` in `capture_blobs` like an exec's input buffers; a schedule's input is its graph part itself, named by
the capture's input hash); every reader joins them back with `join_input`
and `join_output` into the payloads captures held before parts existed (`graph_pickle`, `asts`, `ast`), which is
also what older captures still are.

A schedule names its kernel ASTs by their places in the sorted list of its capture's blobs, and says how many blobs
that list had (a capture's blobs are named by full hashes in `capture_blobs`; in the payload a hash is 32 bytes of noise
per kernel once compressed, a place one or two). Captures before places name them by the first REF_HEX hex digits of
their sha256 (schema 15) or in full; readers join all three.
"""
from __future__ import annotations
from typing import Any, Optional
from replay import serialize

GRAPH = "graph_blob"     # exec inputs (and schedule inputs before they were the graph part): the pickled graph's sha256
ASTS = "ast_blobs"       # schedule outputs before places: each kernel AST's sha256 (or its first REF_HEX digits)
AST_PLACES = "ast_places"   # schedule outputs: (the capture's blob count, each AST's place among its sorted blobs)
AST = "ast_blob"         # kernel inputs: the sha256 of the AST
REF_HEX = 16


def places(shas: list[str], blobs) -> tuple[int, list[int]]:
  """`shas`, each one of the capture's `blobs`, as (the number of blobs, their places in the blobs' sorted list)."""
  place = {sha: i for i, sha in enumerate(sorted(blobs))}
  return len(place), [place[sha] for sha in shas]


class PartError(ValueError):
  """A payload names a part that is not among its capture's blobs, or is not a part of the right form."""


def _part(shared: Optional[dict[str, bytes]], sha: Any, what: str) -> bytes:
  if not isinstance(sha, str):
    raise PartError(f"the {what} of the payload is named by {type(sha).__name__}, not a hash")
  data = (shared or {}).get(sha)
  if data is None: raise PartError(f"the {what} {sha[:12]} of the payload is not among the capture's blobs")
  return data


def _ast(shared: Optional[dict[str, bytes]], sha: Any) -> Any:
  return serialize.loads(_part(shared, sha, "kernel AST"))


def _full_refs(shared: Optional[dict[str, bytes]], refs: list) -> list:
  """The references of a list with each prefix of a sha256 replaced by the one blob of the capture it names (a
  reference that is not a prefix, or names no blob, is left for `_part` to report)."""
  shared = shared or {}
  if all(not isinstance(ref, str) or ref in shared or len(ref) != REF_HEX for ref in refs): return refs
  by_prefix: dict[str, list[str]] = {}
  for sha in shared: by_prefix.setdefault(sha[:REF_HEX], []).append(sha)
  found = []
  for ref in refs:
    named = by_prefix.get(ref, [ref]) if isinstance(ref, str) and ref not in shared else [ref]
    if len(named) > 1: raise PartError(f"the kernel AST {ref} of the payload names {len(named)} of the capture's blobs")
    found.append(named[0])
  return found


def join_input(kind: str, payload: Any, shared: Optional[dict[str, bytes]]) -> Any:
  """An input payload with its parts in place: a graph as `graph_pickle` bytes (loaded where it is used), a kernel
  AST as `ast`."""
  if kind == "schedule" and serialize.is_graph_node(payload): return {"graph": payload}   # the input is the graph part
  if not isinstance(payload, dict): return payload
  if kind in ("schedule", "exec") and GRAPH in payload:
    return {**{k: v for k, v in payload.items() if k != GRAPH}, "graph_pickle": _part(shared, payload[GRAPH], "graph")}
  if kind == "kernel" and AST in payload:
    return {**{k: v for k, v in payload.items() if k != AST}, "ast": _ast(shared, payload[AST])}
  return payload


def _named(shared: Optional[dict[str, bytes]], found: Any) -> list[str]:
  """The blobs a schedule names by their places (`places`)."""
  if not (isinstance(found, tuple) and len(found) == 2 and type(found[0]) is int and isinstance(found[1], list)):
    raise PartError("the kernel ASTs of the payload are not (a blob count, their places)")
  count, at = found
  order = sorted(shared or {})
  if len(order) != count:
    raise PartError(f"the payload names its kernel ASTs among {count} blobs; the capture has {len(order)}")
  if not all(type(i) is int and 0 <= i < count for i in at):
    raise PartError(f"the kernel ASTs of the payload are not places among the capture's {count} blobs")
  return [order[i] for i in at]


def join_output(kind: str, payload: Any, shared: Optional[dict[str, bytes]]) -> Any:
  """An output payload with its parts in place: a schedule's kernel ASTs as `asts`."""
  if kind == "schedule" and isinstance(payload, dict) and AST_PLACES in payload:
    return {**{k: v for k, v in payload.items() if k != AST_PLACES},
            "asts": [_ast(shared, sha) for sha in _named(shared, payload[AST_PLACES])]}
  if kind == "schedule" and isinstance(payload, dict) and ASTS in payload:
    shas = payload[ASTS]
    if not isinstance(shas, (list, tuple)): raise PartError("the kernel ASTs of the payload are not a list of hashes")
    return {**{k: v for k, v in payload.items() if k != ASTS},
            "asts": [_ast(shared, sha) for sha in _full_refs(shared, list(shas))]}
  return payload


def load_output(store, cap: dict) -> tuple[Any, dict[str, bytes]]:
  """A stored capture's output payload, joined, and the blobs it refers to besides its payloads (an exec's buffers
  stay references: `buffers.decode` reads them)."""
  shared = store.shared_blobs(cap["id"])
  return join_output(cap["kind"], serialize.loads(store.get_blob(cap["output_sha"])), shared), shared


def load_capture(store, cap: dict) -> tuple[Any, Any, dict[str, bytes]]:
  """A stored capture's input and output payloads, joined, and the blobs it refers to besides them."""
  out, shared = load_output(store, cap)
  return join_input(cap["kind"], serialize.loads(store.get_blob(cap["input_sha"])), shared), out, shared
