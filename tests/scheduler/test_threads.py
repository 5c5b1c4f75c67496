"""Threads that build graphs at once: new buffers stay distinct and hash-consing still gives one object per node."""
import sys, threading
from scheduler.ops import UOp, Ops
from scheduler.dtype import dtypes


def _in_threads(work, n=4):
  results, old = [None] * n, sys.getswitchinterval()
  sys.setswitchinterval(1e-6)   # switch threads as often as possible, so a race shows in a short test
  try:
    threads = [threading.Thread(target=lambda k=k: results.__setitem__(k, work(k))) for k in range(n)]
    for t in threads: t.start()
    for t in threads: t.join()
  finally: sys.setswitchinterval(old)
  return results


def test_new_buffers_from_four_threads_are_all_distinct():
  made = _in_threads(lambda k: [UOp.new_buffer("CPU", 4, dtypes.float32) for _ in range(5000)])
  numbers = [b.arg[0] for bufs in made for b in bufs]
  assert len(set(numbers)) == len(numbers)
  assert len({id(b) for bufs in made for b in bufs}) == len(numbers)


def test_the_same_node_built_in_four_threads_is_one_object():
  dev = UOp(Ops.DEVICE, arg="CPU")
  made = _in_threads(lambda k: [UOp(Ops.CONST, dtypes.float32, (dev,), float(1000 + i) + 0.5) for i in range(3000)])
  for i in range(3000): assert len({id(nodes[i]) for nodes in made}) == 1


def test_a_context_block_sets_flags_for_its_own_thread_only():
  """A Context in one thread (the capture's read-back turns capture off) must not change what another thread sees:
  that lost captures of concurrent realizes."""
  from scheduler.helpers import Context, FUSE_ARANGE
  entered, release, seen = threading.Event(), threading.Event(), []
  def inside():
    with Context(FUSE_ARANGE=1):
      seen.append(("inside", int(FUSE_ARANGE)))
      entered.set()
      release.wait(10)
    seen.append(("after", int(FUSE_ARANGE)))
  t = threading.Thread(target=inside)
  t.start()
  entered.wait(10)
  seen.append(("other thread", int(FUSE_ARANGE)))
  release.set()
  t.join()
  assert sorted(seen) == [("after", 0), ("inside", 1), ("other thread", 0)]
  with Context(FUSE_ARANGE=1):
    with Context(FUSE_ARANGE=0): assert int(FUSE_ARANGE) == 0
    assert int(FUSE_ARANGE) == 1
  assert int(FUSE_ARANGE) == 0
