"""The Tensor methods tinygrad's users call that issue 28 found missing: predicates (isnan, isinf, isclose),
activations (celu, selu, hardswish, hardtanh, softsign), erf, lerp, std_mean, logcumsumexp, roll,
repeat_interleave, linspace, normal and kaiming_normal; against numpy or their definitions on each device, and the
differentiable ones against finite differences (float64)."""
import math
import numpy as np
import pytest
from scheduler import Tensor, dtypes
from scripts.fuzz.reference import central_difference
from tests.scheduler.conftest import DEVICES

pytestmark = pytest.mark.usefixtures("each_device")
rng = np.random.default_rng(28)
A = rng.standard_normal((3, 5)).astype(np.float32) * 2
SPECIAL = np.array([1.0, np.nan, np.inf, -np.inf, -2.0, 0.0], np.float32)
erf = np.vectorize(math.erf)


def close(t: Tensor, ref, rtol=1e-5, atol=1e-6):
  got, ref = t.numpy(), np.asarray(ref)
  assert got.shape == ref.shape, (got.shape, ref.shape)
  if ref.dtype.kind == "b": np.testing.assert_array_equal(got, ref)
  else: np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol)


def test_nan_and_inf_predicates():
  x = Tensor(SPECIAL)
  close(x.isnan(), np.isnan(SPECIAL))
  close(x.isinf(), np.isinf(SPECIAL))
  close(x.isinf(detect_positive=False), np.isneginf(SPECIAL))
  close(x.isinf(detect_negative=False), np.isposinf(SPECIAL))
  assert x.isnan().dtype == dtypes.bool and x.isinf().dtype == dtypes.bool


def test_isclose_matches_numpy_including_nans_and_infinities():
  a = np.array([1.0, 1.0 + 1e-6, 1.1, np.nan, np.inf, -np.inf, 0.0], np.float32)
  b = np.array([1.0, 1.0, 1.0, np.nan, np.inf, np.inf, 1e-9], np.float32)
  close(Tensor(a).isclose(Tensor(b)), np.isclose(a, b))
  close(Tensor(a).isclose(Tensor(b), equal_nan=True), np.isclose(a, b, equal_nan=True))
  close(Tensor(a).isclose(1.0, rtol=0.2), np.isclose(a, 1.0, rtol=0.2))


ACTIVATIONS = [
  ("celu", lambda t: t.celu(0.6), lambda a: np.maximum(0, a) + np.minimum(0, 0.6 * (np.exp(a / 0.6) - 1))),
  ("selu", lambda t: t.selu(), lambda a: 1.0507 * np.where(a >= 0, a, 1.67326 * (np.exp(a) - 1))),
  ("hardswish", lambda t: t.hardswish(), lambda a: a * np.clip(a + 3, 0, 6) / 6),
  ("hardtanh", lambda t: t.hardtanh(-0.5, 1.5), lambda a: np.clip(a, -0.5, 1.5)),
  ("softsign", lambda t: t.softsign(), lambda a: a / (1 + np.abs(a))),
  ("erf", lambda t: t.erf(), erf),
  ("lerp", lambda t: t.lerp(Tensor(np.ones((3, 5), np.float32)), 0.3), lambda a: a + (1 - a) * 0.3),
  ("logcumsumexp0", lambda t: t.logcumsumexp(0), lambda a: np.logaddexp.accumulate(a, axis=0)),
  ("logcumsumexp1", lambda t: t.logcumsumexp(1), lambda a: np.logaddexp.accumulate(a, axis=1)),
  ("std_mean", lambda t: t.std_mean(1)[0] + t.std_mean(1)[1], lambda a: a.std(1, ddof=1) + a.mean(1)),
]


@pytest.mark.parametrize("name, op, ref", ACTIVATIONS, ids=[c[0] for c in ACTIVATIONS])
def test_values_match_numpy(name, op, ref):
  close(op(Tensor(A)), ref(A.astype(np.float64)), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("name, op, ref", [c for c in ACTIVATIONS if c[0] != "hardtanh"],
                         ids=[c[0] for c in ACTIVATIONS if c[0] != "hardtanh"])
def test_gradients_match_finite_differences(name, op, ref):
  a = A.astype(np.float64)
  a = np.where(np.abs(a) < 1e-3, 0.5, a)   # away from the kinks at 0, where a one-sided slope is taken
  x = Tensor(a, dtype=dtypes.float64, requires_grad=True)
  op(x).sum().backward()
  want = central_difference(lambda v: float(ref(v).sum()), a)
  np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-5, atol=1e-6)


def test_logcumsumexp_keeps_small_prefixes_next_to_a_large_value():
  a = np.array([3.0, -1.0, 100.0, -np.inf], np.float32)
  close(Tensor(a).logcumsumexp(), np.logaddexp.accumulate(a.astype(np.float64)))
  close(Tensor(np.float32(2.0)).logcumsumexp(), np.float32(2.0))


@pytest.mark.parametrize("shifts, dims", [(1, 0), (-2, 1), (7, 1), ((1, -1), (0, 1)), (0, 0)])
def test_roll(shifts, dims):
  close(Tensor(A).roll(shifts, dims), np.roll(A, shifts, dims))


@pytest.mark.parametrize("dim", [None, 0, 1, -1])
def test_repeat_interleave(dim):
  close(Tensor(A).repeat_interleave(3, dim), np.repeat(A, 3, axis=dim))


@pytest.mark.parametrize("start, stop, steps", [(0, 1, 5), (-2.5, 7, 11), (3, 3, 4), (1, -1, 2), (5, 6, 1), (0, 1, 0)])
def test_linspace(start, stop, steps):
  got = Tensor.linspace(start, stop, steps)
  close(got, np.linspace(start, stop, steps, dtype=np.float32), rtol=1e-6, atol=1e-6)
  if steps > 1: assert got.numpy()[-1] == np.float32(stop)
  assert Tensor.linspace(0, 10, 6, dtype=dtypes.int32).numpy().tolist() == [0, 2, 4, 6, 8, 10]


def test_normal_and_kaiming_normal_have_their_moments():
  Tensor.manual_seed(3)
  x = Tensor.normal(200, 100, mean=-2.0, std=3.0).numpy()
  # 20,000 draws: 5 standard errors
  assert x.shape == (200, 100) and abs(x.mean() + 2.0) < 0.06 and abs(x.std() - 3.0) < 0.06
  w = Tensor.kaiming_normal(256, 64, a=0.0).numpy()
  assert abs(w.std() - math.sqrt(2.0 / 64)) < 0.01 and abs(w.mean()) < 0.01


@pytest.mark.parametrize("n, muls", [(2, 1), (3, 2), (4, 2), (8, 3), (13, 5)])
def test_integer_powers_multiply_by_squaring(n, muls):
  from scheduler.ops import Ops
  base = np.array([1.5, -2.0, 0.0, 3.0, -0.5], np.float32)
  (kernel,) = [si for si in (Tensor(base) ** n).schedule() if si.ast.op is Ops.SINK]
  assert sum(u.op is Ops.MUL for u in kernel.ast.toposort) == muls
  close(Tensor(base) ** n, base.astype(np.float64) ** n, rtol=1e-6)
  close(Tensor(base.astype(np.int32) + 1) ** n, (base.astype(np.int32) + 1) ** n)   # ints stay ints
  x = Tensor(base.astype(np.float64), requires_grad=True)
  (x ** n).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), n * base.astype(np.float64) ** (n - 1), rtol=1e-12)


def test_two_to_the_x_is_one_exp2():
  from scheduler.ops import Ops
  exponent = np.array([0.5, 3.0, -1.0, -126.0], np.float32)
  (kernel,) = [si for si in (2 ** Tensor(exponent)).schedule() if si.ast.op is Ops.SINK]
  assert [u.op for u in kernel.ast.toposort if u.op in (Ops.EXP2, Ops.LOG2)] == [Ops.EXP2]
  close(2 ** Tensor(exponent), np.exp2(exponent.astype(np.float64)))
