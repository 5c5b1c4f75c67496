"""The SQLite store of captures and replays, on sqlite-utils: one file, WAL mode, content-addressed
compressed blobs, plain queryable columns, forward migrations.

Sits at the bottom of the harness: `replay/` writes and reads through it; it imports nothing of the
project. The file stays browsable with `sqlite-utils tables/rows` and plain `sqlite3`.
"""
from __future__ import annotations
import hashlib, json, os, sqlite3, time, zlib
from typing import Any, Iterable, Optional, TYPE_CHECKING
from db import journal
if TYPE_CHECKING: import sqlite_utils

SCHEMA_VERSION = 16
DEFAULT_PATH = os.path.join(".replay", "replay.db")


class StoreError(RuntimeError):
  """The database cannot be used: unreadable, corrupt, or from a newer version of the harness."""


class NoDatabase(StoreError):
  """There is no replay database at the path yet (a usage mistake, not a failure)."""


class StoreWriteError(StoreError):
  """The database could not be written (disk full, file size limit, I/O error); the write was rolled back."""


class BlobError(StoreError):
  """One blob cannot be used (missing, corrupt, too large, or not what its hash says); other captures still can."""


def max_blob_bytes() -> int:
  """The largest blob that is decompressed (REPLAY_MAX_BLOB_BYTES, default 1 GiB): a small compressed blob from an
  untrusted database must not expand into all of memory."""
  raw = os.getenv("REPLAY_MAX_BLOB_BYTES", "")
  return int(raw) if raw.isdigit() else 1 << 30


def default_path() -> str: return os.getenv("REPLAY_DB") or DEFAULT_PATH


DICTIONARY_BYTES = 32 * 1024   # zlib's window: a delta sees this much of its dictionary
RECENT_BYTES = 16 * 1024       # a dictionary is made of at most this much of its role's latest payloads
DICTIONARY_GROWTH = 4          # a role's dictionary is made again once its latest payloads are this many times larger
DICTIONARY_MARK = b"replay zlib dictionary\n"   # a dictionary's bytes are never a payload's
DELTA_GAIN = 0.8               # a delta is kept when it is at most this part of the payload compressed alone
MIN_DICTIONARY_BYTES = 256     # smaller payloads are stored as they are
# A fold stores the payloads of its captures (blobs with a role: graphs, kernel ASTs, payloads; not input buffers) in
# packs: one zlib stream of them all, a blob of its own no capture refers to, whose members are rows naming their place
# in it (`base` is the pack, `data` the place). Compressed together, the kernel ASTs of a program take half the bytes of
# each one alone against a dictionary, and no dictionary repeats what the payloads hold.
PACK_MARK = b"pack "           # a member's data: b"pack <offset> <length>" (never a zlib stream: its method is not 8)
MAX_PACK_BYTES = 1 << 20       # a pack holds at most this much (reading one member inflates its whole pack)
REPACK_BELOW = 0.5             # a prune writes again a pack whose remaining members hold less than this part of it


def _window_bits(size: int) -> int:
  """The zlib window for a payload of `size` bytes: about its size (setting up a 32 KB window and dictionary took
  longer than compressing a 1 KB kernel payload)."""
  return min(15, max(10, size.bit_length() + 1))


def _deflate(data: bytes, zdict: Optional[bytes] = None) -> bytes:
  """A payload compressed: harder for one up to a megabyte (payloads are graphs, kernels and small buffers, compressed
  once per database: their bytes count more than their time; buffers of their own are compressed fast), with a window
  of its size alone (setting up a 32 KB window took longer than compressing a 1 KB kernel payload) or the whole window
  against a dictionary (a delta)."""
  level, bits = (6 if len(data) <= 1 << 20 else 1), (15 if zdict else _window_bits(len(data)))
  squeeze = zlib.compressobj(level, zlib.DEFLATED, bits, 8, zlib.Z_DEFAULT_STRATEGY, *([zdict] if zdict else []))
  return squeeze.compress(data) + squeeze.flush()


# ***** migrations: each takes the database from version i to i+1 *****

def _migrate_to_1(db: "sqlite_utils.Database") -> None:
  db["runs"].create({"id": int, "started": float, "finished": float, "git_commit": str, "git_dirty": int, "argv": str,
                     "python": str, "numpy": str, "host": str, "flags": str}, pk="id")
  db["blobs"].create({"sha256": str, "size": int, "data": bytes}, pk="sha256")
  db["captures"].create({"id": int, "run_id": int, "kind": str, "key": str, "name": str, "location": str, "time": float,
                         "input_sha": str, "output_sha": str, "flags": str, "meta": str},
                        pk="id",
                        foreign_keys=[("run_id", "runs", "id"), ("input_sha", "blobs", "sha256"),
                                      ("output_sha", "blobs", "sha256")])
  db["captures"].create_index(["run_id", "kind"])
  db["captures"].create_index(["key"])
  db["captures"].create_index(["location"])
  db["captures"].create_index(["name"])
  db["replays"].create({"id": int, "started": float, "finished": float, "capture_run_id": int, "base_ref": str,
                        "base_commit": str,
                        "head_commit": str, "jobs": int, "argv": str, "verdict": str, "exit_code": int}, pk="id")
  db["outcomes"].create({"id": int, "replay_id": int, "capture_id": int, "status": str, "reason": str, "diff": str,
                         "metrics": str, "seconds": float},
                        pk="id", foreign_keys=[("replay_id", "replays", "id"), ("capture_id", "captures", "id")])
  db["outcomes"].create_index(["replay_id", "status"])
  db["outcomes"].create_index(["capture_id"])


def _migrate_to_2(db: "sqlite_utils.Database") -> None:
  """Replays remember how many captures they selected (to tell a finished replay from an interrupted one) and
  the policy they ran under (so that a later report gives the same verdict)."""
  db["replays"].add_column("selected", int)
  db["replays"].add_column("policy", str)


def _migrate_to_3(db: "sqlite_utils.Database") -> None:
  """Runs remember how the captured command ended: its exit code (negative: killed by that signal)."""
  db["runs"].add_column("exit_code", int)


def _migrate_to_4(db: "sqlite_utils.Database") -> None:
  """Runs remember how to run their command again (working directory, the environment that steers the compiler)
  and the compiler's flag defaults; a rerun names the run it repeats and the tree it ran with. Replays keep notes
  about the whole replay (flag defaults that differ, the end-to-end runs)."""
  for column in ("cwd", "env", "flag_defaults", "tree"): db["runs"].add_column(column, str)
  db["runs"].add_column("rerun_of", int)
  db["replays"].add_column("notes", str)


def _migrate_to_5(db: "sqlite_utils.Database") -> None:
  """Accepted changes: a difference (kind, location, fingerprint of the diff) a reviewer said is expected."""
  db["accepted"].create({"id": int, "kind": str, "location": str, "fingerprint": str, "name": str, "time": float,
                         "head_commit": str}, pk="id")
  db["accepted"].create_index(["kind", "location", "fingerprint"], unique=True)


def _migrate_to_6(db: "sqlite_utils.Database") -> None:
  """A replay of one shard of the selection (`--shard I/N`) says which, so that `replay merge` can join N of them."""
  db["replays"].add_column("shard", str)


def _migrate_to_7(db: "sqlite_utils.Database") -> None:
  """Blobs a capture refers to besides its input and output: input buffers stored once for every capture that reads
  the same contents. Pruning keeps a blob while any capture refers to it here."""
  db["capture_blobs"].create({"capture_id": int, "sha256": str}, pk=("capture_id", "sha256"),
                             foreign_keys=[("capture_id", "captures", "id"), ("sha256", "blobs", "sha256")])
  db["capture_blobs"].create_index(["sha256"])


def _migrate_to_8(db: "sqlite_utils.Database") -> None:
  """The highest run and replay ids ever given out: SQLite would give a pruned newest id to the next row, and a
  report or a note naming "replay 7" would then mean another replay."""
  db["issued_ids"].create({"name": str, "value": int}, pk="name")
  for table in ("runs", "replays"):
    top = db.execute(f"SELECT max(id) FROM {table}").fetchone()[0] or 0
    db["issued_ids"].insert({"name": table, "value": top})


def _migrate_to_9(db: "sqlite_utils.Database") -> None:
  """A database has an identity: shards merged into one replay must come from one database, and capture run 1 of
  one database is not capture run 1 of another."""
  import uuid
  db["identity"].create({"uuid": str}, pk="uuid")
  db["identity"].insert({"uuid": str(uuid.uuid4())})


def _migrate_to_10(db: "sqlite_utils.Database") -> None:
  """Runs count the captures their processes took but could not store: such a run is incomplete, not a success."""
  db["runs"].add_column("lost", int)


def _migrate_to_11(db: "sqlite_utils.Database") -> None:
  """An acceptance is scoped to the base it was made against: the same difference against another base (a reverted
  experiment, another branch point) needs its own review."""
  db["accepted"].add_column("base_commit", str)
  db.execute("DROP INDEX IF EXISTS idx_accepted_kind_location_fingerprint")
  db["accepted"].create_index(["kind", "location", "fingerprint", "base_commit"], unique=True)


def _migrate_to_12(db: "sqlite_utils.Database") -> None:
  """A blob may be stored as a delta: compressed with a zlib dictionary that is a blob of its own (`base`, the sha256
  of a blob that is no delta itself). A training loop captures near-identical payloads every step."""
  db["blobs"].add_column("base", str)


_PART_INDEX_TABLE = \
  'CREATE TABLE "part_index" ("code" TEXT, "node_key" TEXT, "sha256" TEXT, PRIMARY KEY ("code", "node_key"))'


def _migrate_to_13(db: "sqlite_utils.Database") -> None:
  """Which blob holds the pickle of a graph part (a kernel AST), by the part's structural key and the code that pickled
  it: a program captured again into the same database finds its kernels' pickles here instead of making them again."""
  db.execute(_PART_INDEX_TABLE)


def _migrate_to_14(db: "sqlite_utils.Database") -> None:
  """No index of captures by key, location or name: every capture stored updated them, the key's at a random page (in
  a database of 57,000 captures, a run that captured 330 wrote 4,913 pages to the WAL and the file, 2,834 without
  them), and no query needs them (a location is searched with LIKE '%...%', which no index serves; a name or key is
  looked for within a run)."""
  for column in ("key", "location", "name"): db.execute(f'DROP INDEX IF EXISTS "idx_captures_{column}"')


def _migrate_to_15(db: "sqlite_utils.Database") -> None:
  """A schedule capture may name its kernel ASTs by a prefix of their hash (`replay/parts.py`), which a harness of
  schema 14 cannot join: it refuses the database instead of failing on those captures one by one.
  No index of capture_blobs by blob: each capture's links went to random pages of it (a run of the training workloads
  on a database of twenty runs wrote 2,081 pages and read 1,232, 399 and 198 without it), and only the check of
  foreign keys when blobs are deleted used it, which `delete_unreferenced_blobs` does not need (it deletes only blobs
  nothing refers to)."""
  db.execute('DROP INDEX IF EXISTS "idx_capture_blobs_sha256"')


def _migrate_to_16(db: "sqlite_utils.Database") -> None:
  """A blob may be a member of a pack (`PACK_MARK`), which a harness of schema 15 would read as a corrupt delta: it
  refuses the database instead. No table changes."""


MIGRATIONS = [_migrate_to_1, _migrate_to_2, _migrate_to_3, _migrate_to_4, _migrate_to_5, _migrate_to_6, _migrate_to_7,
              _migrate_to_8, _migrate_to_9, _migrate_to_10, _migrate_to_11, _migrate_to_12, _migrate_to_13,
              _migrate_to_14, _migrate_to_15, _migrate_to_16]


# the schema the migrations build, made at once in a new database (importing sqlite-utils and running every step
# took longer than the first captures of a short program); tests/replay/test_store.py checks both give one schema
FRESH_SCHEMA = (
  'CREATE TABLE "runs" ("id" INTEGER PRIMARY KEY, "started" REAL, "finished" REAL, "git_commit" TEXT, '
  '"git_dirty" INTEGER, "argv" TEXT, "python" TEXT, "numpy" TEXT, "host" TEXT, "flags" TEXT, "exit_code" INTEGER, '
  '"cwd" TEXT, "env" TEXT, "flag_defaults" TEXT, "tree" TEXT, "rerun_of" INTEGER, "lost" INTEGER)',
  'CREATE TABLE "blobs" ("sha256" TEXT PRIMARY KEY, "size" INTEGER, "data" BLOB, "base" TEXT)',
  'CREATE TABLE "captures" ("id" INTEGER PRIMARY KEY, "run_id" INTEGER REFERENCES "runs"("id"), "kind" TEXT, '
  '"key" TEXT, "name" TEXT, "location" TEXT, "time" REAL, "input_sha" TEXT REFERENCES "blobs"("sha256"), '
  '"output_sha" TEXT REFERENCES "blobs"("sha256"), "flags" TEXT, "meta" TEXT)',
  'CREATE INDEX "idx_captures_run_id_kind" ON "captures" ("run_id", "kind")',
  'CREATE TABLE "replays" ("id" INTEGER PRIMARY KEY, "started" REAL, "finished" REAL, "capture_run_id" INTEGER, '
  '"base_ref" TEXT, "base_commit" TEXT, "head_commit" TEXT, "jobs" INTEGER, "argv" TEXT, "verdict" TEXT, '
  '"exit_code" INTEGER, "selected" INTEGER, "policy" TEXT, "notes" TEXT, "shard" TEXT)',
  'CREATE TABLE "outcomes" ("id" INTEGER PRIMARY KEY, "replay_id" INTEGER REFERENCES "replays"("id"), '
  '"capture_id" INTEGER REFERENCES "captures"("id"), "status" TEXT, "reason" TEXT, "diff" TEXT, "metrics" TEXT, '
  '"seconds" REAL)',
  'CREATE INDEX "idx_outcomes_replay_id_status" ON "outcomes" ("replay_id", "status")',
  'CREATE INDEX "idx_outcomes_capture_id" ON "outcomes" ("capture_id")',
  'CREATE TABLE "accepted" ("id" INTEGER PRIMARY KEY, "kind" TEXT, "location" TEXT, "fingerprint" TEXT, '
  '"name" TEXT, "time" REAL, "head_commit" TEXT, "base_commit" TEXT)',
  'CREATE UNIQUE INDEX "idx_accepted_kind_location_fingerprint_base_commit" ON "accepted" ("kind", "location", '
  '"fingerprint", "base_commit")',
  'CREATE TABLE "capture_blobs" ("capture_id" INTEGER REFERENCES "captures"("id"), '
  '"sha256" TEXT REFERENCES "blobs"("sha256"), PRIMARY KEY ("capture_id", "sha256"))',
  'CREATE TABLE "issued_ids" ("name" TEXT PRIMARY KEY, "value" INTEGER)',
  """INSERT INTO issued_ids (name, value) VALUES ('runs', 0), ('replays', 0)""",
  'CREATE TABLE "identity" ("uuid" TEXT PRIMARY KEY)',
  'CREATE TABLE "schema_version" ("version" INTEGER)',
  _PART_INDEX_TABLE,
)


def _create_fresh(conn: sqlite3.Connection) -> None:
  """The current schema in an empty database (inside the caller's transaction)."""
  import uuid
  for statement in FRESH_SCHEMA: conn.execute(statement)
  conn.execute("INSERT INTO identity (uuid) VALUES (?)", (str(uuid.uuid4()),))


def _set_wal(conn: sqlite3.Connection, seconds: float = 60.0) -> None:
  """Put the database in WAL mode, waiting while another process holds it: SQLite can answer "database is locked" here
  at once, without its busy handler (seen in CI: of four processes capturing into one new database, one could not
  open it and lost a capture)."""
  deadline = time.monotonic() + seconds
  while True:
    try:
      conn.execute("PRAGMA journal_mode = WAL")
      return
    except sqlite3.OperationalError as e:
      if "locked" not in str(e) or time.monotonic() > deadline: raise
      time.sleep(0.01)


class Store:
  """One open database. Every write is its own transaction, committed before the call returns."""

  def __init__(self, path: Optional[str] = None, create: bool = True):
    self.path = path or default_path()
    if os.path.exists(self.path) and not os.path.isfile(self.path):   # a folder, a device, a pipe
      raise StoreError(f"cannot open {self.path} as a replay database: it is not a regular file")
    if not create and (not os.path.exists(self.path) or os.path.getsize(self.path) == 0):
      # an empty file stays empty: reading commands never write a schema into it
      raise NoDatabase(f"no replay database at {self.path} (capture something first)")
    if os.path.dirname(self.path): os.makedirs(os.path.dirname(self.path), exist_ok=True)
    try:
      conn = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
      conn.execute("PRAGMA busy_timeout = 60000")
      _set_wal(conn)
      conn.execute("PRAGMA synchronous = NORMAL")
      conn.execute("PRAGMA foreign_keys = ON")
    except sqlite3.DatabaseError as e: raise StoreError(f"cannot open {self.path} as a replay database: {e}") from e
    self.conn = conn
    self._db: Optional["sqlite_utils.Database"] = None
    self._known_blobs: set[str] = set()
    self._bases: dict[tuple, tuple[str, bytes]] = {}           # role -> (sha256, bytes) of its current dictionary
    self._pending_bases: dict[tuple, tuple[str, bytes]] = {}   # written in the open transaction
    self._candidates: dict[tuple, bytes] = {}                  # role -> its latest payloads (RECENT_BYTES, newest last)
    self._whole_ratios: dict[tuple, float] = {}                # role -> how its last payload compressed alone
    self._dictionaries: dict[str, bytes] = {}                  # bases read lately
    self._packs: dict[str, bytes] = {}                         # packs read lately, inflated
    self._present_bases: set[str] = set()                      # bases seen in the database in the open transaction
    self._knows_all = False   # every blob the file held when `preload_blob_shas` read them is in _known_blobs
    if self._version() != SCHEMA_VERSION: self._migrate()

  @property
  def db(self) -> "sqlite_utils.Database":
    """The sqlite-utils view of the connection, made on first use (capturing processes never need it)."""
    if self._db is None:
      import sqlite_utils
      self._db = sqlite_utils.Database(self.conn)
    return self._db

  def close(self) -> None: self.conn.close()
  def __enter__(self): return self
  def __exit__(self, *exc): self.close()

  # ***** schema *****

  def _version(self) -> int:
    try:
      found = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
      if not self.conn.execute(found).fetchone():
        return 0
      row = self.conn.execute("SELECT version FROM schema_version").fetchone()
    except sqlite3.DatabaseError as e: raise StoreError(f"{self.path} is not a usable replay database: {e}") from e
    if row is None: return 0
    if not isinstance(row[0], int) or isinstance(row[0], bool):
      raise StoreError(f"{self.path} has schema version {row[0]!r}, which is not a version number; it is not a usable "
                       f"replay database")
    return row[0]

  def _migrate(self) -> None:
    try:
      with self.transaction():
        version = self._version()
        if version > SCHEMA_VERSION:
          raise StoreError(f"{self.path} has schema version {version}, newer than this harness understands "
                           f"({SCHEMA_VERSION}); "
                           "upgrade the harness or use another REPLAY_DB")
        if version == SCHEMA_VERSION: return
        tables = [r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        if version == 0 and "schema_version" not in tables and tables:
          raise StoreError(f"{self.path} is an SQLite file but not a replay database (tables: {', '.join(tables)})")
        if not tables: _create_fresh(self.conn)
        else:
          for step in MIGRATIONS[version:]: step(self.db)
          if "schema_version" not in self.db.table_names(): self.db["schema_version"].create({"version": int})
        self.conn.execute("DELETE FROM schema_version")
        self.conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
    except sqlite3.DatabaseError as e: raise StoreError(f"{self.path} is not a usable replay database: {e}") from e

  class _Tx:
    """One write transaction. A write the file system refuses (a full disk, a file size limit, an I/O error) is
    rolled back and raised as a StoreWriteError naming the database: nothing half-written stays behind."""
    def __init__(self, store: "Store"): self.store, self.conn = store, store.conn

    def __enter__(self):
      self.store._present_bases.clear()
      try: self.conn.execute("BEGIN IMMEDIATE")
      except sqlite3.OperationalError as e: raise self.store.write_error(e) from e

    def __exit__(self, exc_type, exc, tb):
      if exc_type is None:
        try:
          self.conn.execute("COMMIT")
          return False
        except sqlite3.OperationalError as e: failure = e
      else: failure = exc if isinstance(exc, sqlite3.OperationalError) else None
      try: self.conn.execute("ROLLBACK")
      except sqlite3.Error: pass
      if failure is not None: raise self.store.write_error(failure) from failure
      return False

  def transaction(self) -> "_Tx": return Store._Tx(self)

  def write_error(self, e: Exception) -> "StoreWriteError":
    text = str(e)
    hint = " (another process holds it locked)" if "locked" in text else \
           " (is the disk full, or the file too large for its file system?)" \
           if any(w in text for w in ("full", "I/O", "large")) else ""
    return StoreWriteError(f"cannot write to {self.path}: {text}{hint}")

  # ***** blobs *****

  @staticmethod
  def blob_sha(data: bytes) -> str: return hashlib.sha256(data).hexdigest()

  def _put_blob(self, data: Optional[bytes], sha: Optional[str] = None, role: Optional[tuple] = None) -> str:
    """Store a blob (inside the caller's transaction). With a `role` (what the payload is: kind, input or output), a
    payload alike to earlier ones of its role is stored as a delta: compressed with a zlib dictionary made of the role's
    latest payloads (up to RECENT_BYTES; made again once they are DICTIONARY_GROWTH times what it was made of, so that
    a role's dictionaries are few and the later ones rich: kernel ASTs of one program share most of their bytes). The
    dictionary is a blob of its own that no capture refers to (one damaged payload still fails its capture alone), made
    when a second payload would use it (a payload seen once costs nothing more)."""
    sha = sha or self.blob_sha(data)
    if sha in self._known_blobs: return sha
    if data is None:   # a caller left out bytes it saw the database hold, and `replay prune` removed them since
      raise BlobError(f"blob {sha[:12]} is no longer in {self.path}")
    if role is None or len(data) < MIN_DICTIONARY_BYTES:
      self._insert_blob(sha, data, zlib.compress(data, 1))
      return sha
    role = (*role, len(data).bit_length())   # payloads of a size alike are likelier alike
    recent = self._candidates.get(role, b"")
    self._candidates[role] = (recent + data[-RECENT_BYTES:])[-RECENT_BYTES:]   # a large payload's tail only
    current = self._pending_bases.get(role) or self._bases.get(role)
    if current is not None and current[0] not in self._present_bases:
      if self.conn.execute("SELECT 1 FROM blobs WHERE sha256 = ? AND base IS NULL", (current[0],)).fetchone():
        self._present_bases.add(current[0])   # nobody else writes until this transaction ends
      else: current = None   # `replay prune` removed it since
    whole: Optional[bytes] = None
    def worth_it(packed: bytes) -> bool:
      nonlocal whole
      if len(packed) * 10 <= len(data): return True   # a whole payload compresses to a third or so
      if whole is None and (ratio := self._whole_ratios.get(role)) is not None:
        # as well as the role's last payload compressed alone: no need to compress this one alone to know
        if len(packed) <= DELTA_GAIN * ratio * len(data): return True
      if whole is None: whole = _deflate(data)
      self._whole_ratios[role] = len(whole) / len(data)
      return len(packed) <= DELTA_GAIN * len(whole)
    # the current dictionary until the role's latest payloads outgrow it, one made of them, the current one after all
    tries: list[tuple[Optional[str], bytes]] = []
    if current is not None and DICTIONARY_GROWTH * len(current[1]) > len(recent): tries.append(current)
    if recent and (current is None or len(recent) > len(current[1])): tries.append((None, DICTIONARY_MARK + recent))
    if current is not None and current not in tries: tries.append(current)
    for base, zdict in tries:
      if worth_it(packed := _deflate(data, zdict)):
        if base is None:
          base = self.blob_sha(zdict)
          self._insert_blob(base, zdict, zlib.compress(zdict, 6))   # once per role and process, or a few times
          self._pending_bases[role] = (base, zdict)
        self._insert_blob(sha, data, packed, base)
        return sha
    self._insert_blob(sha, data, whole if whole is not None else _deflate(data))
    return sha

  def _put_pack(self, members: list[tuple[str, bytes, Optional[tuple]]]) -> None:
    """Store payloads (sha256, bytes, role) in packs of up to MAX_PACK_BYTES, alike payloads next to each other (inside
    the caller's transaction); a payload left alone in its pack is stored as `_put_blob` stores it."""
    members = sorted((m for m in members if m[0] not in self._known_blobs), key=lambda m: (m[2] or ()))
    chunks: list[list[tuple[str, bytes, Optional[tuple]]]] = []
    size = 0
    for member in members:
      if not chunks or size + len(member[1]) > MAX_PACK_BYTES: chunks, size = [*chunks, []], 0
      chunks[-1].append(member)
      size += len(member[1])
    for chunk in chunks:
      if len(chunk) == 1:
        sha, data, role = chunk[0]
        self._put_blob(data, sha, role)
        continue
      pack, places = self._new_pack([(sha, data) for sha, data, _ in chunk])
      for (sha, data, _), place in zip(chunk, places): self._insert_blob(sha, data, place, pack)

  def _new_pack(self, members: list[tuple[str, bytes]]) -> tuple[str, list[bytes]]:
    """Store the pack of `members` (sha256, bytes): its sha256, and each member's place in it (a member row's data)."""
    whole = b"".join(data for _, data in members)
    pack, places, offset = self.blob_sha(whole), [], 0
    self._insert_blob(pack, whole, _deflate(whole))
    for _, data in members:
      places.append(PACK_MARK + b"%d %d" % (offset, len(data)))
      offset += len(data)
    return pack, places

  def _insert_blob(self, sha: str, data: bytes, packed: bytes, base: Optional[str] = None) -> None:
    self.conn.execute("INSERT OR IGNORE INTO blobs (sha256, size, data, base) VALUES (?, ?, ?, ?)",
                      (sha, len(data), packed, base))

  def _committed(self, shas: Iterable[str]) -> None:
    """After a commit: the blobs are in the file, and the dictionaries made are their roles' current ones."""
    self._known_blobs.update(shas)
    self._bases.update(self._pending_bases)
    self._pending_bases.clear()

  def _inflate(self, sha: str, packed: bytes, zdict: Optional[bytes] = None) -> bytes:
    limit = max_blob_bytes()
    try:
      inflate = zlib.decompressobj(zdict=zdict) if zdict is not None else zlib.decompressobj()
      data = inflate.decompress(packed, limit + 1)
      if not inflate.eof and len(data) <= limit: data += inflate.flush()
    except (zlib.error, TypeError) as e: raise BlobError(f"blob {str(sha)[:12]} is corrupt: {e}") from e
    if len(data) > limit: raise BlobError(f"blob {str(sha)[:12]} expands past {limit} bytes (REPLAY_MAX_BLOB_BYTES)")
    if not inflate.eof: raise BlobError(f"blob {str(sha)[:12]} is truncated")
    if self.blob_sha(data) != sha:
      raise BlobError(f"blob {str(sha)[:12]} does not match its sha256 (altered or corrupt)")
    return data

  def get_blob(self, sha: str) -> bytes:
    """The blob's bytes, decompressed with a size limit and checked against the hash they are stored under (a delta
    through its base, which must be a whole blob)."""
    row = self.conn.execute("SELECT data, base FROM blobs WHERE sha256 = ?", (sha,)).fetchone()
    if row is None: raise BlobError(f"blob {str(sha)[:12]} is missing from {self.path}")
    if row[1] is None: return self._inflate(sha, row[0])
    if isinstance(row[0], bytes) and row[0].startswith(PACK_MARK): return self._from_pack(sha, row[0], row[1])
    if (zdict := self._dictionaries.get(row[1])) is None:
      base = self.conn.execute("SELECT data, base FROM blobs WHERE sha256 = ?", (row[1],)).fetchone()
      if base is None: raise BlobError(f"blob {str(sha)[:12]} is a delta of blob {str(row[1])[:12]}, which is missing")
      if base[1] is not None:
        raise BlobError(f"blob {str(sha)[:12]} is a delta of blob {str(row[1])[:12]}, which is a delta itself")
      try: zdict = self._inflate(row[1], base[0])[:DICTIONARY_BYTES]
      except BlobError as e:
        raise BlobError(f"blob {str(sha)[:12]} is a delta of blob {str(row[1])[:12]}, which cannot be read: {e}") from e
      if len(self._dictionaries) >= 16: self._dictionaries.pop(next(iter(self._dictionaries)))
      self._dictionaries[row[1]] = zdict
    return self._inflate(sha, row[0], zdict)

  def _from_pack(self, sha: str, place: bytes, pack: str) -> bytes:
    """A member's bytes, cut from its pack (inflated once for the members read after it)."""
    where = place[len(PACK_MARK):].split(b" ")
    if len(place) > 64 or len(where) != 2 or not all(part.isdigit() for part in where):
      raise BlobError(f"blob {str(sha)[:12]} names no place in its pack {str(pack)[:12]} ({place[:40]!r})")
    offset, length = int(where[0]), int(where[1])
    if (whole := self._packs.get(pack)) is None:
      row = self.conn.execute("SELECT data, base FROM blobs WHERE sha256 = ?", (pack,)).fetchone()
      if row is None: raise BlobError(f"blob {str(sha)[:12]} is in pack {str(pack)[:12]}, which is missing")
      if row[1] is not None:
        raise BlobError(f"blob {str(sha)[:12]} is in pack {str(pack)[:12]}, which is not a whole blob")
      try: whole = self._inflate(pack, row[0])
      except BlobError as e:
        raise BlobError(f"blob {str(sha)[:12]} is in pack {str(pack)[:12]}, which cannot be read: {e}") from e
      if len(self._packs) >= 4: self._packs.pop(next(iter(self._packs)))
      self._packs[pack] = whole
    data = whole[offset:offset + length]
    if len(data) != length or self.blob_sha(data) != sha:
      raise BlobError(f"blob {str(sha)[:12]} does not match its sha256 (altered or corrupt)")
    return data

  def blob_count(self) -> int: return self.conn.execute("SELECT count(*) FROM blobs").fetchone()[0]

  # ***** runs and captures *****

  def identity(self) -> str:
    """This database's identity (a UUID made when it was created)."""
    return self.conn.execute("SELECT uuid FROM identity").fetchone()[0]

  def _next_id(self, table: str) -> int:
    """An id above every id `table` ever held (inside the caller's transaction)."""
    issued = self.conn.execute("SELECT value FROM issued_ids WHERE name = ?", (table,)).fetchone()
    top = max(issued[0] if issued else 0, self.conn.execute(f"SELECT coalesce(max(id), 0) FROM {table}").fetchone()[0])
    self.conn.execute("INSERT OR REPLACE INTO issued_ids (name, value) VALUES (?, ?)", (table, top + 1))
    return top + 1

  def add_run(self, **fields: Any) -> int:
    with self.transaction():
      row = {"id": self._next_id("runs"), "started": time.time(), **fields}
      return self.conn.execute(f"INSERT INTO runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                               tuple(row.values())).lastrowid

  def capture_count(self, run_id: int) -> int:
    """How many captures run `run_id` holds (as folded so far)."""
    return self.conn.execute("SELECT count(*) FROM captures WHERE run_id = ?", (run_id,)).fetchone()[0]

  def run_argv(self, run_id: int) -> Optional[str]:
    """The command of run `run_id` as its row holds it (JSON), None for a run the file lacks."""
    row = self.conn.execute("SELECT argv FROM runs WHERE id = ?", (run_id,)).fetchone()
    return row[0] if row else None

  def finish_run(self, run_id: int, exit_code: Optional[int] = None) -> None:
    """Mark the run finished; `exit_code` is how the captured command ended, when the harness ran it."""
    with self.transaction():
      self.conn.execute("UPDATE runs SET finished = ?, exit_code = coalesce(?, exit_code) WHERE id = ?",
                        (time.time(), exit_code, run_id))

  def set_run_git(self, run_id: int, commit: Optional[str], dirty: Optional[int]) -> None:
    """The commit the run's tree was at and whether it had changes (found after the run started)."""
    with self.transaction():
      self.conn.execute("UPDATE runs SET git_commit = ?, git_dirty = ? WHERE id = ?", (commit, dirty, run_id))

  def set_run_flag_defaults(self, run_id: int, defaults: str) -> None:
    """The compiler's flag defaults, as the first capturing process of the run saw them (later processes keep them)."""
    with self.transaction():
      self.conn.execute("UPDATE runs SET flag_defaults = ? WHERE id = ? AND flag_defaults IS NULL", (defaults, run_id))

  def defer_checkpoints(self, pages: int = 10_000) -> None:
    """Let the write-ahead log grow to `pages` before it is copied into the database (a capturing process commits
    hundreds of small transactions: checkpointing every 1,000 pages doubled the cost of each; the log is copied when
    the last connection closes). Commits stay as durable as before."""
    self.conn.execute(f"PRAGMA wal_autocheckpoint = {int(pages)}")

  @property
  def known_blobs(self) -> set[str]:
    """The blobs this connection knows the file holds (preloaded, or written since); the set itself, kept current."""
    return self._known_blobs

  # a capturing process reads the hashes of all blobs of a database up to this many at once (~0.6 ms a thousand: 15 ms
  # for a database of 25,000, as many again for each 25,000 more)
  PRELOAD_BLOBS = 10_000
  # reading the blobs one run refers to costs about this many times reading as many hashes of the whole table (measured:
  # 4.7 ms for the 326 captures of a training run, 32 ms for the 4,113 of a corpus run, 15 ms for all 26,000 blobs)
  PER_CAPTURE_COST = 20
  # never more hashes than this at once (two million take seconds and hundreds of megabytes): the file is asked instead
  READ_ALL_AT_MOST = 2_000_000

  def preload_blob_shas(self, argv: Optional[str] = None, besides: Optional[int] = None) -> None:
    """Remember which blobs the file already holds, so that a repeated capture skips compressing and inserting them:
    every one in a database of up to PRELOAD_BLOBS blobs. In a larger one, when the latest run of the command `argv` (a
    run row's argv; not run `besides`) is small beside it, the blobs that run referred to (`holds_blob` asks the file
    about the others); else every one again (a command that never ran may make as many captures as the table holds),
    up to READ_ALL_AT_MOST."""
    rows = self.conn.execute("SELECT max(rowid) FROM blobs").fetchone()[0] or 0   # rowids: at least the count
    last = None
    if rows > self.PRELOAD_BLOBS and argv is not None:
      (last,) = self.conn.execute("SELECT max(run_id) FROM captures WHERE run_id IN "
                                  "(SELECT id FROM runs WHERE argv = ? AND id IS NOT ?)", (argv, besides)).fetchone()
    if last is None or self.capture_count(last) * self.PER_CAPTURE_COST >= rows:
      if rows <= self.READ_ALL_AT_MOST:
        self._known_blobs.update(r[0] for r in self.conn.execute("SELECT sha256 FROM blobs"))
        self._knows_all = True
      return
    # looked up in blobs, not taken from the references: a file written without its foreign keys may refer to a blob it
    # lacks, and a blob this process takes as held goes into its journal without bytes
    self._known_blobs.update(r[0] for r in self.conn.execute(
      "SELECT sha256 FROM blobs WHERE sha256 IN (SELECT input_sha FROM captures WHERE run_id = ?1 UNION SELECT "
      "output_sha FROM captures WHERE run_id = ?1 UNION SELECT sha256 FROM capture_blobs WHERE capture_id IN "
      "(SELECT id FROM captures WHERE run_id = ?1))", (last,)))

  def holds_blob(self, sha: str) -> bool:
    """Whether the file holds blob `sha`, as far as this connection knows: asked of the file (and remembered) when the
    preload did not read every hash."""
    if sha in self._known_blobs: return True
    if self._knows_all or self.conn.execute("SELECT 1 FROM blobs WHERE sha256 = ?", (sha,)).fetchone() is None:
      return False
    self._known_blobs.add(sha)
    return True

  def add_capture(self, *args, **kwargs) -> int:
    """Store a capture with its input and output payloads, and `shared_blobs` (sha256 -> bytes: parts and input buffers
    the payloads refer to by hash; `roles` names what a part is, for delta compression, and an input that is a part),
    all in one transaction; blobs the file already holds are not written again. A blob this process saw stored may be
    gone since (`replay prune` ran meanwhile): then every blob is written again."""
    try: return self._add_capture(*args, **kwargs)
    except sqlite3.IntegrityError:
      self._known_blobs.clear()
      self._bases.clear()
      return self._add_capture(*args, **kwargs)

  def count_lost(self, run_id: int, n: int = 1) -> None:
    """Record that a process of the run took `n` captures it could not store."""
    with self.transaction(): self.conn.execute("UPDATE runs SET lost = coalesce(lost, 0) + ? WHERE id = ?", (n, run_id))

  # the columns of a capture as a journal record holds them (`db/journal.py`), and the statements that insert them
  JOURNAL_FIELDS = journal.FIELDS
  _CAPTURE_ROW = f"INSERT INTO captures ({', '.join(JOURNAL_FIELDS)}) VALUES ({','.join('?' * len(JOURNAL_FIELDS))})"
  # with the ids the database would give the rows one by one (a fold inserts many at once)
  _NUMBERED_CAPTURE_ROW = f"INSERT INTO captures (id, {', '.join(JOURNAL_FIELDS)}) " \
                          f"VALUES ({','.join('?' * (len(JOURNAL_FIELDS) + 1))})"

  def _add_capture(self, run_id: int, kind: str, key: str, name: str, location: str, input_data: bytes,
                   output_data: bytes, flags: dict | str, meta: Optional[dict] = None, input_sha: Optional[str] = None,
                   shared_blobs: Optional[dict[str, bytes]] = None, roles: Optional[dict[str, tuple]] = None) -> int:
    in_sha, out_sha = input_sha or self.blob_sha(input_data), self.blob_sha(output_data)
    shared_blobs = shared_blobs or {}
    row = (run_id, kind, key, name, location, time.time(), in_sha, out_sha,
           flags if isinstance(flags, str) else json.dumps(flags, sort_keys=True), json.dumps(meta) if meta else "{}")
    if not shared_blobs and in_sha in self._known_blobs and out_sha in self._known_blobs:
      # both payloads are stored already: one statement is its own transaction
      try: return self.conn.execute(self._CAPTURE_ROW, row).lastrowid
      except sqlite3.OperationalError as e: raise self.write_error(e) from e
    try:
      with self.transaction():
        for sha, data in shared_blobs.items(): self._put_blob(data, sha, (roles or {}).get(sha))
        self._put_blob(input_data, in_sha, (roles or {}).get(in_sha, (kind, "input")))
        self._put_blob(output_data, out_sha, (kind, "output"))
        capture_id = self._insert_capture(row, list(shared_blobs))
    except BaseException:
      self._pending_bases.clear()
      raise
    # only after the commit: a rolled-back blob must be written again next time
    self._committed((in_sha, out_sha, *shared_blobs))
    return capture_id

  _CAPTURE_BLOB_ROW = "INSERT OR IGNORE INTO capture_blobs (capture_id, sha256) VALUES (?, ?)"

  def _insert_capture(self, row: tuple, shared: list[str]) -> int:
    capture_id = self.conn.execute(self._CAPTURE_ROW, row).lastrowid
    if shared: self.conn.executemany(self._CAPTURE_BLOB_ROW, [(capture_id, sha) for sha in shared])
    return capture_id

  def fold_records(self, records: list, recovering: bool = False) -> tuple[int, list[tuple[int, str]]]:
    """Store journal records (`db/journal.py`) in one transaction: how many were stored, and (run, why) of each one
    that was not (counted as lost by its run). A record whose blob is neither in it nor in the database (`replay prune`
    removed it meanwhile) is lost; so is one the database refuses (a constraint, a trigger): then the records are
    stored one by one, so that one refused record loses no other. A write the file system refuses (a full disk,
    a lock held too long) raises StoreWriteError and stores nothing: the records stay in their journal. `recovering`:
    a folder died folding these, so records already stored are skipped."""
    try:
      # first trusting that the blobs the records left out are still there: the foreign keys check each one anyway, so
      # a blob `replay prune` removed meanwhile fails the transaction, and the records are folded checking them first
      try: return self._fold(records, recovering, trust_held=True)
      except sqlite3.IntegrityError: return self._fold(records, recovering)
    except sqlite3.DatabaseError as e:
      if isinstance(e, sqlite3.OperationalError): raise
    stored, lost = 0, []
    for record in records:
      try:
        one, why = self._fold([record], recovering)
        stored, lost = stored + one, lost + why
      except sqlite3.DatabaseError as e:
        if isinstance(e, sqlite3.OperationalError): raise
        lost.append((record.fields.get("run_id"), f"the database refused it: {e}"))
        try: self.count_lost(record.fields.get("run_id"))
        except (StoreError, sqlite3.Error): pass
    return stored, lost

  def _fold(self, records: list, recovering: bool, trust_held: bool = False) -> tuple[int, list[tuple[int, str]]]:
    written: set[str] = set()
    lost: dict[int, int] = {}
    try:
      with self.transaction():
        held = None if trust_held else \
          self._held_blobs({sha for record in records for sha, data, _ in record.blobs if data is None})
        if not self._knows_all:   # bytes of blobs the file holds are not compressed again only to be ignored
          self._known_blobs.update(self._held_blobs({sha for record in records for sha, data, _ in record.blobs
                                                     if data is not None and sha not in self._known_blobs}))
        # the rows go in together once their blobs are in
        rows, links, payloads = [], [], []
        next_id = self.conn.execute("SELECT coalesce(max(id), 0) + 1 FROM captures").fetchone()[0]
        for record in records:
          row = record.row
          if row is None: row = tuple(record.fields.get(f) for f in self.JOURNAL_FIELDS)
          if recovering and self.conn.execute("SELECT 1 FROM captures WHERE run_id = ? AND kind = ? AND key = ? AND "
                                              "time = ?", (row[0], row[1], row[2], row[5])).fetchone():
            continue
          if held is not None and any(data is None and sha not in written and sha not in held
                                      for sha, data, _ in record.blobs):
            lost[row[0]] = lost.get(row[0], 0) + 1
            continue
          for sha, data, role in record.blobs:
            if data is not None and sha not in written:
              if role is None: self._put_blob(data, sha, role)
              else: payloads.append((sha, data, role))
              written.add(sha)
          rows.append((next_id, *row))
          links.extend((next_id, sha) for sha in record.shared)
          next_id += 1
        self._put_pack(payloads)
        self.conn.executemany(self._NUMBERED_CAPTURE_ROW, rows)
        self.conn.executemany(self._CAPTURE_BLOB_ROW, links)
        stored = len(rows)
        for run_id, n in lost.items():
          self.conn.execute("UPDATE runs SET lost = coalesce(lost, 0) + ? WHERE id = ?", (n, run_id))
    except BaseException:
      self._pending_bases.clear()
      raise
    self._committed(written)
    return stored, [(run_id, "a blob it refers to was removed from the database") for run_id, n in lost.items()
                    for _ in range(n)]

  def _held_blobs(self, shas: set[str]) -> set[str]:
    """Those of `shas` the file holds (asked in batches: a fold asks about every blob its records left out)."""
    held, order = set(), sorted(shas)
    for start in range(0, len(order), 500):
      batch = order[start:start + 500]
      query = f"SELECT sha256 FROM blobs WHERE sha256 IN ({','.join('?' * len(batch))})"
      held.update(r[0] for r in self.conn.execute(query, batch))
    return held

  def part_index(self, code: str) -> dict[str, str]:
    """node key -> sha256 of the blob holding that part's pickle, as the code `code` pickled it (`_migrate_to_13`).
    Blobs are not checked here: a caller uses an entry only for a blob it knows the database holds."""
    return dict(self.conn.execute("SELECT node_key, sha256 FROM part_index WHERE code = ?", (code,)))

  def add_to_part_index(self, code: str, entries: list[tuple[str, str]]) -> None:
    """Record (node key, sha256) pairs of parts the code `code` pickled (replacing an entry for the key: a process
    pickles a part the index names only when the database lacks that blob)."""
    with self.transaction():
      self.conn.executemany("INSERT OR REPLACE INTO part_index (code, node_key, sha256) VALUES (?, ?, ?)",
                            [(code, key, sha) for key, sha in entries])

  def fold_pending(self) -> int:
    """Fold the captures capturing processes left in their journals (`db/journal.py`) into the database, before a
    read lists captures; a database that cannot be written is read as it is."""
    try: return journal.fold_pending(self)[0]
    except (StoreError, OSError, sqlite3.Error): return 0

  def shared_blob_shas(self, capture_id: int) -> list[str]:
    """The blobs (input buffers) capture `capture_id` refers to besides its input and output payloads."""
    return [r[0] for r in self.conn.execute("SELECT sha256 FROM capture_blobs WHERE capture_id = ? ORDER BY sha256",
                                            (capture_id,))]

  def shared_blobs(self, capture_id: int) -> dict[str, bytes]:
    """The contents of the blobs `shared_blob_shas` names (each checked against its hash)."""
    return {sha: self.get_blob(sha) for sha in self.shared_blob_shas(capture_id)}

  def latest_run_id(self) -> Optional[int]:
    """The latest run that captured something, not counting the harness's own reruns of a run (`diff --rerun`)."""
    self.fold_pending()
    row = self.conn.execute("SELECT max(c.run_id) FROM captures c LEFT JOIN runs r ON r.id = c.run_id WHERE r.rerun_of "
                            "IS NULL").fetchone()
    return row[0] if row else None

  def run(self, run_id: int) -> Optional[dict]:
    rows = list(self.db.query("SELECT * FROM runs WHERE id = ?", [run_id]))
    return rows[0] if rows else None

  def captures(self, run_ids: Optional[Iterable[int]] = None, kinds: Optional[Iterable[str]] = None,
               names: Optional[Iterable[str]] = None,
               location: Optional[str] = None, ids: Optional[Iterable[int]] = None) -> list[dict]:
    if ids is None: self.fold_pending()   # a capture named by its id was listed already
    where, params = [], []
    for col, values in (("run_id", run_ids), ("kind", kinds), ("name", names), ("id", ids)):
      if values is not None:
        values = list(values)
        where.append(f"{col} IN ({','.join('?' * len(values))})" if values else "0")
        params.extend(values)
    if location: where.append("location LIKE ?"); params.append(f"%{location}%")
    sql = "SELECT * FROM captures" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id"
    return list(self.db.query(sql, params))

  def capture(self, capture_id: int) -> Optional[dict]:
    rows = self.captures(ids=[capture_id])
    return rows[0] if rows else None

  def capture_counts(self, run_id: Optional[int] = None) -> dict[str, int]:
    self.fold_pending()
    sql, params = "SELECT kind, count(*) FROM captures", []
    if run_id is not None: sql, params = sql + " WHERE run_id = ?", [run_id]
    return dict(self.conn.execute(sql + " GROUP BY kind", params).fetchall())

  # ***** replays and outcomes *****

  def add_replay(self, **fields: Any) -> int:
    with self.transaction():
      return self.db["replays"].insert({"id": self._next_id("replays"), "started": time.time(), **fields}).last_pk

  def finish_replay(self, replay_id: int, verdict: str, exit_code: int) -> None:
    with self.transaction():
      self.db["replays"].update(replay_id, {"finished": time.time(), "verdict": verdict, "exit_code": exit_code})

  def add_outcomes(self, rows: list[dict]) -> None:
    with self.transaction(): self.db["outcomes"].insert_all(rows)

  def update_outcome(self, outcome_id: int, **fields: Any) -> None:
    with self.transaction(): self.db["outcomes"].update(outcome_id, fields)

  def set_replay_policy(self, replay_id: int, policy: str) -> None:
    with self.transaction(): self.db["replays"].update(replay_id, {"policy": policy})

  def set_replay_notes(self, replay_id: int, notes: list[str]) -> None:
    with self.transaction(): self.db["replays"].update(replay_id, {"notes": json.dumps(notes, sort_keys=True)})

  def replay(self, replay_id: Optional[int] = None) -> Optional[dict]:
    sql = "SELECT * FROM replays " + ("WHERE id = ?" if replay_id is not None else "ORDER BY id DESC LIMIT 1")
    rows = list(self.db.query(sql, [replay_id] if replay_id is not None else []))
    return rows[0] if rows else None

  def outcomes(self, replay_id: int) -> list[dict]:
    return list(self.db.query("SELECT o.*, c.kind, c.name, c.location FROM outcomes o JOIN captures c ON c.id = "
                              "o.capture_id "
                              "WHERE o.replay_id = ? ORDER BY o.capture_id", [replay_id]))

  def last_outcome(self, capture_id: int) -> Optional[dict]:
    rows = list(self.db.query("SELECT * FROM outcomes WHERE capture_id = ? ORDER BY id DESC LIMIT 1", [capture_id]))
    return rows[0] if rows else None

  def runs(self) -> list[dict]:
    """Every run with its capture counts by kind, newest first."""
    self.fold_pending()
    rows = list(self.db.query("SELECT * FROM runs ORDER BY id DESC"))
    counts: dict[int, dict[str, int]] = {}
    for run_id, kind, n in self.conn.execute("SELECT run_id, kind, count(*) FROM captures GROUP BY run_id, kind"):
      counts.setdefault(run_id, {})[kind] = n
    return [{**r, "counts": counts.get(r["id"], {})} for r in rows]

  def replays(self) -> list[dict]:
    """Every replay with its number of outcomes, newest first."""
    return list(self.db.query("SELECT r.*, (SELECT count(*) FROM outcomes o WHERE o.replay_id = r.id) AS outcomes FROM "
                              "replays r ORDER BY id DESC"))

  def delete_runs(self, run_ids: list[int]) -> dict[str, int]:
    """Delete runs, their captures, the outcomes about those captures, replays left without outcomes, and blobs no
    capture refers to any more; returns how many rows of each went."""
    gone = {"runs": 0, "captures": 0, "outcomes": 0, "replays": 0, "blobs": 0}
    self.fold_pending()   # a pending capture of a deleted run goes too; one of a kept run keeps its blobs
    if run_ids:
      marks = ",".join("?" * len(run_ids))
      with self.transaction():
        ids = f"SELECT id FROM captures WHERE run_id IN ({marks})"
        gone["outcomes"] = self.conn.execute(f"DELETE FROM outcomes WHERE capture_id IN ({ids})", run_ids).rowcount
        gone["replays"] = self.conn.execute(f"DELETE FROM replays WHERE capture_run_id IN ({marks}) OR "
                                            "id NOT IN (SELECT DISTINCT replay_id FROM outcomes)", run_ids).rowcount
        self.conn.execute(f"DELETE FROM capture_blobs WHERE capture_id IN ({ids})", run_ids)
        gone["captures"] = self.conn.execute(f"DELETE FROM captures WHERE run_id IN ({marks})", run_ids).rowcount
        gone["runs"] = self.conn.execute(f"DELETE FROM runs WHERE id IN ({marks})", run_ids).rowcount
    gone["blobs"] = self.delete_unreferenced_blobs()
    return gone

  def delete_unreferenced_blobs(self) -> int:
    """Delete the blobs no capture refers to, and write again the packs that leaves mostly empty. Foreign keys are not
    checked meanwhile: the statement deletes only blobs nothing refers to, in one transaction no capture is written
    during, and checking them searched the whole captures table for every blob deleted (no index on the hashes captures
    refer to blobs by: 17 s for 20,000 blobs in a database of 8,000 captures, 0.2 s without the check)."""
    self.conn.execute("PRAGMA foreign_keys = OFF")   # only outside a transaction
    try:
      with self.transaction():
        referenced = ("SELECT input_sha FROM captures UNION SELECT output_sha FROM captures UNION SELECT sha256 FROM "
                      "capture_blobs")
        # a blob stays while a capture refers to it, or while a blob that stays is a delta of it
        n = self.conn.execute(f"DELETE FROM blobs WHERE sha256 NOT IN ({referenced}) AND sha256 NOT IN "
                              f"(SELECT base FROM blobs WHERE base IS NOT NULL AND sha256 IN ({referenced}))").rowcount
        self.conn.execute("DELETE FROM part_index WHERE sha256 NOT IN (SELECT sha256 FROM blobs)")
        self._repack_sparse()
    finally: self.conn.execute("PRAGMA foreign_keys = ON")
    self._known_blobs.clear()
    return n

  def _repack_sparse(self) -> None:
    """Write again the packs whose members a prune mostly deleted (inside the caller's transaction): the members that
    stay move into a new pack (one alone is stored whole), and the old pack goes. A pack that cannot be read stays."""
    sparse = self.conn.execute(
      "SELECT pack.sha256 FROM blobs AS pack JOIN blobs AS member ON member.base = pack.sha256 AND "
      "substr(member.data, 1, ?) = ? GROUP BY pack.sha256 HAVING sum(member.size) < ? * pack.size",
      (len(PACK_MARK), PACK_MARK, REPACK_BELOW)).fetchall()
    for (pack,) in sparse:
      rows = self.conn.execute("SELECT sha256, data FROM blobs WHERE base = ? AND substr(data, 1, ?) = ?",
                               (pack, len(PACK_MARK), PACK_MARK)).fetchall()
      try: members = [(sha, self._from_pack(sha, place, pack)) for sha, place in rows]
      except BlobError: continue
      if len(members) == 1:
        self.conn.execute("UPDATE blobs SET data = ?, base = NULL WHERE sha256 = ?",
                          (_deflate(members[0][1]), members[0][0]))
      else:
        new, places = self._new_pack(members)
        self.conn.executemany("UPDATE blobs SET data = ?, base = ? WHERE sha256 = ?",
                              [(place, new, sha) for (sha, _), place in zip(members, places)])
      self.conn.execute("DELETE FROM blobs WHERE sha256 = ?", (pack,))
      self._packs.pop(pack, None)

  def accept(self, entries: list[dict]) -> int:
    """Record differences as expected ({kind, location, fingerprint, name, head_commit, base_commit}); returns how
    many were new."""
    with self.transaction():
      before = self.conn.execute("SELECT count(*) FROM accepted").fetchone()[0]
      for e in entries:
        self.conn.execute("INSERT OR IGNORE INTO accepted (kind, location, fingerprint, name, time, head_commit, "
                          "base_commit) VALUES (?,?,?,?,?,?,?)",
                          (e["kind"], e["location"], e["fingerprint"], e.get("name", ""), time.time(),
                           e.get("head_commit"), e.get("base_commit")))
      return self.conn.execute("SELECT count(*) FROM accepted").fetchone()[0] - before

  def accepted(self) -> list[dict]: return list(self.db.query("SELECT * FROM accepted ORDER BY id"))

  def vacuum(self) -> None: self.conn.execute("VACUUM")

  def reset(self) -> None:
    self.fold_pending()   # captures killed processes left go too
    with self.transaction():
      for table in ("outcomes", "replays", "capture_blobs", "captures", "runs", "blobs", "accepted", "part_index"):
        self.conn.execute(f"DELETE FROM {table}")
    self.conn.execute("VACUUM")

  def integrity_ok(self) -> bool: return self.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
