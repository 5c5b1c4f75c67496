"""Serialization of capture payloads: pickle behind a format header, and a restricted unpickler
that builds only the compiler's own types, numpy arrays and plain Python values.

A database from an untrusted branch therefore cannot run code when it is loaded.
"""
from __future__ import annotations
import copyreg, io, pickle
from typing import Any, Optional
import numpy as np
from replay import sut

# flags that say how to capture or debug, not how to compile: out of the content key, not re-applied on replay
NON_COMPILER_FLAGS = frozenset({"CAPTURE_PROCESS_REPLAY", "DEBUG", "TRACK_MATCH_STATS", "VIZ", "PICKLE_BUFFERS"})
# the first line of a payload: the format and the version of the replay contract of the compiler that captured it.
# PRPL4 (graphs): a flat table of the graph's nodes, then the payload, which names them by their place in it. A row is
# a node's reconstructor arguments with its sources as distances back in the table (`graph_rows` of the contract):
# small numbers that repeat, where pickle names each source by an index into its memo (a table compresses to ~60%).
# PRPL3 (payloads without graph nodes, graphs of a compiler whose contract has no `graph_rows`): (the payload's graph
# nodes in topological order, the payload), so that pickling a graph 100,000 nodes deep never recurses (each node's
# sources are already in pickle's memo). Compiler types are built by the reconstructors of the contract module in
# both, so that renaming a module of the compiler does not break loading older captures.
FORMAT = b"PRPL4"
NODE_BY_NODE = b"PRPL3"
OLDER_FORMATS = (b"PRPL1", b"PRPL2")   # named internal modules of the compiler: not read any more
PROTOCOL = 4


class UnsafePickleError(pickle.UnpicklingError):
  """The payload names something replay refuses to build."""


class PayloadFormatError(ValueError):
  """The payload is not a capture payload of a format this harness reads."""


class ContractVersionError(PayloadFormatError):
  """The payload was captured under a contract version the compiler on the path does not read."""


def dumps(obj: Any, version: Optional[int] = None, plain: bool = False) -> bytes:
  """The payload behind its first line (`PRPL4 contract=N`, `PRPL3 contract=N` without graph nodes); N is the version
  of the contract on the path. `plain`: the caller built the payload from plain values only (no graph node to list)."""
  if version is None: version = sut.contract().VERSION
  if plain: return NODE_BY_NODE + b" contract=%d\n" % version + pickle.dumps(([], obj), protocol=PROTOCOL)
  nodes = graph_nodes(obj)
  rows = getattr(sut.contract(), "graph_rows", None) if nodes else None
  out = io.BytesIO()
  out.write((FORMAT if rows is not None else NODE_BY_NODE) + b" contract=%d\n" % version)
  table = _reductions(type(nodes[0])) if nodes else None
  pickler = pickle.Pickler(out, protocol=PROTOCOL)
  if table is not None: pickler.dispatch_table = table   # a node inside an argument is pickled node by node
  if rows is None:
    pickler.dump((nodes, obj))
    return out.getvalue()
  pickler.dump(rows(nodes))
  naming = _TableRefs(out, nodes)
  if table is not None: naming.dispatch_table = table
  naming.dump(obj)
  return out.getvalue()


class _TableRefs(pickle.Pickler):
  """Pickles a PRPL4 payload: a node of the table as its place in it."""
  def __init__(self, out: io.BytesIO, nodes: list):
    super().__init__(out, protocol=PROTOCOL)
    self.nodes, self.node_type, self.places = nodes, type(nodes[0]), None

  def persistent_id(self, obj: Any) -> Optional[int]:
    if type(obj) is not self.node_type: return None
    # the last node is a root: a graph part's payload is that node alone, and needs no index of the whole table
    if obj is self.nodes[-1]: return len(self.nodes) - 1
    if self.places is None: self.places = {node: i for i, node in enumerate(self.nodes)}
    return self.places.get(obj)


_dispatch_tables: dict[type, Optional[dict]] = {}


def _reductions(node_type: type) -> Optional[dict]:
  """copyreg's reductions and the graph node type's own `__reduce__`, called directly: pickling goes through
  `__reduce_ex__` otherwise, which costs more than the reduction itself for each of a graph's thousands of nodes. None
  for a type that does not reduce itself with `__reduce__` alone."""
  if node_type not in _dispatch_tables:
    own = node_type.__reduce_ex__ is object.__reduce_ex__ and node_type.__reduce__ is not object.__reduce__
    _dispatch_tables[node_type] = {**copyreg.dispatch_table, node_type: node_type.__reduce__} if own else None
  return _dispatch_tables[node_type]


_SCALARS = (str, bytes, int, float, type(None))


def is_graph_node(x: Any) -> bool: return hasattr(x, "toposort") and isinstance(getattr(x, "src", None), tuple)


def graph_nodes(obj: Any) -> list:
  """Every graph node (UOp) reachable from the payload, sources before users; the payload's containers (dicts,
  lists, tuples, sets) are searched for graphs, without recursion."""
  roots, todo = [], [obj]
  while todo:
    x = todo.pop()
    if isinstance(x, _SCALARS): continue
    if is_graph_node(x): roots.append(x)
    elif isinstance(x, dict): todo.extend(reversed([*x.keys(), *x.values()]))
    elif isinstance(x, (list, tuple, set, frozenset)): todo.extend(reversed(list(x)))
  if len(roots) == 1: return list(roots[0].toposort)
  return list(dict.fromkeys(node for root in roots for node in root.toposort))


_SAFE_BUILTINS = {"set", "frozenset", "slice", "complex", "range", "bytearray", "tuple", "list", "dict", "int", "float",
                  "bool", "str", "bytes"}
_SAFE_NUMPY = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype"),
               ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"), ("numpy.dtypes", None)}


# numpy values a payload may hold: plain numbers only. Object, structured or void dtypes would let crafted bytes
# become pointers (a crash, or worse, when the array is printed or freed), so they are refused before they exist.
_PLAIN_KINDS = frozenset("biufc")


def _plain(dtype: np.dtype) -> np.dtype:
  if dtype.kind not in _PLAIN_KINDS or dtype.fields is not None or dtype.subdtype is not None or dtype.hasobject:
    raise UnsafePickleError(f"capture payload holds numpy dtype {dtype.str!r}; only plain numeric dtypes are loaded")
  return dtype


def plain_dtype(spec, align=False, copy=True) -> np.dtype:
  if not isinstance(spec, str):
    raise UnsafePickleError(f"capture payload builds a numpy dtype from {type(spec).__name__}")
  try: dtype = np.dtype(spec)
  except TypeError as e: raise UnsafePickleError(f"capture payload names numpy dtype {spec!r}: {e}") from e
  return _plain(dtype)


class _PlainArray(np.ndarray):
  """What a payload's arrays are rebuilt as: the state is checked (dtype, size) before numpy applies it."""
  def __setstate__(self, state):
    if not isinstance(state, tuple) or len(state) != 5:
      raise UnsafePickleError("capture payload holds a malformed numpy array")
    _version, shape, dtype, _fortran, raw = state
    if not isinstance(dtype, np.dtype) or not isinstance(raw, (bytes, bytearray)):
      raise UnsafePickleError("malformed numpy array state")
    count = 1
    for extent in shape: count *= int(extent)
    if len(raw) != count * _plain(dtype).itemsize:
      raise UnsafePickleError("numpy array bytes do not match its shape and dtype")
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
    if (module, name) in _SAFE_NUMPY or (module == "numpy.dtypes" and name.endswith("DType")):
      return super().find_class(module, name)
    contract = sut.contract()
    if module == contract.__name__ and name in contract.PICKLABLE: return getattr(contract, name)
    raise UnsafePickleError(f"capture payload refers to {module}.{name}, which replay does not load (only the "
                            f"reconstructors of "
                            f"{contract.__name__}, numpy arrays and plain values are allowed)")


def header(data: bytes) -> tuple[bytes, Optional[int], int]:
  """(format, contract version or None, offset of the pickle) of a payload."""
  end = data.find(b"\n", 0, 64)
  if end < 0 or not data.startswith(b"PRPL"):
    raise PayloadFormatError("payload is not a capture payload (no format header)")
  fmt, _, rest = data[:end].partition(b" ")
  version = (int(rest[len(b"contract="):]) if rest.startswith(b"contract=") and rest[len(b"contract="):].isdigit()
             else None)
  return fmt, version, end + 1


def loads(data: bytes) -> Any:
  fmt, version, start = header(data)
  if fmt in OLDER_FORMATS:
    raise PayloadFormatError(f"captured before the replay contract (payload format {fmt.decode()}): capture again with "
                             f"this harness")
  if fmt not in (FORMAT, NODE_BY_NODE) or version is None:
    raise PayloadFormatError(f"payload format {data[:start].strip()!r} is not one this harness reads "
                             f"({FORMAT.decode()} or {NODE_BY_NODE.decode()} contract=N)")
  contract = sut.contract()
  if version not in contract.READS:
    raise ContractVersionError(f"captured under replay contract v{version}; this revision's {contract.__name__} reads "
                               f"v{', v'.join(map(str, sorted(contract.READS)))}")
  stream = io.BytesIO(data)
  stream.seek(start)
  if fmt == FORMAT:
    nodes = _built(contract, RestrictedUnpickler(stream).load())
    return _TableUnpickler(stream, nodes).load()
  value = RestrictedUnpickler(stream).load()
  if not isinstance(value, tuple) or len(value) != 2:
    raise PayloadFormatError("a PRPL3 payload is not a (nodes, payload) pair")
  return value[1]


def _built(contract: Any, table: Any) -> list:
  """The nodes of a PRPL4 table, built in order by the contract's reconstructor it names."""
  if not (isinstance(table, tuple) and len(table) == 3 and isinstance(table[0], str) and type(table[1]) is int
          and table[1] >= 0 and isinstance(table[2], list)):
    raise PayloadFormatError("a PRPL4 payload does not start with a node table (reconstructor, sources at, rows)")
  name, at, rows = table
  if name not in contract.PICKLABLE:
    raise UnsafePickleError(f"the node table of the capture payload is built by {contract.__name__}.{name}, which "
                            f"replay does not load")
  build, nodes = getattr(contract, name), []
  for i, row in enumerate(rows):
    back = row[at] if isinstance(row, tuple) and len(row) > at else None
    if not isinstance(back, tuple) or not all(type(d) is int and 0 < d <= i for d in back):
      raise PayloadFormatError(f"row {i} of the payload's node table does not name its sources by distances back")
    try: nodes.append(build(*row[:at], tuple([nodes[i - d] for d in back]), *row[at + 1:]))
    except (TypeError, ValueError, KeyError, AttributeError) as e:
      raise PayloadFormatError(f"row {i} of the payload's node table cannot be built: {type(e).__name__}: {e}") \
        from None
  return nodes


class _TableUnpickler(RestrictedUnpickler):
  """Loads a PRPL4 payload: a place in the table is that node."""
  def __init__(self, stream: io.BytesIO, nodes: list):
    super().__init__(stream)
    self.nodes = nodes

  def persistent_load(self, pid: Any) -> Any:
    if type(pid) is not int or not 0 <= pid < len(self.nodes):
      raise PayloadFormatError(f"the payload names node {pid!r} of a table of {len(self.nodes)}")
    return self.nodes[pid]
