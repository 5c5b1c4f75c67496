"""The restricted unpickler (issue 13.2): plain numbers and numeric arrays load, anything that could turn
crafted bytes into pointers or code is refused before it is built; graphs are a flat node table (PRPL4), and
PRPL3 payloads still load."""
import numpy as np
import pytest
from replay import serialize


@pytest.mark.parametrize("value",
                         [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([True, False]), np.int64(-5),
                          np.float16(1.5),
                                   np.zeros((0, 3), np.uint8), np.array([1 + 2j], np.complex64)])
def test_plain_numpy_values_round_trip(value):
  loaded = serialize.loads(serialize.dumps(value))
  np.testing.assert_array_equal(np.asarray(loaded), np.asarray(value))
  assert np.asarray(loaded).dtype == np.asarray(value).dtype
  assert b"_PlainArray" not in serialize.dumps(loaded)   # re-pickled, a loaded array is a plain ndarray again


@pytest.mark.parametrize("value",
                         [np.array([None, 1], dtype=object), np.zeros(2, dtype=[("a", "f4"), ("b", "i4")]),
                          np.dtype("V8"),
                                   np.zeros(3, dtype="V4"), np.dtype("O")])
def test_object_structured_and_void_dtypes_are_refused(value):
  with pytest.raises(serialize.UnsafePickleError, match="numpy dtype"): serialize.loads(serialize.dumps(value))


def test_array_bytes_that_do_not_match_the_shape_are_refused():
  rebuild, args, state = np.arange(4, dtype=np.float32).__reduce__()

  class Short:   # pickles as a (4,) float32 array whose bytes hold only two floats
    def __reduce__(self): return rebuild, args, (*state[:4], state[4][:8])
  with pytest.raises(serialize.UnsafePickleError, match="do not match"): serialize.loads(serialize.dumps(Short()))


def test_a_dtype_with_an_object_field_built_over_void_is_refused_before_it_exists():
  """The crash reproduction: numpy.dtype('V8') whose state declares an object field at offset 0."""
  payload = (b"\x80\x04cnumpy\ndtype\n(X\x02\x00\x00\x00V8\x89\x88tR(K\x03X\x01\x00\x00\x00|N(X\x01\x00\x00\x00a"
             b"tq\x00}q\x01X\x01\x00\x00\x00a(cnumpy\ndtype\nX\x02\x00\x00\x00O8\x89\x88\x87RK\x00\x86sK\x08K\x01K?tb.")
  with pytest.raises(serialize.UnsafePickleError): serialize.loads(serialize.FORMAT + b" contract=1\n" + payload)


def _graph():
  from scheduler import Tensor
  x = Tensor.ones(4, 4).contiguous().realize()
  return ((x @ x).relu().sum(axis=1) + 1).lazydata


def test_a_graph_is_a_flat_node_table_then_the_payload_naming_its_nodes_by_place():
  import io, pickle
  from scheduler.contract import without_pickled_buffers, graph_rows
  graph = _graph()
  with without_pickled_buffers():
    data = serialize.dumps({"graph": graph, "n": 3})
    rows = graph_rows(serialize.graph_nodes({"graph": graph, "n": 3}))
  assert data.startswith(b"PRPL4 contract=1\n")
  stream = io.BytesIO(data.split(b"\n", 1)[1])
  assert pickle.load(stream) == rows and rows[0] == "uop"
  assert all(0 < back <= i for i, row in enumerate(rows[2]) for back in row[rows[1]])
  loaded = serialize.loads(data)
  assert loaded["graph"] is graph and loaded["n"] == 3   # built again, the same interned node


def test_the_table_is_smaller_than_pickling_node_by_node_once_compressed(monkeypatch):
  import zlib
  from scheduler import Tensor, contract
  x, w = Tensor.ones(4, 8).contiguous().realize(), Tensor.ones(8, 8).contiguous().realize()
  for _ in range(30): x = (x @ w).relu() * 0.5 + x.exp2().sum(axis=1, keepdim=True)   # ~600 nodes, as graphs are
  graph = x.lazydata
  with contract.without_pickled_buffers():
    table = serialize.dumps(graph)
    monkeypatch.delattr(contract, "graph_rows")
    node_by_node = serialize.dumps(graph)
  assert node_by_node.startswith(b"PRPL3 ")
  assert serialize.loads(node_by_node) is graph   # a compiler without graph_rows, and captures made before PRPL4
  assert len(zlib.compress(table, 6)) < 0.8 * len(zlib.compress(node_by_node, 6))


def test_nodes_inside_arguments_and_buffer_keys_round_trip():
  from scheduler import Tensor, Variable, UOp
  from scheduler.contract import without_pickled_buffers
  v = Variable("i", 1, 10).bind(3)
  x = Tensor.ones(10).contiguous().realize()
  graph = (x.shrink(((0, v),)) * 2).lazydata
  assert any(isinstance(extent, UOp) for u in graph.toposort if u.st is not None for extent in u.st.shape)
  buffer = next(u for u in graph.toposort if u.op.name == "BUFFER")
  with without_pickled_buffers(): loaded = serialize.loads(serialize.dumps({"graph": graph, "buffers": {buffer: 1}}))
  assert loaded["graph"] is graph and loaded["buffers"] == {buffer: 1}


def _table_payload(table, names=0) -> bytes:
  import pickle
  return b"PRPL4 contract=1\n" + pickle.dumps(table, protocol=4) + pickle.dumps(names, protocol=4)


@pytest.mark.parametrize("table, error, match", [
  (("uop", 2, [("CONST", None, (1,), 1)]), serialize.PayloadFormatError, "row 0 .* distances back"),
  (("uop", 2, [("CONST", None, (0,), 1)]), serialize.PayloadFormatError, "row 0 .* distances back"),
  (("uop", 2, [("CONST", None, (), 1), ("ADD", None, ("x",), 1)]), serialize.PayloadFormatError, "row 1"),
  (("uop", 2, [("NO_SUCH_OP", None, (), 1)]), serialize.PayloadFormatError, "row 0 .* cannot be built"),
  (("uop", 7, [("CONST", None, (), 1)]), serialize.PayloadFormatError, "row 0"),
  (("system", 0, [((),)]), serialize.UnsafePickleError, "system"),
  ([1, 2], serialize.PayloadFormatError, "node table"),
])
def test_a_crafted_node_table_is_refused_with_what_is_wrong(table, error, match):
  with pytest.raises(error, match=match): serialize.loads(_table_payload(table))


def test_a_payload_naming_a_node_outside_the_table_is_refused():
  import pickle

  class Names(pickle.Pickler):
    def persistent_id(self, obj): return 5 if obj == "node" else None
  import io
  out = io.BytesIO()
  Names(out, protocol=4).dump({"graph": "node"})
  table = pickle.dumps(("uop", 2, []), protocol=4)
  with pytest.raises(serialize.PayloadFormatError, match="node 5 of a table of 0"):
    serialize.loads(b"PRPL4 contract=1\n" + table + out.getvalue())
