"""The replay runner: feeds a selection of captures to worker processes that run the compiler under
test, isolates crashes and hangs to the capture that caused them, and stores every outcome.

Sits between the command line and the workers (`replay/worker.py`); talks to the database
through `db/`.
"""
from __future__ import annotations
import collections, json, os, selectors, signal, struct, subprocess, sys, time
from dataclasses import dataclass
from typing import Optional
from db import Store, BlobError
from replay.statuses import STATUSES



@dataclass
class RunOptions:
  jobs: int = max(1, os.cpu_count() or 1)
  timeout: float = 120.0
  max_changed: Optional[str] = None  # a count ("10") or a percentage ("5%") of the selection
  tolerances: Optional[dict] = None
  progress: bool = True
  # address-space limit of each worker: a capture that asks for more is an error, not a dead machine
  memory_mb: int = 8192
  # schedule with rewrite tracing and return the trace instead of comparing (`replay show --why`)
  trace: bool = False


@dataclass
class ReplayResult:
  replay_id: int
  outcomes: list[dict]
  stopped_early: bool = False
  wall_seconds: float = 0.0
  compiler_seconds: float = 0.0
  flag_defaults: Optional[dict] = None   # the flag registry of the compiler the workers ran (name -> default)

  def counts(self) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for o in self.outcomes:
      row = out.setdefault(o["kind"], {s: 0 for s in STATUSES})
      row[o["status"]] += 1
    return out


class _Runs:
  """The captures to replay as one contiguous run per worker slot, in id order: consecutive captures (one workload's
  schedules, kernels and realizes) go to the same process, whose caches (lowered kernels, loaded programs) they
  share. A slot whose run is done takes the back half of the longest run left."""
  def __init__(self, captures: list[dict], slots: int):
    size = -(-len(captures) // max(1, slots))
    self.runs = [collections.deque(captures[k:k + size]) for k in range(0, len(captures), size)] if captures else []
    self.runs += [collections.deque() for _ in range(max(1, slots) - len(self.runs))]

  def __bool__(self) -> bool: return any(self.runs)

  def pop(self, slot: int) -> dict:
    run = self.runs[slot]
    if not run:
      longest = max(self.runs, key=len)
      for _ in range(-(-len(longest) // 2)): run.appendleft(longest.pop())
    return run.popleft()


class _Worker:
  def __init__(self, python_path: list[str], env_extra: dict[str, str], slot: int = 0,
               command: Optional[list[str]] = None):
    self.slot = slot
    from replay import isolation, revisions
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(python_path), "CAPTURE_PROCESS_REPLAY": "0",
           isolation.ROOT_ENV: python_path[0], isolation.PACKAGES_ENV: ",".join(revisions.sut_packages()), **env_extra}
    env.pop("PYTEST_CURRENT_TEST", None)
    self.proc = subprocess.Popen(command or [sys.executable, "-m", "replay.worker"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL if not os.getenv("REPLAY_WORKER_STDERR") else None, env=env,
                                 cwd=python_path[0], start_new_session=True)
    self.buf = b""
    self.task: Optional[dict] = None
    self.deadline = 0.0
    self.ready = False

  def send(self, capture: dict, input_data: bytes, output_data: bytes, shared: dict[str, bytes], tolerances,
           timeout: float,
           trace: bool = False) -> None:
    """One capture to replay: a header, the input and output payloads, then the shared blobs the input refers to."""
    from replay.compare import output_names
    header = json.dumps({"capture_id": capture["id"], "kind": capture["kind"],
                         "flags": json.loads(capture["flags"] or "{}"),
                         "tolerances": tolerances, "names": output_names(capture.get("meta")), "trace": trace,
                         "input_len": len(input_data), "output_len": len(output_data),
                         "shared": [[sha, len(data)] for sha, data in shared.items()]}).encode()
    self.task, self.deadline = capture, time.monotonic() + timeout
    assert self.proc.stdin is not None
    self.proc.stdin.write(struct.pack(">I",
                                      len(header)) + header + input_data + output_data + b"".join(shared.values()))
    self.proc.stdin.flush()

  def send_graph(self, kind: str, payload: bytes, flags: dict, timeout: float) -> None:
    """A graph to run and return the result of, not to compare (`replay reduce`'s candidates)."""
    header = json.dumps({"capture_id": 0, "kind": kind, "flags": flags, "evaluate": True, "input_len": len(payload),
                         "output_len": 0}).encode()
    self.task, self.deadline = {"id": 0, "kind": kind}, time.monotonic() + timeout
    assert self.proc.stdin is not None
    self.proc.stdin.write(struct.pack(">I", len(header)) + header + payload)
    self.proc.stdin.flush()

  def messages(self) -> list[dict]:
    """Complete messages read so far (call when stdout is readable); raises EOFError when the worker is gone."""
    assert self.proc.stdout is not None
    chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
    if not chunk: raise EOFError
    self.buf += chunk
    out = []
    while len(self.buf) >= 4 and len(self.buf) >= 4 + (n := struct.unpack(">I", self.buf[:4])[0]):
      out.append(json.loads(self.buf[4:4 + n]))
      self.buf = self.buf[4 + n:]
    return out

  def kill(self) -> None:
    try: os.killpg(self.proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError): pass
    self.proc.wait()

  def death_reason(self) -> str:
    code = self.proc.wait()
    if code < 0:
      try: name = signal.Signals(-code).name
      except ValueError: name = str(-code)
      return f"worker crashed with {name}"
    return f"worker exited with code {code}"


def _limit(max_changed: Optional[str], total: int) -> Optional[int]:
  if not max_changed: return None
  s = max_changed.strip()
  try: return max(1, int(float(s[:-1]) / 100 * total)) if s.endswith("%") else int(s)
  except ValueError:
    raise ValueError(f"--max-changed must be a count or a percentage like 5%, got {max_changed!r}") from None


class _Progress:
  """A bar on a terminal; elsewhere (a CI log) a line every 30 seconds, so a long replay shows it is alive."""
  LOG_EVERY = 30.0

  def __init__(self, total: int, enabled: bool):
    self.total, self.done, self.enabled, self.terminal = total, 0, enabled, sys.stderr.isatty()
    self.t0 = self.logged = time.monotonic()

  def step(self, counts: dict[str, int]) -> None:
    self.done += 1
    if not self.enabled: return
    tail = " ".join(f"{k}:{v}" for k, v in counts.items() if v)
    if not self.terminal:
      if (now := time.monotonic()) - self.logged >= self.LOG_EVERY:
        self.logged = now
        sys.stderr.write(f"replay: {self.done}/{self.total} captures replayed in {now - self.t0:.0f}s ({tail})\n")
        sys.stderr.flush()
      return
    width = 30
    filled = int(width * self.done / max(self.total, 1))
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                     f"{time.monotonic() - self.t0:5.1f}s {tail}   ")
    sys.stderr.flush()

  def close(self) -> None:
    if self.enabled and self.terminal: sys.stderr.write("\n")


class CaptureReplay:
  """One replay of a selection of captures: worker slots each take a contiguous run of captures (`_Runs`, with
  stealing), a worker that dies or overruns its deadline costs only the capture it had (an error outcome) and is
  replaced, and outcomes are written in batches. `worker_command` starts a worker (tests give a scripted one)."""
  BATCH = 64

  def __init__(self, store: Store, captures: list[dict], python_path: list[str], replay_fields: dict,
               options: RunOptions,
               env_extra: Optional[dict[str, str]] = None, keep: bool = True,
               worker_command: Optional[list[str]] = None):
    self.store, self.captures, self.python_path, self.options, self.keep = store, captures, python_path, options, keep
    self.env_extra = {**(env_extra or {}), "REPLAY_WORKER_MEMORY_MB": str(options.memory_mb)}
    self.worker_command = worker_command
    self.t0 = time.monotonic()
    self.replay_id = store.add_replay(jobs=options.jobs, selected=len(captures), **replay_fields) if keep else 0
    self.limit = _limit(options.max_changed, len(captures))
    self.pending = _Runs(captures, min(options.jobs, len(captures)))
    self.outcomes: list[dict] = []
    self.rows: list[dict] = []
    self.counts = {s: 0 for s in STATUSES}
    self.progress = _Progress(len(captures), options.progress)
    self.selector = selectors.DefaultSelector()
    self.workers: list[_Worker] = []
    self.stopped = False
    self.compiler_seconds = 0.0
    self.flag_defaults: Optional[dict] = None

  def record(self, capture: dict, result: dict, seconds: float) -> None:
    self.compiler_seconds += result.get("compiler_seconds", 0.0)
    row = {"replay_id": self.replay_id, "capture_id": capture["id"], "status": result["status"],
           "reason": result.get("reason", ""),
           "diff": result.get("diff", ""), "metrics": json.dumps(result.get("metrics", {})), "seconds": seconds}
    self.rows.append(row)
    if len(self.rows) >= self.BATCH: self.flush()
    self.outcomes.append({**row, "kind": capture["kind"], "name": capture["name"], "location": capture["location"],
                          **({"trace": result["trace"]} if "trace" in result else {})})
    self.counts[result["status"]] += 1
    self.progress.step(self.counts)

  def flush(self) -> None:
    # outcomes are written in batches: one transaction each, not one per capture
    if self.rows and self.keep: self.store.add_outcomes(list(self.rows))
    self.rows.clear()

  def start_worker(self, slot: int) -> _Worker:
    w = _Worker(self.python_path, self.env_extra, slot, self.worker_command)
    assert w.proc.stdout is not None
    self.selector.register(w.proc.stdout, selectors.EVENT_READ, w)
    self.workers.append(w)
    return w

  def retire(self, w: _Worker) -> None:
    self.selector.unregister(w.proc.stdout)
    self.workers.remove(w)
    w.kill()

  def replace(self, w: _Worker) -> None:
    if self.pending and not self.stopped: self.feed(self.start_worker(w.slot))

  def feed(self, w: _Worker) -> None:
    """Give the worker its slot's next capture (or nothing, when the selection is done or the replay stops early)."""
    if self.limit is not None and self.counts["changed"] + self.counts["mismatch"] >= self.limit: self.stopped = True
    w.task = None
    while self.pending and not self.stopped:
      cap = self.pending.pop(w.slot)
      try:
        shared = self.store.shared_blobs(cap["id"])   # parts and buffers the payloads refer to
        w.send(cap, self.store.get_blob(cap["input_sha"]), self.store.get_blob(cap["output_sha"]), shared,
               self.options.tolerances,
               self.options.timeout, self.options.trace)
      except (BlobError, ValueError) as e:   # a bad blob or flags: an outcome of its own, the rest still replays
        self.record(cap,
                    {"status": "error", "reason": f"{e}" if isinstance(e, BlobError)
                     else f"capture {cap['id']} has unreadable flags: {e}"}, 0.0)
        continue
      except BrokenPipeError: w.task = cap  # the worker died at start; the select loop reports it
      return

  def on_readable(self, w: _Worker) -> None:
    try: msgs = w.messages()
    except EOFError:   # the worker died: its capture is an error, a new worker takes the slot
      task, reason = w.task, w.death_reason()
      self.retire(w)
      if task is not None: self.record(task, {"status": "error", "reason": reason}, 0.0)
      elif not w.ready:
        raise RuntimeError(f"replay worker failed to start ({reason}); run with REPLAY_WORKER_STDERR=1 to see why")
      self.replace(w)
      return
    for m in msgs:
      if m.get("ready"):
        w.ready = True
        if isinstance(m.get("flag_defaults"), dict): self.flag_defaults = m["flag_defaults"]
        if w.task is None: self.feed(w)
      elif w.task is not None:
        self.record(w.task, m, time.monotonic() - (w.deadline - self.options.timeout))
        self.feed(w)

  def expire(self) -> None:
    """Workers past their capture's deadline are killed; the capture is an error, a new worker takes the slot."""
    now = time.monotonic()
    for w in [w for w in self.workers if w.task is not None and w.ready and now > w.deadline]:
      task = w.task
      self.retire(w)
      self.record(task, {"status": "error", "reason": f"timed out after {self.options.timeout:g}s"},
                  self.options.timeout)
      self.replace(w)

  def run(self) -> ReplayResult:
    try:
      for slot in range(min(self.options.jobs, len(self.captures))): self.start_worker(slot)
      while self.workers:
        busy = [w for w in self.workers if w.task is not None]
        if not busy and all(w.ready for w in self.workers) and (self.stopped or not self.pending): break
        wait = min((w.deadline for w in busy), default=time.monotonic() + 1.0) - time.monotonic()
        for key, _ in self.selector.select(timeout=max(0.0, min(wait, 1.0))): self.on_readable(key.data)
        self.expire()
    finally:
      self.flush()
      for w in list(self.workers):
        try:
          if w.proc.stdin: w.proc.stdin.close()
        except OSError: pass
      for w in list(self.workers): self.retire(w)
      self.progress.close()
    return ReplayResult(self.replay_id, self.outcomes, self.stopped, time.monotonic() - self.t0, self.compiler_seconds,
                        self.flag_defaults)


def replay_captures(store: Store, captures: list[dict], python_path: list[str], replay_fields: dict,
                    options: RunOptions,
                    env_extra: Optional[dict[str, str]] = None, keep: bool = True) -> ReplayResult:
  """Replay `captures` with the compiler found on `python_path`; every outcome lands in `outcomes`, and with `keep`
  in a new replay of `store` (without it, the caller decides what to store)."""
  return CaptureReplay(store, captures, python_path, replay_fields, options, env_extra, keep).run()
