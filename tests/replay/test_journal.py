"""The capture journal (db/journal.py): records that survive a kill, and folding them into the database once."""
import json, os, signal, struct, subprocess, sys, textwrap, zlib
from db import Store, journal
from tests.conftest import REPO


def _record(i: int, run_id: int, data: bytes = b"") -> journal.Record:
  data = data or f"input {i}".encode()
  in_sha, out_sha = Store.blob_sha(data), Store.blob_sha(b"output")
  fields = {"run_id": run_id, "kind": "kernel", "key": f"k{i}", "name": f"E_{i}", "location": "here",
            "time": 1000.0 + i, "input_sha": in_sha, "output_sha": out_sha, "flags": "{}", "meta": "{}"}
  return journal.Record(fields, [(in_sha, data, ("kernel", "input")), (out_sha, b"output", None)], [])


def test_records_read_back_up_to_a_write_a_kill_cut_short():
  whole = b"".join(_record(i, 1).encode() for i in range(3))
  cut = whole[:-5]
  assert [r.fields["key"] for r in journal.records(whole)] == ["k0", "k1", "k2"]
  assert [r.fields["key"] for r in journal.records(cut)] == ["k0", "k1"]
  damaged = bytearray(whole)
  damaged[len(_record(0, 1).encode()) + 20] ^= 0xFF   # a flipped byte in the second record ends the segment there
  assert [r.fields["key"] for r in journal.records(bytes(damaged))] == ["k0"]
  (back,) = journal.records(_record(7, 1, b"x" * 1000).encode())
  assert back.blobs[0][1:] == (b"x" * 1000, ("kernel", "input")) and back.blobs[1][1:] == (b"output", None)


def test_a_record_made_from_a_row_is_the_record_made_from_its_fields():
  by_name = _record(3, 2)
  by_row = journal.Record(None, by_name.blobs, [], tuple(by_name.fields[f] for f in journal.FIELDS))
  assert by_row.encode() == by_name.encode() and by_row.row == by_name.row
  (back,) = journal.records(by_row.encode())
  assert back.row == by_row.row and back.fields == by_name.fields
  # asked for by name, the fields become the record's dict: a change to it is what the record holds from then on
  back.fields["name"] = "renamed"
  assert back.row[journal.FIELDS.index("name")] == "renamed"
  assert journal.Record({"kind": "kernel"}, [], []).row is None   # not the full set of fields: written as JSON


def _as_json_record(record: journal.Record) -> bytes:
  """The record as a process of the previous version wrote it (RPJ1: a JSON header)."""
  described = [[sha, -1 if data is None else len(data), role] for sha, data, role in record.blobs]
  header = json.dumps({**record.fields, "shared": record.shared, "blobs": described}).encode()
  body = b"".join([struct.pack("<I", len(header)), header, *(d for _, d, _ in record.blobs if d is not None)])
  return struct.pack("<4sII", b"RPJ1", len(body), zlib.crc32(body)) + body


def test_records_read_back_whatever_their_fields_hold_and_from_older_writers():
  odd = _record(1, 1)
  odd.fields.update(name="E_\u00e9\udcff", location="a\x00b.py:3 f", meta='{"k": "\\n"}')   # a NUL: the JSON form
  plain, shared, untyped = _record(2, 1), _record(3, 1), _record(5, 1)
  untyped.fields["name"] = None   # not text: the JSON form keeps it None
  shared.shared, shared.blobs = ["s" * 64], [("s" * 64, None, ("part", "ast")), *shared.blobs]
  data = odd.encode() + plain.encode() + shared.encode() + _as_json_record(_record(4, 1)) + untyped.encode()
  assert data[:4] == b"RPJ1" and plain.encode()[:4] == b"RPJ2" and untyped.encode()[:4] == b"RPJ1"
  back = list(journal.records(data))
  assert [r.fields for r in back] == [odd.fields, plain.fields, shared.fields, _record(4, 1).fields, untyped.fields]
  assert [(r.blobs, r.shared) for r in back[1:3]] == [(plain.blobs, []), (shared.blobs, ["s" * 64])]
  # a header whose numbers are not numbers ends the segment there, as a damaged record does
  bad = plain.encode().replace(b"\x001002.0\x00", b"\x00later!\x00")
  assert bad != plain.encode()
  body = bad[12:]
  assert list(journal.records(struct.pack("<4sII", b"RPJ2", len(body), zlib.crc32(body)) + body)) == []
  # headers cut anywhere, with a valid checksum (a hostile or buggy writer), never raise: each ends the segment, but
  # the one cut right after the shared blobs' count, which is a whole record that lists no blobs
  header = plain._joined_header()
  for cut in range(len(header) + 1):
    body = struct.pack("<I", cut) + header[:cut]
    found = list(journal.records(struct.pack("<4sII", b"RPJ2", len(body), zlib.crc32(body)) + body))
    assert found == [] or ([(r.fields, r.blobs, r.shared) for r in found] == [(plain.fields, [], [])]
                           and header[:cut].endswith(b"\x000"))


def _journal(db: str, records: int) -> tuple[Store, int, journal.Journal]:
  """A database with a run, and a journal of this process that holds `records` records of it."""
  store = Store(db)
  run = store.add_run(argv="[]")
  j = journal.Journal(db, store.known_blobs)
  _append(j, run, range(records))
  return store, run, j


def _append(j: journal.Journal, run: int, numbers) -> None:
  for i in numbers: j.append(_record(i, run).fields, _record(i, run).blobs, [])


def test_a_journal_folds_once_and_a_dead_folder_does_not_store_twice(tmp_path):
  db = str(tmp_path / "r.db")
  store, run, _ = _journal(db, 3)
  assert store.capture_counts(run) == {"kernel": 3}   # a read folds what this process holds
  assert os.listdir(journal.pending_dir(db)) == []
  # a folder that died after its commit leaves the segment as `.folding`: folding it again stores only what is new
  segment = os.path.join(journal.pending_dir(db), "123-abc.000001.folding")
  with open(segment, "wb") as f: f.write(b"".join(_record(i, run).encode() for i in range(4)))
  assert store.capture_counts(run) == {"kernel": 4}
  assert [c["key"] for c in store.captures([run])] == ["k0", "k1", "k2", "k3"]
  assert store.get_blob(store.captures([run])[3]["input_sha"]) == b"input 3"


def test_the_open_segment_of_a_live_process_waits_for_it_and_is_folded_once_it_died(tmp_path):
  db = str(tmp_path / "r.db")
  store = Store(db)
  run = store.add_run(argv="[]")
  writer = textwrap.dedent(f"""
    import sys
    from db import Store, journal
    from tests.replay.test_journal import _record
    j = journal.Journal({db!r}, set())
    for i in range(2): j.append(_record(i, {run}).fields, _record(i, {run}).blobs, [])
    print("written", flush=True)
    sys.stdin.read()
  """)
  proc = subprocess.Popen([sys.executable, "-c", writer], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
  try:
    assert proc.stdout.readline().strip() == "written"
    assert store.capture_counts(run) == {}   # its writer holds it
  finally:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
  assert store.capture_counts(run) == {"kernel": 2}
  assert store.integrity_ok()


def test_a_record_whose_blob_was_pruned_meanwhile_is_counted_lost(tmp_path):
  db = str(tmp_path / "r.db")
  store = Store(db)
  run = store.add_run(argv="[]")
  record = _record(0, run)
  record.blobs[1] = (record.blobs[1][0], None, None)   # the writer believed the database held it
  assert store.fold_records([record]) == (0, [(run, "a blob it refers to was removed from the database")])
  assert store.run(run)["lost"] == 1 and store.capture_counts(run) == {}


def test_a_damaged_segment_is_read_up_to_the_damage_and_never_fails_a_read(tmp_path):
  db = str(tmp_path / "r.db")
  store = Store(db)
  run = store.add_run(argv="[]")
  os.makedirs(journal.pending_dir(db))
  body = b"\x02\x00\x00\x00[]"   # a record whose header is not an object: it checks out, and ends the segment
  damaged = journal._HEAD.pack(journal.MAGIC, len(body), zlib.crc32(body)) + body
  with open(os.path.join(journal.pending_dir(db), "1-x.000001.sealed"), "wb") as f:
    f.write(_record(0, run).encode() + damaged + _record(1, run).encode())
  assert store.capture_counts(run) == {"kernel": 1} and store.integrity_ok()


def test_what_is_not_a_plain_file_in_the_pending_folder_is_left_alone(tmp_path):
  """A segment name on a link to /dev/zero (read forever), a pipe (opened, it waits for a writer) or a folder: no
  writer made these, and a read of the database neither hangs on them nor removes them."""
  db = str(tmp_path / "r.db")
  store = Store(db)
  run = store.add_run(argv="[]")
  pending = journal.pending_dir(db)
  os.makedirs(pending)
  strays = [os.path.join(pending, f"{name}.000001.sealed") for name in ("1-link", "2-pipe", "3-dir")]
  os.symlink("/dev/zero", strays[0])
  os.mkfifo(strays[1])
  os.mkdir(strays[2])
  with open(os.path.join(pending, "4-real.000001.sealed"), "wb") as f: f.write(_record(0, run).encode())
  fold = f"from db import Store, journal; print(journal.fold_pending(Store({db!r})))"
  proc = subprocess.run([sys.executable, "-c", fold], cwd=REPO, capture_output=True, text=True, timeout=60)
  assert proc.returncode == 0 and proc.stdout.strip() == "(1, [])", proc.stderr
  assert all(os.path.lexists(p) for p in strays) and store.capture_counts(run) == {"kernel": 1}


def test_a_forked_child_that_lives_on_does_not_hold_up_its_parents_fold(tmp_path):
  db = str(tmp_path / "r.db")
  program = textwrap.dedent("""
    import os, signal, time
    from scheduler import Tensor
    from replay.capture import flush
    (Tensor([1.0, 2.0]) + 1).realize()
    child = os.fork()
    if child == 0:
      time.sleep(60)
      os._exit(0)
    started = time.time()
    flush()
    print(round(time.time() - started))
    os.kill(child, signal.SIGKILL)
  """)
  env = {**os.environ, "PYTHONPATH": str(REPO), "REPLAY_DB": db, "CAPTURE_PROCESS_REPLAY": "1"}
  proc = subprocess.run([sys.executable, "-c", program], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0 and int(proc.stdout) < 10, proc.stderr
  assert Store(db).capture_counts() == {"schedule": 1, "kernel": 1, "exec": 1}


def test_a_process_folds_its_own_segment_from_memory_unless_the_file_changed(tmp_path):
  db = str(tmp_path / "r.db")
  store, run, j = _journal(db, 2)
  assert store.capture_counts(run) == {"kernel": 2}   # the records it wrote, not read back
  _append(j, run, range(2, 4))
  j.seal()
  (sealed,) = os.listdir(journal.pending_dir(db))
  with open(os.path.join(journal.pending_dir(db), sealed), "ab") as f: f.write(_record(4, run).encode())
  # the file is not what this process wrote: it is read, all of it
  assert [c["key"] for c in store.captures([run])] == ["k0", "k1", "k2", "k3", "k4"]
  assert store.integrity_ok() and journal._written_here == {}


def test_records_kept_for_a_segment_another_process_folded_first_are_let_go(tmp_path):
  db = str(tmp_path / "r.db")
  store, run, j = _journal(db, 2)
  j.seal()
  (sealed,) = os.listdir(journal.pending_dir(db))
  os.unlink(os.path.join(journal.pending_dir(db), sealed))   # as a reader in another process leaves it, once folded
  assert journal._written_here
  journal.fold_pending(store)
  assert journal._written_here == {}


def test_blobs_the_database_holds_go_without_their_bytes_and_are_not_stored_again(tmp_path):
  db = str(tmp_path / "r.db")
  store, run, _ = _journal(db, 1)
  store.capture_counts(run)   # folds: "input 0" and "output" are in the file now
  large = Store(db)   # not preloaded (as in a database too large to read whole): it asks the file for each blob
  assert large.known_blobs == set()
  j = journal.Journal(db, large.known_blobs)
  record = _record(0, run)
  j.append(record.fields, record.blobs, [], large.holds_blob)   # the database holds both blobs: asked, not written
  j.append(_record(1, run).fields, _record(1, run).blobs, [], large.holds_blob)   # "input 1" is new
  with_bytes = [[sha for sha, data, _ in r.blobs if data is not None] for r in j.records]
  assert with_bytes == [[], [Store.blob_sha(b"input 1")]]
  before = store.blob_count()
  journal.fold_pending(large)
  assert store.blob_count() == before + 1 and store.capture_counts(run) == {"kernel": 3}
  # a record that brings the bytes of a blob the file holds has it looked up there, not compressed and stored again
  unaware = journal.Journal(db, set())   # without `holds`: its known blobs, none here
  unaware.append(_record(2, run).fields, _record(2, run).blobs, [])
  assert all(data is not None for _, data, _ in unaware.records[0].blobs)
  fresh = Store(db)
  inserted = []
  real_insert = fresh._insert_blob
  fresh._insert_blob = lambda sha, *rest: (inserted.append(sha), real_insert(sha, *rest))
  journal.fold_pending(fresh)
  assert inserted == [Store.blob_sha(b"input 2")]
  assert store.blob_count() == before + 2 and store.capture_counts(run) == {"kernel": 4} and store.integrity_ok()
