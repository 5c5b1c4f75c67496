"""Tensor.multinomial, Tensor.sequential, the LARS optimizer and OptimizerGroup, against numpy statements of their
definitions on each device."""
import numpy as np
import pytest
from scheduler import Tensor, dtypes
from scheduler.nn.optim import LARS, SGD, Adam, OptimizerGroup

pytestmark = pytest.mark.usefixtures("each_device")
rng = np.random.default_rng(11)


def test_multinomial_draws_in_proportion_to_the_weights():
  Tensor.manual_seed(3)
  weights = np.array([0.1, 0.0, 0.6, 0.3, 0.0], dtype=np.float32)
  draws = Tensor(weights * 7).multinomial(20000, replacement=True).numpy()   # unnormalized weights
  assert draws.dtype == np.int32 and draws.shape == (20000,)
  counts = np.bincount(draws, minlength=5)
  assert counts[1] == 0 and counts[4] == 0   # a category of weight 0 is never drawn, the last included
  # each share within 4 standard deviations of a binomial count
  sd = np.sqrt(20000 * weights * (1 - weights))
  assert np.all(np.abs(counts - 20000 * weights) <= 4 * sd + 1e-9), counts


def test_multinomial_of_rows():
  Tensor.manual_seed(5)
  weights = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 2.0, 0.0]], dtype=np.float32)
  one = Tensor(weights).multinomial().numpy()
  assert one.shape == (3, 1) and one[:, 0].tolist() == [2, 0, 1]
  many = Tensor(weights).multinomial(6, replacement=True).numpy()
  assert many.shape == (3, 6) and (many == np.array([[2], [0], [1]])).all()


@pytest.mark.parametrize("call, message", [
  (lambda: Tensor([1.0, 2.0]).multinomial(2), "without replacement"),
  (lambda: Tensor([1.0, 2.0]).multinomial(0, replacement=True), "num_samples"),
  (lambda: Tensor.ones(2, 2, 2).multinomial(), "1-D or 2-D"),
])
def test_multinomial_refuses_what_it_cannot_draw(call, message):
  with pytest.raises(ValueError, match=message): call()


def test_sequential_applies_each_callable_in_turn():
  x = rng.standard_normal((3, 4)).astype(np.float32)
  out = Tensor(x).sequential([lambda t: t * 2, Tensor.relu, lambda t: t - 1]).numpy()
  np.testing.assert_allclose(out, np.maximum(x * 2, 0) - 1, rtol=1e-6)
  assert Tensor(x).sequential([]).numpy().tolist() == x.tolist()


def lars_by_numpy(w0, x, steps, lr, momentum, wd, nesterov, classic, tcoef):
  """The LARS update written out: trust ratio r = tcoef ||w|| / (||g|| + wd ||w||), 1 when a norm is 0."""
  w, b = w0.astype(np.float64), np.zeros_like(w0, dtype=np.float64)
  for _ in range(steps):
    g = 2 * x.T @ (x @ w) / (x.shape[0] * w.shape[1])
    wn, gn = np.linalg.norm(w), np.linalg.norm(g)
    r = tcoef * wn / (gn + wd * wn) if wn > 0 and gn > 0 else 1.0
    step = g + wd * w
    if classic: step = step * r * lr
    if momentum:
      b = momentum * b + step
      step = step + momentum * b if nesterov else b
    if not classic: step = step * r * lr
    w = w - step
  return w


@pytest.mark.parametrize("classic, nesterov, momentum", [(True, False, 0.9), (False, True, 0.9), (True, False, 0.0)])
def test_lars_matches_numpy(classic, nesterov, momentum):
  w0 = rng.standard_normal((4, 3)).astype(np.float32)
  x = rng.standard_normal((5, 4)).astype(np.float32)
  w = Tensor(w0, requires_grad=True)
  opt = LARS([w], lr=0.5, momentum=momentum, weight_decay=0.01, nesterov=nesterov, classic=classic, tcoef=0.02)
  with Tensor.train():
    for _ in range(3):
      opt.zero_grad()
      ((Tensor(x) @ w) ** 2).mean().backward()
      opt.step()
  ref = lars_by_numpy(w0, x, 3, 0.5, momentum, 0.01, nesterov, classic, 0.02)
  np.testing.assert_allclose(w.numpy(), ref, rtol=1e-4, atol=1e-6)


def test_lars_with_a_zero_weight_takes_the_plain_step():
  w = Tensor.zeros(3, requires_grad=True).contiguous()
  opt = LARS([w], lr=0.1, momentum=0.0, weight_decay=0.0)
  with Tensor.train():
    opt.zero_grad()
    (w * Tensor([1.0, 2.0, 3.0])).sum().backward()
    opt.step()
  np.testing.assert_allclose(w.numpy(), [-0.1, -0.2, -0.3], rtol=1e-6)


def test_optimizer_group_steps_each_optimizer_once():
  a0, b0 = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
  a, b = Tensor(a0, requires_grad=True), Tensor(b0, requires_grad=True)
  group = OptimizerGroup(SGD([a], lr=0.1), Adam([b], lr=0.1))
  assert group[0].params == [a] and len(group.params) == 2
  with Tensor.train():
    group.zero_grad()
    assert a.grad is None and b.grad is None
    (a.square().sum() + b.sum()).backward()
    group.step()
  np.testing.assert_allclose(a.numpy(), a0 - 0.1 * 2 * a0, rtol=1e-6)
  # Adam's first step moves each weight by lr against the gradient's sign (m_hat / sqrt(v_hat) = +-1)
  np.testing.assert_allclose(b.numpy(), b0 - 0.1, rtol=1e-5)
  with pytest.raises(ValueError, match="at least one"): OptimizerGroup()
