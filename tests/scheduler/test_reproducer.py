"""The compiler's half of `replay reduce` (scheduler/reproducer.py): cut points, inputs in a node's place, bypasses, and
the graph written back as a program that builds the same values, checked against running the graph itself."""
import numpy as np
import pytest
from scheduler import Tensor, dtypes
from scheduler.ops import UOp, Ops
from scheduler import reproducer


def _graph(device="CPU"):
  a = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device=device).realize()
  b = Tensor(np.linspace(-1, 1, 4, dtype=np.float32), device=device).realize()
  out = ((a * 2 + b).exp().sum(axis=1) < 30).where(a.max(axis=1), -a.max(axis=1)).pad(((1, 2),)).flip(0)
  return out.lazydata.sink(), out


def _run(prog: dict):
  """Run a program the way its test file does: its inputs as realized tensors, then its lines."""
  import math
  from scheduler.shape.shapetracker import ShapeTracker
  from scheduler.shape.view import View
  env = {"math": math, "np": np, "Tensor": Tensor, "dtypes": dtypes, "UOp": UOp, "Ops": Ops,
         "ShapeTracker": ShapeTracker, "View": View}
  for name, array, device, dtype in prog["inputs"]:
    env[name] = Tensor(np.array(array), device=device, dtype=eval(dtype, env)).realize()
  for line in prog["lines"]: exec(line, env)
  return [env[name].numpy() for name in prog["outputs"]]


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_the_program_computes_what_the_graph_computes_with_tensor_calls(device):
  graph, out = _graph(device)
  prog = reproducer.program(graph)
  assert prog["uop_nodes"] == 0 and len(prog["inputs"]) == 2
  # constants broadcast into a binary op are written as literals: no line builds them
  assert any(line.endswith("* 2.0") for line in prog["lines"]) and not any("Tensor(2.0" in l for l in prog["lines"])
  assert [l.split(" = ")[0] for l in prog["lines"]] == [f"t{k}" for k in range(len(prog["lines"]))]
  np.testing.assert_allclose(_run(prog)[0], out.numpy(), rtol=1e-6)


def test_a_node_no_tensor_call_builds_is_written_as_a_uop():
  a = Tensor(np.array([1.5, -2.0, 3.0], dtype=np.float32)).realize()
  neg = UOp(Ops.NEG, dtypes.float, (a.lazydata,))   # Tensor's negation multiplies by -1: no call builds NEG
  graph = UOp(Ops.SINK, dtypes.void, (neg,))
  prog = reproducer.program(graph)
  assert prog["uop_nodes"] == 1 and "UOp(Ops.NEG, dtypes.float, (x0.lazydata,), None)" in prog["lines"][0]
  np.testing.assert_array_equal(_run(prog)[0], np.array([-1.5, 2.0, -3.0], dtype=np.float32))


def test_cut_points_are_computed_nodes_and_an_input_takes_a_nodes_place():
  graph, out = _graph()
  points = reproducer.cut_points(graph)
  assert points and all(p.op not in (Ops.BUFFER, Ops.CONST, Ops.DEVICE) and not reproducer.is_input(p) for p in points)
  assert not any(p.op is Ops.EXPAND and p.src[0].src[0].op is Ops.CONST for p in points)   # constants stay
  first = points[0]
  value = Tensor(first).numpy()
  cut = reproducer.substitute(graph, {first: reproducer.as_input(first, value)})
  assert reproducer.size(cut) < reproducer.size(graph)
  np.testing.assert_allclose(Tensor(cut.src[0]).numpy(), out.numpy(), rtol=1e-6)
  # a value computed from constants alone (an arange, random bits) can be cut too; a broadcast constant cannot
  counted = (Tensor.arange(6) * 3).lazydata.sink()
  assert not reproducer.cut_points(counted) and any(p.op is Ops.MUL for p in reproducer.cut_points(counted, True))
  assert set(points).isdisjoint(reproducer.cut_points(graph, True))   # the two kinds do not overlap
  broadcast = Tensor.full((4,), 2.0).lazydata.sink()
  assert not reproducer.cut_points(broadcast) and not reproducer.cut_points(broadcast, True)


def test_bypasses_pair_a_node_with_a_source_of_its_shape_and_dtype():
  graph, _ = _graph()
  for node, source in reproducer.bypasses(graph):
    assert source in node.src and source.shape == node.shape and source.dtype == node.dtype
  assert any(node.op is Ops.WHERE for node, _ in reproducer.bypasses(graph))
  one = reproducer.with_outputs(graph, reproducer.outputs(graph)[:1])
  assert one.op is Ops.SINK and one.src == graph.src[:1]


def test_an_assign_can_give_way_to_its_value_or_its_target():
  w = Tensor(np.ones(4, np.float32)).realize()
  step = w.assign(w * 0.5 + 1)
  graph = (step + 1).lazydata.sink()
  (assign,) = [u for u in graph.toposort if u.op is Ops.ASSIGN]
  options = [source for node, source in reproducer.bypasses(graph) if node is assign]
  assert options == [assign.src[1], assign.src[0]]   # the value first: the computation stays, the write goes
  np.testing.assert_allclose(Tensor(reproducer.substitute(graph, {assign: options[0]}).src[0]).numpy(), 2.5)
  np.testing.assert_allclose(Tensor(reproducer.substitute(graph, {assign: options[1]}).src[0]).numpy(), 2.0)


def test_resized_gives_every_axis_of_an_extent_a_smaller_one_and_computes_on_the_leading_elements():
  rng = np.random.default_rng(1)
  x, w = rng.standard_normal((6, 8), dtype=np.float32), rng.standard_normal((8, 4), dtype=np.float32)
  probs = ((Tensor(x).realize() @ Tensor(w).realize()).relu() * 2 + 1).softmax(1)
  out = probs.pad(((0, 0), (1, 0))).shrink(((0, 6), (0, 5))).sum(0)
  graph = out.lazydata.sink()
  assert reproducer.extents(graph) == [8, 6, 5, 4]
  small = reproducer.resized(graph, 6, 3)
  assert reproducer.extents(small) == [8, 5, 4, 3] and small.src[0].shape == (5,)
  h = np.maximum(x[:3] @ w, 0) * 2 + 1
  e = np.exp(h - h.max(1, keepdims=True))
  want = np.concatenate([np.zeros((3, 1), np.float32), e / e.sum(1, keepdims=True)], axis=1).sum(0)
  np.testing.assert_allclose(Tensor(small.src[0]).numpy(), want, rtol=1e-5)
  # the contracted axis too: 8 -> 2 keeps the first two columns of x and rows of w
  np.testing.assert_allclose(Tensor(reproducer.resized(graph, 8, 2).src[0]).numpy()[1:].sum(),
                             np.float32(6), rtol=1e-5)   # softmax rows sum to 1
  assert graph.src[0].shape == (5,)   # the original graph is left as it was


def test_resized_refuses_what_the_sizes_do_not_allow():
  flat = Tensor(np.arange(64, dtype=np.float32)).realize()
  joined = flat.reshape(4, 16).sum(1).lazydata.sink()
  assert reproducer.resized(joined, 16, 2) is None          # 64 elements cannot be 4 x 2
  part = Tensor(np.arange(10, dtype=np.float32)).realize().shrink(((2, 9),)).lazydata.sink()
  assert reproducer.resized(part, 10, 4) is None            # the shrink ends past the new extent
  assert reproducer.resized(part, 7, 3) is None             # no axis has extent 7 before the shrink: nothing changes
