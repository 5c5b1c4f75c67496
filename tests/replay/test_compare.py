"""Schedule diffs per kernel: kernels matched by structure then position, summaries that say what happened to
each kernel, and labels that keep unchanged subtrees unchanged."""
import numpy as np
from scheduler import Tensor
from scheduler.helpers import Context
from replay.compare import ast_text, compare_schedule, kernel_changes


def schedule_of(build, **flags) -> list:
  with Context(**flags): return [si.ast for si in build().schedule()]


def _fusable():
  a = Tensor(np.arange(4, dtype=np.float32)).realize()
  out = (a * 2 + 1).reshape(4, 1).expand(4, 4).contiguous()
  return (out.sum(0) + Tensor.ones(4).contiguous()).sum()


def test_equal_schedules_have_no_changes_and_a_fusion_change_names_the_kernels():
  base, captured = schedule_of(_fusable), schedule_of(_fusable, DONT_REALIZE_EXPAND=1)
  assert kernel_changes(base, base) == ([], [])
  summary, diffs = kernel_changes(base, captured)
  assert len(captured) < len(base) and summary and len(diffs) == len(summary)
  assert any("removed" in line or "fused into" in line for line in summary), summary
  result = compare_schedule({"asts": captured, "var_vals": {}}, {"asts": base, "var_vals": {}})
  assert result.status == "changed" and result.diff.startswith(f"schedule: {len(base)} kernels in the base, "
                                                               f"{len(captured)} captured")


def test_a_kernel_added_at_the_end_is_reported_as_added_and_the_rest_is_untouched():
  base = schedule_of(lambda: Tensor.ones(8).contiguous() + 1)
  extra = schedule_of(lambda: (Tensor.ones(4, 4).contiguous().sum(1)))
  summary, diffs = kernel_changes(base, base + extra)
  span = f"kernels {len(base)}-{len(base) + len(extra) - 1}" if len(extra) > 1 else f"kernel {len(base)}"
  assert len(summary) == 1 and summary[0].startswith(f"{span} (") and summary[0].endswith("r_4_4) added"), summary
  assert diffs[0].count("\n+") >= 3 and "\n-" not in diffs[0].split("\n", 2)[2]
  summary, _ = kernel_changes(base + extra, base)
  assert len(summary) == 1 and summary[0].startswith(f"{span} of the base (") and summary[0].endswith("removed")


def test_labels_depend_on_content_so_a_shared_subtree_reads_the_same_in_both_schedules():
  def shared(scale):
    a = Tensor(np.arange(16, dtype=np.float32).reshape(4, 4)).realize()
    x = a.exp2()
    return (x * x + x * scale).contiguous()
  one, two = schedule_of(lambda: shared(2.0))[-1], schedule_of(lambda: shared(3.0))[-1]
  t1, t2 = ast_text(one), ast_text(two)
  assert "#" in t1 and "^" in t1
  refs1 = {line.strip() for line in t1.splitlines() if line.strip().startswith("^")}
  refs2 = {line.strip() for line in t2.splitlines() if line.strip().startswith("^")}
  assert refs1 & refs2   # the shared exp2(load) subtree has one label in both
  assert ast_text(one) == t1   # deterministic
