"""Buffer contents in exec payloads (replay/buffers.py) and their blobs in the store: constant fills by value,
large arrays once for every capture that holds them, pruning that keeps what a capture still refers to."""
import numpy as np
import pytest
from db import Store
from replay import buffers
from tests.replay.conftest import cli, capture_workloads
from scheduler.device import find_c_compiler


@pytest.mark.parametrize("array", [np.arange(10, dtype=np.float32), np.arange(2000, dtype=np.int64).reshape(40, 50),
                                   np.full((300, 7), np.nan, dtype=np.float32), np.full(1000, -0.0, dtype=np.float64),
                                   np.array([True, False] * 800), np.full(5, 3, dtype=np.uint8),
                                   np.zeros(1, np.float16)])
def test_every_form_gives_back_the_same_bits(array):
  shared = {}
  entry = buffers.encode(array, shared)
  back = buffers.decode(entry, shared)
  assert back.dtype == array.dtype and back.shape == array.shape and back.tobytes() == array.tobytes()
  flat = buffers.decode(entry, shared, array.size)
  assert flat.shape == (array.size,) and flat.tobytes() == array.tobytes()


def test_fills_are_one_value_and_large_arrays_are_blobs_shared_by_content():
  shared = {}
  fill = buffers.encode(np.full((512, 512), 1.5, np.float32), shared)
  assert fill["size"] == 512 * 512 and fill["fill"] == np.float32(1.5).tobytes() and not shared
  data = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
  first, again = buffers.encode(data, shared), buffers.encode(data.copy(), shared)
  assert first["blob"] == again["blob"] and len(shared) == 1
  small = buffers.encode(np.arange(8, dtype=np.float32), shared)   # inline, as its bytes: no numpy object to pickle
  assert small == {"raw": np.arange(8, dtype=np.float32).tobytes(), "dtype": "<f4", "size": 8, "shape": (8,)}
  assert len(shared) == 1


def test_entries_captured_with_numpy_arrays_inline_still_decode():
  assert buffers.decode(np.arange(6, dtype=np.int32).reshape(2, 3)).tolist() == [[0, 1, 2], [3, 4, 5]]
  old_fill = {"fill": np.full(1, -0.0, np.float64), "size": 3, "shape": (3,)}
  assert buffers.decode(old_fill, {}, 3).tobytes() == np.full(3, -0.0).tobytes()


@pytest.mark.parametrize("entry,shared,size,message", [
  ({"blob": "ab" * 32, "dtype": "<f4", "size": 4, "shape": (4,)}, {}, 4, "not in the database"),
  ({"blob": "ab" * 32, "dtype": "<f4", "size": 4, "shape": (4,)}, {"ab" * 32: b"\0" * 15}, 4, "does not hold"),
  ({"fill": np.zeros(1, np.float32), "size": 4, "shape": (4,)}, {}, 5, "for a buffer of 5"),
  ({"fill": np.zeros(2, np.float32), "size": 4, "shape": (4,)}, {}, 4, "more than one value"),
  ({"what": 1, "size": 4}, {}, 4, "unknown buffer entry"),
  ({"raw": b"\0" * 12, "dtype": "<f4", "size": 4, "shape": (4,)}, {}, 4, "inline buffer entry does not hold 4"),
  ({"fill": b"\0" * 3, "dtype": "<f4", "size": 4, "shape": (4,)}, {}, 4, "constant-fill entry does not hold 1"),
  ({"fill": np.zeros(1, np.float32), "size": 4, "shape": (3,)}, {}, None, "shape"),
])
def test_bad_entries_are_clear_errors(entry, shared, size, message):
  with pytest.raises(buffers.BufferEntryError, match=message): buffers.decode(entry, shared, size)


def test_a_blob_entry_with_an_object_dtype_is_refused():
  from replay.serialize import UnsafePickleError
  with pytest.raises(UnsafePickleError):
    buffers.decode({"blob": "a", "dtype": "|O", "size": 1, "shape": (1,)}, {"a": b"\0" * 8}, 1)
  for entry in ({"raw": b"\0" * 8, "dtype": "|O", "size": 1, "shape": (1,)},
                {"fill": b"\0" * 8, "dtype": "|O", "size": 1, "shape": (1,)}):
    with pytest.raises(UnsafePickleError): buffers.decode(entry, {}, 1)


def test_shared_blobs_are_stored_once_and_pruning_keeps_them_while_referred_to(tmp_path):
  store = Store(str(tmp_path / "r.db"))
  big = bytes(range(256)) * 64
  runs = [store.add_run(argv="[]") for _ in range(2)]
  ids = [store.add_capture(run, "exec", f"k{run}", "n", "here", f"in{run}".encode(), b"out", {},
                           shared_blobs={"s" * 64: big}) for run in runs]
  assert store.conn.execute("SELECT count(*) FROM blobs WHERE sha256 = ?", ("s" * 64,)).fetchone()[0] == 1
  assert all(store.shared_blob_shas(i) == ["s" * 64] for i in ids)
  store.delete_runs([runs[0]])
  assert store.shared_blob_shas(ids[0]) == [] and store.shared_blob_shas(ids[1]) == ["s" * 64]
  # still referred to
  assert store.conn.execute("SELECT count(*) FROM blobs WHERE sha256 = ?", ("s" * 64,)).fetchone()[0] == 1
  store.delete_runs([runs[1]])
  assert store.blob_count() == 0


@pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler")
def test_a_training_workload_shares_buffers_and_replays_the_same(tmp_path):
  db = tmp_path / "r.db"
  capture_workloads(db, "mlp_sgd")
  store = Store(str(db))
  refs = store.conn.execute("SELECT count(*), count(DISTINCT sha256) FROM capture_blobs").fetchone()
  assert refs[0] > refs[1] > 0   # the same contents (data, weights between steps) referred to by several captures
  proc = cli("run", "--kind", "exec", db=db)
  assert proc.returncode == 0 and "OK: all" in proc.stdout, proc.stdout + proc.stderr
  # a shared blob that went missing is an outcome of the captures that need it, not the end of the replay
  sha, = store.conn.execute("SELECT sha256 FROM capture_blobs WHERE capture_id IN (SELECT id FROM captures WHERE "
                            "kind = 'exec') GROUP BY sha256 ORDER BY count(*) LIMIT 1").fetchone()
  store.conn.execute("PRAGMA foreign_keys = OFF")
  store.conn.execute("UPDATE blobs SET data = ? WHERE sha256 = ?", (b"garbage", sha))
  proc = cli("run", "--kind", "exec", db=db)
  assert proc.returncode == 4 and "error" in proc.stdout and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
  assert "same" in proc.stdout
