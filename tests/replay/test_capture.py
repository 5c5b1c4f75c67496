"""Capture: all three kinds from the corpus, no duplicate blobs, durability under SIGKILL, concurrent
writers, the restricted unpickler, and captures surviving a reordered Ops enum."""
import json, os, pickle, shutil, signal, sqlite3, subprocess, sys, textwrap, threading, time
import pytest
from db import Store
from replay import serialize
from tests.conftest import REPO
from tests.replay.conftest import cli


def run_py(code: str, db, extra_env=None, cwd=REPO, **kw):
  env = {**os.environ, "PYTHONPATH": str(cwd), "REPLAY_DB": str(db), "CAPTURE_PROCESS_REPLAY": "1", **(extra_env or {})}
  env.pop("PYTEST_CURRENT_TEST", None)
  return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env, **kw)


@pytest.mark.slow
def test_corpus_fills_all_kinds_and_a_second_run_adds_no_blob(tmp_path):
  db = tmp_path / "r.db"
  env = {**os.environ, "PYTHONPATH": str(REPO), "REPLAY_DB": str(db), "CAPTURE_PROCESS_REPLAY": "1"}
  env.pop("PYTEST_CURRENT_TEST", None)
  names = ["mlp_sgd", "disk_state_dict", "symbolic_seq", "ref_matmul", "ref_rand"]
  for _ in range(2):
    subprocess.run([sys.executable, "-m", "scripts.workloads", "--only", *names], cwd=REPO, env=env, check=True,
                   capture_output=True)
  s = Store(str(db))
  runs = sorted({c["run_id"] for c in s.captures()})
  assert len(runs) == 2
  first, second = s.capture_counts(runs[0]), s.capture_counts(runs[1])
  assert first == second and all(first.get(k, 0) > 0 for k in ("schedule", "kernel", "exec"))
  def blobs_of(captures):
    shas = {c["input_sha"] for c in captures} | {c["output_sha"] for c in captures} | \
           {sha for c in captures for sha in s.shared_blob_shas(c["id"])}
    marks = ",".join("?" * len(shas))   # and the dictionaries their deltas were compressed with
    bases = s.conn.execute(f"SELECT base FROM blobs WHERE base IS NOT NULL AND sha256 IN ({marks})", tuple(shas))
    return shas | {r[0] for r in bases}
  blobs_after_two = s.blob_count()
  assert blobs_after_two == len(blobs_of(s.captures()))
  assert blobs_after_two == len(blobs_of(s.captures(run_ids=[runs[0]])))
  run = s.run(runs[0])
  assert run["python"] and run["numpy"] and json.loads(run["argv"]) and "mlp_sgd" in run["argv"]
  loc = {c["location"] for c in s.captures(kinds=["exec"])}
  assert any("models.py" in l for l in loc)
  # each workload's captures name it, training steps name the step, and variants are workloads of their own
  assert any(l.startswith("workload:mlp_sgd / step 3 @ scripts/workloads/models.py:") for l in loc), sorted(loc)[:10]
  assert any(l.startswith("workload:ref_matmul[PYTHON] @ ") for l in loc)
  assert not any(l.startswith("<string>") for l in loc)


def test_captures_into_a_database_too_large_to_preload_are_those_of_one_that_is_not(tmp_path):
  # the same program three times: twice into a database treated as too large to read every blob hash of (the first
  # run reads them all anyway, its command never ran; the second preloads the first one's blobs and asks the file
  # about others), then as usual
  program = """
    import sys
    from db.store import Store
    Store.PRELOAD_BLOBS = Store.PER_CAPTURE_COST = int(sys.argv[1])
    from scheduler import Tensor
    x = Tensor.arange(12).reshape(3, 4).float()
    print(((x * 2).sum(axis=1) + 1).numpy().tolist())
    import replay.capture
    print(replay.capture.SINK.store._knows_all)   # whether this process read every blob hash
  """
  db = tmp_path / "r.db"
  for limit, reads_all in (("0", "True"), ("0", "False"), ("1000000", "True")):
    env = {**os.environ, "PYTHONPATH": str(REPO), "REPLAY_DB": str(db), "CAPTURE_PROCESS_REPLAY": "1"}
    env.pop("PYTEST_CURRENT_TEST", None)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(program), limit], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.split() == ["[13.0,", "45.0,", "77.0]", reads_all], proc.stderr
  s = Store(str(db))
  rows = [[(c["kind"], c["key"], c["input_sha"], c["output_sha"]) for c in s.captures(run_ids=[run])]
          for run in sorted({c["run_id"] for c in s.captures()})]
  assert len(rows) == 3 and rows[0] == rows[1] == rows[2] and len(rows[0]) >= 3
  assert s.integrity_ok() and s.run_argv(s.captures()[0]["run_id"]) is not None


def test_replay_location_labels_regions_per_thread_and_nests(replay_db):
  import threading
  import numpy as np
  from scheduler import Tensor
  from scheduler.helpers import Context
  from replay import replay_location
  from replay.capture import location
  assert "@" not in location()
  with replay_location("decoder"):
    with replay_location("  layer\n2 "): inner = location()
    outer = location()
  assert inner.startswith("decoder / layer 2 @ ") and outer.startswith("decoder @ ") and "test_capture.py" in outer
  seen = []
  with replay_location("main thread"):
    t = threading.Thread(target=lambda: seen.append(location()))
    t.start(); t.join()
  assert "@" not in seen[0]   # a region belongs to the thread that opened it
  with pytest.raises(ValueError, match="non-empty name"): replay_location("  ").__enter__()
  with Context(CAPTURE_PROCESS_REPLAY=1), replay_location("probe"):
    Tensor(np.arange(4, dtype=np.float32)).realize()
  caps = Store(str(replay_db)).captures(kinds=["exec"])
  assert caps and all(c["location"].startswith("probe @ ") for c in caps)


def test_the_captures_inside_a_realize_are_where_the_realize_was_called(replay_db, monkeypatch):
  import inspect
  import numpy as np
  import replay.capture as capture
  from scheduler import Tensor
  from scheduler.helpers import Context
  monkeypatch.delenv("PYTEST_CURRENT_TEST")   # locations are then the program's lines, not the test's name
  line = inspect.currentframe().f_lineno
  with Context(CAPTURE_PROCESS_REPLAY=1):
    x = Tensor(np.arange(29 * 3, dtype=np.float32).reshape(29, 3))   # a shape of its own: its kernels are rendered
    (x.exp() * 2).sum(axis=1).realize()
    (x + 1).schedule()
  capture.SINK.fold()
  here, name = os.path.relpath(__file__), "test_the_captures_inside_a_realize_are_where_the_realize_was_called"
  by_kind = {kind: [c["location"] for c in Store(str(replay_db)).captures(kinds=[kind])]
             for kind in ("exec", "schedule", "kernel")}
  assert by_kind["exec"] == [f"{here}:{line + 3} {name}"] and by_kind["kernel"]
  assert set(by_kind["kernel"]) == {f"{here}:{line + 3} {name}"}
  assert by_kind["schedule"] == [f"{here}:{line + 3} {name}", f"{here}:{line + 4} {name}"]
  assert capture._enclosing.location is None   # nothing is kept once the realize returns


def _rows_in_file(path) -> int:
  """Captures the database file holds (read with sqlite alone: a Store would fold the journal first)."""
  conn = sqlite3.connect(str(path))
  try: return conn.execute("SELECT count(*) FROM captures").fetchone()[0]
  except sqlite3.OperationalError: return 0
  finally: conn.close()


def test_a_program_that_captures_folds_its_journal_itself_and_one_that_stopped_by_a_timer(replay_db, monkeypatch):
  import numpy as np
  import db.journal as journal
  import replay.capture as capture
  from scheduler import Tensor
  from scheduler.helpers import Context
  monkeypatch.setattr(journal, "FOLD_AFTER_SECONDS", 0.3)
  timers = []
  def fold_later(sink, seconds):
    timers.append(seconds)
    sink.timer = threading.Timer(60, lambda: None)   # armed, never started
  monkeypatch.setattr(capture._Sink, "_fold_later", fold_later)
  x = Tensor(np.arange(31 * 2, dtype=np.float32).reshape(31, 2))
  with Context(CAPTURE_PROCESS_REPLAY=1):
    (x + 1).realize()
    assert _rows_in_file(replay_db) == 0 and timers == [0.6]   # waiting in the journal; a timer would fold it later
    time.sleep(0.35)
    (x * 3).realize()   # the oldest capture waited long enough: this capture folds, in this thread
    folded = _rows_in_file(replay_db)
    assert folded >= 2
    # a program that stopped capturing: its last captures are folded by the timer
    monkeypatch.undo()
    monkeypatch.setenv("REPLAY_DB", str(replay_db))
    capture.SINK.timer = None
    monkeypatch.setattr(journal, "FOLD_AFTER_SECONDS", 0.1)
    (x - 2).realize()
  deadline = time.monotonic() + 10
  while _rows_in_file(replay_db) == folded and time.monotonic() < deadline: time.sleep(0.05)
  assert _rows_in_file(replay_db) > folded


WORKER = """
  import numpy as np, sys
  from scheduler import Tensor
  x = Tensor(np.arange(64, dtype=np.float32)).realize()
  for i in range(10_000):
    (x * (i + 1) + 1).sum().realize()
    print(i, flush=True)
"""


def test_sigkill_mid_workload_loses_nothing_that_returned(tmp_path):
  db = tmp_path / "r.db"
  proc = run_py(WORKER, db, stdout=subprocess.PIPE, text=True)
  returned = -1
  deadline = time.time() + 120
  while returned < 40 and time.time() < deadline:
    line = proc.stdout.readline()
    if line: returned = int(line.split()[0])
  os.kill(proc.pid, signal.SIGKILL)
  proc.wait()
  assert returned >= 40
  s = Store(str(db))
  assert s.integrity_ok()
  execs = s.captures(kinds=["exec"])
  # one exec capture for the input, then one per loop iteration that printed
  assert len(execs) >= returned + 2
  for c in execs[:returned + 2]:
    serialize.loads(s.get_blob(c["input_sha"])), serialize.loads(s.get_blob(c["output_sha"]))


def test_four_concurrent_writers_lose_nothing(tmp_path):
  db = tmp_path / "r.db"
  code = """
    import numpy as np
    from scheduler import Tensor
    x = Tensor(np.arange(16, dtype=np.float32)).realize()
    for i in range(25): (x * (i + 1)).realize()
  """
  procs = [run_py(code, db, extra_env={"REPLAY_RUN_ID": ""}) for _ in range(4)]
  assert all(p.wait(timeout=300) == 0 for p in procs)
  s = Store(str(db))
  counts = s.capture_counts()
  # per process: 1 + 25 realizes and schedules
  assert counts["exec"] == 4 * 26 and counts["schedule"] == 4 * 26
  assert len({c["run_id"] for c in s.captures()}) == 4


def test_captures_from_four_threads_are_all_stored(tmp_path):
  """Issue 13.5: threads of one process capture through their own connections into the process's one run."""
  db = tmp_path / "r.db"
  code = """
    import threading
    import numpy as np
    from scheduler import Tensor
    errors = []
    def work(k):
      try:
        x = Tensor(np.arange(16, dtype=np.float32) + k).realize()
        for i in range(10): (x * (i + 1)).realize()
      except Exception as e: errors.append(e)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads: t.start()
    for t in threads: t.join()
    assert not errors, errors
  """
  proc = run_py(code, db, extra_env={"REPLAY_RUN_ID": ""})
  assert proc.wait(timeout=300) == 0
  s = Store(str(db))
  counts = s.capture_counts()
  assert counts["exec"] == 4 * 11 and counts["schedule"] == 4 * 11, counts
  assert len({c["run_id"] for c in s.captures()}) == 1


class _Evil:
  def __reduce__(self): return (os.system, (f"touch {os.environ.get('EVIL_MARKER', '/tmp/evil-marker')}",))


def test_planted_pickle_does_not_run(tmp_path, monkeypatch):
  marker = tmp_path / "pwned"
  monkeypatch.setenv("EVIL_MARKER", str(marker))
  data = serialize.FORMAT + b" contract=1\n" + pickle.dumps({"graph": _Evil()})
  with pytest.raises(serialize.UnsafePickleError, match="posix.system|os.system|nt.system"): serialize.loads(data)
  assert not marker.exists()
  # the same payload planted in a database: replay reports it and runs nothing
  s = Store(str(tmp_path / "r.db"))
  s.add_capture(s.add_run(argv="[]"), "schedule", "k", "evil", "planted", data,
                serialize.dumps({"asts": [], "var_vals": {}}), {})
  s.close()
  proc = cli("run", "--jobs", "1", db=tmp_path / "r.db")
  assert proc.returncode == 4 and "incompatible" in proc.stdout and "system" in proc.stdout
  assert not marker.exists()
  with pytest.raises(serialize.PayloadFormatError): serialize.loads(b"garbage")


def test_capture_survives_reordered_ops(tmp_path):
  db = tmp_path / "r.db"
  code = """
    import numpy as np
    from scheduler import Tensor
    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4)).realize()
    (x.exp() @ x.T).sum(1).realize()
  """
  assert run_py(code, db).wait(timeout=120) == 0
  copy = tmp_path / "tree"
  for pkg in ("scheduler", "runtimes", "replay", "db"): shutil.copytree(REPO / pkg, copy / pkg)
  ops_py = copy / "scheduler" / "ops.py"
  ops_py.write_text(ops_py.read_text().replace("  # graph roots and kernels\n",
                                               "  # graph roots and kernels\n  ZZ_NEW_OP = enum.auto()\n", 1))
  env = {**os.environ, "PYTHONPATH": str(copy), "REPLAY_DB": str(db)}
  check = """
    from db import Store
    from replay import serialize
    from scheduler.ops import Ops
    assert Ops.SINK.value == 2
    s = Store()
    for c in s.captures(): serialize.loads(s.get_blob(c["input_sha"])); serialize.loads(s.get_blob(c["output_sha"]))
    print(len(s.captures()))
  """
  out = subprocess.run([sys.executable, "-c", textwrap.dedent(check)], cwd=copy, env=env, capture_output=True,
                       text=True)
  assert out.returncode == 0, out.stderr
  assert int(out.stdout) > 3
  proc = subprocess.run([sys.executable, "-m", "replay", "run", "--jobs", "1"], cwd=copy, env=env, capture_output=True,
                        text=True)
  assert proc.returncode == 0 and "replay the same" in proc.stdout, proc.stdout + proc.stderr


def test_capture_is_off_by_default_and_the_compiler_does_not_import_the_harness():
  code = "import sys, numpy as np\nfrom scheduler import Tensor\n(Tensor(np.ones(4, np.float32)) * 2).numpy()\n" \
         "print(any(m.split('.')[0] in ('replay', 'db', 'sqlite_utils') for m in sys.modules))"
  env = {k: v for k, v in os.environ.items() if k != "CAPTURE_PROCESS_REPLAY"}
  out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**env, "PYTHONPATH": str(REPO)},
                       capture_output=True, text=True)
  assert out.stdout.strip() == "False", out.stderr


def test_large_exec_buffers_are_recorded_by_hash(tmp_path):
  db = tmp_path / "r.db"
  code = """
    import numpy as np
    from scheduler import Tensor
    x = Tensor(np.arange(4096, dtype=np.float32)).realize()
    (x * 2).realize()
  """
  assert run_py(code, db, extra_env={"REPLAY_MAX_EXEC_BYTES": "1024"}).wait(timeout=120) == 0
  s = Store(str(db))
  last = s.captures(kinds=["exec"])[-1]
  assert json.loads(last["meta"])["omitted_buffers"] == 1
  payload = serialize.loads(s.get_blob(last["input_sha"]))
  (info,) = [v for v in payload["buffers"].values()]
  assert info["omitted"] and info["nbytes"] == 16384 and len(info["sha256"]) == 64


def test_an_unusable_database_is_one_warning_per_process_and_one_line_under_pytest(tmp_path):
  """Issue 13.7: capture failures do not flood stderr, and pytest --replay-capture does not INTERNALERROR."""
  blocker = tmp_path / "a-file"
  blocker.write_text("not a directory")
  db = blocker / "r.db"
  proc = run_py("""
    import numpy as np
    from scheduler import Tensor
    x = Tensor(np.arange(4, dtype=np.float32))
    for i in range(5): (x * i).realize()
    print("done")
  """, db, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  out, err = proc.communicate(timeout=300)
  assert proc.returncode == 0 and "done" in out
  assert err.count("replay capture:") == 1, err
  test_file = tmp_path / "test_tiny.py"
  test_file.write_text("def test_ok():\n  assert True\n")
  env = {**os.environ, "PYTHONPATH": str(REPO), "REPLAY_DB": str(db)}
  env.pop("PYTEST_CURRENT_TEST", None)
  env.pop("CAPTURE_PROCESS_REPLAY", None)
  run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--replay-capture",
                        str(test_file)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
  assert run.returncode != 0 and "INTERNALERROR" not in run.stdout + run.stderr
  assert "cannot use the replay database" in run.stdout + run.stderr


def test_a_capture_run_that_could_not_store_captures_fails_and_says_how_many(tmp_path):
  import subprocess, sys, textwrap
  from tests.conftest import REPO
  db = tmp_path / "r.db"
  program = tmp_path / "p.py"
  program.write_text(textwrap.dedent(f"""
    import sqlite3
    from scheduler import Tensor
    from replay.capture import flush
    (Tensor([1.0, 2.0]) + 1).realize()
    flush()   # these captures are in the database now, not waiting in the journal
    with sqlite3.connect({str(db)!r}) as conn:   # from now on the database refuses new captures
      conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON captures BEGIN SELECT RAISE(ABORT, 'refused'); END")
    (Tensor([1.0, 2.0]) * 3).realize()
  """))
  env = {**__import__("os").environ, "PYTHONPATH": str(REPO), "REPLAY_DB": str(db)}
  proc = subprocess.run([sys.executable, "-m", "replay", "capture", "--", sys.executable, str(program)], cwd=REPO,
                        env=env,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 4 and "captures of run 1 could not be stored" in proc.stderr, proc.stderr
  assert "replay capture: could not store" in proc.stderr   # the program's own one warning
  report = subprocess.run([sys.executable, "-m", "replay", "run"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
  assert report.returncode == 4 and "could not be stored" in report.stdout, report.stdout


def test_a_fold_that_fails_inside_a_capture_loses_nothing(replay_db, monkeypatch, capsys):
  import numpy as np
  import db.journal as journal
  import replay.capture as capture
  from scheduler import Tensor
  from scheduler.helpers import Context
  def locked(store): raise sqlite3.OperationalError("database is locked")
  fold_pending = journal.fold_pending
  monkeypatch.setattr(journal, "FOLD_AFTER_SECONDS", 0.0)   # every capture folds
  monkeypatch.setattr(journal, "fold_pending", locked)
  sink = capture.SINK
  with Context(CAPTURE_PROCESS_REPLAY=1): (Tensor(np.ones(41, np.float32)) + 4).realize()
  assert _rows_in_file(replay_db) == 0   # the folds failed: the captures wait in the journal
  monkeypatch.setattr(journal, "fold_pending", fold_pending)
  sink.fold()
  store = Store(str(replay_db))
  assert store.capture_counts(sink.run_id)["exec"] == 1 and not store.run(sink.run_id)["lost"]
  assert "could not store" not in capsys.readouterr().err


def test_a_fold_writes_the_git_state_once_git_answered_and_no_thread_waits_for_it(replay_db):
  import numpy as np
  import replay.capture as capture
  from replay.git_state import git_state
  from scheduler import Tensor
  from scheduler.helpers import Context
  threads = threading.active_count()
  with Context(CAPTURE_PROCESS_REPLAY=1): (Tensor(np.ones(37, np.float32)) * 5).realize()
  assert threading.active_count() <= threads + 1   # at most the timer of a later fold
  if capture.SINK.git.proc is not None: capture.SINK.git.proc.wait(timeout=30)   # else answered from the cache
  capture.SINK.fold()
  run = Store(str(replay_db)).run(capture.SINK.run_id)
  assert capture.SINK.git is None and (run["git_commit"], run["git_dirty"]) == git_state()


def test_an_exec_capture_names_where_the_program_made_each_output(tmp_path):
  db = tmp_path / "r.db"
  program = tmp_path / "prog.py"
  program.write_text("import numpy as np\nfrom scheduler import Tensor\n\ndef build():\n"
                     "  return (Tensor(np.ones(4, np.float32)) * 3).relu()\n\nbuild().realize()\n")
  env = {**os.environ, "PYTHONPATH": str(REPO), "REPLAY_DB": str(db), "CAPTURE_PROCESS_REPLAY": "1"}
  env.pop("PYTEST_CURRENT_TEST", None)
  git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
  subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
  subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], cwd=tmp_path, check=True)
  head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
  subprocess.run([sys.executable, str(program)], cwd=tmp_path, env=env, check=True)
  s = Store(str(db))
  execs = s.captures(kinds=["exec"])
  run = s.run(execs[0]["run_id"])
  assert run["finished"] and run["host"]
  # the git state is found while the program runs, and written before it exits
  assert run["git_commit"] == head and run["git_dirty"] == 0   # files git does not track are no change
  outputs = json.loads(execs[-1]["meta"])["outputs"]
  assert any(o.endswith("from prog.py:5 build") for o in outputs), outputs


def test_tensors_a_public_call_makes_share_where_the_program_called_it(replay_db):
  from scheduler import Tensor
  from scheduler.helpers import Context
  from scheduler.tensor.base import current_op
  import inspect
  here = os.path.relpath(__file__)
  line = inspect.currentframe().f_lineno
  with Context(CAPTURE_PROCESS_REPLAY=1):
    a = Tensor.ones(4)                                  # a class method: not a public call of a tensor
    b = (a * 2).relu()                                  # two calls on one line: the walk is taken once per call
    c = a.sequential([lambda x: x + 1, Tensor.exp])     # what the callbacks make belongs to the sequential call
    d = a.softmax()
  assert a._origin == (here, line + 2, "test_tensors_a_public_call_makes_share_where_the_program_called_it")
  assert b._origin[:2] == (here, line + 3) and c._origin[:2] == (here, line + 4) and d._origin[:2] == (here, line + 5)
  assert current_op == [None, None, None]   # nothing is kept once the call returns
  made = []
  def in_another_thread(x):   # while this thread is inside sequential, another thread makes tensors of its own
    worker = threading.Thread(target=lambda: made.append(Tensor.ones(2) + 1))
    worker.start()
    worker.join()
    return x
  from scheduler.helpers import CAPTURE_PROCESS_REPLAY
  saved, CAPTURE_PROCESS_REPLAY.value = CAPTURE_PROCESS_REPLAY.value, 1   # on in every thread
  try: a.sequential([lambda x: x * 2, in_another_thread])
  finally: CAPTURE_PROCESS_REPLAY.value = saved
  assert made[0]._origin[:2] == (here, line + 11)
  with Context(CAPTURE_PROCESS_REPLAY=0): assert Tensor.ones(2)._origin is None


def test_creation_methods_optimizers_and_backward_place_their_tensors_with_one_search_each(replay_db, monkeypatch):
  from scheduler import Tensor, hooks
  from scheduler.helpers import Context
  from scheduler.nn.optim import Adam
  from scheduler.tensor import base
  from replay.capture import code_frame
  import inspect
  searches = []
  def counting_search(start=None):
    searches.append(code_frame(start if start is not None else sys._getframe(1)))
    return searches[-1]
  monkeypatch.setattr(hooks, "_FRAME", [counting_search])
  def made_by(call):
    """What `call` returns, the places of the tensors it made that live on, and how often the stack was searched."""
    before, searches[:] = set(base.all_tensors), []
    result = call()
    return result, {ref()._origin for ref in set(base.all_tensors) - before if ref() is not None}, len(searches)
  here, line = os.path.relpath(__file__), inspect.currentframe().f_lineno
  with Context(CAPTURE_PROCESS_REPLAY=1), Tensor.train():
    w, w_at, w_searches = made_by(lambda: Tensor.kaiming_uniform(4, 3, requires_grad=True))
    opt, opt_at, opt_searches = made_by(lambda: Adam([w], lr=0.1))
    loss = (w * w).sum()
    _, grad_at, grad_searches = made_by(lambda: loss.backward())
    step, step_at, _ = made_by(lambda: opt.schedule_step())
  # a random initializer makes dozens of tensors through the public methods it calls, an optimizer's step hundreds:
  # the stack is searched once per call the program made
  assert (w_at, w_searches) == ({(here, line + 2, "<lambda>")}, 1)
  assert (opt_at, opt_searches) == ({(here, line + 3, "<lambda>")}, 1)
  assert (grad_at, grad_searches) == ({(here, line + 5, "<lambda>")}, 1) and w.grad is not None
  # a step's tensors live on only as the updates of its state and parameters: the one search found the call
  assert (step_at, searches) == (set(), [(here, line + 6, "<lambda>")]) and len(step) > 1
  assert base.current_op == [None, None, None]


def test_tensor_origins_name_each_place_of_a_long_function_and_of_a_loop(replay_db):
  from scheduler import Tensor
  from scheduler.helpers import Context
  # a long program function (places in it are remembered by instruction offset: reading its line table for each
  # tensor would cost a walk through the whole table), with tensors made in a loop and after it
  body = "".join(f"  v{i} = {i}\n" for i in range(300))
  source = ("def program(Tensor):\n  made = []\n" + body + "  for i in range(3):\n    made.append(Tensor.ones(2) + i)\n"
            + body + "  made.append(Tensor.zeros(3))\n  return made\n")
  code = compile(source, os.path.join(os.getcwd(), "long_prog.py"), "exec")
  namespace: dict = {}
  exec(code, namespace)
  with Context(CAPTURE_PROCESS_REPLAY=1): made = namespace["program"](Tensor)
  in_loop = 2 + 300 + 2   # `def`, `made = []`, the body, then the loop's first line and the line inside it
  assert [t._origin for t in made] == [("long_prog.py", in_loop, "program")] * 3 + \
    [("long_prog.py", in_loop + 300 + 1, "program")]


def test_git_state_names_the_commit_and_whether_tracked_files_changed(tmp_path):
  from replay.git_state import git_state
  git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
  assert git_state(str(tmp_path)) == (None, None)   # not a repository
  subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
  assert git_state(str(tmp_path)) == (None, None)   # no commit yet
  (tmp_path / "a.txt").write_text("1\n")
  subprocess.run([*git, "add", "a.txt"], cwd=tmp_path, check=True)
  subprocess.run([*git, "commit", "-q", "-m", "x"], cwd=tmp_path, check=True)
  head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
  (tmp_path / "untracked.txt").write_text("not tracked\n")
  assert git_state(str(tmp_path)) == (head, 0)
  (tmp_path / "a.txt").write_text("2\n")
  assert git_state(str(tmp_path)) == (head, 1)
  subprocess.run(["git", "checkout", "-q", "--detach"], cwd=tmp_path, check=True)
  assert git_state(str(tmp_path)) == (head, 1)


def test_capturing_into_a_database_that_cannot_be_opened_names_why_once(tmp_path):
  """The program runs on; the capture warning names the cause (here a folder where the database should be), not an
  assertion from a run half set up, and each capture tries again."""
  folder = tmp_path / "not-a-db"
  folder.mkdir()
  env = {**os.environ, "PYTHONPATH": str(REPO), "REPLAY_DB": str(folder), "CAPTURE_PROCESS_REPLAY": "1"}
  env.pop("PYTEST_CURRENT_TEST", None)
  program = ("import numpy as np\nfrom scheduler import Tensor\n"
             "for i in range(3): (Tensor(np.ones(4, np.float32)) + i).realize()\n")
  proc = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, env=env, capture_output=True, text=True)
  assert proc.returncode == 0, proc.stderr
  lines = [line for line in proc.stderr.splitlines() if line.startswith("replay capture:")]
  assert len(lines) == 1 and "is not a regular file" in lines[0] and "AssertionError" not in proc.stderr
