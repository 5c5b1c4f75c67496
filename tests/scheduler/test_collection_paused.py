"""The cyclic garbage collector is off while the compiler schedules and runs a realize, and as it was afterwards."""
import gc
import numpy as np
import pytest
from scheduler import Tensor
from scheduler.helpers import collection_paused
from scheduler.realize import run_schedule
import scheduler.realize as realize_module
import scheduler.schedule as schedule_module


@pytest.fixture(autouse=True)
def collector_on():
  was = gc.isenabled()
  gc.enable()
  yield
  (gc.enable if was else gc.disable)()


def test_block_pauses_and_resumes():
  with collection_paused():
    assert not gc.isenabled()
    with collection_paused(): assert not gc.isenabled()
    assert not gc.isenabled()   # the inner block did not switch it on under the outer one
  assert gc.isenabled()


def test_a_collector_switched_off_stays_off():
  gc.disable()
  with collection_paused(): pass
  assert not gc.isenabled()


def test_resumed_after_an_error():
  with pytest.raises(ValueError):
    with collection_paused(): raise ValueError("inside")
  assert gc.isenabled()


def test_scheduling_and_running_are_paused(monkeypatch):
  scheduled, compiled = [], []
  schedule_inner, compile_inner = schedule_module._schedule, realize_module.compile_ahead
  monkeypatch.setattr(schedule_module, "_schedule",
                      lambda sink: (scheduled.append(gc.isenabled()), schedule_inner(sink))[1])
  monkeypatch.setattr(realize_module, "compile_ahead",
                      lambda items: (compiled.append(gc.isenabled()), compile_inner(items))[1])
  a = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
  out = (a * 2).sum(1)
  np.testing.assert_array_equal(out.numpy(), [6, 24])
  items = (a + 1).schedule()
  assert gc.isenabled()
  run_schedule(items)   # run directly, outside a realize
  assert scheduled == [False, False] and compiled == [False, False] and gc.isenabled()



def test_the_harness_is_imported_with_the_collector_paused(monkeypatch):
  """Capture imports the harness on first use, outside any realize: its two thousand long-lived objects do not count
  towards the program's collections."""
  import builtins
  from scheduler import hooks
  seen, real_import = [], builtins.__import__

  def watching(name, *args, **kwargs):
    if name == "replay.capture": seen.append(gc.isenabled())
    return real_import(name, *args, **kwargs)

  monkeypatch.setattr(hooks, "_POINT", [])
  monkeypatch.setattr(hooks, "_FRAME", [])
  monkeypatch.setattr(builtins, "__import__", watching)
  assert hooks.origin() is not None   # this test's frame is outside the compiler
  assert seen == [False] and gc.isenabled() and hooks._POINT and hooks._FRAME
