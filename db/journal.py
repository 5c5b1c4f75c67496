"""The capture journal: captures a process has taken that the database does not hold yet.

A capturing process appends each capture to a file of its own in `<database>-pending/`, one write per capture: the
capture is durable once the captured call returns (a killed process leaves it in the file). The process folds its
file into the database in one transaction a second after its first unfolded capture, when the file grows large, and
at exit; whoever reads the database folds what a killed process left behind (`fold_pending`). One transaction for
many captures instead of one each: the commits cost as much as everything else capture does.

A segment file goes `<token>.<seq>.new` (made, not locked yet) -> `.open` (its writer holds a lock on it and appends)
-> `.sealed` (its writer is done with it) -> `.folding` (a folder is moving it into the database) -> removed. A folder
locks a segment before it moves it, so an `.open` segment whose lock can be taken lost its writer, and a `.folding`
one whose lock can be taken lost its folder: its captures may be in the database already, and are skipped if they are.
A record whose write a kill cut short fails its checksum and ends the segment: that call never returned.
"""
from __future__ import annotations
import json, os, stat, struct, threading, zlib
from typing import Callable, Iterator, Optional
try: import fcntl
except ImportError: fcntl = None   # no advisory locks (Windows): captures are committed one by one instead

# RPJ2: the record's header is its fields as strings joined by NUL (the JSON header took a third of encoding a record);
# a record whose fields do not fit that form (a NUL inside, a field that is not text, fields of another set) is written
# as RPJ1, JSON
MAGIC, JSON_MAGIC = b"RPJ2", b"RPJ1"
FIELDS = ("run_id", "kind", "key", "name", "location", "time", "input_sha", "output_sha", "flags", "meta")
_HEAD = struct.Struct("<4sII")   # magic, body length, crc32 of the body
_HEADER_LENGTH = struct.Struct("<I")
_NO_ROLE = ("", "")   # how a blob without a role is written in an RPJ2 header
FOLD_AFTER_SECONDS = 1.0          # how long a capture may wait in the journal while its process runs
FOLD_AT_BYTES = 64 * 1024 * 1024  # a segment this large is folded at once


class JournalError(OSError):
  """A journal file cannot be written."""


def pending_dir(db_path: str) -> str: return db_path + "-pending"


def available(db_path: str) -> bool:
  """Whether captures into `db_path` can wait in a journal (a file database, on a system with file locks)."""
  return fcntl is not None and db_path not in ("", ":memory:") and not db_path.startswith("file:")


class Record:
  """One capture as the journal holds it: the captures row, and its blobs as (sha256, bytes or None when the database
  or an earlier record holds them, role for delta compression). Its fields are a dict, or a tuple in FIELDS order
  (`row`: what a capture writes and a fold inserts, without a dict in between)."""
  __slots__ = ("_fields", "_row", "blobs", "shared")

  def __init__(self, fields: Optional[dict], blobs: list[tuple[str, Optional[bytes], Optional[tuple]]],
               shared: list[str], row: Optional[tuple] = None):
    if (fields is None) == (row is None): raise TypeError("a record has fields or a row, one of them")
    self._fields, self._row, self.blobs, self.shared = fields, row, blobs, shared

  @property
  def fields(self) -> dict:
    """The fields by name (made from the row once asked for; the dict is the record's from then on)."""
    if self._fields is None: self._fields, self._row = dict(zip(FIELDS, self._row)), None
    return self._fields

  @property
  def row(self) -> Optional[tuple]:
    """The fields in FIELDS order, None when they are not exactly those."""
    if self._row is not None: return self._row
    fields = self._fields
    return tuple(fields.values()) if tuple(fields) == FIELDS else None

  def encode(self) -> bytes:
    header = self._joined_header()
    magic = MAGIC
    if header is None:
      magic = JSON_MAGIC
      header = json.dumps({**self.fields, "shared": self.shared,
                           "blobs": [[sha, -1 if data is None else len(data), role] for sha, data, role in self.blobs]},
                          separators=(",", ":")).encode()
    length = _HEADER_LENGTH.pack(len(header))
    crc, size = zlib.crc32(header, zlib.crc32(length)), len(length) + len(header)
    datas = [data for _, data, _ in self.blobs if data is not None]
    for data in datas: crc, size = zlib.crc32(data, crc), size + len(data)
    return b"".join([_HEAD.pack(magic, size, crc), length, header, *datas])

  def _joined_header(self) -> Optional[bytes]:
    """The RPJ2 header: the fields in FIELDS order, the shared blobs' count and shas, then per blob its sha, size (-1:
    left out) and role (two strings, both empty for none); None when the record does not fit that form (a field that
    is not text where FIELDS has text, or holds a NUL)."""
    row = self._row if self._row is not None else self.row
    if row is None: return None
    run_id, when = row[0], row[5]
    if type(run_id) is not int or type(when) is not float: return None
    strings = [str(run_id), *row[1:5], repr(when), *row[6:], str(len(self.shared)), *self.shared]
    extend = strings.extend
    for sha, data, role in self.blobs:
      if role is None: role = _NO_ROLE
      elif len(role) != 2 or role == _NO_ROLE: return None
      extend((sha, "-1" if data is None else str(len(data)), *role))
    try: text = "\0".join(strings)
    except TypeError: return None
    if text.count("\0") != len(strings) - 1: return None
    return text.encode("utf-8", "surrogatepass")

  @staticmethod
  def decode(body: bytes, magic: bytes = MAGIC) -> "Record":
    (length,) = _HEADER_LENGTH.unpack_from(body)
    raw_header = body[_HEADER_LENGTH.size:_HEADER_LENGTH.size + length]
    if len(raw_header) != length: raise ValueError("a header runs past its record")
    fields, row = None, None
    if magic == MAGIC: row, shared, described = _split_header(raw_header)
    else: fields, shared, described = _json_header(raw_header)
    pos, blobs = _HEADER_LENGTH.size + length, []
    for sha, size, role in described:
      data = None if size < 0 else body[pos:pos + size]
      if data is not None and len(data) != size: raise ValueError("a blob runs past its record")
      pos += max(size, 0)
      blobs.append((sha, data, role))
    return Record(fields, blobs, shared, row)


def _split_header(raw: bytes) -> tuple[tuple, list[str], list[tuple]]:
  strings = raw.decode("utf-8", "surrogatepass").split("\0")
  if len(strings) <= len(FIELDS): raise ValueError("a header lacks fields")
  values: list = strings[:len(FIELDS)]
  values[0], values[5] = int(values[0]), float(values[5])
  count = int(strings[len(FIELDS)])
  start = len(FIELDS) + 1
  shared, rest = strings[start:start + count], strings[start + count:]
  if count < 0 or len(shared) != count or len(rest) % 4: raise ValueError("a header's blob list is cut short")
  described = [(rest[i], int(rest[i + 1]), (rest[i + 2], rest[i + 3]) if rest[i + 2] or rest[i + 3] else None)
               for i in range(0, len(rest), 4)]
  return tuple(values), shared, described


def _json_header(raw: bytes) -> tuple[dict, list[str], list[tuple]]:
  header = json.loads(raw)
  described = [(str(sha), int(size), tuple(str(r) for r in role) if role is not None else None)
               for sha, size, role in header.pop("blobs")]
  shared = [str(s) for s in header.pop("shared")]
  if not all(isinstance(v, (str, int, float, type(None))) for v in header.values()):
    raise ValueError("a record's fields are plain values")
  return header, shared, described


def records(data: bytes) -> Iterator[Record]:
  """The records of a segment's bytes, up to the first that is cut short or damaged."""
  pos = 0
  while pos + _HEAD.size <= len(data):
    magic, length, crc = _HEAD.unpack_from(data, pos)
    body = data[pos + _HEAD.size:pos + _HEAD.size + length]
    if magic not in (MAGIC, JSON_MAGIC) or len(body) != length or zlib.crc32(body) != crc: return
    try: record = Record.decode(body, magic)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, struct.error): return
    yield record
    pos += _HEAD.size + length


_live: dict[str, list["Journal"]] = {}   # the journals of this process, by database
_live_lock = threading.Lock()
# the records of the segments this process sealed, by path, with the segment's size: folded from here, not read back
# and decoded (a segment of the same size is the one this process wrote; any other is read from its file)
_written_here: dict[str, tuple[int, list[Record]]] = {}


class Journal:
  """The journal of one capturing process: appends records to its open segment, seals it for folding."""

  def __init__(self, db_path: str, known_blobs: set[str]):
    db_path = os.path.abspath(db_path)   # the program may change its working directory
    self.db_path, self.dir = db_path, pending_dir(db_path)
    self.token, self.pid = f"{os.getpid()}-{os.urandom(4).hex()}", os.getpid()
    self.known_blobs = known_blobs          # the database held these when the process started
    self.written: set[str] = set()          # blobs in a record of this journal
    self.lock = threading.Lock()
    self.seq, self.fd, self.path, self.bytes = 0, None, "", 0
    self.records: list[Record] = []   # those of the open segment: its folder in this process need not read them back
    with _live_lock: _live.setdefault(os.path.realpath(db_path), []).append(self)

  def _open_segment(self) -> None:
    os.makedirs(self.dir, exist_ok=True)
    self.seq += 1
    base = os.path.join(self.dir, f"{self.token}.{self.seq:06d}")
    fd = os.open(base + ".new", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX)
      os.rename(base + ".new", base + ".open")   # locked before a folder can see it as open
    except BaseException:
      os.close(fd)
      raise
    self.fd, self.path, self.bytes = fd, base + ".open", 0

  def append(self, fields: dict | tuple, blobs: list[tuple[str, bytes, Optional[tuple]]], shared: list[str],
             holds: Optional[Callable[[str], bool]] = None) -> int:
    """Write one capture, its fields by name or in FIELDS order (blobs this journal or the database holds go without
    their bytes: `holds(sha)` says whether the database does, else the known blobs); the segment's size."""
    with self.lock:
      if os.getpid() != self.pid: raise JournalError("a journal is written by the process that made it")
      kept, new, written, known = [], [], self.written, self.known_blobs
      for sha, data, role in blobs:
        # the known blobs first: `holds` (a call) is asked only about the others
        if data is None or sha in written or sha in known or sha in new or (holds is not None and holds(sha)):
          kept.append((sha, None, role))
        else:
          kept.append((sha, data, role))
          new.append(sha)
      entry = Record(None, kept, shared, fields) if type(fields) is tuple else Record(fields, kept, shared)
      record = entry.encode()
      try:
        if self.fd is None: self._open_segment()
        done = os.write(self.fd, record)
        if done < len(record):   # a signal or a full pipe cut the write short: the rest follows
          view = memoryview(record)[done:]
          while view: view = view[os.write(self.fd, view):]
      except OSError as e:
        if self.fd is not None:
          try: os.ftruncate(self.fd, self.bytes)   # a record cut short would end the segment for the records after it
          except OSError: self._seal()   # then the next record goes into a segment of its own
        raise JournalError(f"cannot write to {self.dir}: {e.strerror or e}") from e
      self.written.update(new)
      self.bytes += len(record)
      self.records.append(entry)
      return self.bytes

  def seal(self) -> None:
    """Close the open segment for folding (the next capture opens another)."""
    with self.lock: self._seal()

  def _seal(self) -> None:
    if self.fd is None or os.getpid() != self.pid: return
    sealed = self.path[:-len(".open")] + ".sealed"
    try:
      os.rename(self.path, sealed)
      with _live_lock: _written_here[sealed] = (os.fstat(self.fd).st_size, self.records)
    finally:
      os.close(self.fd)
      self.fd, self.records = None, []


def _segments(directory: str) -> list[tuple[str, int, str, str]]:
  """(token, seq, state, path) of the segments in `directory`, in the order they were written."""
  found = []
  for name in os.listdir(directory):
    token, _, rest = name.partition(".")
    seq, _, state = rest.partition(".")
    if seq.isdigit() and state in ("new", "open", "sealed", "folding"):
      found.append((token, int(seq), state, os.path.join(directory, name)))
  return sorted(found)


_fold_lock = threading.Lock()   # one fold at a time in a process


def fold_pending(store) -> tuple[int, list[tuple[int, str]]]:
  """Fold every segment no live writer holds into `store` (this process's own journals are sealed first), a
  segment per transaction, in the order each journal wrote them: how many captures were stored, and (run, why) of each
  capture that could not be."""
  with _live_lock: mine = [j for j in _live.get(os.path.realpath(store.path), ()) if j.pid == os.getpid()]
  for journal in mine: journal.seal()
  directory = pending_dir(store.path)
  if fcntl is None or not os.path.isdir(directory): return 0, []
  folded, lost = 0, []
  with _fold_lock:
    stuck: set[str] = set()   # journals whose writer lives: their later segments wait for the earlier ones
    for token, _, state, path in _segments(directory):
      if token in stuck or state == "new": continue
      done = _fold_segment(store, path, wait=state != "open")
      if done is None: stuck.add(token)
      else: folded, lost = folded + done[0], lost + done[1]
    with _live_lock:   # segments of this process that another process folded first: their records are not needed
      for path in [p for p in _written_here if not os.path.exists(p)]: del _written_here[path]
  return folded, lost


def _fold_segment(store, path: str, wait: bool) -> Optional[tuple[int, list[tuple[int, str]]]]:
  """Fold one segment (None: its writer holds it). What is not a plain file is no segment a writer made (a link to a
  device, a pipe, a folder): left alone, never read (a link to /dev/zero would be read forever, a pipe waited on)."""
  try: fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
  except OSError: return 0, []   # another process folded it, or a link (ELOOP) or what cannot be read: not a segment
  try:
    if not stat.S_ISREG(os.fstat(fd).st_mode): return 0, []
    try: fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError: return None
    try:
      if os.stat(path).st_ino != os.fstat(fd).st_ino: return 0, []
    except FileNotFoundError: return 0, []   # folded while this process waited for the lock
    recovering = path.endswith(".folding")
    with _live_lock: mine = _written_here.pop(path, None)
    if not recovering:
      moved = path.rsplit(".", 1)[0] + ".folding"
      os.rename(path, moved)
      path = moved
    if mine is not None and mine[0] == os.fstat(fd).st_size: found = mine[1]
    else:
      chunks = []
      while chunk := os.read(fd, 1 << 20): chunks.append(chunk)
      found = list(records(b"".join(chunks)))
    done = store.fold_records(found, recovering=recovering)
    os.unlink(path)
    return done
  finally: os.close(fd)


def _after_fork_in_child() -> None:
  global _live_lock, _fold_lock
  # a thread of the parent may have held them when it forked
  _live_lock, _fold_lock = threading.Lock(), threading.Lock()
  # the parent's open segment stays locked while any process holds it open: a child that lives on would keep the
  # parent from folding it
  for journals in _live.values():
    for j in journals:
      if j.fd is not None:
        try: os.close(j.fd)
        except OSError: pass
        j.fd, j.lock, j.records = None, threading.Lock(), []
  _written_here.clear()   # the parent folds its own


if hasattr(os, "register_at_fork"): os.register_at_fork(after_in_child=_after_fork_in_child)
