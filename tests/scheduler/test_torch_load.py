"""nn.state.torch_load against files torch.save wrote (tests/scheduler/torch_files, torch 2.13.0), checkpoints written
in torch.save's zip layout by a stand-in for torch's pickling (views, dtypes, hostile pickles), and, with torch
installed, against torch.save itself."""
import collections, os, pickle, sys, types, zipfile
import numpy as np
import pytest
from scheduler import Tensor, dtypes
from scheduler.dtype import bf16_to_float32, float32_to_bf16
from scheduler.nn.state import torch_load
from scheduler.nn.torch_file import TorchFileError

pytestmark = pytest.mark.usefixtures("each_device")
STORAGE_NAMES = {np.float32: "FloatStorage", np.float64: "DoubleStorage", np.float16: "HalfStorage",
                 np.int64: "LongStorage", np.int32: "IntStorage", np.int8: "CharStorage", np.uint8: "ByteStorage",
                 np.bool_: "BoolStorage", np.int16: "ShortStorage"}


@pytest.fixture
def fake_torch(monkeypatch):
  """Modules named as torch's, holding what a checkpoint's pickle refers to: storage types and the rebuild calls."""
  torch, utils = types.ModuleType("torch"), types.ModuleType("torch._utils")
  for name in [*STORAGE_NAMES.values(), "BFloat16Storage"]:
    setattr(torch, name, type(name, (), {"__module__": "torch"}))
  def _rebuild_tensor_v2(*args): raise AssertionError("only pickled here")
  def _rebuild_parameter(*args): raise AssertionError("only pickled here")
  for fn in (_rebuild_tensor_v2, _rebuild_parameter):
    fn.__module__, fn.__qualname__ = "torch._utils", fn.__name__
    setattr(utils, fn.__name__, fn)
  torch._utils = utils
  monkeypatch.setitem(sys.modules, "torch", torch)
  monkeypatch.setitem(sys.modules, "torch._utils", utils)
  return torch


class Storage:
  def __init__(self, key: str, data: np.ndarray, storage_type: str):
    self.key, self.data, self.type = key, data, storage_type


class Saved:
  """A tensor as torch pickles it: a view (offset, size, stride in elements) of a storage."""
  def __init__(self, storage, offset, size, stride, parameter=False):
    self.args = (storage, offset, tuple(size), tuple(stride), False, collections.OrderedDict())
    self.parameter = parameter

  def __reduce__(self):
    utils = sys.modules["torch._utils"]
    rebuilt = (utils._rebuild_tensor_v2, self.args)
    if not self.parameter: return rebuilt
    return utils._rebuild_parameter, (_Call(*rebuilt), True, collections.OrderedDict())


class _Call:
  def __init__(self, fn, args): self.fn, self.args = fn, args
  def __reduce__(self): return self.fn, self.args


def write_checkpoint(path, obj, storages: list[Storage], compression=zipfile.ZIP_STORED, byteorder=b"little"):
  class Writer(pickle.Pickler):
    def persistent_id(self, x):
      if isinstance(x, Storage):
        return ("storage", getattr(sys.modules["torch"], x.type), x.key, "cpu", x.data.size)
      return None
  import io
  buffer = io.BytesIO()
  Writer(buffer, protocol=2).dump(obj)
  with zipfile.ZipFile(path, "w", compression=compression) as archive:
    archive.writestr("checkpoint/data.pkl", buffer.getvalue())
    archive.writestr("checkpoint/byteorder", byteorder)
    for s in storages: archive.writestr(f"checkpoint/data/{s.key}", s.data.tobytes())
    archive.writestr("checkpoint/version", b"3\n")


def storage(key, array) -> Storage:
  return Storage(key, np.ascontiguousarray(array).reshape(-1), STORAGE_NAMES[array.dtype.type])


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_a_state_dict_of_views_and_dtypes_loads(fake_torch, tmp_path, compression):
  rng = np.random.default_rng(0)
  weight = rng.standard_normal((4, 3)).astype(np.float32)
  shared = np.arange(20, dtype=np.int64)
  half, flags = rng.standard_normal(5).astype(np.float16), np.array([True, False, True])
  bf16_bits = float32_to_bf16(np.array([1.5, -2.25, 3e38], np.float32))
  stores = [storage("0", weight), storage("1", shared), storage("2", half), storage("3", flags),
            Storage("4", bf16_bits, "BFloat16Storage"), storage("5", np.array([7.0], np.float64))]
  state = collections.OrderedDict([
    ("layer.weight", Saved(stores[0], 0, (4, 3), (3, 1), parameter=True)),
    ("layer.weight_t", Saved(stores[0], 0, (3, 4), (1, 3))),                  # a transposed view of the same storage
    ("steps", Saved(stores[1], 5, (2, 3), (3, 1))),                           # at an offset into its storage
    ("every_other", Saved(stores[1], 1, (5,), (4,))),                         # strided: read through numpy
    ("row_expanded", Saved(stores[5], 0, (2, 3), (0, 0))),                    # stride 0: expanded
    ("half", Saved(stores[2], 0, (5,), (1,))), ("mask", Saved(stores[3], 0, (3,), (1,))),
    ("bf16", Saved(stores[4], 0, (3,), (1,))), ("scalar", Saved(stores[1], 7, (), ())),
    ("empty", Saved(stores[0], 0, (0, 3), (3, 1))),
  ])
  path = tmp_path / "model.pt"
  write_checkpoint(path, state, stores, compression)
  got = torch_load(path)
  assert list(got) == list(state)
  expected = {"layer.weight": weight, "layer.weight_t": weight.T, "steps": shared[5:11].reshape(2, 3),
              "every_other": shared[1::4][:5], "row_expanded": np.full((2, 3), 7.0), "half": half, "mask": flags,
              "scalar": np.array(7), "empty": np.zeros((0, 3), np.float32)}
  for name, want in expected.items():
    assert got[name].shape == want.shape, name
    np.testing.assert_array_equal(got[name].numpy(), want)
    assert got[name].numpy().dtype == want.dtype, name
  assert got["bf16"].dtype == dtypes.bfloat16
  np.testing.assert_array_equal(got["bf16"].numpy(), bf16_to_float32(bf16_bits))


def test_a_dict_holding_a_state_dict_and_plain_values(fake_torch, tmp_path):
  w = np.arange(6, dtype=np.float32)
  stores = [storage("0", w)]
  write_checkpoint(tmp_path / "ck.pt", {"model": {"w": Saved(stores[0], 0, (2, 3), (3, 1))}, "epoch": 3,
                                        "lr": [0.1, 0.01]}, stores)
  got = torch_load(tmp_path / "ck.pt")
  assert got["epoch"] == 3 and got["lr"] == [0.1, 0.01]
  np.testing.assert_array_equal(got["model"]["w"].numpy(), w.reshape(2, 3))


def test_a_checkpoint_cannot_run_code(fake_torch, tmp_path):
  marker = tmp_path / "ran"
  class Evil:
    def __reduce__(self): return os.system, (f"touch {marker}",)
  write_checkpoint(tmp_path / "evil.pt", {"x": Evil()}, [])
  with pytest.raises(TorchFileError, match="posix.system|os.system"): torch_load(tmp_path / "evil.pt")
  assert not marker.exists()


def test_what_is_not_a_checkpoint_is_named(fake_torch, tmp_path):
  (tmp_path / "legacy.pt").write_bytes(b"\x80\x02\x8a\x0alegacy-magic")
  with pytest.raises(TorchFileError, match="not a zip archive"): torch_load(tmp_path / "legacy.pt")
  with zipfile.ZipFile(tmp_path / "other.zip", "w") as archive: archive.writestr("readme.txt", "hi")
  with pytest.raises(TorchFileError, match="no <name>/data.pkl"): torch_load(tmp_path / "other.zip")
  w = np.arange(6, dtype=np.float32)
  write_checkpoint(tmp_path / "short.pt", {"w": Saved(storage("0", w), 0, (6,), (1,))}, [storage("0", w[:2])])
  with pytest.raises(TorchFileError, match="holds 8 bytes, its storage needs 24"): torch_load(tmp_path / "short.pt")
  write_checkpoint(tmp_path / "big.pt", {"w": Saved(storage("0", w), 0, (6,), (1,))}, [storage("0", w)],
                   byteorder=b"big")
  with pytest.raises(TorchFileError, match="big-endian"): torch_load(tmp_path / "big.pt")


FILES = os.path.join(os.path.dirname(__file__), "torch_files")


def test_files_written_by_torch_save():
  # written by torch 2.13.0's torch.save (a Linear's state dict and views of every storage kind), values in expected.npz
  got, expected = torch_load(os.path.join(FILES, "state_dict.pt")), np.load(os.path.join(FILES, "expected.npz"))
  assert sorted(got) == sorted(expected.files)
  for name in expected.files:
    np.testing.assert_array_equal(got[name].numpy(), expected[name])
    assert got[name].shape == expected[name].shape, name
  assert got["bf16"].dtype == dtypes.bfloat16 and got["half"].dtype == dtypes.float16
  checkpoint = torch_load(os.path.join(FILES, "checkpoint.pt"))
  assert checkpoint["epoch"] == 3 and checkpoint["lr"] == [0.1, 0.01]
  np.testing.assert_array_equal(checkpoint["model"]["weight"].numpy(), expected["weight"])


def test_against_torch_save(tmp_path):
  torch = pytest.importorskip("torch")
  linear = torch.nn.Linear(3, 2)
  state = {**linear.state_dict(), "t": torch.arange(12).reshape(3, 4).T, "h": torch.ones(2, dtype=torch.float16)}
  torch.save(state, tmp_path / "real.pt")
  got = torch_load(tmp_path / "real.pt")
  for name, value in state.items(): np.testing.assert_array_equal(got[name].numpy(), value.detach().numpy())
