"""Sequence alignment of two runs' captures (replay/alignment.py): pairs follow signatures, not positions."""
from replay.alignment import align


def caps(*specs, start=1, location="step 0"):
  """Captures from "kind:name" specs, numbered from `start`, at one location."""
  out = []
  for i, spec in enumerate(specs):
    kind, name = spec.split(":", 1)
    out.append({"id": start + i, "kind": kind, "name": name, "location": location})
  return out


def names(pairs):
  return [(a and a["name"], b and b["name"]) for a, b in pairs]


def test_identical_runs_pair_one_to_one():
  a = caps("schedule:2 kernels", "kernel:E_4", "kernel:r_4", "exec:realize float[4]")
  b = caps("schedule:2 kernels", "kernel:E_4", "kernel:r_4", "exec:realize float[4]", start=10)
  assert [(x["id"], y["id"]) for x, y in align(a, b)] == [(1, 10), (2, 11), (3, 12), (4, 13)]


def test_an_added_realize_leaves_the_later_captures_paired_with_their_counterparts():
  base = caps("schedule:3 kernels", "exec:realize float[]", "schedule:1 kernels", "exec:realize float[2, 2, 5, 5]",
              start=10)
  head = caps("schedule:2 kernels", "exec:realize float[4]", "schedule:2 kernels", "exec:realize float[]",
              "schedule:1 kernels", "exec:realize float[2, 2, 5, 5]")
  pairs = names(align(head, base))
  assert ("realize float[]", "realize float[]") in pairs and ("realize float[2, 2, 5, 5]",
                                                              "realize float[2, 2, 5, 5]") in pairs
  assert ("realize float[4]", None) in pairs
  assert sum(1 for a, b in pairs if a is None or b is None) == 2   # one schedule, one realize are added
  assert len([p for p in pairs if p[0] == "2 kernels" and p[1] == "3 kernels"]) == 1   # a changed schedule still pairs


def test_a_changed_kernel_pairs_with_its_old_self_and_a_dropped_one_is_removed():
  base = caps("schedule:3 kernels", "kernel:E_4", "kernel:r_8", "kernel:E_2", "exec:realize float[2]", start=10)
  head = caps("schedule:2 kernels", "kernel:E_4", "kernel:r_8_2", "exec:realize float[2]")
  pairs = names(align(head, base))
  assert ("r_8_2", "r_8") in pairs and (None, "E_2") in pairs and ("E_4", "E_4") in pairs
  assert ("realize float[2]", "realize float[2]") in pairs


def test_a_dtype_change_still_pairs_the_realize_so_its_outputs_are_compared():
  pairs = names(align(caps("exec:realize half[4]"), caps("exec:realize float[4]", start=5)))
  assert pairs == [("realize half[4]", "realize float[4]")]


def test_locations_align_separately_and_every_capture_appears_once():
  head = caps("exec:realize float[1]", location="a") + caps("exec:realize float[1]", "exec:realize float[1]", start=2,
                                                            location="b")
  base = caps("exec:realize float[1]", "exec:realize float[1]", start=10,
              location="b") + caps("exec:realize float[9]", start=12, location="c")
  pairs = align(head, base)
  assert sorted(a["id"] for a, _ in pairs if a) == [1, 2, 3] and sorted(b["id"] for _, b in pairs if b) == [10, 11, 12]
  by_head = {a["id"]: b and b["id"] for a, b in pairs if a}
  assert by_head == {1: None, 2: 10, 3: 11}
