"""A static cost of a rendered C kernel: how many ALU operations, loads and stores it executes and how many
bytes it moves, each weighted by the trip counts of the loops around it.

The harness reads the source, not the compiler's data structures, so it prices a base revision's kernel and the
captured one with the same ruler whatever the compiler's internals look like. The renderer writes one operation
per line (`int alu7 = ...;`, `float val3 = data1[...];`, `data0[...] = ...;`, `for (...) {`), which is all this
relies on; a loop bound that is not a constant (a symbolic shape) counts as one trip.

Used by `compare.compare_kernel`: a changed kernel whose cost grows is flagged `slower` in reports.
"""
from __future__ import annotations
import re
from typing import Optional

_TYPE_BYTES = {"bool": 1, "char": 1, "unsigned char": 1, "signed char": 1, "short": 2, "unsigned short": 2, "half": 2,
               "_Float16": 2,
               "int": 4, "unsigned int": 4, "float": 4, "long": 8, "long long": 8, "unsigned long": 8,
               "unsigned long long": 8, "double": 8}
_FOR = re.compile(r"^for \(int \w+ = \(?(?:\(int\))?(-?\d+)\)?; \w+ < \(?(?:\(int\))?(-?\d+)\)?;")
_DECL = re.compile(r"^((?:unsigned |signed )?(?:long "
                   r"long|long|int|short|char|float|double|half|_Float16|bool))\s+(\w+)\s*=\s*(.*);$")
_LOAD = re.compile(r"^\*?\(?\w*\)?\s*data\d+\[")
_STORE = re.compile(r"^data\d+\[.*\]\s*=")
_INDEXED = re.compile(r"data\d+\[")
_ATTRIBUTES = re.compile(r"^(?:__attribute__\(\((?:[^()]|\([^()]*\))*\)\)\s*)+")   # arguments may hold one level of ()
# how much one unit of each counter weighs in the single cost figure (memory is dearer than arithmetic)
WEIGHTS = {"alu": 1.0, "loads": 4.0, "stores": 4.0}


def kernel_body(src: str, name: Optional[str] = None) -> list[str]:
  """The lines of the kernel function (`void NAME(...) {` to its closing brace, after any `__attribute__((...))`),
  without helper functions."""
  lines = [line.strip() for line in src.splitlines()]
  start = next((i for i, line in enumerate(lines) if _ATTRIBUTES.sub("", line).startswith("void ")
                and (name is None or f" {name}(" in line)), None)
  if start is None: return []
  depth, body = 0, []
  for line in lines[start:]:
    depth += line.count("{") - line.count("}")
    body.append(line)
    if depth <= 0 and len(body) > 1: break
  return body[1:-1]


def static_cost(src: str, name: Optional[str] = None) -> dict:
  """{alu, loads, stores, bytes, cost} of a rendered kernel, each operation counted once per loop iteration."""
  counts = {"alu": 0, "loads": 0, "stores": 0, "bytes": 0}
  trips: list[int] = []   # one entry per open block: the trip count of a loop, 1 for any other block
  for line in kernel_body(src, name):
    times = 1
    for t in trips: times *= t
    if line.startswith("for "):
      m = _FOR.match(line)
      trips.append(max(0, int(m.group(2)) - int(m.group(1))) if m else 1)
      continue
    if line.endswith("{"): trips.append(1); continue
    if line.startswith("}"):
      if trips: trips.pop()
      continue
    if _STORE.match(line):
      counts["stores"] += times
      counts["bytes"] += times * 4
      continue
    decl = _DECL.match(line)
    if decl is None: continue
    ctype, var, expr = decl.groups()
    if var.startswith("val") or _LOAD.match(expr):
      counts["loads"] += times
      counts["bytes"] += times * _TYPE_BYTES.get(ctype, 4)
    elif var.startswith(("alu", "acc")) or _INDEXED.search(expr) is None: counts["alu"] += times
  counts["cost"] = sum(counts[k] * w for k, w in WEIGHTS.items())
  return counts


def growth(base: dict, captured: dict) -> Optional[float]:
  """How much more the captured kernel costs than the base's, as a fraction (0.25: 25% more); None if not more."""
  b, c = base.get("cost", 0), captured.get("cost", 0)
  if c <= b: return None
  return float("inf") if b == 0 else (c - b) / b
