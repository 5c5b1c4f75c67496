"""The restricted unpickler (issue 13.2): plain numbers and numeric arrays load, anything that could turn
crafted bytes into pointers or code is refused before it is built; graphs pickle to the bytes plain pickle makes."""
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


def test_graphs_pickle_to_the_bytes_pickle_makes_without_the_direct_reductions():
  import pickle
  from scheduler import Tensor
  from scheduler.contract import without_pickled_buffers
  x = Tensor.ones(4, 4).contiguous().realize()
  graph = ((x @ x).relu().sum(axis=1) + 1).lazydata
  with without_pickled_buffers():
    data = serialize.dumps({"graph": graph, "n": 3})
    plain = pickle.dumps((serialize.graph_nodes({"graph": graph, "n": 3}), {"graph": graph, "n": 3}), protocol=4)
  assert data.split(b"\n", 1)[1] == plain
  assert serialize.loads(data)["graph"] is graph   # built again, the same interned node
