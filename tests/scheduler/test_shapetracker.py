"""ShapeTracker against numpy: random chains of movement ops on np.arange, evaluated through the
tracker's index and valid expressions, read the same elements (padding reads 0)."""
import numpy as np
from hypothesis import given, settings, strategies as st
from scheduler.shape.shapetracker import ShapeTracker
from runtimes.python import indexed_view


def apply_np(x: np.ndarray, op: str, arg):
  if op == "reshape": return x.reshape(arg)
  if op == "permute": return x.transpose(arg)
  if op == "expand": return np.broadcast_to(x, arg)
  if op == "pad": return np.pad(x, arg)
  if op == "shrink": return x[tuple(slice(b, e) for b, e in arg)]
  if op == "flip": return np.flip(x, tuple(i for i, f in enumerate(arg) if f)) if any(arg) else x
  raise ValueError(op)


@st.composite
def movement_chain(draw, start=None):
  shape = start if start is not None else tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
  ops, cur = [], shape
  for _ in range(draw(st.integers(1, 6))):
    kind = draw(st.sampled_from(["reshape", "permute", "expand", "pad", "shrink", "flip"]))
    if kind == "reshape":
      n = int(np.prod(cur))
      divisors = [d for d in range(1, n + 1) if n % d == 0]
      a = draw(st.sampled_from(divisors))
      arg = (a, n // a) if draw(st.booleans()) else (n,)
      if draw(st.booleans()) and len(arg) == 2: arg = (arg[0], 1, arg[1])
    elif kind == "permute": arg = tuple(draw(st.permutations(range(len(cur)))))
    elif kind == "expand":
      if 1 not in cur: continue
      arg = tuple(draw(st.integers(1, 3)) if s == 1 else s for s in cur)
    elif kind == "pad": arg = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in cur)
    elif kind == "shrink":
      arg = []
      for s in cur:
        b = draw(st.integers(0, s - 1))
        arg.append((b, draw(st.integers(b + 1, s))))
      arg = tuple(arg)
    else: arg = tuple(draw(st.booleans()) for _ in cur)
    ops.append((kind, arg))
    cur = apply_np(np.zeros(cur), kind, arg).shape
  return shape, ops


def check(shape, ops):
  x = np.arange(1, int(np.prod(shape)) + 1).reshape(shape)  # 1-based so that padding (0) is visible
  st_ = ShapeTracker.from_shape(shape)
  for kind, arg in ops:
    x = apply_np(x, kind, arg)
    st_ = getattr(st_, kind)(arg)
  assert st_.shape == x.shape
  flat = np.arange(1, int(np.prod(shape)) + 1)
  _, idx, valid = indexed_view(st_, {})
  got = np.where(valid, flat[np.where(valid, idx, 0)], 0)
  np.testing.assert_array_equal(got, x)
  return st_


@settings(max_examples=300, deadline=None)
@given(movement_chain())
def test_movement_chains_match_numpy(chain):
  check(*chain)


@settings(max_examples=200, deadline=None)
@given(movement_chain(), st.data())
def test_merged_views_read_the_same(a, data):
  """st1 + st2 (view merging) reads what applying st2's movement ops to st1's output reads."""
  st1 = check(*a)
  ops2 = data.draw(movement_chain(start=st1.shape))[1]
  base = np.arange(1, int(np.prod(a[0])) + 1)
  _, idx1, valid1 = indexed_view(st1, {})
  expected = np.where(valid1, base[np.where(valid1, idx1, 0)], 0)
  st2 = ShapeTracker.from_shape(st1.shape)
  for kind, arg in ops2:
    expected = apply_np(expected, kind, arg)
    st2 = getattr(st2, kind)(arg)
  merged = st1 + st2
  assert merged.shape == expected.shape
  _, idx, valid = indexed_view(merged, {})
  np.testing.assert_array_equal(np.where(valid, base[np.where(valid, idx, 0)], 0), expected)


def test_permute_then_flatten_keeps_two_views():
  assert len(ShapeTracker.from_shape((4, 4)).permute((1, 0)).reshape((16,)).views) == 2


def test_reshape_of_contiguous_keeps_one_view():
  st_ = ShapeTracker.from_shape((4, 4)).reshape((2, 8)).reshape((16,)).reshape((8, 2))
  assert len(st_.views) == 1 and st_.contiguous


def test_pad_then_shrink_back_is_contiguous():
  assert ShapeTracker.from_shape((4, 4)).pad(((1, 1), (1, 1))).shrink(((1, 5), (1, 5))).contiguous


def test_invert_undoes_a_permute():
  st_ = ShapeTracker.from_shape((2, 3, 4)).permute((2, 0, 1))
  inv = st_.invert((2, 3, 4))
  assert inv is not None and (st_ + inv).contiguous


def test_real_strides_and_unit_stride_axes():
  st_ = ShapeTracker.from_shape((4, 6)).permute((1, 0))
  assert st_.real_strides() == (1, 6)
  assert st_.unit_stride_axes() == [0]
  padded = ShapeTracker.from_shape((4,)).pad(((1, 1),))
  assert padded.real_strides() == (None,) and padded.real_strides(ignore_valid=True) == (1,)


def test_real_size_of_an_expand():
  assert ShapeTracker.from_shape((4, 1)).expand((4, 5)).real_size() == 4
