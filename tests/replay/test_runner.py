"""The runner's work queue: which worker replays which capture."""
from replay.runner import _Runs


def drain(runs: _Runs, order: list[int]) -> dict[int, list[int]]:
  got: dict[int, list[int]] = {}
  for slot in order:
    if not runs: break
    got.setdefault(slot, []).append(runs.pop(slot)["id"])
  return got


def test_each_worker_replays_a_contiguous_run_of_captures():
  got = drain(_Runs([{"id": i} for i in range(10)], 2), [0, 1] * 5)
  assert got == {0: [0, 1, 2, 3, 4], 1: [5, 6, 7, 8, 9]}


def test_a_worker_done_early_takes_the_back_half_of_the_longest_run():
  runs = _Runs([{"id": i} for i in range(12)], 3)    # runs 0-3, 4-7, 8-11
  got = drain(runs, [0] * 4 + [1] + [0] * 20)
  assert got[0][:4] == [0, 1, 2, 3] and got[0][4:6] == [10, 11] and got[1] == [4]
  assert sorted(got[0] + got[1]) == list(range(12))   # every capture exactly once


def test_no_captures_and_more_workers_than_captures():
  assert not _Runs([], 4)
  assert drain(_Runs([{"id": 0}], 3), [2]) == {2: [0]}


def test_progress_is_an_occasional_line_when_stderr_is_not_a_terminal(capsys, monkeypatch):
  from replay import runner
  monkeypatch.setattr(runner._Progress, "LOG_EVERY", 0.0)
  progress = runner._Progress(3, True)
  for _ in range(3): progress.step({"same": 1, "changed": 0})
  progress.close()
  err = capsys.readouterr().err
  assert "\r" not in err and err.splitlines()[-1].startswith("replay: 3/3 captures replayed in") and "same:1" in err
  quiet = runner._Progress(3, False)
  quiet.step({"same": 1}); quiet.close()
  assert capsys.readouterr().err == ""


# ***** the runner's orchestration, with a scripted worker (no compiler): death, timeout, stealing *****

import json, os, sys, textwrap
import pytest
from db import Store
from replay.runner import CaptureReplay, RunOptions
from tests.conftest import REPO

SCRIPTED_WORKER = textwrap.dedent('''
  import json, os, struct, sys, time
  from replay.worker import read_exact, send
  out = os.fdopen(os.dup(1), "wb")
  send(out, {"ready": True, "pid": os.getpid(), "flag_defaults": {"X": 0}})
  stdin = sys.stdin.buffer
  while True:
    try: (n,) = struct.unpack(">I", read_exact(stdin, 4))
    except EOFError: break
    header = json.loads(read_exact(stdin, n))
    name = read_exact(stdin, header["input_len"]).decode()
    read_exact(stdin, header["output_len"])
    if name == "die": os._exit(3)
    if name == "hang": time.sleep(600)
    if name == "slow": time.sleep(0.3)
    send(out, {"capture_id": header["capture_id"], "status": "same", "metrics": {"pid": os.getpid()},
               "compiler_seconds": 0.01})
''')


def store_with(tmp_path, names: list[str]) -> tuple[Store, list[dict]]:
  """A database whose captures' input payloads are the names that tell the scripted worker what to do."""
  store = Store(str(tmp_path / "r.db"))
  run = store.add_run(argv="[]")
  for i, name in enumerate(names):
    store.add_capture(run, "kernel", f"key{i}", name, f"here:{i}", name.encode(), b"out", {}, {})
  return store, store.captures(run_ids=[run])


def replay(store, captures, **options) -> dict:
  options = RunOptions(**{"jobs": 1, "progress": False, **options})
  result = CaptureReplay(store, captures, [str(REPO)], {}, options,
                         worker_command=[sys.executable, "-c", SCRIPTED_WORKER]).run()
  assert result.flag_defaults == {"X": 0}
  return {o["capture_id"]: o for o in result.outcomes}


def test_a_worker_that_dies_costs_only_its_capture(tmp_path):
  store, caps = store_with(tmp_path, ["ok", "die", "ok", "ok"])
  out = replay(store, caps)
  assert [out[c["id"]]["status"] for c in caps] == ["same", "error", "same", "same"]
  assert out[caps[1]["id"]]["reason"] == "worker exited with code 3"
  pids = {json.loads(out[c["id"]]["metrics"])["pid"] for c in caps if c["name"] == "ok"}
  assert len(pids) == 2   # a new worker took the slot
  assert len(store.outcomes(store.replays()[0]["id"])) == 4   # and every outcome is stored


def test_a_capture_past_its_deadline_is_an_error_and_the_rest_still_replays(tmp_path):
  store, caps = store_with(tmp_path, ["ok", "hang", "ok"])
  out = replay(store, caps, timeout=1.0)
  assert [out[c["id"]]["status"] for c in caps] == ["same", "error", "same"]
  assert out[caps[1]["id"]]["reason"] == "timed out after 1s"


def test_a_worker_done_early_steals_from_the_slow_one(tmp_path):
  store, caps = store_with(tmp_path, ["slow"] * 6 + ["ok"] * 6)
  out = replay(store, caps, jobs=2)
  assert all(o["status"] == "same" for o in out.values())
  slow_pids = {json.loads(out[c["id"]]["metrics"])["pid"] for c in caps[:6]}
  assert len(slow_pids) == 2   # the second worker finished its fast run and took the back half of the slow one


def test_max_changed_stops_feeding_workers(tmp_path):
  store, caps = store_with(tmp_path, ["ok"] * 5)
  options = RunOptions(jobs=1, progress=False, max_changed="2")
  runner = CaptureReplay(store, caps, [str(REPO)], {}, options,
                         worker_command=[sys.executable, "-c", SCRIPTED_WORKER.replace(
    '"status": "same"', '"status": "changed"')])
  result = runner.run()
  assert result.stopped_early and [o["status"] for o in result.outcomes] == ["changed", "changed"]
