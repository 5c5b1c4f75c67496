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
