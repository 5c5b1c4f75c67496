"""`replay reduce`: the delta debugging over a graph (with two trees simulated in this process), and end to end, for
planted bugs in lowering, in the view algebra and in a fusion rule, a test file that fails at the bug and passes
without it."""
import json, os, re, subprocess, sys
import numpy as np
import pytest
from replay import reduce as rd, serialize, sut
from replay.compare import ast_text
from db import Store
from scheduler import Tensor
from scheduler.device import find_c_compiler
from tests.replay.conftest import cli, capture_workloads, commit_on_a, edit, NO_REALIZE_EXPAND


class InProcessTrees:
  """Both trees in this process: the working tree is the base plus `bug`, which changes the outputs of any graph
  that holds a node it recognizes."""
  def __init__(self, bug):
    self.bug, self.runs = bug, 0

  def run(self, kind, payload, flags, timeout, names=None):
    contract = sut.contract()
    inp = serialize.loads(payload)
    self.runs += 1
    graph = contract.fresh_buffers(inp["graph"], inp["buffers"], lambda e, n: np.asarray(e).reshape(-1))
    outputs = contract.realize(graph)
    answers = {"base": {"status": "ok", "value": {"outputs": outputs}}}
    if kind == "schedule": answers["base"]["value"] = {"kernels": [ast_text(a) for a in contract.schedule(graph)[0]]}
    if self.bug(graph) and kind == "exec": current = [o + 1 for o in outputs]
    else: current = outputs
    answers["current"] = {"status": "ok", "value": {"outputs": current}}
    if kind == "schedule": answers["current"] = answers["base"]
    return {name: answers[name] for name in (names or answers)}


def _has_max_reduce(graph) -> bool:
  return any(u.op.name == "REDUCE_AXIS" and u.arg[0].name == "MAX" for u in graph.toposort)


def _model_graph():
  """A few layers with several outputs: the bug lives in the one max-reduce of one output's subgraph."""
  rng = np.random.default_rng(0)
  x = Tensor(rng.standard_normal((6, 8), dtype=np.float32)).realize()
  w1, w2 = (Tensor(rng.standard_normal(s, dtype=np.float32)).realize() for s in ((8, 8), (8, 4)))
  h = (x @ w1).relu()
  logits = h @ w2
  probs = logits.softmax(axis=1)        # softmax subtracts the row max: the one MAX reduce
  loss = (h * 2 - 1).square().mean()
  return logits.lazydata.sink(loss.lazydata, probs.lazydata, (h + 1).sum(axis=0).lazydata)


def _reducer(trees, budget=30.0):
  contract = sut.contract()
  return rd.Reducer(contract, trees, "exec", {}, None, budget)


def test_the_reduction_keeps_the_difference_and_shrinks_the_graph_to_the_node_that_shows_it():
  graph = _model_graph()
  trees = InProcessTrees(_has_max_reduce)
  prims = sut.contract().reduction()
  reduction = rd.Reduction({"id": 1, "kind": "exec", "name": "t", "location": "here"}, "exec", graph, prims.size(graph))
  out = _reducer(trees).run(graph, reduction)
  assert _has_max_reduce(out.graph) and len(prims.outputs(out.graph)) == 1
  assert out.size < reduction.original_size / 5 and out.size <= 15, rd.graph_text(out.graph)
  assert 0 < out.evaluations < trees.runs   # the base values of cut points are runs of the base alone
  assert "differ" in out.difference
  # the bug shows on any values and any shape: the inputs were given the smallest shapes the Tensor API still builds
  # the graph with (a max over one element is no reduce) and the simplest values, zeros
  assert all(n <= 2 and (read() == 0).all() for _, n, *_, read in sut.contract().graph_buffers(out.graph))
  assert any("shapes: extents [6, 4] -> [2]" in p for p in out.passes)
  # the program of the reduced graph computes what the base computed for it
  prog = prims.program(out.graph)
  assert any(".max(" in line for line in prog["lines"]) and len(prog["lines"]) <= 10


def test_constants_become_the_simplest_numbers_that_keep_the_difference():
  x = Tensor(np.linspace(-1, 1, 8, dtype=np.float32)).realize()
  graph = (x * 0.37 + 5.5).exp2().lazydata.sink()
  needs_a_large_constant = lambda g: any(u.op.name == "CONST" and u.arg > 1.5 for u in g.toposort)
  reducer = _reducer(InProcessTrees(needs_a_large_constant))
  reducer.start(graph)
  out = reducer.simpler_constants(graph)
  assert sorted(u.arg for u in out.toposort if u.op.name == "CONST") == [0.0, 2.0]
  assert sut.contract().reduction().constants(out) == []
  assert rd.simple_numbers(5.5) == [0, 1, 2, -1, 6] and rd.simple_numbers(-3) == [0, 1, 2, -1]
  # a divisor is never made 0 (undefined in C)
  i = Tensor(np.arange(8, dtype=np.int32)).realize()
  halves = (i // 3).lazydata.sink()
  prims = sut.contract().reduction()
  ((three, _),) = prims.constants(halves)
  assert prims.with_constant(halves, three, 0) is halves and prims.with_constant(halves, three, 1) is not halves


def test_a_graph_that_does_not_differ_is_refused_with_the_reason():
  graph = _model_graph()
  with pytest.raises(rd.ReduceError, match="does not differ between the base and the working tree"):
    _reducer(InProcessTrees(lambda g: False)).run(graph, rd.Reduction({}, "exec", graph, 0))


def test_the_budget_bounds_the_work_and_keeps_the_best_graph_so_far():
  graph = _model_graph()
  trees = InProcessTrees(_has_max_reduce)
  prims = sut.contract().reduction()
  out = _reducer(trees, budget=1e-3).run(graph, rd.Reduction({}, "exec", graph, prims.size(graph)))
  assert out.size == prims.size(graph) and out.evaluations == 2   # the check at the start and the one at the end


def test_simple_inputs_are_written_as_formulas_and_others_as_values():
  assert rd._array_source(np.zeros((2, 3), np.float32)) == "np.full((2, 3), 0.0, dtype=np.float32)"
  assert rd._array_source((np.arange(12) % 7).astype(np.int32).reshape(3, 4)) == \
    "(np.arange(12) % 7).astype(np.int32).reshape((3, 4))"
  assert rd._array_source(np.arange(5, dtype=np.int8)) == "np.arange(5).astype(np.int8).reshape((5,))"
  odd = np.array([0.5, np.nan, -np.inf], np.float32)
  source = rd._array_source(odd)
  np.testing.assert_array_equal(eval(source, {"np": np}), odd)
  for values in rd.simple_values(np.ones(10, np.float16)): assert rd._formula(values) is not None


def test_differs_compares_outputs_within_tolerance_and_kernels_by_text():
  ok = lambda v: {"status": "ok", "value": v}
  a, b = np.array([1.0, 2.0], dtype=np.float32), np.array([1.0, 2.5], dtype=np.float32)
  assert rd.differs("exec", {"base": ok({"outputs": [a]}), "current": ok({"outputs": [a + 1e-7]})}, None) is None
  assert "1 of 2 elements differ" in rd.differs("exec", {"base": ok({"outputs": [a]}), "current": ok({"outputs": [b]})},
                                                None)
  assert rd.differs("exec", {"base": ok({"outputs": [a]}), "current": {"status": "error", "reason": "x"}}, None) is None
  assert rd.differs("schedule", {"base": ok({"kernels": ["k1", "k2"]}), "current": ok({"kernels": ["k1"]})},
                    None) == "2 kernels at the base, 1 with the working tree"
  assert rd.differs("schedule", {"base": ok({"kernels": ["k1"]}), "current": ok({"kernels": ["k2"]})},
                    None) == "kernel 0 differs"


# ***** end to end: planted bugs, the CLI, the test file run with each tree *****

LOAD_IGNORES_VALID = ("scheduler/codegen/lowerer.py",
                      "ret = self.emit(Ops.LOAD, u.dtype, (self.define_global(u.src[0]), idx, valid))",
                      "ret = self.emit(Ops.LOAD, u.dtype, (self.define_global(u.src[0]), idx, "
                      "self.const(True, dtypes.bool)))")
# composing two views forgets the lower view's offset (a shrink of a shrink reads from the buffer's start); a bug that
# reads out of bounds instead (a mask one too wide) would give a test that fails only when the memory there is not 0
COMPOSE_OFFSET = ("scheduler/shape/view.py", "offset = self.offset + sum(o * s for o, s in zip(origin, self.strides))",
                  "offset = sum(o * s for o, s in zip(origin, self.strides))")
SPLIT_OFF = ("scheduler/helpers.py", 'SPLIT_REDUCEOP = ContextVar("SPLIT_REDUCEOP", 1)',
             'SPLIT_REDUCEOP = ContextVar("SPLIT_REDUCEOP", 0)')


def _reduce_planted(repo, tmp_path, branch, change, workload, kind, status):
  commit_on_a(repo, branch, lambda r: edit(r, *change))
  db = tmp_path / f"{branch}.db"
  capture_workloads(db, workload, "--no-variants", cwd=repo)
  cli("diff", "--base", "main", db=db, cwd=repo)
  doc = json.loads(cli("report", "--format", "json", db=db, cwd=repo).stdout)
  picked = [o["capture_id"] for o in doc["outcomes"] if o["kind"] == kind and o["status"] == status]
  assert picked, [(o["kind"], o["status"]) for o in doc["outcomes"] if o["status"] != "same"]
  out = tmp_path / f"{branch}-reduced"
  proc = cli("reduce", str(picked[0]), "--budget", "60", "--out", str(out), db=db, cwd=repo)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert "with the base: passes; with the working tree: fails" in proc.stdout, proc.stdout
  before, after = map(int, re.search(r": (\d+) nodes -> (\d+) in", proc.stdout).groups())
  test_file = next(out.glob("test_reduce_*.py"))
  # the file on its own, with the bug on the path: it fails (the tool's own check aside)
  env = {**os.environ, "PYTHONPATH": str(repo)}
  env.pop("CAPTURE_PROCESS_REPLAY", None)
  run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_file.name], cwd=out,
                       env=env, capture_output=True, text=True, timeout=300)
  assert run.returncode == 1, run.stdout
  assert len(Store(str(db)).runs()) == 1   # reducing, and the test file's runs, captured nothing into the database
  return before, after, test_file.read_text()


@pytest.mark.slow
@pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler")
def test_a_fusion_rule_change_reduces_to_a_schedule_with_other_kernels(repo, tmp_path):
  before, after, text = _reduce_planted(repo, tmp_path, "reduce-fusion", NO_REALIZE_EXPAND, "ref_expand_of_expr",
                                        "schedule", "changed")
  assert after <= before and "assert [kernel_name(k) for k in kernels] == [" in text
  # `diff --reduce` reduces the first capture of each such group, within its budget
  proc = cli("diff", "--base", "main", "--reduce", "60", db=tmp_path / "reduce-fusion.db", cwd=repo)
  assert "replay reduce: capture" in proc.stderr and "with the base: passes; with the working tree: fails" in \
    proc.stderr, proc.stderr


# (planted change, workload whose outputs it changes, most nodes left, what the test file must build); the flag
# default one: the capture records SPLIT_REDUCEOP=0 (the new default), and replayed as recorded both trees would agree
PLANTED_OUTPUT_BUGS = {"lowering": (LOAD_IGNORES_VALID, "cnn_adam", 15, ".pad("),
                       "view-algebra": (COMPOSE_OFFSET, "nested_views", 15, ".shrink("),
                       "flag-default": (SPLIT_OFF, "big_reductions", 5, ".sum(")}


@pytest.mark.slow
@pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler")
@pytest.mark.parametrize("planted", list(PLANTED_OUTPUT_BUGS))
def test_a_planted_bug_reduces_to_a_test_that_fails_only_with_it(repo, tmp_path, planted):
  change, workload, most, call = PLANTED_OUTPUT_BUGS[planted]
  before, after, text = _reduce_planted(repo, tmp_path, f"reduce-{planted}", change, workload, "exec", "mismatch")
  assert after <= most < before and call in text
  assert "os.environ.update" not in text   # each tree runs at its own defaults: the file sets no flag


def test_a_kernel_capture_is_refused_with_a_pointer_to_its_schedule(replay_db):
  with pytest.raises(rd.ReduceError, match="reduce the schedule or exec capture at the same location"):
    rd.reduce_capture(None, {"id": 3, "kind": "kernel", "location": "w.py:1"}, {}, 1.0, None)
