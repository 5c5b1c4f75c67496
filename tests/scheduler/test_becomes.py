"""Issue 28: after `schedule()`, tensors point at the buffers the schedule will write (the reference's "become"); a
read that needs such a buffer before its schedule ran is an error that says so, never a value computed from
memory nobody wrote."""
import numpy as np
import pytest
from scheduler import Tensor
from scheduler.realize import run_schedule

pytestmark = pytest.mark.usefixtures("each_device")


def graph():
  x = Tensor(np.arange(4, dtype=np.float32))
  a = x + 1
  return x, a, a * 2, a + 3


def test_after_the_schedule_runs_every_tensor_of_the_graph_reads_its_value():
  x, a, b, c = graph()
  schedule = b.schedule()
  run_schedule(schedule)
  expect = np.arange(4, dtype=np.float32) + 1
  np.testing.assert_array_equal(b.numpy(), expect * 2)
  np.testing.assert_array_equal(a.numpy(), expect)
  np.testing.assert_array_equal(c.numpy(), expect + 3)
  assert b.lazydata.is_realized


@pytest.mark.parametrize("read", ["b", "a", "c"])
def test_reading_before_the_schedule_runs_is_an_error_not_a_wrong_value(read):
  x, a, b, c = graph()
  schedule = b.schedule()
  with pytest.raises(RuntimeError, match="has not run yet"): {"a": a, "b": b, "c": c}[read].numpy()
  run_schedule(schedule)   # then everything reads right
  np.testing.assert_array_equal(c.numpy(), np.arange(4, dtype=np.float32) + 4)


def test_schedules_made_first_and_run_in_order_are_fine():
  x = Tensor(np.ones(4, np.float32))
  first = (x * 5).schedule()
  y = x * 7
  second = (y + 1).schedule()
  run_schedule(first)
  run_schedule(second)
  np.testing.assert_array_equal(y.numpy(), np.full(4, 7.0, np.float32))
  with pytest.raises(RuntimeError, match="has not run yet"):
    z = Tensor(np.ones(4, np.float32)) + 1
    pending = (z * 3).schedule()
    run_schedule((z - 1).schedule())   # reads z's buffer, which `pending` writes
  run_schedule(pending)


def test_a_draw_after_an_unrun_schedule_of_a_draw_names_the_generator_and_manual_seed_restarts_it(each_device):
  Tensor.manual_seed(3)
  Tensor.rand(3).schedule()   # the device's first draw makes its generator's counter (copied in on CPU); never run
  if each_device == "CPU":
    named = r"reads the random generator's counter \(Tensor.manual_seed\(\) restarts .*\), .* not run yet"
    with pytest.raises(RuntimeError, match=named): Tensor.rand(3).numpy()
  Tensor.manual_seed(11)
  first = Tensor.rand(4).numpy()
  Tensor.manual_seed(11)
  np.testing.assert_array_equal(Tensor.rand(4).numpy(), first)
  assert ((first >= 0) & (first < 1)).all()
