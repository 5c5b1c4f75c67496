"""Tensor methods of tinygrad's API that were missing: scatter_reduce, cumprod, cummin, argsort, var_mean,
logsigmoid, isfinite, rearrange, meshgrid, masked_select and to_; against numpy (or a loop that states torch's
definition) on each device, the differentiable ones against finite differences (float64)."""
import numpy as np
import pytest
from scheduler import Tensor, dtypes
from scripts.fuzz.reference import central_difference
from tests.scheduler.conftest import DEVICES

pytestmark = pytest.mark.usefixtures("each_device")
rng = np.random.default_rng(2025)


def same(t: Tensor, ref, rtol=1e-5, atol=1e-6):
  got, ref = t.numpy(), np.asarray(ref)
  assert got.shape == ref.shape, (got.shape, ref.shape)
  if ref.dtype.kind in "biu": np.testing.assert_array_equal(got, ref)
  else: np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol)


def scatter_reduce_by_loop(x, dim, index, src, reduce, include_self):
  """torch's definition, element by element: each target collects its own value (with include_self) and what src
  sends it, and is replaced by their reduction."""
  out, sent = x.copy(), {}
  for pos in np.ndindex(index.shape):
    target = list(pos)
    target[dim] = index[pos]
    sent.setdefault(tuple(target), []).append(src[pos])
  for target, values in sent.items():
    values = ([x[target]] if include_self else []) + values
    if reduce == "sum": out[target] = sum(values)
    elif reduce == "prod": out[target] = np.prod(values)
    elif reduce == "amax": out[target] = max(values)
    elif reduce == "amin": out[target] = min(values)
    elif np.issubdtype(x.dtype, np.integer): out[target] = sum(values) // len(values)
    else: out[target] = sum(values) / len(values)
  return out


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dim", [0, 1])
def test_scatter_reduce_matches_its_definition(reduce, include_self, dim):
  x = rng.uniform(-2, 2, (4, 5)).astype(np.float32)
  index = rng.integers(0, x.shape[dim], (3, 4))
  src = rng.uniform(-2, 2, (3, 5)).astype(np.float32)
  want = scatter_reduce_by_loop(x, dim, index, src, reduce, include_self)
  same(Tensor(x).scatter_reduce(dim, Tensor(index), Tensor(src), reduce, include_self=include_self), want)


@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin"])
def test_scatter_reduce_of_ints_floors_a_mean_and_keeps_the_dtype(reduce):
  x = rng.integers(-9, 9, (3, 4)).astype(np.int32)
  index = rng.integers(0, 4, (3, 6))
  src = rng.integers(-9, 9, (3, 6)).astype(np.int32)
  got = Tensor(x).scatter_reduce(1, Tensor(index), Tensor(src), reduce)
  assert got.dtype == dtypes.int32
  same(got, scatter_reduce_by_loop(x, 1, index, src, reduce, True))


def test_scatter_reduce_names_a_bad_reduce():
  with pytest.raises(ValueError, match="scatter_reduce reduce must be one of sum, prod, mean, amax, amin"):
    Tensor.zeros(2, 2).scatter_reduce(0, Tensor([[0, 1]]), Tensor([[1.0, 2.0]]), "max")


def test_scatter_reduce_sum_gradient_matches_finite_differences():
  x, src = rng.standard_normal((3, 4)), rng.standard_normal((2, 4))
  index = np.array([[0, 2, 2, 1], [0, 0, 1, 1]])
  weights = rng.standard_normal((3, 4))
  tx, ts = (Tensor(a, dtype=dtypes.float64, requires_grad=True) for a in (x, src))
  (tx.scatter_reduce(0, Tensor(index), ts, "sum") * Tensor(weights)).sum().backward()
  want_src = central_difference(
    lambda s: float((scatter_reduce_by_loop(x, 0, index, s, "sum", True) * weights).sum()), src)
  np.testing.assert_allclose(ts.grad.numpy(), want_src, rtol=1e-6, atol=1e-8)
  np.testing.assert_allclose(tx.grad.numpy(), weights, rtol=1e-12)


@pytest.mark.parametrize("n", [1, 7, 600])   # 600: longer than a block, cumulated block by block
def test_cumulative_products_and_minima_match_numpy(n):
  x = rng.uniform(0.9, 1.1, (3, n)).astype(np.float32)
  same(Tensor(x).cumprod(1), np.cumprod(x, 1), rtol=2e-5)
  same(Tensor(x).cummin(1), np.minimum.accumulate(x, 1))
  same(Tensor(x.T.copy()).cumprod(0), np.cumprod(x.T, 0), rtol=2e-5)
  ints = rng.integers(-3, 4, (n,)).astype(np.int32)
  same(Tensor(ints).cumprod(0), np.cumprod(ints))
  same(Tensor(ints).cummin(0), np.minimum.accumulate(ints))


def test_cumprod_gradient_matches_finite_differences():
  a = rng.uniform(0.5, 1.5, (2, 5))
  x = Tensor(a, dtype=dtypes.float64, requires_grad=True)
  x.cumprod(1).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), central_difference(lambda v: float(np.cumprod(v, 1).sum()), a),
                             rtol=1e-6)


@pytest.mark.parametrize("descending", [False, True])
def test_argsort_is_numpys_stable_order(descending):
  x = rng.integers(0, 4, (3, 9)).astype(np.float32)   # ties: equal values keep their order
  want = np.argsort(-x if descending else x, axis=1, kind="stable")
  same(Tensor(x).argsort(descending=descending), want.astype(np.int32))
  same(Tensor(x).argsort(0), np.argsort(x, axis=0, kind="stable").astype(np.int32))


def test_var_mean_logsigmoid_isfinite():
  x = rng.standard_normal((4, 6)).astype(np.float32)
  var, mean = Tensor(x).var_mean(1, correction=0)
  same(var, x.var(1), rtol=1e-5)
  same(mean, x.mean(1))
  wide = np.array([-200.0, -3.0, 0.0, 2.0, 200.0], np.float32)
  same(Tensor(wide).logsigmoid(), -np.logaddexp(0, -wide.astype(np.float64)), rtol=1e-5)
  special = np.array([1.0, np.inf, -np.inf, np.nan, 0.0], np.float32)
  same(Tensor(special).isfinite(), np.isfinite(special))


@pytest.mark.parametrize("formula, sizes, numpy_of", [
  ("b c (h w) -> b h w c", {"h": 4}, lambda a: a.reshape(2, 3, 4, 3).transpose(0, 2, 3, 1)),
  ("b c (h w) -> (b h) (w c)", {"w": 3}, lambda a: a.reshape(2, 3, 4, 3).transpose(0, 2, 3, 1).reshape(8, 9)),
  ("... w -> w ...", {}, lambda a: np.moveaxis(a, -1, 0)),
  ("b ... -> b (...)", {}, lambda a: a.reshape(2, 36)),
  ("b c w -> b 1 c w 1", {}, lambda a: a[:, None, :, :, None]),
  ("b c w -> b c w", {}, lambda a: a),
])
def test_rearrange_matches_numpy(formula, sizes, numpy_of):
  a = np.arange(72, dtype=np.float32).reshape(2, 3, 12)
  same(Tensor(a).rearrange(formula, **sizes), numpy_of(a))


@pytest.mark.parametrize("formula, sizes, message", [
  ("b c -> c b", {}, "the left side names 2 axes, the tensor has 3"),
  ("b c w -> b c", {}, "both sides must name the same axes"),
  ("b c (h w) -> b c h w", {}, "give the sizes of all but one of"),
  ("b c (h w) -> b c h w", {"h": 5}, "cannot split 12"),
  ("b c (h w) -> b c h w", {"h": 4, "w": 4}, "is 16, the axis is 12"),
  ("b c w", {}, "needs one '->'"),
  ("b (c (w)) -> b", {}, "parentheses cannot nest"),
  ("b c w -> b c w ...", {}, "'...' must be on both sides"),
  ("b b w -> b w", {}, "named twice"),
])
def test_rearrange_names_what_is_wrong(formula, sizes, message):
  with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
    Tensor.zeros(2, 3, 12).rearrange(formula, **sizes)


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid_matches_numpy(indexing):
  axes = [np.arange(3), np.arange(10, 12), np.arange(20, 24)]
  for count in (1, 2, 3):
    grids = Tensor(axes[0]).meshgrid(*(Tensor(a) for a in axes[1:count]), indexing=indexing)
    want = np.meshgrid(*axes[:count], indexing=indexing)
    assert len(grids) == count
    for got, ref in zip(grids, want): same(got, ref.astype(np.int32))


def test_masked_select_broadcasts_the_mask_and_may_select_nothing():
  x = rng.standard_normal((2, 3)).astype(np.float32)
  mask = np.array([[True, False, True], [False, False, True]])
  same(Tensor(x).masked_select(Tensor(mask)), x[mask])
  row = np.array([True, False, True])
  same(Tensor(x).masked_select(Tensor(row)), x[np.broadcast_to(row, x.shape)])
  nothing = Tensor(x).masked_select(Tensor(np.zeros((2, 3), bool)))
  assert nothing.shape == (0,) and nothing.numpy().size == 0


def test_to_underscore_moves_the_tensor_and_its_gradient_in_place():
  other = "PYTHON" if Tensor.zeros(1).device != "PYTHON" else DEVICES[-1]
  x = Tensor([1.0, 2.0], requires_grad=True)
  (x * x).sum().backward()
  same_object = x.to_(other)
  assert same_object is x and x.device == other and x.grad.device == other
  same(x, np.array([1.0, 2.0], np.float32))
  same(x.grad, np.array([2.0, 4.0], np.float32))


def test_rearrange_joins_the_axes_of_an_ellipsis_on_the_right():
  a = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
  same(Tensor(a).rearrange("b ... w -> b (... w)"), a.reshape(2, 60))
  same(Tensor(a).rearrange("b ... w -> w (...) b"), a.transpose(3, 1, 2, 0).reshape(5, 12, 2))
  with pytest.raises(ValueError, match="cannot be inside parentheses on the left"):
    Tensor(a).rearrange("b (...) -> b ...")


def test_squeeze_of_a_tuple_of_axes_drops_those_of_extent_one():
  x = np.zeros((1, 3, 1, 2), np.float32)
  assert Tensor(x).squeeze((0, 2)).shape == (3, 2)
  assert Tensor(x).squeeze((0, 1)).shape == (3, 1, 2)   # axis 1 has 3 elements: kept, as torch
  assert Tensor(x).squeeze((-2,)).shape == (1, 3, 2)


def test_rand_like_and_randn_like_are_methods_and_keep_shape_device_and_dtype():
  x = Tensor.zeros(3, 4, dtype=dtypes.float16)
  for like in (x.rand_like(), Tensor.rand_like(x), x.randn_like()):
    assert like.shape == (3, 4) and like.dtype == dtypes.float16 and like.device == x.device
  draws = Tensor.zeros(2000).rand_like().numpy()
  assert 0 <= draws.min() and draws.max() < 1 and abs(draws.mean() - 0.5) < 0.05
  normal = Tensor.zeros(4000).randn_like().numpy()
  assert abs(normal.mean()) < 0.1 and abs(normal.std() - 1) < 0.1


def test_an_empty_tensor_can_be_read():
  got = Tensor.empty(2, 3, dtype=dtypes.int32).numpy()
  assert got.shape == (2, 3) and got.dtype == np.int32


def test_randperm_is_a_permutation():
  Tensor.manual_seed(3)
  perm = Tensor.randperm(50).numpy()
  assert perm.dtype == np.int32 and sorted(perm.tolist()) == list(range(50)) and perm.tolist() != list(range(50))
  assert Tensor.randperm(5, dtype=dtypes.int64).dtype == dtypes.int64


def max_pool_by_loop(x, k, stride, padding):
  """torch's max_pool2d with indices: each window's first maximum and its position in the flattened input plane."""
  n, c, h, w = x.shape
  padded = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)), constant_values=-np.inf)
  oh, ow = (h + 2 * padding - k) // stride + 1, (w + 2 * padding - k) // stride + 1
  values, indices = np.zeros((n, c, oh, ow), x.dtype), np.zeros((n, c, oh, ow), np.int32)
  for b, ch, i, j in np.ndindex(n, c, oh, ow):
    window = padded[b, ch, i * stride:i * stride + k, j * stride:j * stride + k]
    di, dj = np.unravel_index(np.argmax(window), window.shape)
    values[b, ch, i, j] = window[di, dj]
    indices[b, ch, i, j] = (i * stride + di - padding) * w + (j * stride + dj - padding)
  return values, indices


@pytest.mark.parametrize("k, stride, padding", [(2, 2, 0), (3, 2, 1), (3, 1, 1)])
def test_max_pool_indices_and_max_unpool_match_torchs_definition(k, stride, padding):
  x = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
  want_values, want_indices = max_pool_by_loop(x, k, stride, padding)
  values, indices = Tensor(x).max_pool2d(k, stride=stride, padding=padding, return_indices=True)
  same(values, want_values)
  same(indices, want_indices)
  unpooled = np.zeros((2, 3, 7 * 6), np.float32)
  for b, ch in np.ndindex(2, 3):   # a position several windows picked holds the value once
    unpooled[b, ch][want_indices[b, ch].reshape(-1)] = want_values[b, ch].reshape(-1)
  got = values.max_unpool2d(indices, k, stride=stride, padding=padding, output_size=(2, 3, 7, 6))
  same(got, unpooled.reshape(2, 3, 7, 6))
  default = values.max_unpool2d(indices, k, stride=stride, padding=padding)
  assert default.shape[-2:] == tuple((n - 1) * stride - 2 * padding + k for n in values.shape[-2:])


def test_data_is_a_memoryview_of_the_shape_and_element_format():
  assert Tensor([1, 2]).data().tolist() == [1, 2] and Tensor([1, 2]).data().format == "i"
  assert Tensor([[1.5, 2.0]]).data().tolist() == [[1.5, 2.0]]
  assert Tensor(3).data().tolist() == 3 and Tensor(3).data().shape == ()
  assert Tensor([True, False]).data().tolist() == [True, False]
  assert Tensor.ones(0, 2).data().shape == (0, 2)
  assert bytes(Tensor([1], dtype=dtypes.uint16).data()) == b"\x01\x00"


def test_clip_takes_tensor_bounds():
  x, low, high = np.array([1.0, 2.0, 3.0], np.float32), np.array([2.0, 0.0, 2.5], np.float32), np.float32(2.5)
  same(Tensor(x).clip(min_=Tensor(low), max_=2.5), np.clip(x, low, high))   # a Tensor was compared with None
  same(Tensor(x).clamp(max_=Tensor(low)), np.minimum(x, low))
  with pytest.raises(RuntimeError, match="at least one"): Tensor(x).clip()


def test_float_floor_division_and_modulo_follow_python():
  # C has no float %: it failed to compile; float // gave the unrounded quotient
  a = np.array([7.5, -7.5, 3.0, -2.25, 5.0, 1e6 + 0.5], np.float32)
  b = np.array([2.0, 2.0, -2.0, 0.5, 0.0, 3.0], np.float32)
  with np.errstate(divide="ignore", invalid="ignore"):
    same(Tensor(a) % Tensor(b), np.mod(a, b))
    same(Tensor(a) // Tensor(b), np.floor_divide(a, b))
  same(7.5 % Tensor(b[:4]), np.mod(np.float32(7.5), b[:4]))
  same(Tensor(a[:4]) // 2, np.floor_divide(a[:4], np.float32(2)))
  same(abs(Tensor(a)), np.abs(a))
  assert (Tensor([7, -7]) // 2).tolist() == [3, -3] and (Tensor([7, -7]) % 3).tolist() == [1, 2]   # ints as before
  # remainder's derivatives: 1 for the dividend, -floor(a / b) for the divisor
  x, y = Tensor([7.5, -7.5], requires_grad=True), Tensor([2.0, 2.0], requires_grad=True)
  (x % y).sum().backward()
  assert x.grad.tolist() == [1.0, 1.0] and y.grad.tolist() == [-3.0, 4.0]


def test_conv2d_padding_by_name():
  # torch's 'same' puts the odd pad after (k=4: 1 before, 2 after; checked against torch.nn.functional.conv2d)
  x, w = rng.standard_normal((1, 2, 7, 6)).astype(np.float32), rng.standard_normal((3, 2, 4, 3)).astype(np.float32)
  explicit = Tensor(x).conv2d(Tensor(w), dilation=(1, 2), padding=(2, 2, 1, 2))
  same(Tensor(x).conv2d(Tensor(w), dilation=(1, 2), padding="same"), explicit.numpy())
  assert Tensor(x).conv2d(Tensor(w), padding="same").shape == (1, 3, 7, 6)
  same(Tensor(x).conv2d(Tensor(w), padding="valid"), Tensor(x).conv2d(Tensor(w)).numpy())
  from scheduler import nn
  assert nn.Conv1d(2, 3, 4, padding="same")(Tensor.ones(1, 2, 9)).shape == (1, 3, 9)
  with pytest.raises(ValueError, match="needs stride 1"): Tensor(x).conv2d(Tensor(w), padding="same", stride=2)
  with pytest.raises(ValueError, match="'same', 'valid'"): Tensor(x).conv2d(Tensor(w), padding="full")
