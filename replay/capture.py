"""The capture sink: what `scheduler/hooks.py` hands over when `CAPTURE_PROCESS_REPLAY=1`.

Each capture point serializes its inputs when the captured call starts (an `exec` reads its input
buffers before the kernels overwrite them) and its outputs when it returns, then appends both to the
process's capture journal (`db/journal.py`) in one write: a capture is durable as soon as the captured
call has returned. The journal is folded into the database a second later (by the next capture, in the thread that
takes it; by a timer when the program stopped capturing), and at exit.
"""
from __future__ import annotations
import atexit, hashlib, json, os, platform, sys, threading, time, weakref
from typing import Any, Optional
import numpy as np
from db import Store, journal
from replay import buffers, parts, serialize, sut
from replay.git_state import GitQuery, git_state
from replay.locations import current_region
from replay.serialize import NON_COMPILER_FLAGS

DEFAULT_MAX_EXEC_BYTES = 64 * 1024 * 1024
_HARNESS_DIRS = tuple(os.path.dirname(os.path.abspath(p)) + os.sep for p in (__file__, __import__("db").__file__))
_package_dirs: list[tuple[str, ...]] = []


def _inside_dirs() -> tuple[str, ...]:
  """The folders of the compiler and the harness: frames there are not where a program is."""
  if not _package_dirs:
    try: dirs = sut.package_dirs()
    except sut.NoContract: dirs = ()
    _package_dirs.append(dirs + _HARNESS_DIRS)
  return _package_dirs[0]


_contracts: list = []


def _contract() -> Any:
  """The compiler's contract, found once per process (finding it reads the environment: a few us, at every capture)."""
  if not _contracts: _contracts.append(sut.contract())
  return _contracts[0]


def _flags_now() -> dict[str, int]:
  try: return _contract().flag_values()
  except sut.NoContract: return {}


def _flag_defaults() -> dict[str, int]:
  try: return _contract().flag_defaults()
  except sut.NoContract: return {}


class _Sink:
  """The run of this process, one database connection per thread (a connection and its transactions cannot be
  shared by threads that capture at the same time), and the journal captures wait in until they are folded into the
  database (`db/journal.py`); everything is reopened after a fork."""
  def __init__(self):
    self.pid: Optional[int] = None
    self.ready: Optional[int] = None   # the process whose run is set up (pid is set first, when setting it up begins)
    self.run_id: Optional[int] = None
    self.lock = threading.Lock()
    self.local = threading.local()
    self.journal: Optional[journal.Journal] = None
    self.fold_store: Optional[Store] = None
    self.fold_lock = threading.Lock()
    self.timer: Optional[threading.Timer] = None
    self.pending_since: Optional[float] = None   # when the oldest capture the journal holds unfolded was taken
    self.git: Optional[GitQuery] = None   # the git process asked for the run's state, not written yet
    # the database's index of part pickles (node key -> blob) for the code this process runs, and what it adds
    self.code = ""
    self.command: Optional[str] = None   # this process's command line as a run row holds it, when it makes a run
    self.joined: Optional[int] = None    # the run this process joined (REPLAY_RUN_ID), made by another process
    self.part_shas: dict[str, str] = {}
    self.new_parts: list[tuple[str, str]] = []

  def get(self) -> tuple[Store, int]:
    # once this process's run is set up, every capture asks: answered without the lock
    if self.ready == os.getpid() and (store := getattr(self.local, "store", None)) is not None:
      return store, self.run_id
    with self.lock:
      if self.pid != os.getpid():   # a new process (or the first capture): a new run, new connections
        self.pid, self.local = os.getpid(), threading.local()
        try: self._start_run()
        except BaseException:
          self.pid = None   # the next capture tries again (and reports the same cause, not a half-made run)
          raise
    assert self.run_id is not None
    return self._thread_store(), self.run_id

  def _start_run(self) -> None:
    """Set this process's run up: its connection, journal, part index, run row and git query."""
    self.fold_store, self.fold_lock, self.timer, self.pending_since = None, threading.Lock(), None, None
    env_run = os.getenv("REPLAY_RUN_ID")
    self.joined = int(env_run) if env_run else None
    # the command of the run this process makes (a large database preloads the blobs of its last run)
    self.command = json.dumps(this_command()) if self.joined is None else None
    store = self._thread_store()
    self.journal = journal.Journal(store.path, store.known_blobs) if journal.available(store.path) else None
    self.code, self.new_parts = _source_stamp(), []
    self.part_shas = store.part_index(self.code) if self.code else {}
    # the defaults of the compiler this process imported (the process that made the run may have imported another)
    if self.joined is not None:
      self.run_id = self.joined
      store.set_run_flag_defaults(self.run_id, flag_defaults_json())
    else:
      self.run_id = store.add_run(**run_info(with_git=False, argv_json=self.command),
                                  flag_defaults=flag_defaults_json())
    # git takes a few milliseconds in a process of its own: the program goes on meanwhile, and a fold (or the exit)
    # writes what it found
    self.git = GitQuery() if self.joined is None else None
    atexit.register(self._at_exit, os.getpid(), store, None if self.joined is not None else self.run_id)
    self.ready = os.getpid()

  def _thread_store(self) -> Store:
    store = getattr(self.local, "store", None)
    if store is None:
      store = self.local.store = Store()
      store.defer_checkpoints()
      # a process of a run another process made: the blobs of that run's command
      command = self.command if self.joined is None else store.run_argv(self.joined)
      store.preload_blob_shas(command, besides=self.joined)
    return store

  @property
  def store(self) -> Optional[Store]: return getattr(self.local, "store", None)

  def put(self, store: Store, run_id: int, kind: str, key: str, name: str, location: str, input_data: bytes,
          input_sha: str, output_data: bytes, flags: str, meta: dict, shared: dict[str, bytes],
          roles: dict[str, tuple]) -> None:
    """Store one capture: into the journal, folded into the database a second later (or at once without one, or
    when its folder cannot be written)."""
    if self.journal is not None:
      output_sha = hashlib.sha256(output_data).hexdigest()
      # the captures row in the journal's field order (`journal.FIELDS`)
      fields = (run_id, kind, key, name, location, time.time(), input_sha, output_sha, flags,
                json.dumps(meta) if meta else "{}")
      # the order add_capture stores them in: parts first, then the payloads
      blobs = [(sha, data, roles.get(sha)) for sha, data in shared.items()]
      blobs += ((input_sha, input_data, roles.get(input_sha, (kind, "input"))),   # a schedule's input is its graph
                (output_sha, output_data, (kind, "output")))
      try: size = self.journal.append(fields, blobs, list(shared), store.holds_blob)
      except journal.JournalError: size = None
      if size is not None:
        now = time.monotonic()
        if self.pending_since is None: self.pending_since = now
        # folded here, by the thread that captures, once the oldest capture waited long enough: a fold in a thread of
        # its own hands the interpreter back and forth with the program at every database call (a thousand thread
        # switches a second, which cost the program more than the fold itself)
        if size >= journal.FOLD_AT_BYTES or now - self.pending_since >= journal.FOLD_AFTER_SECONDS:
          try: self.fold(store)
          except Exception: pass   # this capture is in the journal: folded later, at exit, or by the next reader
        elif self.timer is None: self._fold_later(2 * journal.FOLD_AFTER_SECONDS)
        return
    store.add_capture(run_id, kind, key, name, location, input_data, output_data, flags, meta, input_sha=input_sha,
                      shared_blobs=shared, roles=roles)

  def fold(self, store: Optional[Store] = None) -> None:
    """Move the captures waiting in this process's journal into the database (through `store`, a connection of this
    process no other thread uses now, or one of the folder's own)."""
    with self.fold_lock:
      self.pending_since = None
      if self.pid != os.getpid(): return
      if self.journal is None:
        self._save_part_index(store or self._thread_store())
        return
      if store is None:
        if self.fold_store is None:
          self.fold_store = Store(self.journal.db_path)
          self.fold_store.defer_checkpoints()
        store = self.fold_store
      _, lost = journal.fold_pending(store)
      self._save_part_index(store)   # after the fold: the blobs the entries name are in the database now
      self._write_git(store, wait=False)
    mine = [why for run_id, why in lost if run_id == self.run_id]   # not those of processes that died before
    if mine:
      _warn_once(f"replay capture: could not store {len(mine)} capture{'s' * (len(mine) != 1)} ({mine[0]}); further "
                 f"failures in this process are counted, not reported")

  def known_part(self, node_key: str) -> Optional[str]:
    """The blob holding the pickle of the part with this node key, when the database holds it (None when it cannot be
    opened: the capture that stores the part reports that)."""
    try: store, _ = self.get()
    except Exception: return None
    sha = self.part_shas.get(node_key)
    return sha if sha is not None and store.holds_blob(sha) else None

  def _save_part_index(self, store: Store) -> None:
    if not self.new_parts: return
    entries, self.new_parts = self.new_parts, []
    try: store.add_to_part_index(self.code, entries)
    except Exception: pass   # an index the database lacks costs the next process pickles, nothing else

  def _fold_later(self, seconds: float) -> None:
    """A fold in a thread of its own for a program that stopped capturing (one that captures folds as it goes)."""
    self.timer = threading.Timer(seconds, self._fold_in_background)
    self.timer.daemon = True
    self.timer.start()

  def _fold_in_background(self) -> None:
    self.timer = None
    since = self.pending_since
    if since is None: return   # folded by a capture since: the next unfolded capture arms the timer again
    left = 2 * journal.FOLD_AFTER_SECONDS - (time.monotonic() - since)
    if left > 0:   # a capture folded meanwhile, and the program captures still
      self._fold_later(left)
      return
    try: self.fold()
    except Exception: pass   # the captures stay in the journal: folded at exit, or by the next reader

  def _write_git(self, store: Store, wait: bool) -> None:
    """The run's git state into its row, once git answered (`wait`: at exit, for up to its timeout)."""
    query, run_id = self.git, self.run_id
    if query is None or run_id is None or (found := query.result(wait)) is None: return
    self.git = None
    try: store.set_run_git(run_id, *found)
    except Exception: pass   # the run row says less; the captures are what counts

  def _at_exit(self, pid: int, store: Store, run_id: Optional[int]) -> None:
    if os.getpid() != pid: return   # a forked child that exits normally runs its parent's handlers too
    if self.timer is not None: self.timer.cancel()
    try: self.fold(store)
    except Exception as e:
      where = self.journal.dir if self.journal is not None else "its journal"
      _warn_once(f"replay capture: captures wait in {where}: they could not be moved into the database ({e}); the "
                 f"next command that reads it moves them")
    if run_id is None: return
    with self.fold_lock: self._write_git(store, wait=True)
    try: store.finish_run(run_id)
    except Exception: pass


SINK = _Sink()
_WARNED: list[int] = []   # this process already warned that captures cannot be stored


def _warn_once(message: str) -> None:
  """One warning per process about captures it could not store, not one per capture."""
  if os.getpid() in _WARNED: return
  _WARNED.append(os.getpid())
  print(message, file=sys.stderr)


# besides the compiler's flags, the environment that decides what a captured command computes
EXTRA_RERUN_ENV = ("PYTHONHASHSEED",)


def rerun_env() -> dict[str, str]:
  """The environment a rerun of this process's command needs: every compiler flag set in it, and the extras."""
  names = (set(_flag_defaults()) - NON_COMPILER_FLAGS) | set(EXTRA_RERUN_ENV)
  return {k: v for k, v in sorted(os.environ.items()) if k in names}


def this_command() -> list[str]:
  """How this process was started, runnable again: the interpreter by its full path, then its options and arguments."""
  argv = list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
  return [sys.executable, *argv[1:]]


def run_info(argv: Optional[list[str]] = None, with_git: bool = True, argv_json: Optional[str] = None) -> dict:
  commit, dirty = git_state() if with_git else (None, None)
  if argv_json is None: argv_json = json.dumps(argv if argv is not None else this_command())
  return {"git_commit": commit, "git_dirty": dirty, "argv": argv_json,
          "python": platform.python_version(), "numpy": np.__version__, "host": platform.node(),
          "flags": json.dumps(_flags_now(), sort_keys=True), "cwd": os.getcwd(), "env": json.dumps(rerun_env())}


def flag_defaults_json() -> str:
  return json.dumps(_flag_defaults())


_outside_cache: dict[str, Optional[str]] = {}


def _outside_name(filename: str) -> Optional[str]:
  """The name to show for a file outside the compiler and harness, None for one inside (cached per file)."""
  if filename not in _outside_cache:
    path = os.path.abspath(filename)
    outside = not path.startswith(_inside_dirs()) and "importlib" not in path and not filename.startswith("<frozen")
    _outside_cache[filename] = os.path.relpath(filename) if outside else None
  return _outside_cache[filename]


def location() -> str:
  """Where a capture was taken: the pytest node id under pytest, else `file:line function` of the first frame outside
  the compiler and harness; a region named with `replay_location` comes first
  (`workload:mlp_sgd @ models.py:31 train`)."""
  region = current_region()
  node = os.getenv("PYTEST_CURRENT_TEST")
  where = node.rsplit(" ", 1)[0] if node else code_location()
  return f"{region} @ {where}" if region else where


# id of a code object -> (the code, the name to show for its file or None inside the compiler or harness, and for a
# code outside them its places (file, line, function) by instruction offset): keyed by id because hashing a code object
# hashes its bytecode and constants, on every lookup (the entry holds the code, so its id is not reused while the entry
# lives). Each place is one tuple that every tensor made there shares: a tuple made per call would be one more object
# for the garbage collector to count and scan per tensor the program makes
_frame_names: dict[int, tuple] = {}


def code_frame(start=None) -> Optional[tuple[str, int, str]]:
  """(file, line, function) of the innermost frame outside the compiler and the harness, from frame `start` outwards
  (default: the caller's); each code object is looked up once, and each place in it: tensors are made by the thousand,
  from the same few places (a frame's line number is found by reading its function's line table from the start, which
  in a long function costs more than the rest of the walk)."""
  frame, names = start if start is not None else sys._getframe(1), _frame_names
  while frame is not None:
    code = frame.f_code
    entry = names.get(id(code))
    if entry is None:
      if len(names) > 100_000: names.clear()   # programs that make code objects at run time
      entry = names[id(code)] = (code, _outside_name(code.co_filename), {})
    if entry[1] is not None:
      places, offset = entry[2], frame.f_lasti
      if (place := places.get(offset)) is None: place = places[offset] = (entry[1], frame.f_lineno, code.co_name)
      return place
    frame = frame.f_back
  return None


def code_location() -> str:
  """`file:line function` of the innermost frame outside the compiler and the harness."""
  where = code_frame()
  return f"{where[0]}:{where[1]} {where[2]}" if where else "?"


def max_exec_bytes() -> int:
  try: return int(os.getenv("REPLAY_MAX_EXEC_BYTES", DEFAULT_MAX_EXEC_BYTES))
  except ValueError: return DEFAULT_MAX_EXEC_BYTES


# ***** payloads per kind *****

def _exec_inputs(sink) -> tuple[dict, dict, dict[str, bytes]]:
  """The contents of every realized buffer the graph reads (constant fills by value, large buffers as blobs of their
  own, returned third); buffers above the cap by shape, dtype and hash only. What is read may be the buffer's own
  memory (`graph_buffers`): what is kept is copied here, before the kernels run."""
  cap, contents, omitted, shared = max_exec_bytes(), {}, [], {}
  for u, size, dtype_name, nbytes, read in _contract().graph_buffers(sink):
    if nbytes > cap:
      contents[u] = {"omitted": True, "size": size, "dtype": dtype_name, "nbytes": nbytes,
                     "sha256": hashlib.sha256(np.ascontiguousarray(read()).reshape(-1).view(np.uint8)).hexdigest()}
      omitted.append(nbytes)
    else: contents[u] = buffers.encode(read(), shared)
  return contents, ({"omitted_buffers": len(omitted), "omitted_bytes": sum(omitted)} if omitted else {}), shared


# per thread, the last graph pickled, its sha256 and bytes: a realize and its schedule share one graph
_graph_memo = threading.local()


def graph_part(sink) -> tuple[str, bytes]:
  """The graph as a part of its own (`replay/parts.py`): its sha256 and pickled bytes."""
  last = getattr(_graph_memo, "last", None)
  if last is not None and last[0]() is sink: return last[1]
  data = serialize.dumps(sink)
  part = (hashlib.sha256(data).hexdigest(), data)
  _graph_memo.last = (weakref.ref(sink), part)
  return part



# what a part is, for the store's delta compression (a payload is compressed against an earlier one of its role)
_GRAPH_ROLE, _AST_ROLE = ("part", "graph"), ("part", "ast")


# kernel ASTs as parts of their own, by AST (a schedule's output pickles them, the kernel captures that render them
# next reuse the bytes; a training loop schedules the same ASTs every step)
_ast_parts: "weakref.WeakKeyDictionary[Any, tuple[str, bytes]]" = weakref.WeakKeyDictionary()
_ast_parts_lock = threading.Lock()


def ast_part(ast) -> tuple[str, Optional[bytes]]:
  """The AST as a part of its own: its sha256 and pickled bytes, pickled once per process; the bytes are None when the
  database holds them already (found by the AST's structural key, for the code this process runs)."""
  if (hit := _ast_parts.get(ast)) is not None: return hit
  node_key = _structural_key(ast)
  if node_key is not None and (sha := SINK.known_part(node_key)) is not None: part = (sha, None)
  else:
    data = serialize.dumps(ast)
    part = (hashlib.sha256(data).hexdigest(), data)
    if node_key is not None and SINK.code: SINK.new_parts.append((node_key, part[0]))
  with _ast_parts_lock: _ast_parts[ast] = part
  return part


def _structural_key(node) -> Optional[str]:
  """The node's key in the database's part index (None from a compiler whose contract has no structural key)."""
  key = getattr(_contract(), "structural_key", None)
  return key(node) if key is not None else None


def _source_stamp() -> str:
  try: return sut.source_stamp()
  except (sut.NoContract, OSError): return ""   # no index: every part is pickled


# the kind of each kernel AST pickled in this process, by its part's sha256 (finding it walks the whole AST)
_kinds: dict[str, str] = {}


def _kind(ast, sha: str) -> str:
  """The kernel's kind (`E`, `r`, a meta op), found once per AST."""
  kind = _kinds.get(sha)
  if kind is None: kind = _kinds[sha] = _contract().kernel_kind(ast)
  return kind


# the kernel parts of the last few schedules: a training loop schedules the same kernels every step
_schedule_outputs: dict[tuple, tuple[dict[str, bytes], str, list[str]]] = {}
SCHEDULE_MEMO = 32


def _schedule_output(asts: list, var_vals: dict) -> tuple[dict[str, bytes], str, list[str]]:
  """A schedule's kernels as parts, the capture's name (`3 kernels: E,r`), and the parts' hashes in the schedule's
  order."""
  key = (tuple(asts), tuple(var_vals.items()))
  if (hit := _schedule_outputs.get(key)) is not None: return hit
  if len(_schedule_outputs) >= SCHEDULE_MEMO: _schedule_outputs.pop(next(iter(_schedule_outputs)))
  ast_parts = [ast_part(a) for a in asts]
  kinds = ",".join(sorted({_kind(a, sha) for a, (sha, _) in zip(asts, ast_parts)}))
  hit = _schedule_outputs[key] = (dict(ast_parts), f"{len(asts)} kernels" + (f": {kinds}" if asts else ""),
                                  [sha for sha, _ in ast_parts])
  return hit


# flag values -> (their JSON, the compiler's flags' JSON), and the last flags tuple looked up with its answer: a
# compiler whose contract hands the same tuple over while no flag changes (`flag_items`) is answered by identity, not by
# hashing forty pairs at every capture
_flags_json: dict[tuple, tuple[str, str]] = {}
_last_flags = threading.local()


def flag_items(contract) -> tuple:
  """The flags now as (name, value) pairs sorted by name: the contract's own cached tuple where it has one."""
  items = getattr(contract, "flag_items", None)
  return items() if items is not None else tuple(sorted(contract.flag_values().items()))


def flags_json(flags: tuple) -> tuple[str, str]:
  """The flags (`flag_items`) as JSON, all of them and the compiler's only (the capture's key), once per set of
  values."""
  last = getattr(_last_flags, "hit", None)
  if last is not None and last[0] is flags: return last[1]
  if (found := _flags_json.get(flags)) is None:
    values = dict(flags)
    compiler = {k: v for k, v in values.items() if k not in NON_COMPILER_FLAGS}
    found = _flags_json[flags] = (json.dumps(values, sort_keys=True), json.dumps(compiler, sort_keys=True))
  _last_flags.hit = (flags, found)
  return found


_enclosing = threading.local()   # per thread, the location of the captured call running now


class CapturePoint:
  """One captured call: `with CapturePoint(kind, inputs, meta) as cap: ...; cap.set_output(out)`."""

  # slots: a training step takes hundreds of captures (one per kernel rendered), each of which sets a dozen of these
  __slots__ = ("kind", "meta", "output", "has_output", "shared", "roles", "contract", "flags", "input_sha",
               "input_data", "location", "name", "enclosing_location")

  def __init__(self, kind: str, inputs: tuple, meta: dict):
    self.kind, self.meta = kind, {k: (v() if callable(v) else v) for k, v in meta.items()} if meta else {}
    self.output: Any = None
    self.has_output = False
    self.contract = contract = _contracts[0] if _contracts else _contract()
    self.flags = flag_items(contract)
    # `shared`: blobs of their own the payloads refer to, by sha256 (parts: a graph, kernel ASTs; an exec's input
    # buffers), and `roles`: the role of each for the store's delta compression
    if kind == "kernel":
      ast = inputs[0]
      if (part := _ast_parts.get(ast)) is None:   # a kernel's AST is pickled once per process
        with contract.without_pickled_buffers(): part = ast_part(ast)
      sha, data = part
      self.shared, self.roles = {sha: data}, {sha: _AST_ROLE}
      self.input_data = serialize.dumps({parts.AST: sha, "device": inputs[1], "options": inputs[2]}, contract.VERSION,
                                        plain=True)
      self.input_sha = hashlib.sha256(self.input_data).hexdigest()
    else:
      # pickling a graph leaves buffer contents out (they are stored apart)
      with contract.without_pickled_buffers(): self._graph_input(kind, inputs[0])
    # the captures a captured call makes inside it (the schedule and kernels of a realize) were taken where it was
    self.location = getattr(_enclosing, "location", None) or location()
    self.name = self.meta.pop("name", kind)

  def _graph_input(self, kind: str, graph) -> None:
    if kind == "schedule":   # the input is the graph itself, a part the realize's exec capture refers to
      self.input_sha, self.input_data = graph_part(graph)
      self.shared, self.roles = {}, {self.input_sha: _GRAPH_ROLE}
    elif kind == "exec":
      contents, info, self.shared = _exec_inputs(graph)
      sha, data = graph_part(graph)
      self.shared[sha], self.roles = data, {sha: _GRAPH_ROLE}
      self.meta.update(info)
      self.input_data = serialize.dumps({parts.GRAPH: sha, "buffers": contents}, self.contract.VERSION)
      self.input_sha = hashlib.sha256(self.input_data).hexdigest()
    else: raise ValueError(f"unknown capture kind {kind!r}")

  def __enter__(self):
    self.enclosing_location = getattr(_enclosing, "location", None)
    _enclosing.location = self.location
    return self

  def set_output(self, output: Any) -> None:
    """The call's result; a callable is called once here (so outputs are only computed when capturing)."""
    self.output, self.has_output = (output() if callable(output) else output), True

  def __exit__(self, exc_type, exc, tb):
    _enclosing.location = self.enclosing_location
    if exc_type is not None or not self.has_output: return False
    try: self._store()
    except Exception as e:
      _warn_once(f"replay capture: could not store a {self.kind} capture ({type(e).__name__}: {e}); further failures "
                 f"in this process are counted, not reported")
      try:   # the run counts what it lost, so that it ends as a failure (best effort: the database may be what failed)
        store, run_id = SINK.get()
        store.count_lost(run_id)
      except Exception: pass
    return False

  def _store(self) -> None:
    contract = self.contract
    if self.kind == "schedule":
      asts, var_vals = self.output
      with contract.without_pickled_buffers():
        ast_parts, self.name, shas = _schedule_output(list(asts), dict(var_vals))
        self.shared = {**self.shared, **ast_parts}
        output_data = serialize.dumps({parts.AST_PLACES: parts.places(shas, self.shared), "var_vals": dict(var_vals)},
                                      contract.VERSION, plain=not var_vals)
      self.roles = {**self.roles, **dict.fromkeys(ast_parts, _AST_ROLE)}
    elif self.kind == "kernel":
      src, name, *options = self.output   # older compilers hand over (src, name) only
      output_data = serialize.dumps({"src": src, "name": name, **({"options": options[0]} if options else {})},
                                    contract.VERSION, plain=True)
      self.name = name
    else:   # a step's outputs are the next one's inputs
      output_data = serialize.dumps({"outputs": [buffers.encode(o, self.shared) for o in self.output]},
                                    contract.VERSION, plain=True)
    all_flags, compiler = flags_json(self.flags)
    # the content key: the hash of the input payload's hash and the compiler flags (the payload is hashed once)
    key = hashlib.sha256(f"{self.input_sha}|{compiler}".encode()).hexdigest()
    store, run_id = SINK.get()
    SINK.put(store, run_id, self.kind, key, self.name, self.location, self.input_data, self.input_sha, output_data,
             all_flags, self.meta, self.shared, self.roles)


def flush() -> None:
  """Move the captures this process is holding into the database now (an xdist worker before it reports back)."""
  if SINK.pid == os.getpid(): SINK.fold()
