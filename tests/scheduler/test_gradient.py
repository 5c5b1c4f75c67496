"""Gradients from the UOp rules against central finite differences (float64)."""
import numpy as np
import pytest
from scheduler import Tensor, dtypes, Device

rng = np.random.default_rng(3)


@pytest.fixture(autouse=True)
def python_device():
  old = Device.DEFAULT
  Device.DEFAULT = "PYTHON"
  yield
  Device.DEFAULT = old


def numeric_grad(f, x: np.ndarray, eps=1e-6) -> np.ndarray:
  g = np.zeros_like(x)
  for i in np.ndindex(x.shape):
    xp, xm = x.copy(), x.copy()
    xp[i] += eps; xm[i] -= eps
    g[i] = (f(xp) - f(xm)) / (2 * eps)
  return g


FUNCS = [
  ("sum_mul", lambda t: (t * t).sum()), ("exp_log", lambda t: (t.exp() + 1).log().sum()), ("relu", lambda t: (t.relu() * 3).sum()),
  ("sigmoid", lambda t: t.sigmoid().sum()), ("tanh", lambda t: t.tanh().mean()), ("sqrt", lambda t: (t * t + 1).sqrt().sum()),
  ("div", lambda t: (1 / (t * t + 1)).sum()), ("max", lambda t: t.max(1).sum()), ("softmax", lambda t: (t.softmax(1) * t).sum()),
  ("log_softmax", lambda t: t.log_softmax(1)[:, 1].sum()), ("matmul", lambda t: (t @ t.T).sum()), ("layernorm", lambda t: (t.layernorm() * t).sum()),
  ("pad_shrink_flip", lambda t: (t.pad(((1, 0), (0, 2))).flip(1)[1:, :3] * 2).sum()), ("permute_reshape", lambda t: (t.T.reshape(-1) * t.reshape(-1)).sum()),
  ("expand", lambda t: (t.reshape(3, 1, 4).expand(3, 2, 4) * t.reshape(1, 3, 4).expand(2, 3, 4).permute(1, 0, 2)).sum()),
  ("prod", lambda t: t.prod(0).sum()), ("sin", lambda t: t.sin().sum()), ("where", lambda t: (t > 0).where(t * 2, t * t).sum()),
  ("maximum", lambda t: t.maximum(t.flip(0)).sum()), ("cumsum", lambda t: t.cumsum(1).sum(0).max()),
]


@pytest.mark.parametrize("name,f", FUNCS, ids=[f[0] for f in FUNCS])
def test_gradient_matches_finite_differences(name, f):
  x = rng.standard_normal((3, 4))
  t = Tensor(x, dtype=dtypes.float64, requires_grad=True)
  f(t).backward()
  expected = numeric_grad(lambda v: f(Tensor(v, dtype=dtypes.float64)).numpy().item(), x)
  np.testing.assert_allclose(t.grad.numpy(), expected, rtol=1e-4, atol=1e-6)


def test_gradient_of_two_targets_and_accumulation():
  x, w = rng.standard_normal((2, 3)), rng.standard_normal((3, 2))
  tx, tw = Tensor(x, dtype=dtypes.float64, requires_grad=True), Tensor(w, dtype=dtypes.float64, requires_grad=True)
  gx, gw = ((tx @ tw) ** 2).sum().gradient(tx, tw)
  np.testing.assert_allclose(gw.numpy(), numeric_grad(lambda v: (((x @ v) ** 2).sum()), w), rtol=1e-5)
  np.testing.assert_allclose(gx.numpy(), numeric_grad(lambda v: (((v @ w) ** 2).sum()), x), rtol=1e-5)
  (tx.sum() * 2).backward(); (tx.sum() * 3).backward()
  np.testing.assert_allclose(tx.grad.numpy(), np.full((2, 3), 5.0))


def test_backward_needs_a_scalar_and_a_grad_target():
  t = Tensor(rng.standard_normal((2, 2)), requires_grad=True)
  with pytest.raises(RuntimeError, match="scalar"): (t * 2).backward()
  with pytest.raises(RuntimeError, match="no tensor with requires_grad"): Tensor([1.0, 2.0]).sum().backward()
