"""Every Tensor op against numpy, on each device, over dtypes, broadcasting and edge shapes."""
import numpy as np
import pytest
from scheduler import Tensor, Variable, dtypes



pytestmark = pytest.mark.usefixtures("each_device")


rng = np.random.default_rng(0)
A = rng.standard_normal((3, 4)).astype(np.float32)
B = rng.standard_normal((3, 4)).astype(np.float32)
POS = (np.abs(A) + 0.5).astype(np.float32)
I = rng.integers(-20, 20, (3, 4)).astype(np.int32)
J = rng.integers(1, 7, (3, 4)).astype(np.int32)


def close(t: Tensor, ref, rtol=1e-5, atol=1e-5):
  got = t.numpy()
  ref = np.asarray(ref)
  assert got.shape == ref.shape, (got.shape, ref.shape)
  if ref.dtype.kind in "biu": np.testing.assert_array_equal(got, ref)
  else: np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol)


UNARY = [
  ("neg", lambda t: -t, lambda a: -a, A), ("abs", lambda t: t.abs(), np.abs, A), ("exp", lambda t: t.exp(), np.exp, A),
  ("exp2", lambda t: t.exp2(), np.exp2, A), ("log", lambda t: t.log(), np.log, POS),
  ("log2", lambda t: t.log2(), np.log2, POS),
  ("sqrt", lambda t: t.sqrt(), np.sqrt, POS), ("rsqrt", lambda t: t.rsqrt(), lambda a: 1 / np.sqrt(a), POS),
  ("sin", lambda t: t.sin(), np.sin, A), ("cos", lambda t: t.cos(), np.cos, A),
  ("tan", lambda t: t.tan(), np.tan, A * 0.5),
  ("tanh", lambda t: t.tanh(), np.tanh, A), ("sigmoid", lambda t: t.sigmoid(), lambda a: 1 / (1 + np.exp(-a)), A),
  ("relu", lambda t: t.relu(), lambda a: np.maximum(a, 0), A),
  ("leakyrelu", lambda t: t.leakyrelu(0.1), lambda a: np.where(a > 0, a, 0.1 * a), A),
  ("gelu", lambda t: t.gelu(), lambda a: 0.5 * a * (1 + np.tanh(np.sqrt(2 / np.pi) * (a + 0.044715 * a ** 3))), A),
  ("silu", lambda t: t.silu(), lambda a: a / (1 + np.exp(-a)), A),
  ("softplus", lambda t: t.softplus(), lambda a: np.log1p(np.exp(a)), A),
  ("reciprocal", lambda t: t.reciprocal(), lambda a: 1 / a, POS), ("square", lambda t: t.square(), np.square, A),
  ("clip", lambda t: t.clip(-0.5, 0.5), lambda a: np.clip(a, -0.5, 0.5), A), ("sign", lambda t: t.sign(), np.sign, A),
  ("int_neg", lambda t: -t, lambda a: -a, I), ("int_abs", lambda t: t.abs(), np.abs, I),
  ("cast_int", lambda t: t.int(), lambda a: a.astype(np.int32), A * 10),
  ("cast_bool", lambda t: t.bool(), lambda a: a != 0, I),
  ("cast_half", lambda t: t.half(), lambda a: a.astype(np.float16), A),
  ("logical_not", lambda t: (t > 0).logical_not(), lambda a: ~(a > 0), A),
  ("bitcast", lambda t: t.bitcast(dtypes.int32), lambda a: a.view(np.int32), A),
]


@pytest.mark.parametrize("name,op,ref,data", UNARY, ids=[u[0] for u in UNARY])
def test_unary(name, op, ref, data):
  close(op(Tensor(data)), ref(data), rtol=2e-3 if name == "cast_half" else 1e-5)


BINARY = [
  ("add", lambda a, b: a + b, A, B), ("sub", lambda a, b: a - b, A, B), ("mul", lambda a, b: a * b, A, B),
  ("div", lambda a, b: a / b, A, POS),
  ("maximum", lambda a, b: np.maximum(a, b) if isinstance(a, np.ndarray) else a.maximum(b), A, B),
  ("minimum", lambda a, b: np.minimum(a, b) if isinstance(a, np.ndarray) else a.minimum(b), A, B),
  ("lt", lambda a, b: a < b, A, B), ("gt", lambda a, b: a > b, A, B), ("le", lambda a, b: a <= b, I, J),
  ("ge", lambda a, b: a >= b, I, J),
  ("eq", lambda a, b: a == b, I, J), ("ne", lambda a, b: a != b, I, J),
  ("int_add", lambda a, b: a + b, I, J), ("int_mul", lambda a, b: a * b, I, J),
  ("int_floordiv", lambda a, b: a // b if isinstance(a, Tensor) else np.trunc(a / b).astype(np.int32), I, J),
  ("and", lambda a, b: (a > 0) & (b > 2), I, J), ("or", lambda a, b: (a > 0) | (b > 2), I, J),
  ("xor", lambda a, b: a ^ b, I, J),
  ("broadcast_row", lambda a, b: a + b, A, B[:1]), ("broadcast_col", lambda a, b: a * b, A, B[:, :1]),
  ("broadcast_both", lambda a, b: a - b, A[:1, :, None].reshape(1, 4), B[:, :1]),
  ("pow", lambda a, b: a ** b, POS, B), ("mixed_int_float", lambda a, b: a + b, I, A),
]


@pytest.mark.parametrize("name,op,a,b", BINARY, ids=[b[0] for b in BINARY])
def test_binary(name, op, a, b):
  close(op(Tensor(a), Tensor(b)), op(a, b), rtol=1e-4)


def test_scalar_operands():
  t = Tensor(A)
  close(2 - t, 2 - A); close(t / 4, A / 4); close(3 * t + 1, 3 * A + 1); close(1 / Tensor(POS), 1 / POS)
  close(Tensor(I) % 5, I % 5); close(Tensor(I) * 2 + 1, I * 2 + 1)


def test_where_and_comparisons():
  close((Tensor(A) > 0).where(Tensor(A), Tensor(B)), np.where(A > 0, A, B))
  close((Tensor(A) > 0).where(1.0, -1.0), np.where(A > 0, 1.0, -1.0).astype(np.float32))


REDUCE = [
  ("sum", lambda t: t.sum(), lambda a: a.sum()), ("sum0", lambda t: t.sum(0), lambda a: a.sum(0)),
  ("sum1k", lambda t: t.sum(1, keepdim=True), lambda a: a.sum(1, keepdims=True)),
  ("prod", lambda t: t.prod(1), lambda a: a.prod(1)), ("max", lambda t: t.max(), lambda a: a.max()),
  ("max0", lambda t: t.max(0), lambda a: a.max(0)),
  ("min1", lambda t: t.min(1), lambda a: a.min(1)), ("mean", lambda t: t.mean(), lambda a: a.mean()),
  ("mean1", lambda t: t.mean(1), lambda a: a.mean(1)),
  ("var", lambda t: t.var(1), lambda a: a.var(1, ddof=1)), ("std", lambda t: t.std(), lambda a: a.std(ddof=1)),
  ("argmax", lambda t: t.argmax(1), lambda a: a.argmax(1).astype(np.int32)),
  ("argmin", lambda t: t.argmin(0), lambda a: a.argmin(0).astype(np.int32)),
  ("softmax", lambda t: t.softmax(1),
   lambda a: np.exp(a - a.max(1, keepdims=True)) / np.exp(a - a.max(1, keepdims=True)).sum(1, keepdims=True)),
  ("log_softmax", lambda t: t.log_softmax(),
   lambda a: a - a.max(1, keepdims=True) - np.log(np.exp(a - a.max(1, keepdims=True)).sum(1, keepdims=True))),
  ("logsumexp", lambda t: t.logsumexp(1), lambda a: np.log(np.exp(a).sum(1))),
  ("cumsum", lambda t: t.cumsum(1), lambda a: a.cumsum(1)),
  ("any", lambda t: (t > 1).any(1), lambda a: (a > 1).any(1)),
  ("all", lambda t: (t > -1).all(0), lambda a: (a > -1).all(0)),
]


@pytest.mark.parametrize("name,op,ref", REDUCE, ids=[r[0] for r in REDUCE])
def test_reduce(name, op, ref):
  close(op(Tensor(A)), ref(A), rtol=1e-4, atol=1e-5)


def test_int_and_bool_reductions():
  close(Tensor(I).sum(0), I.sum(0)); close(Tensor(I).max(1), I.max(1)); close(Tensor(I).min(), I.min())
  close((Tensor(I) > 0).sum(), (I > 0).sum().astype(np.int32))


def test_argmax_ranks_nan_as_inf_and_stays_inside_the_axis():
  nan, inf = float("nan"), float("inf")
  rows = np.array([[5, nan, 1], [nan, 9, nan], [1, 3, 3], [inf, nan, 2], [-inf, -inf, -inf]], dtype=np.float32)
  t = Tensor(rows)
  assert t.argmax(1).numpy().tolist() == [1, 0, 1, 0, 0]
  assert t.argmin(1).numpy().tolist() == [1, 0, 0, 1, 0]   # -NaN is NaN: the first NaN, else the first minimum
  assert Tensor(np.array([nan], np.float32)).argmax().item() == 0   # was 1, past the axis


def test_long_cumsum_uses_two_stages():
  x = np.arange(600, dtype=np.float32) / 100
  close(Tensor(x).cumsum(), np.cumsum(x), rtol=1e-4)


MOVEMENT = [
  ("reshape", lambda t: t.reshape(4, 3), lambda a: a.reshape(4, 3)),
  ("reshape_neg", lambda t: t.reshape(-1), lambda a: a.reshape(-1)),
  ("permute", lambda t: t.permute(1, 0), lambda a: a.T), ("T", lambda t: t.T, lambda a: a.T),
  ("expand", lambda t: t.reshape(3, 1, 4).expand(3, 2, 4), lambda a: np.broadcast_to(a.reshape(3, 1, 4), (3, 2, 4))),
  ("pad", lambda t: t.pad(((1, 2), (0, 1))), lambda a: np.pad(a, ((1, 2), (0, 1)))),
  ("pad_value", lambda t: t.pad(((1, 0), (2, 1)), value=-3.0),
   lambda a: np.pad(a, ((1, 0), (2, 1)), constant_values=-3.0)),
  ("shrink", lambda t: t.shrink(((1, 3), (0, 2))), lambda a: a[1:3, 0:2]),
  ("flip", lambda t: t.flip(1), lambda a: a[:, ::-1]),
  ("squeeze", lambda t: t.reshape(3, 1, 4).squeeze(1), lambda a: a),
  ("unsqueeze", lambda t: t.unsqueeze(0), lambda a: a[None]),
  ("flatten", lambda t: t.reshape(3, 2, 2).flatten(1), lambda a: a.reshape(3, 4)),
  ("getitem_int", lambda t: t[1], lambda a: a[1]),
  ("getitem_slice_step", lambda t: t[::2, 1::2], lambda a: a[::2, 1::2]),
  ("getitem_neg_step", lambda t: t[:, ::-2], lambda a: a[:, ::-2]),
  ("getitem_none_ellipsis", lambda t: t[None, ..., 2], lambda a: a[None, ..., 2]),
  ("getitem_negative", lambda t: t[-1, -2], lambda a: a[-1, -2]),
  ("cat", lambda t: t.cat(t * 2, dim=1), lambda a: np.concatenate([a, a * 2], 1)),
  ("stack", lambda t: t.stack(t + 1), lambda a: np.stack([a, a + 1])),
  ("repeat", lambda t: t.repeat(2, 1), lambda a: np.tile(a, (2, 1))),
  ("split", lambda t: t.split([1, 3], dim=1)[1], lambda a: a[:, 1:]),
  ("chunk", lambda t: t.chunk(2, dim=1)[0], lambda a: a[:, :2]),
  ("transpose_3d", lambda t: t.reshape(3, 2, 2).transpose(0, 2), lambda a: a.reshape(3, 2, 2).transpose(2, 1, 0)),
]


@pytest.mark.parametrize("name,op,ref", MOVEMENT, ids=[m[0] for m in MOVEMENT])
def test_movement(name, op, ref):
  close(op(Tensor(A)), ref(A))


def test_tensor_index_and_gather():
  idx = np.array([2, 0, -1], dtype=np.int32)
  close(Tensor(A)[Tensor(idx)], A[idx])
  gidx = np.array([[0, 3], [1, 1], [2, 0]], dtype=np.int32)
  close(Tensor(A).gather(1, Tensor(gidx)), np.take_along_axis(A, gidx, 1))


def test_creation():
  close(Tensor.arange(5), np.arange(5, dtype=np.int32))
  close(Tensor.arange(1, 10, 3), np.arange(1, 10, 3, dtype=np.int32))
  close(Tensor.arange(0.0, 1.0, 0.25), np.arange(0.0, 1.0, 0.25, dtype=np.float32))
  close(Tensor.eye(3), np.eye(3, dtype=np.float32)); close(Tensor.zeros(2, 3), np.zeros((2, 3), np.float32))
  close(Tensor.ones(2, 2, dtype=dtypes.int32), np.ones((2, 2), np.int32))
  close(Tensor.full((2,), 7), np.full((2,), 7, np.int32))
  close(Tensor([[1, 2], [3, 4]]), np.array([[1, 2], [3, 4]], dtype=np.int32))
  close(Tensor([True, False]), np.array([True, False]))
  close(Tensor(A).zeros_like(), np.zeros_like(A)); close(Tensor(bytes([1, 2, 3])), np.array([1, 2, 3], np.uint8))
  assert Tensor(3.5).item() == 3.5 and Tensor([1, 2]).tolist() == [1, 2]


def test_random_is_deterministic_per_seed():
  Tensor.manual_seed(42)
  a = Tensor.rand(3, 5).numpy()
  Tensor.manual_seed(42)
  b = Tensor.rand(3, 5).numpy()
  np.testing.assert_array_equal(a, b)
  assert (a >= 0).all() and (a < 1).all() and a.std() > 0.1
  r = Tensor.randint(200, low=2, high=5).numpy()
  assert r.min() >= 2 and r.max() < 5
  n = Tensor.randn(2000).numpy()
  assert abs(n.mean()) < 0.15 and abs(n.std() - 1) < 0.15


def test_nn_ops():
  x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
  w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
  ref = np.zeros((2, 4, 4, 4), np.float32)
  for i in range(4):
    for j in range(4): ref[:, :, i, j] = np.einsum("bchw,ochw->bo", x[:, :, i:i + 3, j:j + 3], w)
  close(Tensor(x).conv2d(Tensor(w)), ref, rtol=1e-4, atol=1e-4)
  ref_p = np.zeros((2, 4, 3, 3), np.float32)
  xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
  for i in range(3):
    for j in range(3): ref_p[:, :, i, j] = np.einsum("bchw,ochw->bo", xp[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3], w)
  close(Tensor(x).conv2d(Tensor(w), stride=2, padding=1), ref_p, rtol=1e-4, atol=1e-4)
  close(Tensor(x).max_pool2d(), x.reshape(2, 3, 3, 2, 3, 2).max((3, 5)))
  close(Tensor(x).avg_pool2d(), x.reshape(2, 3, 3, 2, 3, 2).mean((3, 5)), rtol=1e-5)
  close(Tensor(A) @ Tensor(B.T), A @ B.T, rtol=1e-4, atol=1e-5)
  close(Tensor(A).linear(Tensor(B.T), Tensor(np.ones(3, np.float32))), A @ B.T + 1, rtol=1e-4, atol=1e-5)
  close(Tensor(A).layernorm(), (A - A.mean(1, keepdims=True)) / np.sqrt(A.var(1, keepdims=True) + 1e-5), rtol=1e-4,
        atol=1e-5)
  close(Tensor([0, 2, 1], dtype=dtypes.int32).one_hot(3), np.eye(3, dtype=np.int32)[[0, 2, 1]])
  y = np.array([1, 0, 3], dtype=np.int32)
  ls = A - A.max(1, keepdims=True); ls = ls - np.log(np.exp(ls).sum(1, keepdims=True))
  close(Tensor(A).sparse_categorical_crossentropy(Tensor(y)), -ls[np.arange(3), y].mean(), rtol=1e-5)
  p = 1 / (1 + np.exp(-A)); t = (B > 0).astype(np.float32)
  close(Tensor(p).binary_crossentropy(Tensor(t)), (-t * np.log(p) - (1 - t) * np.log(1 - p)).mean(), rtol=1e-4)
  q = rng.standard_normal((2, 4, 8)).astype(np.float32)
  att = q @ q.transpose(0, 2, 1) / np.sqrt(8)
  att = np.exp(att - att.max(-1, keepdims=True)); att = att / att.sum(-1, keepdims=True)
  close(Tensor(q).scaled_dot_product_attention(Tensor(q), Tensor(q)), att @ q, rtol=1e-4, atol=1e-5)


def test_float16_and_empty():
  h = A.astype(np.float16)
  close(Tensor(h) + Tensor(h), h + h, rtol=2e-3)
  close(Tensor(h).sum(), np.float16(h.astype(np.float32).sum()), rtol=2e-3, atol=2e-3)
  assert Tensor.zeros(0, 3).numpy().shape == (0, 3)
  close(Tensor.zeros(0, 3).sum(1), np.zeros((0,), np.float32))
  close(Tensor.zeros(0, 3).sum(0), np.zeros((3,), np.float32))


def test_contiguous_assign_and_realize():
  a = Tensor(A).contiguous().realize()
  a += 1
  close(a, A + 1)
  b = Tensor.zeros(3, 4).contiguous().realize()
  b.assign(Tensor(A) * 2)
  close(b, A * 2)
  with pytest.raises(ValueError, match="shape mismatch"): b.assign(Tensor.zeros(4, 3))


def test_bad_input_errors_are_clear():
  with pytest.raises(ValueError, match="can't reshape"): Tensor(A).reshape(5, 5)
  with pytest.raises(ValueError, match="broadcast"): Tensor(A) + Tensor(np.ones((2, 4), np.float32))
  with pytest.raises(IndexError, match="out of bounds"): Tensor(A)[7]
  with pytest.raises(TypeError, match="only int slicing"): Tensor(A)[Variable("i", 0, 2).bind(1):]
  with pytest.raises(TypeError, match="can't create Tensor"): Tensor(object())
  with pytest.raises(RuntimeError, match="cannot dot"): Tensor(A) @ Tensor(A)


def test_a_kernel_reading_a_buffer_runs_before_the_assign_to_it():
  """Realizing two rand calls in one schedule gives what realizing them one by one gives (the second assigns the
  rng counter the first reads)."""
  Tensor.manual_seed(9)
  a1, b1 = Tensor.rand(3), Tensor.rand(3)
  Tensor.realize(a1, b1)
  Tensor.manual_seed(9)
  a2 = Tensor.rand(3).numpy()
  b2 = Tensor.rand(3).numpy()
  np.testing.assert_array_equal(a1.numpy(), a2)
  np.testing.assert_array_equal(b1.numpy(), b2)
  c = Tensor.ones(4).contiguous().realize()
  d = c * 2
  c.assign(Tensor.full((4,), 5.0))
  Tensor.realize(d, c)
  np.testing.assert_array_equal(d.numpy(), np.full(4, 2.0, np.float32))
