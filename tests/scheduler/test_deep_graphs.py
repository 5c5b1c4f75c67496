"""Deep graphs under the default recursion limit: building, keys, shapes, devices, value ranges, scheduling,
lowering, gradients and pickling of graphs thousands of nodes deep (issue 25); the power of a broadcast reduce by
squaring. Each test runs in a fresh interpreter, so nothing raised the recursion limit before it."""
import subprocess, sys, textwrap
import numpy as np
import pytest
from scheduler import Tensor, dtypes
from scheduler.ops import UOp, Ops
from tests.conftest import REPO, DEVICES, needs_cc



def fresh(code: str, timeout: float = 300) -> str:
  """Run `code` in a new interpreter with the default recursion limit; its stdout."""
  prelude = "import sys\nassert sys.getrecursionlimit() == 1000, sys.getrecursionlimit()\n"
  proc = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], cwd=REPO, capture_output=True,
                        text=True, timeout=timeout)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc.stdout


@needs_cc
@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_a_10000_step_elementwise_chain_schedules_and_realizes(device):
  steps = 10_000 if device == "CPU" else 3_000
  out = fresh(f"""
    import numpy as np
    from scheduler import Tensor, Device
    Device.DEFAULT = "{device}"
    x = Tensor(np.array([1.0, -0.5, 0.25, 2.0], np.float32))
    y = x
    for _ in range({steps}): y = y * 0.999 + x
    print(repr(y.numpy().tolist()))
  """)
  x = np.array([1.0, -0.5, 0.25, 2.0], np.float32)
  want = x.copy()
  for _ in range(steps): want = want * np.float32(0.999) + x
  np.testing.assert_allclose(eval(out), want, rtol=1e-4)


@needs_cc
@pytest.mark.slow
def test_backward_through_1000_sin_layers_matches_the_chain_rule():
  out = fresh("""
    import numpy as np
    from scheduler import Tensor
    x = Tensor(np.linspace(0.1, 1.5, 6).astype(np.float32), requires_grad=True)
    y = x
    for _ in range(1000): y = y.sin()
    y.sum().backward()
    print(repr(x.grad.numpy().tolist()))
  """)
  z = np.linspace(0.1, 1.5, 6).astype(np.float32).astype(np.float64)
  grad = np.ones_like(z)
  for _ in range(1000):   # d sin(z)/dz = cos(z), multiplied layer by layer
    grad, z = grad * np.cos(z), np.sin(z)
  np.testing.assert_allclose(eval(out), grad, rtol=2e-3)


@needs_cc
def test_the_product_over_a_broadcast_axis_of_100000_is_a_power_by_squaring():
  def product(): return Tensor(np.array([[1.0000001], [0.99999]], np.float32)).expand(2, 100_000).prod(1)
  (item,) = [si for si in product().schedule() if si.ast.op is Ops.SINK]
  muls = sum(1 for u in item.ast.toposort if u.op is Ops.MUL)
  assert muls <= 2 * 17   # log2(100000) < 17 squarings and as many multiplies
  base = np.array([1.0000001, 0.99999], np.float32).astype(np.float64)
  # float32: each of the 17 squarings doubles the relative rounding error, a bound of about n * 2^-24 = 6e-3
  np.testing.assert_allclose(product().numpy(), base ** 100_000, rtol=6e-3)


def test_uop_properties_of_a_graph_10000_deep_need_no_recursion():
  out = fresh("""
    from scheduler.ops import UOp, Ops
    from scheduler.dtype import dtypes
    from scheduler import Tensor
    x = UOp.variable("x", 0, 10)
    e = x
    for i in range(10_000): e = e + x if i % 2 else e * 1
    print(e.vmin, e.vmax, len(e.key))
    t = Tensor.ones(3).contiguous()
    for _ in range(10_000): t = t + 1
    u = t.lazydata
    print(u.shape, u.device, len(u.key), len(repr(u).splitlines()))
    from replay import serialize
    again = serialize.loads(serialize.dumps(u.sink()))
    print(again.src[0] is u)
  """)
  lines = out.splitlines()
  assert lines[0].split() == ["0", "50010", "32"]   # x in [0, 10] plus 5000 more x
  assert lines[1].startswith("(3,) CPU 32") and int(lines[1].split()[-1]) > 10_000
  assert lines[2] == "True"   # pickled and loaded back, hash-consing gives the very same node


@needs_cc
@pytest.mark.slow
def test_a_deep_program_is_captured_and_replays_the_same(tmp_path):
  program = tmp_path / "deep.py"
  program.write_text("import numpy as np\nfrom scheduler import Tensor\nx = Tensor(np.ones(4, np.float32))\ny = x\n"
                     "for _ in range(5000): y = y * 1.001 + x\nprint(y.numpy())\n")
  db = tmp_path / "r.db"
  run = lambda *args: subprocess.run([sys.executable, "-m", "replay", "--db", str(db), *args], cwd=REPO,
                                     capture_output=True, text=True, timeout=600)
  captured = run("capture", "--", sys.executable, str(program))
  assert captured.returncode == 0, captured.stderr[-2000:]
  replayed = run("run")
  assert (replayed.returncode == 0
          and "OK: all 3 captures replay the same" in replayed.stdout), replayed.stdout + replayed.stderr[-2000:]
  shown = run("show", "1")
  assert shown.returncode == 0 and "[4000] " in shown.stdout   # deep ASTs print with the depth written out


def test_pointing_live_tensors_at_results_walks_their_graphs_once():
  from scheduler.tensor import base
  a = Tensor.ones(4).contiguous()
  chain = [a]
  for _ in range(2000): chain.append(chain[-1] + 1)   # 2,000 live tensors, each graph containing the one before
  visited = []
  real = base._reaches
  def counting(roots, targets):
    out = real(roots, targets)
    visited.append(len(out))
    return out
  base._reaches = counting
  try: chain[-1].realize()
  finally: base._reaches = real
  assert visited and max(visited) < 20_000   # linear in the union of the live graphs (a walk per tensor: ~4,000,000)
  assert chain[-1].lazydata.base.op is Ops.BUFFER and chain[1000].numpy()[0] == 1001.0
