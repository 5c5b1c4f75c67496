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
