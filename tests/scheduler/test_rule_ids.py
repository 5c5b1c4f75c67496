"""Scheduling decisions cite the rule of SCHEDULER.md that made them: in the rewrite trace (what `replay show --why`
prints) for the worked examples W23-W28 and for S41, and in the errors of S59 and S74."""
import numpy as np
import pytest
from scheduler import Tensor, Context, UOp, Variable, dtypes
from replay.replayers import trace_schedule


def rules(*tensors: Tensor) -> list[str]:
  return [e["rule"] for e in trace_schedule({"graph": UOp.sink(*[t.lazydata for t in tensors])}) if e["rule"]]


def matrix() -> Tensor: return Tensor(np.arange(16, dtype=np.float32).reshape(4, 4)).realize()


def test_w23_copies_cite_s19_s28_and_the_copy_source_s36():
  assert "S19 (copy of a constant)" in rules(Tensor.full((4, 4), 3.0).to("PYTHON"))
  assert "S28 (copy of a view)" in rules(matrix()[1:3].to("PYTHON"))
  assert "S36 (copy source)" in rules((matrix() + 1).to("PYTHON"))


def test_w24_a_split_reduce_cites_s18_and_its_forced_first_stage_s44():
  found = rules(Tensor.ones(65536).contiguous().sum())
  assert "S18 (split reduce)" in found and "S44 (forced)" in found
  with Context(SPLIT_REDUCEOP=0): assert "S18 (split reduce)" not in rules(Tensor.ones(65536).contiguous().sum())


def test_w25_a_bound_variable_broadcast_is_realized_by_s39():
  v = Variable("i", 1, 10).bind(3)
  assert "S39 (realize before expand)" in rules(Tensor.arange(10).float().realize() + v)


def test_w26_reorder_then_expand_cites_s27_or_s29_then_s39():
  cast = rules(matrix().reshape(4, 1, 4).expand(4, 3, 4).cast(dtypes.int32) + 1)
  unary = rules(matrix().reshape(4, 1, 4).expand(4, 3, 4).sqrt() + 1)
  assert cast.index("S27 (narrow cast before expand)") < cast.index("S39 (realize before expand)")
  assert unary.index("S29 (unary before expand)") < unary.index("S39 (realize before expand)")


def test_w27_a_disk_bitcast_is_a_byte_view_by_s25(tmp_path):
  path = tmp_path / "t.disk"
  path.write_bytes(bytes(range(64)))
  assert "S25 (DISK byte view)" in rules(Tensor.empty(64, dtype=dtypes.uint8,
                                                      device=f"DISK:{path}").bitcast(dtypes.float32).to("CPU"))


def test_w28_the_assign_conflict_cites_s45():
  a, b = matrix(), Tensor(np.ones(4, np.float32)).realize()
  b.assign(a.sum(0))
  a.assign(a * 2)
  assert rules(b, a)[-1] == "S45 (assign conflict)"


def test_s41_dont_group_reduces_skips_every_grouping_decision():
  x = matrix()
  assert "S44 (forced)" in rules(x.sum(1) + x.max(1))
  with Context(DONT_GROUP_REDUCES=1):
    assert not [r for r in rules(x.sum(1) + x.max(1)) if r[:3] in ("S44", "S45", "S46")]


def test_s59_reading_old_and_new_contents_is_an_error_that_names_the_rule():
  a = Tensor.ones(4).contiguous().realize()
  a_old = a.reshape(2, 2).reshape(4)
  a.assign(a_old * 2)
  with pytest.raises(RuntimeError, match=r"cycle detected in graph.*\(S59\)"): (a + a_old).schedule()


def test_s74_a_kernel_over_two_devices_is_an_error_that_names_the_rule():
  from scheduler.schedule import create_schedule_with_vars
  a = Tensor(np.ones(4, np.float32), device="CPU").realize()
  b = Tensor(np.ones(4, np.float32), device="PYTHON").realize()
  mixed = UOp.sink(a.lazydata + b.lazydata)
  with pytest.raises(RuntimeError, match=r"same device.*\(S74\)"): create_schedule_with_vars(mixed)
