"""Scale-out: `run --shard I/N` replays a deterministic, disjoint part of the selection, and `replay merge` joins the
shards (databases or JSON reports) into one report with one verdict."""
import json, shutil
import pytest
from tests.replay.conftest import cli, capture_workloads
from replay import shards
from scheduler.device import find_c_compiler

pytestmark = pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler")


def test_shards_are_deterministic_disjoint_and_cover_the_selection():
  captures = [{"id": i} for i in (7, 3, 9, 1, 4, 12, 5)]
  parts = [shards.select(captures, i, 3) for i in (1, 2, 3)]
  ids = [c["id"] for part in parts for c in part]
  assert sorted(ids) == sorted(c["id"] for c in captures) and len(set(ids)) == len(ids)
  assert [len(p) for p in parts] == [3, 2, 2]
  assert shards.select(list(reversed(captures)), 2, 3) == parts[1]


@pytest.mark.parametrize("spec", ["0/3", "4/3", "1-3", "", "a/b", "1/0"])
def test_a_bad_shard_spec_is_a_usage_error(spec):
  with pytest.raises(shards.ShardError): shards.parse(spec)


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
  db = tmp_path_factory.mktemp("shards") / "r.db"
  capture_workloads(db, "ref_add_const", "ref_matmul_bias_relu", "ref_sum_axis0")
  return db


def test_shards_replayed_apart_merge_into_the_whole_replay(captured, tmp_path):
  whole = cli("run", "--format", "json", db=captured)
  assert whole.returncode == 0, whole.stdout + whole.stderr
  full = json.loads(whole.stdout)
  reports, dbs = [], []
  for i in (1, 2, 3):   # each shard on its own copy of the database, as separate machines would
    db = tmp_path / f"shard{i}.db"
    shutil.copy(captured, db)
    proc = cli("run", "--shard", f"{i}/3", "--format", "json", "--output", str(tmp_path / f"shard{i}.json"), db=db)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    reports.append(tmp_path / f"shard{i}.json"); dbs.append(db)
    assert json.loads(proc.stdout)["replay"]["shard"] == f"{i}/3"
  parts = [{o["capture_id"] for o in json.loads(p.read_text())["outcomes"]} for p in reports]
  assert set.union(*parts) == {o["capture_id"] for o in full["outcomes"]} and sum(map(len,
                                                                                      parts)) == len(full["outcomes"])
  for inputs in (reports, dbs[::-1], [reports[0], dbs[1], reports[2]]):
    merged = cli("merge", *map(str, inputs), "--format", "json", db=captured)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    doc = json.loads(merged.stdout)
    assert doc["totals"] == full["totals"] and doc["verdict"] == full["verdict"] and doc["exit_code"] == 0
    assert doc["replay"]["shard"] == "3 of 3 shards" and doc["replay"]["selected"] == len(full["outcomes"])
  text = cli("merge", *map(str, reports), db=captured)
  assert (text.returncode == 0 and text.stdout.startswith("merged replay of 3 of 3 shards: ")
          and "OK: all" in text.stdout)


def test_merge_fails_on_a_missing_shard_and_a_mismatch_in_any_shard(captured, tmp_path):
  reports = []
  for i in (1, 2):
    db = tmp_path / f"s{i}.db"
    shutil.copy(captured, db)
    out = tmp_path / f"s{i}.json"
    assert cli("run", "--shard", f"{i}/3", "--format", "json", "--output", str(out), db=db).returncode == 0
    reports.append(out)
  proc = cli("merge", *map(str, reports))
  assert proc.returncode == 4 and "INCOMPLETE: shard 3 missing" in proc.stdout, proc.stdout
  doc = json.loads(reports[1].read_text())
  doc["outcomes"][0]["status"] = "mismatch"
  reports[1].write_text(json.dumps(doc))
  db = tmp_path / "s3.db"
  shutil.copy(captured, db)
  assert cli("run", "--shard", "3/3", db=db).returncode == 0
  proc = cli("merge", *map(str, reports), str(db))
  assert proc.returncode == 3 and "FAIL: 1 of" in proc.stdout, proc.stdout


def test_merge_refuses_results_that_are_not_shards_of_one_replay(captured, tmp_path):
  one, other = tmp_path / "a.json", tmp_path / "b.json"
  assert cli("run", "--shard", "1/2", "--format", "json", "--output", str(one), db=captured).returncode == 0
  assert cli("run", "--shard", "2/2", "--expect-no-change", "--format", "json", "--output", str(other),
             db=captured).returncode == 0
  proc = cli("merge", str(one), str(other))
  assert proc.returncode == 2 and "not shards of one replay: their policy differs" in proc.stderr, proc.stderr
  proc = cli("merge", str(one), str(one))
  assert proc.returncode == 2 and "given twice" in proc.stderr
  (tmp_path / "junk.json").write_text("{not json")
  proc = cli("merge", str(tmp_path / "junk.json"))
  assert (proc.returncode == 2 and "neither a replay database nor a JSON report" in proc.stderr
          and "Traceback" not in proc.stderr)
  proc = cli("merge", str(tmp_path / "nope.db"))
  assert proc.returncode == 2 and "no such file" in proc.stderr
  proc = cli("run", "--shard", "3/2", db=captured)
  assert proc.returncode == 2 and "between 1 and N" in proc.stderr


def test_merge_proves_its_inputs_are_the_shards_of_one_replay(captured, tmp_path):
  def shard(db, spec, *extra, name):
    out = tmp_path / name
    assert cli("run", "--shard", spec, *extra, "--format", "json", "--output", str(out), db=db).returncode == 0
    return str(out)
  # two databases with the same runs, heads and no base: their shards do not join
  twin = tmp_path / "twin.db"
  capture_workloads(twin, "ref_add_const", "ref_matmul_bias_relu", "ref_sum_axis0")
  proc = cli("merge", shard(captured, "1/2", name="a1.json"), shard(twin, "2/2", name="b2.json"))
  assert proc.returncode == 2 and "come from different databases" in proc.stderr, proc.stderr
  # two selections of one database
  proc = cli("merge", shard(captured, "1/2", "--kind", "exec", name="e1.json"),
             shard(captured, "2/2", "--kind", "kernel", name="k2.json"))
  assert proc.returncode == 2 and "come from different selections" in proc.stderr, proc.stderr
  # a forged shard that repeats shard 1's captures under another number
  first, second = shard(captured, "1/3", name="s1.json"), shard(captured, "2/3", name="s2.json")
  doc = json.loads(open(first).read())
  doc["replay"]["shard"] = "3/3"
  (tmp_path / "forged.json").write_text(json.dumps(doc))
  proc = cli("merge", first, second, str(tmp_path / "forged.json"))
  assert proc.returncode == 2 and "both hold capture" in proc.stderr, proc.stderr
  # a shard file that is not the expected shape is a one-line usage error
  doc["replay"]["policy"] = [1]
  (tmp_path / "bad.json").write_text(json.dumps(doc))
  proc = cli("merge", first, str(tmp_path / "bad.json"))
  assert (proc.returncode == 2 and "policy is not a JSON object" in proc.stderr
          and proc.stderr.count("\n") == 1), proc.stderr
