"""One test per class of defect that generated programs (scripts/fuzz) found, on both devices, against numpy or
closed forms."""
import math
import numpy as np
import pytest
from scheduler import Tensor, dtypes, nn


def test_an_element_of_a_padded_view_reads_its_mask(each_device):
  a, b = Tensor([[1., 2], [3, 4]]), Tensor([[10., 20], [30, 40]])
  assert Tensor.stack(Tensor([1., 2.]), Tensor([10., 20.]))[0, 0].item() == 1.0
  assert Tensor.cat(a, b, dim=1)[0, 2].item() == 10.0
  x = Tensor([1., 2, 3])
  assert [Tensor.cat(x, x)[i].item() for i in (0, 3, 5)] == [1.0, 1.0, 3.0]


def test_integer_division_and_modulo_by_zero_are_zero(each_device):
  assert (Tensor([7, -7]) % Tensor([0, 0])).tolist() == [0, 0]
  assert (Tensor([7, -7]) // Tensor([0, 0])).tolist() == [0, 0]
  zero = Tensor.zeros((2,), dtype=dtypes.int32)
  assert (zero // zero).tolist() == [0, 0]   # x // x is 1 only where x cannot be 0


def test_float_floor_division_and_modulo_of_exact_multiples(each_device):
  # a / b is a * (1 / b): at an exact multiple the product can land past the whole number (-1785 * (1 / 7) is
  # -255.00002), and the floor took one too many: -1785 // 7 was -256, and -1785 % 7 was 7, the divisor itself
  for dtype, top in ((np.float32, 2000), (np.float16, 1000)):
    a = np.arange(-top, top + 1).astype(dtype)
    for b in (7.0, -7.0, 3.0, 25.0, -0.5):
      divisor = np.full_like(a, b)
      np.testing.assert_array_equal((Tensor(a) // Tensor(divisor)).numpy(), np.floor_divide(a, divisor), err_msg=b)
      np.testing.assert_array_equal((Tensor(a) % Tensor(divisor)).numpy(), np.mod(a, divisor), err_msg=b)
      np.testing.assert_array_equal((Tensor(a) % b).numpy(), np.mod(a, dtype(b)), err_msg=b)
  # a remainder is never the divisor, and has its sign, for any values
  x, y = np.random.default_rng(0).standard_normal((2, 10_000)).astype(np.float32) * [[10.0], [1.0]]
  rest = (Tensor(x) % Tensor(y)).numpy()
  assert np.all(np.abs(rest) < np.abs(y)) and np.all((rest == 0) | (np.sign(rest) == np.sign(y)))


def test_unary_ops_of_padding_see_the_zero(each_device):
  with np.errstate(divide="ignore"):
    np.testing.assert_array_equal(Tensor.eye(2).log().numpy(), np.log(np.eye(2, dtype=np.float32)))
    np.testing.assert_array_equal(Tensor.ones(1).pad(((0, 2),)).reciprocal().numpy(), [1, np.inf, np.inf])


def test_rounding_keeps_special_and_large_values(each_device):
  v = [math.nan, math.inf, -math.inf, 3e9, -3e9, 2.5, -2.5, 1.5, 3.5, 4.5, -0.7, -0.3, -0.0, 0.5, -0.5, -1e-30]
  for dt in (dtypes.float32, dtypes.float64):
    t = Tensor(v, dtype=dt)
    for name, ref in (("trunc", np.trunc), ("floor", np.floor), ("ceil", np.ceil), ("round", np.round)):
      got, expected = getattr(t, name)().numpy(), ref(np.array(v, dtype=t.numpy().dtype))
      np.testing.assert_array_equal(got, expected, err_msg=name)
      np.testing.assert_array_equal(np.signbit(got), np.signbit(expected), err_msg=f"{name}: the sign of zero")


@pytest.mark.parametrize("fn", ["sigmoid", "tanh", "gelu", "quick_gelu", "hardsigmoid", "silu", "softplus"])
def test_gradients_at_large_inputs_are_finite(each_device, fn):
  x = Tensor([-400., -300., 300., 400.], requires_grad=True)
  g = getattr(x, fn)().sum().gradient(x)[0].numpy()
  assert np.all(np.isfinite(g)), g
  np.testing.assert_allclose(g[:2], 0, atol=1e-6)


def test_gradients_at_zero_and_of_constant_powers(each_device):
  x = Tensor([0., 4.], requires_grad=True)
  np.testing.assert_allclose(x.rsqrt().sum().gradient(x)[0].numpy(), [-np.inf, -0.5 * 4 ** -1.5])
  y = Tensor([1., 2., 3.], requires_grad=True)
  assert (y ** 0).sum().gradient(y)[0].tolist() == [0, 0, 0]
  assert (Tensor([math.nan, math.inf]) ** 0).tolist() == [1, 1]
  z = Tensor([0.], requires_grad=True)
  assert z.softplus().sum().gradient(z)[0].item() == pytest.approx(0.5)
  h = Tensor([-3., 3., math.nan])
  assert h.hardsigmoid().numpy()[:2].tolist() == [0, 1] and math.isnan(h.hardsigmoid().numpy()[2])


def test_replicate_pads_any_size_and_negative_pads_cut(each_device):
  x = Tensor([[1., 2.]])
  np.testing.assert_array_equal(x.pad(((0, 0), (3, 1)), mode="replicate").numpy(),
                                np.pad([[1., 2.]], ((0, 0), (3, 1)), mode="edge"))
  y, v = Tensor.arange(6).reshape(1, 6).float(), np.arange(6.).reshape(1, 6)
  for mode, numpy_mode in (("reflect", "reflect"), ("replicate", "edge"), ("circular", "wrap")):
    for before, after in ((-2, 3), (-1, 2), (3, -2), (-1, -1)):   # as the reference: cut first, then pad what is left
      cut = v[:, max(-before, 0):6 - max(-after, 0)]
      expected = np.pad(cut, ((0, 0), (max(before, 0), max(after, 0))), mode=numpy_mode)
      np.testing.assert_array_equal(y.pad((before, after), mode=mode).numpy(), expected,
                                    err_msg=f"{mode} {before, after}")
  with pytest.raises(ValueError, match="too large"): y.pad((-2, 4), mode="reflect")


def test_optimizer_state_lives_on_the_parameters_device(each_device):
  other = "PYTHON" if each_device == "CPU" else "CPU"
  from scheduler.device import find_c_compiler
  if other == "CPU" and not find_c_compiler(): pytest.skip("no C compiler")
  w = Tensor([[1., 2.]], device=other, requires_grad=True)
  for opt in (nn.optim.SGD([w], lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01), nn.optim.Adam([w], lr=0.1)):
    with Tensor.train():
      opt.zero_grad()
      (w * w).sum().backward()
      opt.step()
  assert w.device == other and np.all(np.isfinite(w.numpy()))


def test_a_scalar_random_int_times_a_scalar(each_device):
  Tensor.manual_seed(1)
  a = Tensor.randint(low=-3, high=9)
  assert -9 <= (a * Tensor(3, dtype=dtypes.int32)).item() <= 24


def test_nan_to_int_cast_of_a_constant_does_not_crash(each_device):
  t = Tensor.full((), -1, dtype=dtypes.int32).cast(dtypes.float64).sqrt().trunc()
  assert math.isnan(t.item())


def test_tanh_is_accurate_near_zero(each_device):
  v = np.array([-0.0, 1e-30, -1e-20, 1e-3, 0.049, 0.051, 0.7, -3.0], dtype=np.float32)
  got = Tensor(v).tanh().numpy()
  np.testing.assert_allclose(got, np.tanh(v), rtol=2e-6)
  assert np.signbit(got[0])


def test_elu_keeps_nan_and_its_gradient(each_device):
  x = Tensor([math.nan, -1., 2., -500.], requires_grad=True)
  out = x.elu().numpy()
  assert math.isnan(out[0]) and out[1:].tolist() == pytest.approx([math.expm1(-1), 2, -1])
  np.testing.assert_allclose(x.elu().sum().gradient(x)[0].numpy()[1:], [math.exp(-1), 1, 0], atol=1e-6)


def test_sign_keeps_nan(each_device):
  out = Tensor([math.nan, -2., 0., 3.]).sign().numpy()
  assert math.isnan(out[0]) and out[1:].tolist() == [-1, 0, 1]


def _pool3d(x: np.ndarray, k: int, stride: int, pad: int, how: str, include_pad: bool) -> np.ndarray:
  fill = -np.inf if how == "max" else 0.0
  xp = np.pad(x, [(0, 0)] * (x.ndim - 3) + [(pad, pad)] * 3, constant_values=fill)
  ones = np.pad(np.ones(x.shape[-3:]), [(pad, pad)] * 3)
  outs = [(n + 2 * pad - k) // stride + 1 for n in x.shape[-3:]]
  out = np.zeros(x.shape[:-3] + tuple(outs))
  for i, j, l in np.ndindex(*outs):
    cut = (slice(i * stride, i * stride + k), slice(j * stride, j * stride + k), slice(l * stride, l * stride + k))
    window = xp[(...,) + cut]
    if how == "max": out[..., i, j, l] = window.max(axis=(-1, -2, -3))
    else: out[..., i, j, l] = window.sum(axis=(-1, -2, -3)) / (k ** 3 if include_pad else ones[cut].sum())
  return out


@pytest.mark.parametrize("how,include_pad", [("avg", False), ("avg", True), ("max", True)])
def test_pooling_over_three_axes(each_device, how, include_pad):
  x = np.random.default_rng(0).standard_normal((1, 2, 10, 9, 11)).astype(np.float32)
  t = Tensor(x)
  got = t.avg_pool2d(kernel_size=(4, 4, 4), stride=3, padding=1, count_include_pad=include_pad) if how == "avg" else \
    t.max_pool2d(kernel_size=(4, 4, 4), stride=3, padding=1)
  np.testing.assert_allclose(got.numpy(), _pool3d(x, 4, 3, 1, how, include_pad), rtol=1e-5, atol=1e-6)
  assert Tensor.ones(1, 1, 16, 16, 16).avg_pool2d(kernel_size=(8, 8, 8), stride=5, padding=1,
                                                  count_include_pad=False).shape == (1, 1, 3, 3, 3)


@pytest.mark.parametrize("exponent", [1.5, 2.5, 0.3, -0.5, -1.5, -2, 5])
def test_power_gradients_at_zero_are_one_sided_limits(each_device, exponent):
  x = Tensor([0., 1., -2., 4.], requires_grad=True)
  y = x ** exponent
  grad = y.sum().gradient(x)[0].numpy()
  limit = 0.0 if exponent > 1 else (np.inf if exponent > 0 else -np.inf)
  assert grad[0] == limit
  with np.errstate(all="ignore"):
    v = np.array([0., 1., -2., 4.])
    np.testing.assert_allclose(y.numpy(), v ** exponent, rtol=1e-5)
    np.testing.assert_allclose(grad[1:], (exponent * v ** (exponent - 1))[1:], rtol=1e-5)


def test_bilinear_interpolation_of_integers_blends(each_device):
  x = Tensor([[[0, 100, 200]]], dtype=dtypes.uint8)
  out = x.interpolate((5,), mode="linear")
  assert out.dtype == dtypes.uint8
  expected = np.round(Tensor([[[0., 100., 200.]]]).interpolate((5,), mode="linear").numpy()).astype(np.uint8)
  np.testing.assert_array_equal(out.numpy(), expected)
  assert out.numpy().tolist() != [[[0, 0, 100, 100, 200]]]
  # above - below < 0 must not wrap
  down = Tensor([[[200, 0, 7]]], dtype=dtypes.uint8).interpolate((4,), mode="linear")
  np.testing.assert_array_equal(down.numpy(),
                                np.round(Tensor([[[200., 0., 7.]]]).interpolate((4,), mode="linear").numpy()))


def test_negative_zero_constants_keep_their_sign(each_device):
  """-0.0 and 0.0 are different constants (hash-consing compared them equal), and 0 * -1 folds to -0.0."""
  assert Tensor.zeros((1,)).neg().reciprocal().tolist() == [-math.inf]
  assert Tensor.full((2,), -0.0).reciprocal().tolist() == [-math.inf, -math.inf]
  assert Tensor.full((2,), 0.0).reciprocal().tolist() == [math.inf, math.inf]
  assert Tensor([-0.0, 0.0, -2.0]).abs().reciprocal().tolist() == [math.inf, math.inf, 0.5]
