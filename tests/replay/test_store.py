"""The SQLite store: schema and migrations, content-addressed blobs, clear errors for bad files."""
import json, sqlite3
import pytest
from db import Store, StoreError, SCHEMA_VERSION


def test_tables_indexes_and_blob_dedup(tmp_path):
  s = Store(str(tmp_path / "r.db"))
  assert {"runs", "captures", "blobs", "replays", "outcomes", "schema_version"} <= set(s.db.table_names())
  # captures are found by run (and kind); an index on a column every capture sets differently costs each fold a page
  assert [ix.columns for ix in s.db["captures"].indexes] == [["run_id", "kind"]]
  run = s.add_run(argv="[]")
  for _ in range(3): s.add_capture(run, "kernel", "k", "E_4", "here", b"same input", b"same output", {"A": 1})
  assert s.blob_count() == 2 and len(s.captures(run_ids=[run])) == 3
  assert s.get_blob(s.captures()[0]["input_sha"]) == b"same input"
  assert s.integrity_ok()


def test_browsable_with_plain_sqlite(tmp_path):
  s = Store(str(tmp_path / "r.db"))
  s.add_capture(s.add_run(argv="[]"), "exec", "k", "realize", "loc", b"i", b"o", {})
  s.close()
  conn = sqlite3.connect(tmp_path / "r.db")
  assert conn.execute("SELECT kind, name, location FROM captures").fetchall() == [("exec", "realize", "loc")]


def test_newer_schema_is_refused(tmp_path):
  s = Store(str(tmp_path / "r.db"))
  s.conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
  s.close()
  with pytest.raises(StoreError, match="newer than this harness"): Store(str(tmp_path / "r.db"))


def test_older_file_is_migrated(tmp_path):
  path = tmp_path / "r.db"
  conn = sqlite3.connect(path)
  conn.execute("CREATE TABLE schema_version (version INTEGER)")
  conn.execute("INSERT INTO schema_version VALUES (0)")
  conn.commit(); conn.close()
  s = Store(str(path))
  assert s._version() == SCHEMA_VERSION and "captures" in s.db.table_names()


def _shape(conn: sqlite3.Connection) -> dict:
  """Every table's columns, primary key, foreign keys and indexes, and the rows a new database starts with."""
  shape = {}
  for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").fetchall():
    columns = [(r[1], r[2].upper(), r[5]) for r in conn.execute(f"PRAGMA table_info({table})")]
    keys = sorted((r[2], r[3], r[4]) for r in conn.execute(f"PRAGMA foreign_key_list({table})"))
    indexes = sorted((r[1] if not r[1].startswith("sqlite_autoindex") else "auto", r[2],
                      tuple(c[2] for c in conn.execute(f"PRAGMA index_info('{r[1]}')")))
                     for r in conn.execute(f"PRAGMA index_list({table})"))
    shape[table] = (columns, keys, indexes)
  shape["rows"] = (conn.execute("SELECT name, value FROM issued_ids ORDER BY name").fetchall(),
                   conn.execute("SELECT count(*) FROM identity").fetchone()[0],
                   conn.execute("SELECT version FROM schema_version").fetchall())
  return shape


def test_a_new_database_has_the_schema_the_migrations_build(tmp_path):
  """A new file gets the schema in one step (no sqlite-utils, no chain of migrations); it must be what they build."""
  fresh = Store(str(tmp_path / "fresh.db"))
  assert fresh._db is None   # made without sqlite-utils
  path = tmp_path / "migrated.db"
  conn = sqlite3.connect(path)
  conn.execute("CREATE TABLE schema_version (version INTEGER)")
  conn.execute("INSERT INTO schema_version VALUES (0)")
  conn.commit(); conn.close()
  migrated = Store(str(path))
  assert _shape(fresh.conn) == _shape(migrated.conn)
  assert _shape(fresh.conn)["rows"] == ([("replays", 0), ("runs", 0)], 1, [(SCHEMA_VERSION,)])


def test_not_a_database_and_foreign_sqlite(tmp_path):
  (tmp_path / "junk.db").write_bytes(b"this is not sqlite at all" * 100)
  with pytest.raises(StoreError, match="not a usable replay database|cannot open"): Store(str(tmp_path / "junk.db"))
  conn = sqlite3.connect(tmp_path / "other.db"); conn.execute("CREATE TABLE foo (x)"); conn.commit(); conn.close()
  with pytest.raises(StoreError, match="not a replay database"): Store(str(tmp_path / "other.db"))
  with pytest.raises(StoreError, match="no replay database"): Store(str(tmp_path / "missing.db"), create=False)


def _stored(tmp_path, payload: bytes):
  s = Store(str(tmp_path / "r.db"))
  s.add_capture(s.add_run(argv="[]"), "kernel", "k", "E_4", "here", payload, b"out", {})
  return s, s.captures()[0]["input_sha"]


def test_a_blob_that_does_not_match_its_hash_is_refused(tmp_path):
  """Issue 13.2: blobs are checked against their sha256 when read."""
  import zlib
  from db import BlobError
  s, sha = _stored(tmp_path, b"the captured input")
  s.conn.execute("UPDATE blobs SET data = ? WHERE sha256 = ?", (zlib.compress(b"something else"), sha))
  with pytest.raises(BlobError, match="does not match its sha256"): s.get_blob(sha)
  s.conn.execute("UPDATE blobs SET data = ? WHERE sha256 = ?", (b"not zlib at all", sha))
  with pytest.raises(BlobError, match="corrupt"): s.get_blob(sha)


def test_a_blob_is_decompressed_with_a_size_limit(tmp_path, monkeypatch):
  from db import BlobError
  s, sha = _stored(tmp_path, b"\0" * 100_000)   # compresses to a few hundred bytes
  monkeypatch.setenv("REPLAY_MAX_BLOB_BYTES", "10000")
  with pytest.raises(BlobError, match="expands past 10000 bytes"): s.get_blob(sha)
  monkeypatch.setenv("REPLAY_MAX_BLOB_BYTES", "100000")
  assert s.get_blob(sha) == b"\0" * 100_000


def test_a_schema_version_that_is_not_a_number_is_a_clear_error(tmp_path):
  s = Store(str(tmp_path / "r.db"))
  s.conn.execute("UPDATE schema_version SET version = 'two'")
  s.close()
  with pytest.raises(StoreError, match="not a version number"): Store(str(tmp_path / "r.db"))


FULL_DISK = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # past the limit a write fails with EFBIG, as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
{body}
"""


def test_a_full_disk_is_one_clear_line_and_nothing_half_written(tmp_path):
  import os, subprocess, sys
  from tests.conftest import REPO
  db = tmp_path / "r.db"
  env = {**os.environ, "PYTHONPATH": str(REPO), "REPLAY_DB": str(db)}
  env.pop("CAPTURE_PROCESS_REPLAY", None)
  subprocess.run([sys.executable, "-m", "replay", "capture", "--", sys.executable, "-m", "scripts.workloads", "--only",
                  "mlp_sgd", "--no-variants"],
                 cwd=REPO, env=env, check=True, capture_output=True)
  run = FULL_DISK.format(limit=20000,
                         body="sys.argv = ['replay', 'run', '--jobs', '1']\nfrom replay.cli import main\nmain()")
  proc = subprocess.run([sys.executable, "-c", run], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 4 and proc.stderr.strip().splitlines() == [proc.stderr.strip()], proc.stderr
  assert proc.stderr.startswith("replay: error: cannot ") and "disk" in proc.stderr and "Traceback" not in proc.stderr
  s = Store(str(db))
  assert s.integrity_ok() and len(s.captures()) > 0
  # captures under a full disk: the program runs on, with one warning
  capture = FULL_DISK.format(limit=40000, body="import numpy as np\nfrom scheduler import Tensor\n"
                                               "for i in range(20): (Tensor(np.arange(64, dtype=np.float32)) * "
                                               "i).realize()\nprint('done')")
  proc = subprocess.run([sys.executable, "-c", capture], cwd=REPO, env={**env, "CAPTURE_PROCESS_REPLAY": "1"},
                        capture_output=True, text=True,
                        timeout=300)
  assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr
  warnings = [line for line in proc.stderr.splitlines() if line.startswith("replay capture:")]
  assert len(warnings) == 1 and "cannot write to" in warnings[0] and "Traceback" not in proc.stderr, proc.stderr


def test_a_commit_the_disk_refuses_is_rolled_back_and_named(tmp_path):
  import sqlite3
  from db import StoreWriteError
  s = Store(str(tmp_path / "r.db"))
  real = s.conn
  run = s.add_run(argv="[]")

  class FullDisk:
    def execute(self, sql, *args):
      if sql == "COMMIT": raise sqlite3.OperationalError("database or disk is full")
      return real.execute(sql, *args)
    def __getattr__(self, name): return getattr(real, name)
  s.conn = FullDisk()
  with pytest.raises(StoreWriteError, match=r"cannot write to .*r.db: database or disk is full \(is the disk full"):
    s.add_capture(run, "exec", "k", "n", "loc", b"in", b"out", {})
  s.conn = real
  assert s.captures() == [] and s.blob_count() == 0 and not real.in_transaction   # rolled back, nothing half-written


def test_run_and_replay_ids_are_never_given_out_twice_even_after_a_prune(tmp_path):
  s = Store(str(tmp_path / "r.db"))
  first = s.add_run(argv="[]")
  second = s.add_run(argv="[]")
  replay = s.add_replay(capture_run_id=second)
  s.delete_runs([second])   # the newest run and its replay go
  assert s.replay(replay) is None
  assert s.add_run(argv="[]") == second + 1 and s.add_replay(capture_run_id=first) == replay + 1


def test_a_writer_restores_blobs_a_prune_removed_meanwhile(tmp_path):
  path = str(tmp_path / "r.db")
  writer, pruner = Store(path), Store(path)
  run = writer.add_run(argv="[]")
  writer.add_capture(run, "kernel", "k1", "n", "l", b"input", b"output", {})
  old = pruner.add_run(argv="[]")
  pruner.add_capture(old, "kernel", "k0", "n", "l", b"shared-in", b"shared-out", {})
  writer.preload_blob_shas()            # the writer saw "shared-in" and "shared-out" stored...
  pruner.delete_runs([old])             # ...and a prune removed them with the old run
  writer.add_capture(run, "kernel", "k2", "n", "l", b"shared-in", b"shared-out", {})   # stored again, not lost
  (cap,) = [c for c in writer.captures(run_ids=[run]) if c["key"] == "k2"]
  assert writer.get_blob(cap["input_sha"]) == b"shared-in" and writer.get_blob(cap["output_sha"]) == b"shared-out"


def test_a_large_database_preloads_the_blobs_of_the_commands_last_run_and_asks_for_others(tmp_path):
  s = Store(str(tmp_path / "r.db"))
  train, other = json.dumps(["python", "train.py"]), json.dumps(["python", "eval.py"])
  old = s.add_run(argv=train)
  s.add_capture(old, "kernel", "k0", "n", "l", b"old-in", b"old-out", {})
  last = s.add_run(argv=train)
  s.add_capture(last, "kernel", "k1", "n", "l", b"in", b"out", {}, shared_blobs={Store.blob_sha(b"part"): b"part"})
  elsewhere = s.add_run(argv=other)
  s.add_capture(elsewhere, "kernel", "k2", "n", "l", b"eval-in", b"eval-out", {})
  small = Store(s.path)
  small.preload_blob_shas(train)   # a database this small: every hash
  assert small.known_blobs == {Store.blob_sha(d) for d in (b"old-in", b"old-out", b"in", b"out", b"part", b"eval-in",
                                                            b"eval-out")}
  def large_store() -> Store:   # as if the file were too large to read whole, and the command's runs small beside it
    store = Store(s.path)
    store.PRELOAD_BLOBS, store.PER_CAPTURE_COST = 0, 1
    return store
  large = large_store()
  large.preload_blob_shas(train)   # the blobs of the command's latest run
  assert large.known_blobs == {Store.blob_sha(d) for d in (b"in", b"out", b"part")}
  assert large.holds_blob(Store.blob_sha(b"eval-in")) and Store.blob_sha(b"eval-in") in large.known_blobs   # asked
  assert not large.holds_blob(Store.blob_sha(b"never stored"))
  joined = large_store()   # a process of run `last` itself preloads the run of its command before that one
  joined.preload_blob_shas(train, besides=last)
  assert joined.known_blobs == {Store.blob_sha(b"old-in"), Store.blob_sha(b"old-out")}
  # a command that never ran, or whose last run is not small beside the table, reads every hash: a process may make as
  # many captures as the table holds, and asking for each blob costs ten times more
  stranger = large_store()
  stranger.preload_blob_shas(json.dumps(["python", "new.py"]))
  assert stranger.known_blobs == small.known_blobs and not stranger.holds_blob(Store.blob_sha(b"never stored"))
  big_run = large_store()
  big_run.PER_CAPTURE_COST = 7
  big_run.preload_blob_shas(train)
  assert big_run.known_blobs == small.known_blobs
  huge = large_store()   # a table too large to read whole even so: the file is asked about each blob
  huge.READ_ALL_AT_MOST = 6
  huge.preload_blob_shas(json.dumps(["python", "new.py"]))
  assert huge.known_blobs == set() and huge.holds_blob(Store.blob_sha(b"in")) and not huge.holds_blob("0" * 64)
  # a file written without its foreign keys may refer to a blob it lacks: that blob is not taken as held (a capture
  # would go into the journal without its bytes, and be lost)
  s.conn.execute("PRAGMA foreign_keys = OFF")
  s.conn.execute("UPDATE captures SET output_sha = ? WHERE key = 'k1'", ("0" * 64,))
  dangling = large_store()
  dangling.preload_blob_shas(train)
  assert dangling.known_blobs == {Store.blob_sha(d) for d in (b"in", b"part")} and not dangling.holds_blob("0" * 64)


def _payload(step: int) -> bytes:
  """A training step's payload: the same structure every step, a few numbers differ."""
  import pickle
  return pickle.dumps([("node", i, "ADD" if i % 3 else "MUL", (i - 1, i - 2), step if i % 50 == 0 else i)
                       for i in range(400)])


def _base(store: Store, sha: str):
  return store.conn.execute("SELECT base FROM blobs WHERE sha256 = ?", (sha,)).fetchone()[0]


def test_payloads_alike_are_stored_as_deltas_and_read_back_exactly(tmp_path):
  import zlib
  s = Store(str(tmp_path / "r.db"))
  run = s.add_run(argv="[]")
  for step in range(6): s.add_capture(run, "schedule", f"k{step}", "n", "l", _payload(step), b"o" * 300, {})
  inputs = [c["input_sha"] for c in s.captures(run_ids=[run])]
  assert _base(s, inputs[0]) is None   # the first is stored whole: a payload seen once costs no dictionary
  (dictionary,) = {_base(s, sha) for sha in inputs[1:]}   # one dictionary, made of the first payload's bytes
  assert _base(s, dictionary) is None and dictionary not in {c["output_sha"] for c in s.captures()} | set(inputs)
  whole = len(zlib.compress(_payload(1), 1))
  sizes = [s.conn.execute("SELECT length(data) FROM blobs WHERE sha256 = ?", (sha,)).fetchone()[0]
           for sha in inputs[1:]]
  assert all(size * 5 < whole for size in sizes), (whole, sizes)
  fresh = Store(str(tmp_path / "r.db"))   # another connection reads them without this one's memory
  for step, sha in enumerate(inputs): assert fresh.get_blob(sha) == _payload(step)
  # the kinds do not mix: a kernel's payload is no delta of a schedule's dictionary
  for key in ("k1", "k2"): s.add_capture(run, "kernel", key, "n", "l", _payload(9 + len(key)) + key.encode(), b"x", {})
  assert [_base(s, c["input_sha"]) is None for c in s.captures(kinds=["kernel"])] == [True, False]
  assert _base(s, s.captures(kinds=["kernel"])[1]["input_sha"]) != dictionary


def test_a_role_s_later_payloads_are_deltas_of_a_dictionary_made_of_several_earlier_ones(tmp_path):
  """Kernel ASTs of one program share their words with many earlier ASTs, few with any one: a role's dictionary is
  made again of its latest payloads as they grow, so later deltas are smaller than against the first payload alone."""
  import random, zlib
  from db.store import DICTIONARY_MARK, RECENT_BYTES
  rng = random.Random(7)
  words = [bytes(rng.getrandbits(8) for _ in range(12)) for _ in range(150)]
  payloads = [b"".join(rng.sample(words, 40)) for _ in range(60)]
  s = Store(str(tmp_path / "r.db"))
  run = s.add_run(argv="[]")
  for i, data in enumerate(payloads): s.add_capture(run, "kernel", f"k{i}", "n", "l", data, b"o", {})
  inputs = [c["input_sha"] for c in s.captures(run_ids=[run])]
  bases = [_base(s, sha) for sha in inputs]
  dictionaries = list(dict.fromkeys(b for b in bases if b is not None))
  sizes = {sha: s.conn.execute("SELECT size FROM blobs WHERE sha256 = ?", (sha,)).fetchone()[0]
           for sha in dictionaries}
  assert 2 <= len(dictionaries) <= 4   # grown a few times, not made again for every payload
  assert max(sizes.values()) > 5 * len(payloads[0]) and max(sizes.values()) <= len(DICTIONARY_MARK) + RECENT_BYTES
  stored = sum(s.conn.execute("SELECT length(data) FROM blobs WHERE sha256 = ?", (sha,)).fetchone()[0]
               for sha in inputs[30:])
  def against_the_first(data: bytes) -> int:
    squeeze = zlib.compressobj(9, zlib.DEFLATED, 15, 9, zlib.Z_DEFAULT_STRATEGY, DICTIONARY_MARK + payloads[0])
    return len(squeeze.compress(data) + squeeze.flush())
  assert stored < 0.6 * sum(against_the_first(data) for data in payloads[30:])
  fresh = Store(str(tmp_path / "r.db"))
  assert [fresh.get_blob(sha) for sha in inputs] == payloads


def test_a_damaged_payload_fails_alone_and_a_damaged_dictionary_is_named(tmp_path):
  import zlib
  from db import BlobError
  s = Store(str(tmp_path / "r.db"))
  run = s.add_run(argv="[]")
  for step in range(3): s.add_capture(run, "schedule", f"k{step}", "n", "l", _payload(step), b"o", {})
  first, second, third = (c["input_sha"] for c in s.captures(run_ids=[run]))
  dictionary = _base(s, second)   # made of the first payload's bytes; the first itself is whole
  s.conn.execute("UPDATE blobs SET data = ? WHERE sha256 = ?", (zlib.compress(b"tampered"), first))
  with pytest.raises(BlobError, match="does not match its sha256"): Store(s.path).get_blob(first)
  assert Store(s.path).get_blob(second) == _payload(1)   # the others read through the dictionary, not the payload
  s.conn.execute("UPDATE blobs SET data = ? WHERE sha256 = ?", (zlib.compress(b"not the dictionary"), dictionary))
  with pytest.raises(BlobError, match=f"is a delta of blob {dictionary[:12]}, which cannot be read: .*sha256"):
    Store(s.path).get_blob(second)
  s.conn.execute("UPDATE blobs SET base = ? WHERE sha256 = ?", (second, third))
  with pytest.raises(BlobError, match="which is a delta itself"): Store(s.path).get_blob(third)
  s.conn.execute("PRAGMA foreign_keys = OFF")
  s.conn.execute("DELETE FROM blobs WHERE sha256 = ?", (dictionary,))
  with pytest.raises(BlobError, match=f"is a delta of blob {dictionary[:12]}, which is missing"):
    Store(s.path).get_blob(second)


def test_a_prune_keeps_the_dictionary_of_a_blob_it_keeps_and_a_writer_never_points_at_a_removed_one(tmp_path):
  path = str(tmp_path / "r.db")
  writer, pruner = Store(path), Store(path)
  old, new = writer.add_run(argv="[]"), writer.add_run(argv="[]")
  writer.add_capture(old, "schedule", "k0", "n", "l", _payload(0), b"o", {})
  writer.add_capture(new, "schedule", "k1", "n", "l", _payload(1), b"o", {})   # shares the old run's dictionary
  dictionary = _base(writer, writer.captures(run_ids=[new])[0]["input_sha"])
  pruner.delete_runs([old])
  (cap,) = pruner.captures()
  assert _base(pruner, cap["input_sha"]) == dictionary and pruner.get_blob(cap["input_sha"]) == _payload(1)
  pruner.delete_runs([new])
  assert pruner.blob_count() == 0                            # the dictionary goes with the last blob made with it
  later = writer.add_run(argv="[]")
  writer.add_capture(later, "schedule", "k2", "n", "l", _payload(2), b"o", {})   # its dictionary is gone: made again
  (cap,) = writer.captures(run_ids=[later])
  again = _base(writer, cap["input_sha"])
  assert again is not None and writer.conn.execute("SELECT 1 FROM blobs WHERE sha256 = ?", (again,)).fetchone()
  assert Store(path).get_blob(cap["input_sha"]) == _payload(2)


def test_a_prune_deletes_only_unreferenced_blobs_and_checks_foreign_keys_again_after(tmp_path):
  """Blobs are deleted without checking foreign keys (a check searched every capture per blob): what stays is every
  blob a kept capture refers to, and the database refuses a capture naming a missing blob afterwards as before."""
  s = Store(str(tmp_path / "r.db"))
  runs = [s.add_run(argv="[]") for _ in range(4)]
  for n, run in enumerate(runs * 25):
    shared = {Store.blob_sha(f"{n}-{j}".encode()): f"{n}-{j}".encode() for j in range(3)}
    shared[Store.blob_sha(b"common")] = b"common"
    s.add_capture(run, "exec", f"k{n}", "n", "l", f"in{n}".encode(), f"out{n}".encode(), {}, shared_blobs=shared)
  kept = s.captures(run_ids=runs[2:])
  s.delete_runs(runs[:2])
  assert s.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
  assert s.conn.execute("PRAGMA foreign_key_check").fetchall() == []
  needed = {sha for c in kept for sha in (c["input_sha"], c["output_sha"], *s.shared_blob_shas(c["id"]))}
  assert {r[0] for r in s.conn.execute("SELECT sha256 FROM blobs")} == needed and len(needed) == 50 * 5 + 1
  with pytest.raises(sqlite3.IntegrityError):
    s.conn.execute("INSERT INTO captures (run_id, kind, input_sha, output_sha) VALUES (?, 'exec', ?, ?)",
                   (runs[2], "0" * 64, "0" * 64))


def test_opening_waits_while_the_database_is_locked_at_once():
  # SQLite can refuse PRAGMA journal_mode at once, without its busy handler, while another process holds the file
  from db.store import _set_wal
  class Refusing:
    def __init__(self, refusals, error="database is locked"): self.refusals, self.error, self.calls = refusals, error, 0
    def execute(self, sql):
      self.calls += 1
      if self.calls <= self.refusals: raise sqlite3.OperationalError(self.error)
  conn = Refusing(3)
  _set_wal(conn)
  assert conn.calls == 4
  with pytest.raises(sqlite3.OperationalError):   # locked for longer than it waits
    _set_wal(Refusing(10**9), seconds=0.05)
  with pytest.raises(sqlite3.OperationalError):   # any other error at once
    _set_wal(Refusing(1, "disk I/O error"))


def _folded_payloads(path: str, count: int = 8):
  """A fold of `count` kernel captures whose inputs are alike payloads: (the store, the captures' input hashes)."""
  from db import journal
  s = Store(path)
  run = s.add_run(argv="[]")
  records = []
  for i in range(count):
    data = _payload(i)
    fields = {"run_id": run, "kind": "kernel", "key": f"k{i}", "name": "E", "location": "here", "time": 1000.0 + i,
              "input_sha": Store.blob_sha(data), "output_sha": Store.blob_sha(b"out"), "flags": "{}", "meta": "{}"}
    records.append(journal.Record(fields, [(fields["input_sha"], data, ("kernel", "input")),
                                           (fields["output_sha"], b"out", ("kernel", "output"))], []))
  assert s.fold_records(records) == (count, [])
  return s, [r.fields["input_sha"] for r in records]


def test_a_fold_packs_its_payloads_into_one_stream_read_back_exactly(tmp_path):
  """Payloads compressed together take less than each compressed alone; each member names its place in the pack."""
  import zlib
  from db.store import PACK_MARK
  s, inputs = _folded_payloads(str(tmp_path / "r.db"))
  packs = {_base(s, sha) for sha in inputs}
  assert len(packs) == 1 and None not in packs
  (pack,) = packs
  assert _base(s, pack) is None and pack not in {c["output_sha"] for c in s.captures()}
  members = s.conn.execute("SELECT data FROM blobs WHERE base = ?", (pack,)).fetchall()
  assert len(members) == 9 and all(data.startswith(PACK_MARK) for (data,) in members)   # 8 inputs and the output
  stored = s.conn.execute("SELECT sum(length(data)) FROM blobs").fetchone()[0]
  assert stored < 0.5 * sum(len(zlib.compress(_payload(i), 6)) for i in range(8))
  fresh = Store(s.path)
  assert [fresh.get_blob(sha) for sha in inputs] == [_payload(i) for i in range(8)]
  assert fresh.get_blob(Store.blob_sha(b"out")) == b"out"
  assert s.integrity_ok()


def test_a_pack_is_split_at_its_size_limit_and_a_lone_payload_is_not_packed(tmp_path, monkeypatch):
  import db.store
  monkeypatch.setattr(db.store, "MAX_PACK_BYTES", 3 * len(_payload(0)))
  s, inputs = _folded_payloads(str(tmp_path / "r.db"), 7)
  packs = [_base(s, sha) for sha in inputs]
  assert len(set(packs)) >= 3 and all(packs.count(p) <= 3 for p in set(packs))
  assert [Store(s.path).get_blob(sha) for sha in inputs] == [_payload(i) for i in range(7)]
  one, (only,) = _folded_payloads(str(tmp_path / "one.db"), 1)
  assert one.conn.execute("SELECT count(*) FROM blobs WHERE data LIKE 'pack %'").fetchone()[0] == 0
  assert one.get_blob(only) == _payload(0)


def test_a_damaged_or_missing_pack_is_named_and_a_damaged_member_fails_alone(tmp_path):
  import zlib
  from db import BlobError
  s, inputs = _folded_payloads(str(tmp_path / "r.db"))
  pack = _base(s, inputs[0])
  s.conn.execute("UPDATE blobs SET data = ? WHERE sha256 = ?", (b"pack 5 999999", inputs[1]))
  with pytest.raises(BlobError, match="does not match its sha256"): Store(s.path).get_blob(inputs[1])
  for place in (b"pack five", b"pack 1 " + b"9" * 5000):
    s.conn.execute("UPDATE blobs SET data = ? WHERE sha256 = ?", (place, inputs[2]))
    with pytest.raises(BlobError, match=f"names no place in its pack {pack[:12]}"): Store(s.path).get_blob(inputs[2])
  assert Store(s.path).get_blob(inputs[3]) == _payload(3)   # the others still read
  s.conn.execute("UPDATE blobs SET data = ? WHERE sha256 = ?", (zlib.compress(b"not the pack"), pack))
  with pytest.raises(BlobError, match=f"is in pack {pack[:12]}, which cannot be read: .*sha256"):
    Store(s.path).get_blob(inputs[3])
  s.conn.execute("UPDATE blobs SET base = ? WHERE sha256 = ?", (inputs[5], pack))
  with pytest.raises(BlobError, match="which is not a whole blob"): Store(s.path).get_blob(inputs[3])
  s.conn.execute("PRAGMA foreign_keys = OFF")
  s.conn.execute("DELETE FROM blobs WHERE sha256 = ?", (pack,))
  with pytest.raises(BlobError, match=f"is in pack {pack[:12]}, which is missing"): Store(s.path).get_blob(inputs[3])


def test_a_prune_keeps_the_members_a_kept_capture_refers_to_and_writes_a_mostly_empty_pack_again(tmp_path, monkeypatch):
  import db.store
  s, inputs = _folded_payloads(str(tmp_path / "r.db"))
  pack = _base(s, inputs[0])
  (run,) = {c["run_id"] for c in s.captures()}
  keep = s.add_run(argv="[]")
  s.add_capture(keep, "kernel", "kept", "E", "here", _payload(4), b"other output", {})   # names a member
  s.add_capture(keep, "kernel", "kept too", "E", "here", _payload(5), b"other output", {})
  whole = s.conn.execute("SELECT size FROM blobs WHERE sha256 = ?", (pack,)).fetchone()[0]
  s.delete_runs([run])
  # two of the pack's nine members stay: they move into a pack of their own, and the old one goes
  (repacked,) = {_base(s, Store.blob_sha(_payload(i))) for i in (4, 5)}
  assert repacked != pack and not s.conn.execute("SELECT 1 FROM blobs WHERE sha256 = ?", (pack,)).fetchone()
  assert s.conn.execute("SELECT size FROM blobs WHERE sha256 = ?", (repacked,)).fetchone()[0] < whole / 3
  assert [Store(s.path).get_blob(Store.blob_sha(_payload(i))) for i in (4, 5)] == [_payload(4), _payload(5)]
  s.conn.execute("DELETE FROM captures WHERE key = 'kept too'")
  s.delete_unreferenced_blobs()   # one member left holding half the pack: not written again
  assert _base(s, Store.blob_sha(_payload(4))) == repacked
  monkeypatch.setattr(db.store, "REPACK_BELOW", 0.75)
  s.delete_unreferenced_blobs()   # below the threshold, the member left alone is stored whole
  assert _base(s, Store.blob_sha(_payload(4))) is None and Store(s.path).get_blob(Store.blob_sha(_payload(4))) == \
    _payload(4)
  s.delete_runs([keep])
  assert s.blob_count() == 0   # the pack goes with the last member a capture refers to


def test_a_path_that_is_not_a_regular_file_is_named_as_such(tmp_path):
  import os
  os.mkfifo(tmp_path / "pipe")
  (tmp_path / "folder").mkdir()
  for path in (tmp_path / "pipe", tmp_path / "folder", "/dev/null"):
    for create in (True, False):
      with pytest.raises(StoreError, match="it is not a regular file"): Store(str(path), create=create)
