"""The nn layers and the optimizer added after the first set: Conv1d, ConvTranspose1d/2d, GroupNorm, InstanceNorm,
LayerNorm2d, RMSNorm, LSTMCell and LAMB, each against a numpy statement of torch's definition (convolutions as
explicit sums over positions) on each device."""
import numpy as np
import pytest
from scheduler import Tensor, nn
from scheduler.nn.optim import LAMB

pytestmark = pytest.mark.usefixtures("each_device")
rng = np.random.default_rng(7)


def conv1d_by_sums(x, w, bias, stride, padding, dilation, groups):
  batch, _, length = x.shape
  out_channels, per_group, kernel = w.shape
  padded = np.pad(x, ((0, 0), (0, 0), (padding, padding)))
  out_length = (length + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
  out = np.zeros((batch, out_channels, out_length))
  for o in range(out_channels):
    g = o // (out_channels // groups)
    for t in range(out_length):
      for k in range(kernel):
        out[:, o, t] += padded[:, g * per_group:(g + 1) * per_group, t * stride + k * dilation] @ w[o, :, k]
  return out + bias[None, :, None]


def conv_transpose2d_by_sums(x, w, bias, stride, padding, output_padding, groups):
  """Every input element adds its weighted kernel into the output at (i * stride + k - padding)."""
  batch, in_channels, h, wd = x.shape
  _, per_group, kh, kw = w.shape
  out_h = (h - 1) * stride - 2 * padding + kh + output_padding
  out_w = (wd - 1) * stride - 2 * padding + kw + output_padding
  full = np.zeros((batch, per_group * groups, out_h + 2 * padding + kh, out_w + 2 * padding + kw))
  per_in = in_channels // groups
  for c in range(in_channels):
    g = c // per_in
    for i in range(h):
      for j in range(wd):
        full[:, g * per_group:(g + 1) * per_group, i * stride:i * stride + kh, j * stride:j * stride + kw] += \
          x[:, c, i, j][:, None, None, None] * w[c][None]
  return full[:, :, padding:padding + out_h, padding:padding + out_w] + bias[None, :, None, None]


@pytest.mark.parametrize("stride, padding, dilation, groups", [(1, 0, 1, 1), (2, 1, 1, 1), (1, 2, 2, 2)])
def test_conv1d_matches_explicit_sums(stride, padding, dilation, groups):
  layer = nn.Conv1d(4, 6, 3, stride=stride, padding=padding, dilation=dilation, groups=groups)
  assert layer.weight.shape == (6, 4 // groups, 3) and layer.bias.shape == (6,)
  x = rng.standard_normal((2, 4, 11)).astype(np.float32)
  want = conv1d_by_sums(x, layer.weight.numpy(), layer.bias.numpy(), stride, padding, dilation, groups)
  np.testing.assert_allclose(layer(Tensor(x)).numpy(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("stride, padding, output_padding, groups", [(1, 0, 0, 1), (2, 1, 1, 1), (2, 0, 0, 2)])
def test_conv_transpose2d_matches_explicit_sums(stride, padding, output_padding, groups):
  layer = nn.ConvTranspose2d(4, 6, 3, stride=stride, padding=padding, output_padding=output_padding, groups=groups)
  assert layer.weight.shape == (4, 6 // groups, 3, 3) and layer.bias.shape == (6,)
  x = rng.standard_normal((2, 4, 5, 4)).astype(np.float32)
  want = conv_transpose2d_by_sums(x, layer.weight.numpy(), layer.bias.numpy(), stride, padding, output_padding, groups)
  np.testing.assert_allclose(layer(Tensor(x)).numpy(), want, rtol=1e-4, atol=1e-5)


def test_conv_transpose1d_is_the_2d_one_over_one_axis():
  layer = nn.ConvTranspose1d(3, 2, 4, stride=2)
  x = rng.standard_normal((2, 3, 5)).astype(np.float32)
  as_2d = conv_transpose2d_by_sums(x[..., None], layer.weight.numpy()[..., None], layer.bias.numpy(), 2, 0, 0, 1)
  np.testing.assert_allclose(layer(Tensor(x)).numpy(), as_2d[..., 0], rtol=1e-4, atol=1e-5)


def group_norm(x, groups, weight, bias, eps):
  grouped = x.reshape(x.shape[0], groups, -1).astype(np.float64)
  normed = (grouped - grouped.mean(-1, keepdims=True)) / np.sqrt(grouped.var(-1, keepdims=True) + eps)
  shape = (1, -1) + (1,) * (x.ndim - 2)
  return normed.reshape(x.shape) * weight.reshape(shape) + bias.reshape(shape)


def test_group_and_instance_norm_match_numpy():
  x = rng.standard_normal((2, 6, 3, 4)).astype(np.float32) * 3 + 1
  layer = nn.GroupNorm(3, 6)
  layer.weight, layer.bias = Tensor(rng.standard_normal(6).astype(np.float32)), Tensor(np.arange(6, dtype=np.float32))
  np.testing.assert_allclose(layer(Tensor(x)).numpy(), group_norm(x, 3, layer.weight.numpy(), layer.bias.numpy(),
                                                                  1e-5), rtol=1e-4, atol=1e-4)
  instance = nn.InstanceNorm(6, affine=False)
  assert instance.weight is None
  np.testing.assert_allclose(instance(Tensor(x)).numpy(), group_norm(x, 6, np.ones(6), np.zeros(6), 1e-5),
                             rtol=1e-4, atol=1e-4)
  with pytest.raises(ValueError, match="6 channels do not split into 4 groups"): nn.GroupNorm(4, 6)
  with pytest.raises(ValueError, match="expects 6 channels on axis 1"): layer(Tensor.zeros(2, 5, 3))


def test_layernorm2d_normalizes_the_channels_of_each_position():
  x = rng.standard_normal((2, 5, 3, 4)).astype(np.float32)
  moved = x.transpose(0, 2, 3, 1).astype(np.float64)
  normed = (moved - moved.mean(-1, keepdims=True)) / np.sqrt(moved.var(-1, keepdims=True) + 1e-5)
  np.testing.assert_allclose(nn.LayerNorm2d(5)(Tensor(x)).numpy(), normed.transpose(0, 3, 1, 2), rtol=1e-4, atol=1e-4)


def test_rmsnorm_matches_numpy_and_keeps_the_dtype():
  x = rng.standard_normal((3, 8)).astype(np.float32)
  layer = nn.RMSNorm(8)
  layer.weight = Tensor(rng.standard_normal(8).astype(np.float32))
  want = x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6) * layer.weight.numpy()
  np.testing.assert_allclose(layer(Tensor(x)).numpy(), want, rtol=1e-5, atol=1e-6)
  assert nn.RMSNorm(8, elementwise_affine=False)(Tensor(x).half()).dtype == Tensor(x).half().dtype


def test_lstm_cell_matches_torchs_gate_order():
  cell = nn.LSTMCell(3, 4)
  cell.bias_ih, cell.bias_hh = (Tensor(rng.standard_normal(16).astype(np.float32)) for _ in range(2))
  x = rng.standard_normal((2, 3)).astype(np.float32)
  h, c = (rng.standard_normal((2, 4)).astype(np.float32) for _ in range(2))
  sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
  gates = (x @ cell.weight_ih.numpy().T + cell.bias_ih.numpy() + h @ cell.weight_hh.numpy().T + cell.bias_hh.numpy())
  i, f, g, o = np.split(gates, 4, axis=1)
  want_c = sig(f) * c + sig(i) * np.tanh(g)
  want_h = sig(o) * np.tanh(want_c)
  got_h, got_c = cell(Tensor(x), (Tensor(h), Tensor(c)))
  np.testing.assert_allclose(got_h.numpy(), want_h, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got_c.numpy(), want_c, rtol=1e-5, atol=1e-5)
  zero_h, zero_c = cell(Tensor(x))   # no state: h and c start at zero
  i0, _, g0, o0 = np.split(x @ cell.weight_ih.numpy().T + cell.bias_ih.numpy() + cell.bias_hh.numpy(), 4, axis=1)
  np.testing.assert_allclose(zero_c.numpy(), sig(i0) * np.tanh(g0), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(zero_h.numpy(), sig(o0) * np.tanh(sig(i0) * np.tanh(g0)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_lamb_matches_numpy(wd):
  w0 = rng.standard_normal((4, 3)).astype(np.float32)
  x = rng.standard_normal((5, 4)).astype(np.float32)
  w = Tensor(w0, requires_grad=True)
  opt = LAMB([w], lr=0.01, weight_decay=wd)
  with Tensor.train():
    for _ in range(3):
      opt.zero_grad()
      ((Tensor(x) @ w) ** 2).mean().backward()
      opt.step()
  ref, m, v = w0.astype(np.float64), 0.0, 0.0
  for t in range(1, 4):
    g = 2 * x.T @ (x @ ref) / (x.shape[0] * ref.shape[1])
    m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
    step = (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-6) + wd * ref
    ref = ref - 0.01 * np.linalg.norm(ref) / np.linalg.norm(step) * step
  np.testing.assert_allclose(w.numpy(), ref, rtol=1e-4, atol=1e-5)
