"""Outcome statuses are defined once (replay/statuses.py): reports order groups and merging picks statuses by the
same severity."""
from replay import statuses
from replay.report import Summary


def test_one_severity_order_for_reports_and_for_merging():
  assert set(statuses.SEVERITY_ORDER) == set(statuses.STATUSES)
  ranked = sorted(statuses.STATUSES, key=statuses.severity, reverse=True)
  assert ranked == list(statuses.SEVERITY_ORDER)
  assert statuses.more_serious("mismatch", "error") and statuses.more_serious("error", "changed")
  assert statuses.severity("no such status") == statuses.severity("error")


def test_report_groups_follow_the_severity_order():
  outcomes = [{"capture_id": i, "kind": "exec", "name": "n", "location": "l", "status": st, "diff": st, "reason": "",
               "metrics": "{}"}
              for i, st in enumerate(reversed(statuses.SEVERITY_ORDER))]
  summary = Summary({"id": 1}, outcomes)
  shown = [group[0]["status"] for group in summary.groups()]
  assert shown == [st for st in statuses.SEVERITY_ORDER if st != "same"]
