"""Issue 28, second part: sort and topk, scatter, unfold, einsum with an ellipsis, the acc_dtype argument of sum and
prod, a constant exponent tensor, UOp.index and the ShapeTracker helpers (real_size within the mask, consecutive,
axis_is_masked); against numpy or definitions on each device, gradients against finite differences (float64)."""
import numpy as np
import pytest
from scheduler import Tensor, dtypes, UOp, Ops
from scheduler.shape.shapetracker import ShapeTracker
from scripts.fuzz.reference import central_difference

pytestmark = pytest.mark.usefixtures("each_device")
rng = np.random.default_rng(2828)
A = rng.standard_normal((4, 6)).astype(np.float32)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_matches_numpy_values_and_stable_indices(dim, descending):
  values, indices = Tensor(A).sort(dim, descending=descending)
  order = np.argsort(-A if descending else A, axis=dim, kind="stable")
  np.testing.assert_array_equal(indices.numpy(), order)
  np.testing.assert_array_equal(values.numpy(), np.take_along_axis(A, order, axis=dim))
  assert indices.dtype == dtypes.int32 and values.dtype == dtypes.float32


def test_sort_keeps_equal_values_in_order_and_sorts_ints():
  ties = np.array([[3, 1, 3, 2, 1, 3]], np.int32)
  values, indices = Tensor(ties).sort()
  np.testing.assert_array_equal(indices.numpy(), np.argsort(ties, kind="stable"))
  np.testing.assert_array_equal(values.numpy(), np.sort(ties))
  values, indices = Tensor(np.array([2.0, -np.inf, np.inf, 0.5], np.float32)).sort(descending=True)
  np.testing.assert_array_equal(values.numpy(), [np.inf, 2.0, 0.5, -np.inf])
  np.testing.assert_array_equal(indices.numpy(), [2, 0, 3, 1])


@pytest.mark.parametrize("largest", [True, False])
def test_topk_is_the_head_of_the_sort(largest):
  values, indices = Tensor(A).topk(3, dim=1, largest=largest)
  order = np.argsort(-A if largest else A, axis=1, kind="stable")[:, :3]
  np.testing.assert_array_equal(indices.numpy(), order)
  np.testing.assert_array_equal(values.numpy(), np.take_along_axis(A, order, axis=1))
  with pytest.raises(ValueError, match="out of range"): Tensor(A).topk(7, dim=1)


def test_sort_gradient_routes_to_the_sorted_positions():
  a = rng.standard_normal((3, 5))
  weights = rng.standard_normal((3, 5))
  x = Tensor(a, requires_grad=True)
  (x.sort(1)[0] * Tensor(weights)).sum().backward()
  want = central_difference(lambda v: float((np.sort(v, 1) * weights).sum()), a)
  np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-5, atol=1e-6)


def test_scatter_matches_a_loop_with_replace_add_and_multiply():
  base = rng.standard_normal((3, 5)).astype(np.float32)
  index = np.array([[0, 1, 2, 0], [2, 0, 1, 1]], np.int32)        # dim 0: distinct targets per column
  src = rng.standard_normal((2, 5)).astype(np.float32)
  for reduce in (None, "add", "multiply"):
    want = base.copy()
    for i in range(index.shape[0]):
      for j in range(index.shape[1]):
        if reduce is None: want[index[i, j], j] = src[i, j]
        elif reduce == "add": want[index[i, j], j] += src[i, j]
        else: want[index[i, j], j] *= src[i, j]
    got = Tensor(base).scatter(0, Tensor(index), Tensor(src), reduce=reduce).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
  along_1 = Tensor(base).scatter(1, Tensor(np.array([[4, 0], [1, 2]], np.int32)), 9.0).numpy()
  want = base.copy(); want[0, 4] = want[0, 0] = want[1, 1] = want[1, 2] = 9.0
  np.testing.assert_array_equal(along_1, want)
  with pytest.raises(ValueError, match="reduce"): Tensor(base).scatter(0, Tensor(index), 1.0, reduce="max")


@pytest.mark.parametrize("dim, size, step", [(0, 2, 1), (0, 3, 2), (1, 4, 1), (-1, 6, 3), (1, 1, 5)])
def test_unfold_matches_sliding_windows(dim, size, step):
  got = Tensor(A).unfold(dim, size, step).numpy()
  windows = np.lib.stride_tricks.sliding_window_view(A, size, axis=dim % 2)
  windows = np.take(windows, range(0, windows.shape[dim % 2], step), axis=dim % 2)
  np.testing.assert_array_equal(got, windows)
  with pytest.raises(RuntimeError, match="does not fit"): Tensor(A).unfold(0, 5, 1)


def test_einsum_with_an_ellipsis_matches_numpy():
  x, y = rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal((2, 4, 5)).astype(np.float32)
  for formula, operands in (("...ij,...jk->...ik", (x, y)), ("...ij->...", (x,)), ("i...->...", (x,)),
                            ("...j,...j", (x, x)), ("b...,b...->b...", (x, x))):
    got = Tensor.einsum(formula, *[Tensor(o) for o in operands]).numpy()
    np.testing.assert_allclose(got, np.einsum(formula, *operands), rtol=1e-5, atol=1e-5)


def test_acc_dtype_accumulates_and_returns_in_that_dtype():
  half = Tensor(np.full(4096, 0.1, np.float16))
  assert half.sum().dtype == dtypes.float16 and half.sum(acc_dtype=dtypes.float32).dtype == dtypes.float32
  assert abs(half.sum(acc_dtype=dtypes.float32).item() - 409.6) < 0.5
  ints = Tensor(np.arange(1, 6, dtype=np.int8))
  assert ints.prod(acc_dtype=dtypes.int32).item() == 120 and ints.prod(acc_dtype=dtypes.int32).dtype == dtypes.int32


def test_a_constant_exponent_tensor_specializes_and_zero_needs_no_kernel():
  v = Tensor(A).realize()
  zero = v ** Tensor(0.0)
  assert len(zero.schedule()) == 0
  np.testing.assert_array_equal(zero.numpy(), np.ones_like(A))
  np.testing.assert_allclose((v ** Tensor(2.0)).numpy(), A ** 2, rtol=1e-6)
  np.testing.assert_allclose((v ** Tensor.full((4, 6), 3.0)).numpy(), A ** 3, rtol=1e-5)


def test_uop_index_builds_an_index_node():
  buf = UOp.new_buffer("CPU", 16, dtypes.float32)
  i = UOp.const(dtypes.int32, 3)
  node = buf.index(i)
  assert node.op is Ops.INDEX and node.src == (buf, i) and node.dtype == buf.dtype
  gated = buf.index(i, i < 8)
  assert gated.src[2].op is Ops.CMPLT


def test_shapetracker_helpers_read_only_inside_the_mask():
  padded = ShapeTracker.from_shape((4, 4)).pad(((1, 1), (0, 0)))
  assert padded.real_size() == 16 and padded.real_strides() == (None, 1) and padded.real_strides(True) == (4, 1)
  assert padded.axis_is_masked(0) and not padded.axis_is_masked(1)
  assert ShapeTracker.from_shape((4,)).pad(((1, 1),)).real_size() == 4
  assert ShapeTracker.from_shape((10,)).shrink(((2, 5),)).real_size() == 5
  assert ShapeTracker.from_shape((4, 4)).shrink(((1, 3), (0, 4))).consecutive
  assert not ShapeTracker.from_shape((4, 4)).permute((1, 0)).consecutive and not padded.consecutive
  assert ShapeTracker.from_shape((3, 0)).real_size() == 0
