"""Flags (`scheduler/helpers.py`): the cached (name, value) pairs a capture takes stay in step with every way a flag
changes."""
import threading
from scheduler import helpers
from scheduler.helpers import Context, ContextVar, DEBUG, FUSE_ARANGE


def test_frozen_is_the_snapshot_and_the_same_object_until_a_flag_changes():
  first = ContextVar.frozen()
  assert first == tuple(ContextVar.snapshot().items())
  assert ContextVar.frozen() is first


def test_a_block_that_is_left_gives_back_the_pairs_from_before_it():
  # a capture enters a block around every graph it pickles: the pairs, and what a capture derives from them, are kept
  first = ContextVar.frozen()
  with Context(DEBUG=dict(first)["DEBUG"] + 1): inside = ContextVar.frozen()
  assert inside != first and ContextVar.frozen() is first
  with Context(DEBUG=dict(first)["DEBUG"] + 1): assert ContextVar.frozen() is inside
  with Context(DEBUG=[1]): assert dict(ContextVar.frozen())["DEBUG"] == [1]   # not hashable: built, not kept
  assert ContextVar.frozen() is first


def test_frozen_follows_blocks_and_process_values():
  before = dict(ContextVar.frozen())
  with Context(DEBUG=before["DEBUG"] + 3):
    assert dict(ContextVar.frozen())["DEBUG"] == before["DEBUG"] + 3
    with Context(FUSE_ARANGE=1 - before["FUSE_ARANGE"]):
      assert dict(ContextVar.frozen())["FUSE_ARANGE"] == 1 - before["FUSE_ARANGE"]
    assert dict(ContextVar.frozen())["FUSE_ARANGE"] == before["FUSE_ARANGE"]
  assert dict(ContextVar.frozen()) == before
  old = FUSE_ARANGE.value
  try:
    FUSE_ARANGE.value = old + 5
    assert dict(ContextVar.frozen())["FUSE_ARANGE"] == old + 5
  finally: FUSE_ARANGE.value = old
  assert dict(ContextVar.frozen()) == before


def test_a_new_flag_appears_in_frozen():
  ContextVar.frozen()
  name = "TEST_FLAGS_REGISTERED_LATE"
  ContextVar(name, 7)
  try: assert dict(ContextVar.frozen())[name] == 7
  finally:   # other tests capture every registered flag
    del ContextVar._cache[name]
    helpers._changes[0] = object()
  assert name not in dict(ContextVar.frozen())


def test_another_threads_block_does_not_show_here():
  here = ContextVar.frozen()
  entered, leave, seen = threading.Event(), threading.Event(), {}

  def other():
    with Context(DEBUG=dict(here)["DEBUG"] + 1):
      seen["there"] = dict(ContextVar.frozen())["DEBUG"]
      entered.set()
      leave.wait(10)

  t = threading.Thread(target=other)
  t.start()
  entered.wait(10)
  try:
    assert seen["there"] == dict(here)["DEBUG"] + 1
    assert ContextVar.frozen() == here   # the other thread's change made a new tuple here, with this thread's values
  finally:
    leave.set()
    t.join()
