"""The operations added for issue 17 against numpy on CPU and PYTHON: the inverse and hyperbolic trigonometric
family, nll_loss and cross_entropy options, einsum, interpolate, conv_transpose2d; gradients against finite
differences live in test_gradient.py."""
import numpy as np
import pytest
from scheduler import Tensor, dtypes

rng = np.random.default_rng(17)


pytestmark = pytest.mark.usefixtures("each_device")


UNIT = np.concatenate([np.linspace(-0.999, 0.999, 41), [-1.0, 1.0, 0.0]]).astype(np.float32)
WIDE = np.array([-1e4, -300.0, -7.5, -1.0, -0.3, 0.0, 0.2, 1.0, 3.0, 80.0, 1e4], np.float32)


@pytest.mark.parametrize("name,ref,data,atol", [
  ("asin", np.arcsin, UNIT, 3e-7), ("acos", np.arccos, UNIT, 5e-7), ("atan", np.arctan, WIDE, 3e-7),
  ("atanh", np.arctanh, UNIT[(UNIT > -1) & (UNIT < 1)], 2e-6), ("asinh", np.arcsinh, WIDE, 2e-6),
  ("acosh", np.arccosh, np.array([1.0, 1.5, 2.0, 10.0, 1e4], np.float32), 2e-6),
  ("sinh", np.sinh, np.linspace(-5, 5, 21).astype(np.float32), 0),
  ("cosh", np.cosh, np.linspace(-5, 5, 21).astype(np.float32), 0),
])
def test_trigonometric_family_matches_numpy(name, ref, data, atol):
  got = getattr(Tensor(data), name)().numpy()
  np.testing.assert_allclose(got, ref(data.astype(np.float64)), rtol=2e-6, atol=atol)


def test_inverse_trigonometry_at_infinity_and_outside_the_domain():
  assert Tensor([np.inf, -np.inf]).atan().numpy().tolist() == pytest.approx([np.pi / 2, -np.pi / 2])
  assert np.isnan(Tensor([1.5]).asin().numpy()).all() and np.isnan(Tensor([0.5]).acosh().numpy()).all()
  assert Tensor([1.0, -1.0]).atanh().numpy().tolist() == [np.inf, -np.inf]


LOGITS = rng.standard_normal((6, 5)).astype(np.float32)
LABELS = np.array([0, 4, 2, 2, 1, 3])
WEIGHTS = np.array([1.0, 2.0, 0.5, 1.5, 0.25], np.float32)


def _log_softmax(x):
  return x - np.log(np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)) - x.max(1, keepdims=True)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted,ignore", [(False, None), (True, None), (False, 2), (True, 4)])
def test_nll_loss_matches_its_definition(reduction, weighted, ignore):
  logp = _log_softmax(LOGITS.astype(np.float64))
  w = WEIGHTS[LABELS] if weighted else np.ones(6)
  w = w * (LABELS != ignore) if ignore is not None else w
  per = -logp[np.arange(6), LABELS] * w
  expect = per.sum() / w.sum() if reduction == "mean" else per.sum() if reduction == "sum" else per
  got = Tensor(logp.astype(np.float32)).nll_loss(Tensor(LABELS.astype(np.int32)), Tensor(WEIGHTS) if weighted else None,
                                                 ignore, reduction)
  np.testing.assert_allclose(got.numpy(), expect, rtol=1e-5, atol=1e-6)


def test_nll_loss_over_spatial_axes():
  logp = _log_softmax(rng.standard_normal((2, 3, 4)).transpose(0, 2, 1).reshape(8,
                                                                                3)).reshape(2, 4, 3).transpose(0, 2, 1)
  y = rng.integers(0, 3, (2, 4))
  expect = -np.take_along_axis(logp, y[:, None, :], 1).mean()
  np.testing.assert_allclose(Tensor(logp.astype(np.float32)).nll_loss(Tensor(y.astype(np.int32))).numpy(), expect,
                             rtol=1e-5)


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 1.0])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_with_indices_and_probabilities(smoothing, reduction):
  logp = _log_softmax(LOGITS.astype(np.float64))
  target = np.eye(5)[LABELS] * (1 - smoothing) + smoothing / 5
  per = -(logp * target).sum(1)
  expect = per.mean() if reduction == "mean" else per.sum() if reduction == "sum" else per
  by_index = Tensor(LOGITS).cross_entropy(Tensor(LABELS.astype(np.int32)), reduction=reduction,
                                          label_smoothing=smoothing)
  np.testing.assert_allclose(by_index.numpy(), expect, rtol=1e-5, atol=1e-6)
  probs = np.eye(5)[LABELS].astype(np.float32)
  by_prob = Tensor(LOGITS).cross_entropy(Tensor(probs), reduction=reduction, label_smoothing=smoothing)
  np.testing.assert_allclose(by_prob.numpy(), expect, rtol=1e-5, atol=1e-6)


def test_loss_options_are_checked():
  with pytest.raises(ValueError, match="reduction"):
    Tensor(LOGITS).nll_loss(Tensor(LABELS.astype(np.int32)), reduction="avg")
  with pytest.raises(ValueError, match="label_smoothing"):
    Tensor(LOGITS).cross_entropy(Tensor(LABELS.astype(np.int32)), label_smoothing=1.5)
  with pytest.raises(RuntimeError, match="integer class indices"):
    Tensor(LOGITS).nll_loss(Tensor(LABELS.astype(np.float32)))


@pytest.mark.parametrize("formula,shapes", [
  ("ij,jk->ik", [(3, 4), (4, 5)]), ("ij,jk", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
  ("ii->i", [(4, 4)]),
  ("ii", [(4, 4)]), ("ij->ji", [(3, 4)]), ("ij,ij->", [(3, 4), (3, 4)]), ("i,j->ij", [(3,), (4,)]),
  ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
  ("ijk,jil->kl", [(2, 3, 4), (3, 2, 5)]), ("iij->j", [(3, 3, 2)]),
])
def test_einsum_matches_numpy(formula, shapes):
  operands = [rng.standard_normal(s).astype(np.float32) for s in shapes]
  got = Tensor.einsum(formula, *[Tensor(o) for o in operands]).numpy()
  np.testing.assert_allclose(got, np.einsum(formula, *operands), rtol=1e-5, atol=1e-5)
  assert np.allclose(Tensor.einsum(formula, [Tensor(o) for o in operands]).numpy(), got)   # operands as one list too


@pytest.mark.parametrize("formula,shapes,error", [
  ("ij,jk->ik", [(3, 4), (5, 5)], "sizes"), ("ij->ik", [(3, 4)], "not valid"), ("ij,jk", [(3, 4)], "names 2 operands"),
  ("i...i.->i", [(3, 4)], "ellipsis is written"), ("ijk->i", [(3, 4)], "3 letters"),
])
def test_einsum_errors_are_clear(formula, shapes, error):
  with pytest.raises((ValueError, NotImplementedError), match=error):
    Tensor.einsum(formula, *[Tensor(np.zeros(s, np.float32)) for s in shapes])


def _torch_source(n: int, out: int, mode: str, align_corners: bool) -> np.ndarray:
  """The source coordinate of each output position, as torch documents it."""
  i = np.arange(out, dtype=np.float64)
  if mode == "nearest": return np.minimum(np.floor(i * n / out), n - 1)
  if mode == "nearest-exact": return np.minimum(np.floor((i + 0.5) * n / out), n - 1)
  if align_corners: return i * (n - 1) / (out - 1) if out > 1 else np.zeros(out)
  return np.maximum((i + 0.5) * n / out - 0.5, 0)


def _resize_reference(x: np.ndarray, size, mode, align_corners) -> np.ndarray:
  for axis, out in zip(range(x.ndim - len(size), x.ndim), size):
    source = _torch_source(x.shape[axis], out, mode, align_corners)
    moved = np.moveaxis(x, axis, -1)
    if mode.startswith("nearest"): resized = moved[..., source.astype(int)]
    else: resized = np.apply_along_axis(lambda row: np.interp(source, np.arange(len(row)), row), -1, moved)
    x = np.moveaxis(resized, -1, axis)
  return x


@pytest.mark.parametrize("mode,align",
                         [("nearest", False), ("nearest-exact", False), ("linear", False), ("linear", True),
                          ("bilinear", True)])
@pytest.mark.parametrize("size", [(8, 10), (3, 2), (5, 5), (1, 7)])
def test_interpolate_matches_the_torch_coordinate_rules(mode, align, size):
  x = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
  got = Tensor(x).interpolate(size, mode=mode, align_corners=align).numpy()
  np.testing.assert_allclose(got, _resize_reference(x.astype(np.float64), size, mode, align), rtol=1e-5, atol=1e-6)


def test_interpolate_errors_are_clear():
  with pytest.raises(ValueError, match="mode"): Tensor.ones(1, 1, 4, 4).interpolate((8, 8), mode="cubic")
  with pytest.raises(ValueError, match="align_corners"):
    Tensor.ones(1, 1, 4, 4).interpolate((8, 8), mode="nearest", align_corners=True)
  with pytest.raises(ValueError, match="does not fit"): Tensor.ones(4).interpolate((8, 8))


def conv_transpose_reference(x, w, stride=1, padding=0, output_padding=0, dilation=1, groups=1):
  """Each input element scatters w times itself into the output: the definition, by loops."""
  n, cin, h, wd = x.shape
  per_group, kh, kw = w.shape[1:]
  oh = (h - 1) * stride - 2 * padding + dilation * (kh - 1) + output_padding + 1
  ow = (wd - 1) * stride - 2 * padding + dilation * (kw - 1) + output_padding + 1
  out = np.zeros((n, per_group * groups, oh, ow))
  for c in range(cin):
    g = c // (cin // groups)
    for i, j, ky, kx in np.ndindex(h, wd, kh, kw):
      y, xx = i * stride - padding + ky * dilation, j * stride - padding + kx * dilation
      if 0 <= y < oh and 0 <= xx < ow:
        out[:, g * per_group:(g + 1) * per_group, y, xx] += x[:, c, i, j][:, None] * w[c, :, ky, kx][None]
  return out


@pytest.mark.parametrize("options",
                         [{}, {"stride": 2}, {"stride": 2, "padding": 1},
                          {"stride": 3, "padding": 1, "output_padding": 2},
                                     {"dilation": 2, "padding": 1}, {"groups": 2, "stride": 2},
                                     {"stride": 2, "dilation": 2, "output_padding": 1}],
                         ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "plain")
def test_conv_transpose2d_matches_its_definition(options):
  x, w = rng.standard_normal((2, 4, 5, 6)).astype(np.float32), rng.standard_normal((4, 3, 3, 2)).astype(np.float32)
  b = rng.standard_normal(3 * options.get("groups", 1)).astype(np.float32)
  got = Tensor(x).conv_transpose2d(Tensor(w), Tensor(b), **options).numpy()
  np.testing.assert_allclose(got, conv_transpose_reference(x, w, **options) + b[None, :, None, None], rtol=1e-4,
                             atol=1e-5)


def test_conv_transpose2d_is_the_input_gradient_of_conv2d():
  x = Tensor(rng.standard_normal((1, 3, 7, 7)), dtype=dtypes.float64, requires_grad=True)
  w = Tensor(rng.standard_normal((4, 3, 3, 3)), dtype=dtypes.float64)
  upstream = rng.standard_normal((1, 4, 3, 3))
  (x.conv2d(w, stride=2) * Tensor(upstream, dtype=dtypes.float64)).sum().backward()
  again = Tensor(upstream, dtype=dtypes.float64).conv_transpose2d(w, stride=2)
  np.testing.assert_allclose(again.numpy(), x.grad.numpy(), rtol=1e-10, atol=1e-12)
  with pytest.raises(ValueError, match="output_padding"):
    Tensor.ones(1, 3, 4, 4).conv_transpose2d(Tensor.ones(3, 2, 3, 3), stride=2, output_padding=2)


@pytest.mark.parametrize("mode,numpy_mode", [("reflect", "reflect"), ("replicate", "edge"), ("circular", "wrap")])
@pytest.mark.parametrize("pads", [(2, 1, 1, 2), (0, 3), (-1, 2, 0, 1), (1, 1, 1, 1, 1, 0)])
def test_pad_modes_match_numpy(mode, numpy_mode, pads):
  x = rng.standard_normal((3, 4, 5)).astype(np.float32)
  # torch order: last axis first
  pairs = [(pads[2 * k], pads[2 * k + 1]) if 2 * k < len(pads) else (0, 0) for k in range(3)][::-1]
  cut = x[tuple(slice(max(-b, 0), x.shape[a] - max(-e, 0)) for a, (b, e) in enumerate(pairs))]
  expect = np.pad(cut, [(max(b, 0), max(e, 0)) for b, e in pairs], mode=numpy_mode)
  np.testing.assert_array_equal(Tensor(x).pad(pads, mode=mode).numpy(), expect)


def test_pad_modes_cost_no_kernel_and_refuse_too_large_pads():
  assert len(Tensor.empty(4, 4).pad((2, 2), mode="reflect").schedule()) == 1   # the copy that stores it, nothing before
  with pytest.raises(ValueError, match="too large"): Tensor.ones(3).pad((3, 0), mode="reflect")
  with pytest.raises(NotImplementedError, match="not supported"): Tensor.ones(3).pad((1, 1), mode="symmetric")


def test_errors_have_the_reference_kinds():
  with pytest.raises(RuntimeError, match="not supported"): Tensor([1.5]) & Tensor([2.0])
  with pytest.raises(RuntimeError, match="not supported"): Tensor([1.5]).bitwise_or(2)
  with pytest.raises(RuntimeError, match="not supported"): Tensor([1, 2]) ^ 1.5
  assert (Tensor([True, False]) ^ Tensor([True, True])).numpy().tolist() == [False, True]
  assert (Tensor([6, 3]) & 5).numpy().tolist() == [4, 1]
  q = Tensor.ones(1, 2, 4)
  with pytest.raises(RuntimeError, match="attn_mask or is_causal, not both"):
    q.scaled_dot_product_attention(q, q, attn_mask=Tensor.ones(2, 2).bool(), is_causal=True)
  with pytest.raises(ValueError, match="kernel size"): Tensor.ones(1, 1, 2, 2).conv2d(Tensor.ones(1, 1, 3, 3))
  with pytest.raises(ValueError, match="does not match"): Tensor.ones(1, 2, 4, 4).conv2d(Tensor.ones(1, 3, 3, 3))


def test_division_by_the_same_tensor_folds_away():
  a, b = Tensor.empty(4, 4), Tensor.empty(4, 4)
  assert len((a / a).schedule()) == 0 and len(((a * b) / b).schedule()) == 0 and len(((b * a) / b).schedule()) == 0
  assert len(Tensor.empty(4, 1).softmax(1).schedule()) == 0 and len((a / b).schedule()) == 1
  x = rng.standard_normal((3, 1)).astype(np.float32)
  np.testing.assert_array_equal(Tensor(x).softmax(1).numpy(), np.ones((3, 1), np.float32))
  np.testing.assert_allclose(((Tensor(x) * 3) / 3).numpy(), x, rtol=1e-6)


def pool_reference(x, k, s, p, d, ceil, kind, include_pad=True):
  """Pooling by its definition (torch's output size rule for ceil_mode: the last window starts inside the input or
  its left padding; the average's divisor counts the padding, never the ceil overhang)."""
  n, c, h, w = x.shape
  def out_size(length):
    num = length + 2 * p - (d * (k - 1) + 1)
    o = (-(-num // s) if ceil else num // s) + 1
    return o - 1 if ceil and (o - 1) * s >= length + p else o
  oh, ow = out_size(h), out_size(w)
  big = 2 * p + 2 * k * d + s
  xp = np.full((n, c, h + big, w + big), -np.inf if kind == "max" else 0.0)
  xp[:, :, p:p + h, p:p + w] = x
  counted = np.zeros(xp.shape[2:])
  if include_pad: counted[:h + 2 * p, :w + 2 * p] = 1
  else: counted[p:p + h, p:p + w] = 1
  out = np.zeros((n, c, oh, ow))
  for i, j in np.ndindex(oh, ow):
    ys, xs = [i * s + a * d for a in range(k)], [j * s + b * d for b in range(k)]
    window = xp[:, :, ys][:, :, :, xs]
    out[:, :, i, j] = window.max((2, 3)) if kind == "max" else window.sum((2, 3)) / counted[np.ix_(ys, xs)].sum()
  return out


@pytest.mark.parametrize("k,s,p,d", [(2, 2, 0, 1), (3, 2, 1, 1), (3, 3, 1, 1), (2, 3, 0, 2), (3, 2, 0, 1)])
@pytest.mark.parametrize("ceil", [False, True])
def test_pooling_with_ceil_mode_and_dilation(k, s, p, d, ceil):
  x = rng.standard_normal((1, 2, 7, 6)).astype(np.float32)
  np.testing.assert_allclose(Tensor(x).max_pool2d(k, s, d, p, ceil_mode=ceil).numpy(),
                             pool_reference(x, k, s, p, d, ceil, "max"), atol=1e-6)
  np.testing.assert_allclose(Tensor(x).avg_pool2d(k, s, d, p, ceil_mode=ceil).numpy(),
                             pool_reference(x, k, s, p, d, ceil, "avg"), atol=1e-5)
  np.testing.assert_allclose(Tensor(x).avg_pool2d(k, s, d, p, ceil_mode=ceil, count_include_pad=False).numpy(),
                             pool_reference(x, k, s, p, d, ceil, "avg", include_pad=False), atol=1e-5)


@pytest.mark.parametrize("index,value", [
  ((slice(1, 3),), 7.0), ((1, slice(None, None, 2)), -1.0), ((slice(None), 4), np.arange(4, dtype=np.float32)),
  ((np.array([0, 2]),), np.full(5, 9.0, np.float32)), ((slice(None), np.array([4, 0])), 3.0),
  ((Ellipsis, 1), np.arange(4, dtype=np.float32)),
  ((2, 3), 5.5), ((slice(1, None), slice(None, 2)), np.array([[1.0, 2.0]] * 3, np.float32)),
], ids=str)
@pytest.mark.parametrize("realized", [True, False])
def test_setitem_writes_where_the_index_selects(index, value, realized):
  base = np.arange(20, dtype=np.float32).reshape(4, 5)
  t = Tensor(base.copy()).realize() if realized else Tensor.arange(20).float().reshape(4, 5)
  as_tensor = tuple(Tensor(i.astype(np.int32)) if isinstance(i, np.ndarray) else i for i in index)
  t[as_tensor] = Tensor(value) if isinstance(value, np.ndarray) else value
  assert t.lazydata.is_realized == realized   # a realized tensor is written at once, whatever the index
  expect = base.copy()
  expect[index] = value
  np.testing.assert_array_equal(t.numpy(), expect)


def test_setitem_refuses_what_it_cannot_do():
  with pytest.raises(NotImplementedError, match="requires_grad"):
    w = Tensor.ones(3, requires_grad=True)
    w[0] = 2.0
  with pytest.raises(TypeError, match="can't set"):
    t = Tensor.ones(3)
    t[0] = "x"
  x = Tensor([1, 2, 3], dtype=dtypes.int32).realize()
  x[1] = 7.9   # cast to the tensor's dtype, as the reference does
  assert x.numpy().tolist() == [1, 7, 3]
