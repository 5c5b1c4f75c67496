"""The defects of the reference scheduler (SCHEDULER.md D1-D10), each checked against numpy: where the
reference computes a wrong value we compute the right one; where it crashes or guesses we schedule
correctly or raise a clear error naming the problem.

Kernel counts that differ from the reference here are only for programs the reference gets wrong:
D3 (FUSE_ARANGE keeps requested outputs and CONTIGUOUS realized: 2 and 2 kernels instead of a failure)
and D4 (the arange feeding a double reduce stays a kernel of its own).
"""
import pathlib
import numpy as np
import pytest
from scheduler import Tensor, Context, Variable, dtypes
from scheduler.realize import run_schedule


def realize_all(*tensors):
  sched, var_vals = tensors[0].schedule_with_vars(*tensors[1:])
  run_schedule(sched, var_vals)
  return sched


def test_d1_fuse_arange_across_an_axis_splitting_reshape():
  with Context(FUSE_ARANGE=1):
    out = Tensor.arange(16).reshape(4, 4).float().sum(1)
    realize_all(out)
  np.testing.assert_allclose(out.numpy(), np.arange(16).reshape(4, 4).sum(1))


def test_d2_fuse_conv_bw_double_reduce_through_a_reshape():
  a_np = np.arange(64, dtype=np.float32).reshape(16, 4)
  a = Tensor(a_np).realize()
  with Context(FUSE_CONV_BW=1):
    out = a.sum(1).reshape(4, 4).sum(1)
    out2 = Tensor.arange(1, 17).reshape(4, 4).sum(1)
    realize_all(out, out2)
  np.testing.assert_allclose(out.numpy(), a_np.sum(1).reshape(4, 4).sum(1))
  np.testing.assert_allclose(out2.numpy(), np.arange(1, 17).reshape(4, 4).sum(1))


def test_d3_fuse_arange_keeps_outputs_and_contiguous_realized():
  with Context(FUSE_ARANGE=1):
    first, doubled = Tensor.arange(10), Tensor.arange(10) * 2
    assert len(realize_all(first, doubled)) == 2
    plus_one = Tensor.arange(10).contiguous() + 1
    assert len(realize_all(plus_one)) == 2
  np.testing.assert_array_equal(first.numpy(), np.arange(10))
  np.testing.assert_array_equal(doubled.numpy(), np.arange(10) * 2)
  np.testing.assert_array_equal(plus_one.numpy(), np.arange(10) + 1)


def test_d4_fuse_arange_with_fuse_conv_bw():
  with Context(FUSE_ARANGE=1, FUSE_CONV_BW=1):
    out = Tensor.arange(1, 17).reshape(4, 4).sum(1)
    realize_all(out)
  np.testing.assert_array_equal(out.numpy(), np.arange(1, 17).reshape(4, 4).sum(1))


@pytest.mark.parametrize("reader_first", [True, False])
def test_d5_a_reader_of_the_old_value_runs_before_the_assign(reader_first):
  a, b = Tensor.ones(4).contiguous().realize(), Tensor.full((4,), 2.0).contiguous().realize()
  k = (a * 3).contiguous()
  u = k + b
  b.assign(Tensor.full((4,), 5.0))
  realize_all(u, b) if reader_first else realize_all(b, u)
  np.testing.assert_array_equal(u.numpy(), np.full(4, 5.0))
  np.testing.assert_array_equal(b.numpy(), np.full(4, 5.0))


def test_d6_self_assign_through_the_same_view_is_allowed():
  a = Tensor(np.arange(16, dtype=np.float32).reshape(4, 4)).realize()
  b = a[1:3]
  b.assign(b + 1)
  realize_all(b)
  expected = np.arange(16, dtype=np.float32).reshape(4, 4)
  expected[1:3] += 1
  np.testing.assert_array_equal(a.numpy(), expected)


def test_d6_self_assign_from_an_overlapping_other_view_is_rejected():
  a = Tensor(np.arange(16, dtype=np.float32).reshape(4, 4)).realize()
  b = a[1:3]
  with pytest.raises(RuntimeError, match="self operand of augmented assign must be contiguous"):
    b.assign(a[0:2] + 1).schedule()


def test_d6_self_assign_from_a_disjoint_view_is_allowed():
  a = Tensor(np.arange(16, dtype=np.float32).reshape(4, 4)).realize()
  a[0:2].assign(a[2:4] * 10).realize()
  expected = np.arange(16, dtype=np.float32).reshape(4, 4)
  expected[0:2] = expected[2:4] * 10
  np.testing.assert_array_equal(a.numpy(), expected)


def test_d7_strided_disk_views_are_a_clear_error(tmp_path: pathlib.Path):
  path = tmp_path / "bytes.bin"
  path.write_bytes(bytes(range(64)))
  t = Tensor.empty(64, dtype=dtypes.uint8, device=f"DISK:{path}")
  np.testing.assert_array_equal(t[16:32].to("CPU").numpy(), np.arange(16, 32))
  with pytest.raises(RuntimeError, match="DISK"): t[::2].to("CPU").realize()
  with pytest.raises(RuntimeError, match="DISK"): t.reshape(4, 16)[:, 1].to("CPU").realize()


def test_d8_reading_a_partial_assign_in_the_same_schedule():
  a = Tensor.zeros(4, 4).contiguous().realize()
  b = a[1:3]
  b.assign(Tensor.ones(2, 4) * 7)
  out = b + 1
  realize_all(out)
  np.testing.assert_array_equal(out.numpy(), np.full((2, 4), 8.0))
  expected = np.zeros((4, 4))
  expected[1:3] = 7
  np.testing.assert_array_equal(a.numpy(), expected)


def test_d9_one_variable_bound_to_two_values_is_an_error():
  a = Tensor.arange(10).float().realize()
  i = Variable("i", 1, 10)
  first, second = a.shrink(((0, i.bind(3)),)).sum(), a.shrink(((0, i.bind(5)),)).sum()
  with pytest.raises(RuntimeError, match="'i' is bound to both 3 and 5"): first.schedule_with_vars(second)


def test_d10_swapping_assigns_is_a_cycle_error():
  a, b = Tensor.ones(4).contiguous().realize(), Tensor.full((4,), 2.0).contiguous().realize()
  a_old, b_old = a.reshape(2, 2).reshape(4), b.reshape(2, 2).reshape(4)
  a.assign(b_old + 0.5)
  b.assign(a_old + 0.5)
  with pytest.raises(RuntimeError, match="cycle detected in graph"): a.schedule(b)
