"""The UOp IR: hash-consing, stable keys across processes, pickling by op name, pattern matching."""
import pickle, shutil, subprocess, sys, textwrap
import pytest
from scheduler.dtype import dtypes
from scheduler.ops import (UOp, Ops, UPat, PatternMatcher, graph_rewrite, graph_rewrite_map, track_rewrites,
                           tracked_rewrites)
from scheduler.helpers import Context, ContextVar
from tests.conftest import REPO

PROGRAM = textwrap.dedent("""
  import numpy as np, pickle, sys
  from scheduler import Tensor, Device
  Device.DEFAULT = "PYTHON"
  x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4)).realize()
  out = (x.exp() @ x.T).sum(1)
  sched = out.schedule()
  print(",".join(si.ast.key.hex() for si in sched))
""")


def run_python(code: str, cwd=REPO) -> str:
  proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                        env={"PYTHONPATH": str(cwd), "PATH": ""})
  assert proc.returncode == 0, proc.stderr
  return proc.stdout.strip()


def test_hash_consing_gives_one_object_per_structure():
  a = UOp.const(dtypes.float32, 1.0) + UOp.const(dtypes.float32, 2.0)
  b = UOp.const(dtypes.float32, 1.0) + UOp.const(dtypes.float32, 2.0)
  assert a is b
  assert UOp.const(dtypes.int32, 1) is not UOp.const(dtypes.float32, 1.0)


def test_one_sweep_of_the_cache_frees_a_whole_dead_graph():
  # each cache key holds its node's sources: a sweep that dropped only the entries dead when it began freed one level
  # of a dead graph per sweep, and long programs kept their old graphs alive
  import gc, weakref
  from scheduler import ops
  bottom = UOp.variable("one_sweep_probe", 0, 9)
  top, chain = bottom, []
  for i in range(300):
    top = top * 3 + i
    chain.append(weakref.ref(top))
  probe = weakref.ref(bottom)
  gc.disable()   # no cycle collection: the sweep alone must free the graph
  try:
    del bottom, top
    assert probe() is not None   # the cache keys of its users hold it
    with ops._UCACHE_LOCK: ops._sweep_dead(ops.UOpMetaClass.ucache)
    assert probe() is None and all(ref() is None for ref in chain)
    assert not any(ref() is None for ref in ops.UOpMetaClass.ucache.values())   # no dead entry is left
  finally: gc.enable()


def test_ast_keys_are_equal_in_two_processes():
  first, second = run_python(PROGRAM), run_python(PROGRAM)
  assert first and first == second


def test_pickle_round_trip_is_the_same_object():
  v = UOp.variable("n", 1, 8)
  g = ((v * 3 + 1) // 2).sink()
  assert pickle.loads(pickle.dumps(g)) is g


def test_pickles_survive_a_reordered_ops_enum(tmp_path):
  g = (UOp.variable("n", 1, 8) * 3 + 1).maximum(UOp.const(dtypes.int32, 4))
  data = pickle.dumps(g.sink())
  (tmp_path / "g.pkl").write_bytes(data)
  copy = tmp_path / "tree"
  shutil.copytree(REPO / "scheduler", copy / "scheduler")
  ops_py = copy / "scheduler" / "ops.py"
  src = ops_py.read_text()
  # a new member first shifts the value of every existing op
  ops_py.write_text(src.replace("  # graph roots and kernels\n",
                                "  # graph roots and kernels\n  BRAND_NEW_OP = enum.auto()\n", 1))
  code = f"""
import pickle
from scheduler.ops import Ops
assert Ops.SINK.value != {Ops.SINK.value}
g = pickle.loads(open({str(tmp_path / 'g.pkl')!r}, 'rb').read())
print(g.key.hex())
"""
  assert run_python(code, cwd=copy) == g.sink().key.hex()


def test_pattern_matcher_named_and_commutative():
  x = UOp.variable("x", 0, 10)
  pm = PatternMatcher([(UPat.var("a") + UPat.cvar("c"), lambda a, c: a * c.arg)])
  assert graph_rewrite(x + 3, pm) is x * 3
  assert graph_rewrite(UOp.const(dtypes.int32, 3) + x, pm) is x * 3  # ADD is commutative


def test_matchers_add_and_rewrite_to_fixed_point():
  x = UOp.variable("x", 0, 10)
  strip_add0 = PatternMatcher([(UPat.var("a") + 0, lambda a: a)])
  strip_mul1 = PatternMatcher([(UPat.var("a") * 1, lambda a: a)])
  assert graph_rewrite(((x + 0) * 1 + 0) * 1, strip_add0 + strip_mul1) is x


def test_graph_rewrite_map_maps_every_node():
  x = UOp.variable("x", 0, 10)
  e = (x + 0) * 2
  m = graph_rewrite_map(e.sink(), PatternMatcher([(UPat.var("a") + 0, lambda a: a)]))
  assert m[x + 0] is x and m[e] is x * 2 and set(m) == set(e.sink().toposort)


def test_track_rewrites_records_rule_location():
  x = UOp.variable("x", 0, 10)
  pm = PatternMatcher([(UPat.var("a") + 0, lambda a: a)])
  @track_rewrites()
  def rewrite(u): return graph_rewrite(u, pm)
  with Context(TRACK_MATCH_STATS=1): rewrite(x + 0)
  name, steps = tracked_rewrites[-1]
  assert name == "rewrite" and steps[0][1] is x + 0 and steps[0][2] is x and steps[0][0][0].endswith("test_ops.py")


def test_context_restores_flags_even_on_error():
  before = ContextVar._cache["FUSE_ARANGE"].value
  with pytest.raises(ZeroDivisionError):
    with Context(FUSE_ARANGE=1):
      assert ContextVar._cache["FUSE_ARANGE"].value == 1
      1 / 0
  assert ContextVar._cache["FUSE_ARANGE"].value == before
  with pytest.raises(KeyError, match="NOT_A_FLAG"):
    with Context(NOT_A_FLAG=1): pass


@pytest.mark.parametrize("bottom_up", [False, True])
def test_graph_rewrite_of_a_100k_chain_needs_no_recursion(bottom_up):
  """Issue 11.6: rewriting is iterative, so a 100,000-deep chain rewrites under the default recursion limit."""
  assert sys.getrecursionlimit() <= 10_000
  x = UOp.variable("x", 0, 10)
  chain = x
  for _ in range(100_000): chain = chain + 0   # ADD(ADD(... x ..., 0), 0): the identity rule removes every link
  assert graph_rewrite(chain, PatternMatcher([(UPat.var("a") + 0, lambda a: a)]), bottom_up=bottom_up) is x
