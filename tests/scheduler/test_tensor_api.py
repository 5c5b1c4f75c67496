"""Tensor methods that test_tensor_ops.py does not reach, against numpy on each device, and the edge
behaviour issue 12 names: extreme inputs of the activations, pow with zero base or exponent, reductions
over an axis of size zero, empty tensors, and triangular masks that cost no kernel."""
import math
import numpy as np
import pytest
from scheduler import Tensor, dtypes
from tests.scheduler.conftest import DEVICES

rng = np.random.default_rng(7)
A = rng.standard_normal((4, 5)).astype(np.float32)
I = rng.integers(-9, 9, (4, 5)).astype(np.int32)
U = rng.integers(0, 200, (4, 5)).astype(np.uint32)


pytestmark = pytest.mark.usefixtures("each_device")


def close(t: Tensor, ref, rtol=1e-5, atol=1e-6):
  got, ref = t.numpy(), np.asarray(ref)
  assert got.shape == ref.shape, (got.shape, ref.shape)
  if ref.dtype.kind in "biu": np.testing.assert_array_equal(got, ref)
  else: np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol)


def sigmoid(a): return 1 / (1 + np.exp(-a))
def softplus(a): return np.log1p(np.exp(a))


CASES = [
  ("elu", lambda t: t.elu(0.7), lambda a: np.where(a > 0, a, 0.7 * (np.exp(a) - 1)), A),
  ("mish", lambda t: t.mish(), lambda a: a * np.tanh(softplus(a)), A),
  ("hardsigmoid", lambda t: t.hardsigmoid(), lambda a: np.clip(a / 6 + 0.5, 0, 1), A * 4),
  ("relu6", lambda t: t.relu6(), lambda a: np.clip(a, 0, 6), A * 5),
  ("swish", lambda t: t.swish(), lambda a: a * sigmoid(a), A),
  ("quick_gelu", lambda t: t.quick_gelu(), lambda a: a * sigmoid(1.702 * a), A),
  ("ceil", lambda t: t.ceil(), np.ceil, A * 3), ("floor", lambda t: t.floor(), np.floor, A * 3),
  ("trunc", lambda t: t.trunc(), np.trunc, A * 3),
  ("round", lambda t: t.round(), np.round, np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.4], np.float32)),
  ("clamp", lambda t: t.clamp(-0.5, 0.5), lambda a: np.clip(a, -0.5, 0.5), A),
  ("cummax", lambda t: t.cummax(1), lambda a: np.maximum.accumulate(a, axis=1), A),
  ("cumsum_long", lambda t: t.cumsum(0), lambda a: np.cumsum(a, axis=0), rng.standard_normal(700).astype(np.float32)),
  ("cummax_long", lambda t: t.cummax(0), lambda a: np.maximum.accumulate(a),
   rng.standard_normal(700).astype(np.float32)),
  ("triu", lambda t: t.triu(1), lambda a: np.triu(a, 1), A),
  ("tril", lambda t: t.tril(-1), lambda a: np.tril(a, -1), A),
  ("triu_batched", lambda t: t.reshape(2, 2, 5).triu(), lambda a: np.triu(a.reshape(2, 2, 5)), A),
  ("tril_wide", lambda t: t.tril(3), lambda a: np.tril(a, 3), A),
  ("masked_fill", lambda t: t.masked_fill(t > 0, -1.0), lambda a: np.where(a > 0, -1.0, a), A),
  ("idiv", lambda t: t // 4, lambda a: np.trunc(a / 4).astype(np.int32), I),
  ("mod_negative", lambda t: t % 4, lambda a: np.mod(a, 4), I),
  ("mod_by_negative", lambda t: t % -3, lambda a: np.mod(a, -3), I),
  ("div_floor", lambda t: t.div(4, rounding_mode="floor"), lambda a: np.floor_divide(a, 4), I),
  ("bitwise_and", lambda t: t & 6, lambda a: a & 6, I), ("bitwise_or", lambda t: t | 6, lambda a: a | 6, I),
  ("bitwise_not", lambda t: ~t, lambda a: ~a, I),
  ("lshift", lambda t: t << 2, lambda a: a << 2, U), ("rshift", lambda t: t >> 2, lambda a: a >> 2, U),
  ("unflatten", lambda t: t.unflatten(1, (5, 1)), lambda a: a.reshape(4, 5, 1), A),
  ("T", lambda t: t.T, lambda a: a.T, A),
  ("full_like", lambda t: t.full_like(3.5), lambda a: np.full_like(a, 3.5), A),
  ("rmatmul", lambda t: t.matmul(Tensor(A.T.copy()), reverse=True), lambda a: A.T @ a, A),
  ("avg_pool_no_pad_count", lambda t: t.reshape(1, 1, 4, 5).avg_pool2d(2, stride=1, padding=1, count_include_pad=False),
   lambda a: _avg_pool_no_pad(a), A),
  ("max_pool_dilated", lambda t: t.reshape(1, 1, 4, 5).max_pool2d(2, stride=1, dilation=2),
   lambda a: np.maximum.reduce([a[i:i + 2, j:j + 3] for i in (0, 2) for j in (0, 2)]).reshape(1, 1, 2, 3), A),
  ("binary_crossentropy", lambda t: t.sigmoid().binary_crossentropy((t > 0).float()),
   lambda a: np.mean(-(a > 0).astype(np.float32) * np.log(sigmoid(a)) - (1 - (a > 0)) * np.log(1 - sigmoid(a))), A),
  ("binary_crossentropy_logits", lambda t: t.binary_crossentropy_logits((t > 0).float(), reduction="sum"),
   lambda a: np.sum(np.maximum(a, 0) - a * (a > 0) + np.log1p(np.exp(-np.abs(a)))), A),
  ("binary_crossentropy_logits_pos_weight",   # positives weighted per class, as torch's BCEWithLogitsLoss
   lambda t: (t * 4).binary_crossentropy_logits((t > 0.3).float(), pos_weight=Tensor([1.0, 2.5, 0.5, 3.0, 1.5])),
   lambda a: np.mean([1.0, 2.5, 0.5, 3.0, 1.5] * (a > 0.3) * np.logaddexp(0, -4.0 * a.astype(np.float64))
                     + (a <= 0.3) * np.logaddexp(0, 4.0 * a.astype(np.float64))), A),
  ("one_hot", lambda t: t.one_hot(5), lambda a: np.eye(5, dtype=np.int32)[a], np.array([0, 3, 4, 1], np.int32)),
  ("any_all", lambda t: (t > 0).any(1).float() + (t > -3).all(1).float(),
   lambda a: (a > 0).any(1) + (a > -3).all(1).astype(np.float32), A),
  ("logsumexp_keepdim", lambda t: t.logsumexp(1, keepdim=True), lambda a: np.log(np.exp(a).sum(1, keepdims=True)), A),
  ("eye_wide", lambda t: Tensor.eye(3, 5) + t[:3, :5] * 0, lambda a: np.eye(3, 5, dtype=np.float32), A),
]


def _avg_pool_no_pad(a):
  padded, ones = np.pad(a, 1), np.pad(np.ones_like(a), 1)
  sums = np.array([[padded[i:i + 2, j:j + 2].sum() for j in range(6)] for i in range(5)])
  counts = np.array([[ones[i:i + 2, j:j + 2].sum() for j in range(6)] for i in range(5)])
  return (sums / counts).reshape(1, 1, 5, 6)


@pytest.mark.parametrize("name,op,ref,data", CASES, ids=[c[0] for c in CASES])
def test_method_matches_numpy(name, op, ref, data):
  close(op(Tensor(data)), ref(data), rtol=1e-4, atol=1e-5)


def test_triangular_masks_cost_no_kernel():
  """Issue 12.4: the mask is a view of a constant, so ones(16,16).tril() is the one elementwise kernel."""
  assert [si.kind for si in Tensor.ones(16, 16).tril().schedule()] == ["E"]
  assert [si.kind for si in Tensor.ones(16, 16).triu(2).schedule()] == ["E"]


@pytest.mark.parametrize("value", [1e4, -1e4, math.inf, -math.inf])
@pytest.mark.parametrize("name", ["sigmoid", "tanh", "gelu", "quick_gelu", "hardsigmoid"])
def test_activations_at_extreme_inputs_are_their_limits(name, value):
  limits = {"sigmoid": (1.0, 0.0), "tanh": (1.0, -1.0), "gelu": (value, 0.0), "quick_gelu": (value, 0.0),
            "hardsigmoid": (1.0, 0.0)}
  expected = limits[name][0] if value > 0 else limits[name][1]
  got = getattr(Tensor([value]), name)().numpy()[0]
  assert got == pytest.approx(expected, abs=1e-6), (name, value, got)


def test_rsqrt_and_pow_with_zero_base_or_exponent():
  close(Tensor([4.0, 0.25, 1.0]).rsqrt(), [0.5, 2.0, 1.0])
  assert Tensor([0.0]).rsqrt().numpy()[0] == math.inf
  base = np.array([0.0, 0.0, 0.0, 2.0, -2.0], np.float32)
  exponent = np.array([0.0, 2.0, -1.0, 0.0, 3.0], np.float32)
  close(Tensor(base) ** Tensor(exponent), np.power(base, exponent))        # tensor exponent
  close(Tensor(base) ** 0, np.ones_like(base))                              # constant exponent 0, also 0 ** 0
  close(Tensor(base) ** 2, base ** 2)
  close(2.0 ** Tensor(exponent), 2.0 ** exponent)                           # constant base
  close(0.0 ** Tensor(np.array([0.0, 1.0, 2.0], np.float32)), [1.0, 0.0, 0.0])


def test_reductions_over_an_axis_of_size_zero():
  empty = Tensor.zeros(0, 3).contiguous()
  close(empty.sum(0), np.zeros(3, np.float32))
  with np.errstate(invalid="ignore", divide="ignore"):
    assert (np.isnan(empty.mean(0).numpy()).all() and np.isnan(empty.var(0).numpy()).all()
            and np.isnan(empty.std(0).numpy()).all())
  assert empty.mean(1).shape == (0,) and empty.max(1).numpy().shape == (0,)


def test_operations_on_empty_tensors():
  e = Tensor([])
  assert e.shape == (0,) and (e + 1).numpy().shape == (0,) and e.sum().item() == 0
  assert (e * 2).reshape(0, 5).shape == (0, 5) and Tensor.ones(0, 4).cumsum(1).numpy().shape == (0, 4)
  assert e.cat(Tensor([1.0, 2.0])).tolist() == [1.0, 2.0]


def test_same_seed_gives_the_same_numbers_on_every_device():
  Tensor.manual_seed(1234)
  first = Tensor.rand(64, device="PYTHON").numpy()
  Tensor.manual_seed(1234)
  again = Tensor.rand(64, device="PYTHON").numpy()
  np.testing.assert_array_equal(first, again)
  if "CPU" in DEVICES:
    Tensor.manual_seed(1234)
    np.testing.assert_array_equal(Tensor.rand(64, device="CPU").numpy(), first)
  assert 0 <= first.min() and first.max() < 1 and 0.3 < first.mean() < 0.7


NAMED = [
  ("add", lambda t: t.add(2.0), lambda a: a + 2), ("sub", lambda t: t.sub(1.0, reverse=True), lambda a: 1 - a),
  ("mul", lambda t: t.mul(t), lambda a: a * a), ("pow", lambda t: t.abs().pow(1.5), lambda a: np.abs(a) ** 1.5),
  ("neg", lambda t: t.neg(), lambda a: -a),
  ("eq_ne", lambda t: t.eq(t).float() + t.ne(0).float(), lambda a: 1.0 + (a != 0)),
  ("dot", lambda t: t.dot(t.T), lambda a: a @ a.T),
  ("double_long", lambda t: t.double() + t.long().double(), lambda a: a + a.astype(np.int64)),
  ("detach_clone", lambda t: t.detach().clone() * 2, lambda a: a * 2),
  ("contiguous_backward", lambda t: t.contiguous_backward() + 1, lambda a: a + 1),
  ("batchnorm",
   lambda t: t.reshape(1, 4, 5).batchnorm(Tensor(np.arange(4, dtype=np.float32)), Tensor(np.ones(4, np.float32)),
                                                        Tensor(np.full(4, 0.5, np.float32)),
                                                        Tensor(np.full(4, 2.0, np.float32))),
   lambda a: ((a - 0.5) * np.arange(4, dtype=np.float32)[:, None] * 2 + 1).reshape(1, 4, 5)),
]
INT_NAMED = [
  ("idiv", lambda t: t.idiv(3), lambda a: np.trunc(a / 3).astype(np.int32)),
  ("xor", lambda t: t.xor(5), lambda a: a ^ 5),
  ("bitwise_and_or_not", lambda t: t.bitwise_and(3) + t.bitwise_or(8) + t.bitwise_not(),
   lambda a: (a & 3) + (a | 8) + ~a),
]


@pytest.mark.parametrize("name,op,ref", NAMED, ids=[c[0] for c in NAMED])
def test_named_method_matches_numpy(name, op, ref):
  close(op(Tensor(A)), ref(A), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name,op,ref", INT_NAMED, ids=[c[0] for c in INT_NAMED])
def test_named_int_method_matches_numpy(name, op, ref):
  close(op(Tensor(I)), ref(I))


def test_shifts_sizes_and_flags():
  close(Tensor(U).lshift(3).rshift(1), (U << 3) >> 1)
  t = Tensor(A)
  assert t.element_size() == 4 and t.nbytes() == 80 and t.is_floating_point() and not Tensor(I).is_floating_point()
  assert t.requires_grad is None and t.requires_grad_().requires_grad is True
  assert Tensor.from_uop(Tensor(3).lazydata.const_like(4)).item() == 4


def test_dropout_only_in_training_and_scales_the_kept():
  t = Tensor.ones(1000)
  assert (t.dropout(0.5).numpy() == 1).all()              # not training: identity
  with Tensor.train():
    kept = t.dropout(0.25).numpy()
  assert set(np.unique(kept)) <= {0.0, np.float32(1 / 0.75)} and 0.6 < (kept > 0).mean() < 0.9


def test_random_initialisers_have_their_ranges():
  Tensor.manual_seed(3)
  for make, limit in ((lambda: Tensor.uniform(256, low=-2, high=3), None),
                      (lambda: Tensor.scaled_uniform(16, 16), 1 / 16),
                      (lambda: Tensor.glorot_uniform(16, 16), (6 / 32) ** 0.5),
                      (lambda: Tensor.kaiming_uniform(16, 16, a=0.0), math.sqrt(6 / 16))):
    values = make().numpy()
    if limit is None: assert -2 <= values.min() and values.max() < 3
    else: assert np.abs(values).max() <= limit + 1e-6 and np.abs(values).max() > limit / 2
  like = Tensor.rand_like(Tensor.zeros(3, 4, dtype=dtypes.float16))
  assert like.shape == (3, 4) and like.dtype == dtypes.float16


def test_no_grad_skips_backward():
  w = Tensor([1.0, 2.0], requires_grad=True)
  Tensor.no_grad = True
  try:
    with pytest.raises(RuntimeError, match="no tensor with requires_grad"): (w * 2).sum().backward()
  finally: Tensor.no_grad = False


def test_every_public_tensor_method_is_called_by_name_somewhere_in_the_tests():
  """Issue 12.3: a public method nobody calls by name is a method nobody tested."""
  import pathlib, re
  text = "\n".join(p.read_text() for p in pathlib.Path(__file__).resolve().parents[1].rglob("*.py"))
  public = [n for n in dir(Tensor) if not n.startswith("_")]
  assert [n for n in public if not re.search(rf"\.{n}\b", text)] == []


def test_exec_outputs_read_back_as_numpy_reads_them_also_when_they_are_constants():
  from scheduler import dtypes
  from scheduler.ops import Ops
  from scheduler.tensor.base import _read_back
  tensors = [Tensor.full((1,), 3.0), Tensor.full((2, 3), -0.0), Tensor.full((4,), 7, dtype=dtypes.int8),
             Tensor.full((2,), True), Tensor.full((3,), float("nan")),
             Tensor.full((2, 2), 1e-3, dtype=dtypes.float16), Tensor.full((3,), 2.5).pad(((1, 1),)),
             Tensor.full((2,), 1.5, dtype=dtypes.bfloat16), Tensor([1.0, 2.0]) * 2]
  for t in tensors: t.realize()
  assert sum(t.lazydata.op is Ops.CONST for t in tensors) >= 6   # read without a kernel
  for t, back in zip(tensors, _read_back(tensors)):
    want = t.numpy()
    assert back.dtype == want.dtype and back.shape == want.shape
    assert np.array_equal(back, want, equal_nan=True) and (np.signbit(back) == np.signbit(want)).all()
