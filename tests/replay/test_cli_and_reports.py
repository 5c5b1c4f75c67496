"""The replay command line on a captured corpus sample: determinism, browsing, every report format,
early stop, and usage errors."""
import json
from xml.etree import ElementTree as ET
import jsonschema
import pytest
from tests.conftest import REPO
from tests.replay.conftest import cli, capture_workloads

SCHEMA = json.loads((REPO / "replay" / "report.schema.json").read_text())


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
  db = tmp_path_factory.mktemp("cli") / "r.db"
  capture_workloads(db, "mlp_sgd", "ref_softmax", "ref_conv2d_3x3", "symbolic_seq", "disk_state_dict")
  return db


def test_run_right_after_capture_is_all_same(captured):
  proc = cli("run", "--jobs", "2", db=captured)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert "OK: all" in proc.stdout and "replay the same" in proc.stdout
  for kind in ("schedule", "kernel", "exec"): assert f"\n{kind}" in proc.stdout


def test_reports_in_every_format(captured, tmp_path):
  assert cli("run", "--jobs", "2", db=captured).returncode == 0
  doc = json.loads(cli("report", "--format", "json", db=captured).stdout)
  jsonschema.validate(doc, SCHEMA)
  assert doc["exit_code"] == 0 and doc["totals"]["same"] == len(doc["outcomes"]) > 0
  root = ET.fromstring(cli("report", "--format", "junit", db=captured).stdout)
  assert root.tag == "testsuites" and sum(int(s.get("tests")) for s in root) == len(doc["outcomes"])
  md = cli("report", "--format", "markdown", db=captured).stdout
  assert md.startswith("### replay") and "| kind" in md
  out = tmp_path / "r.html"
  assert cli("report", "--format", "html", "--output", str(out), db=captured).returncode == 0
  assert out.read_text().startswith("<!doctype html>")


def test_html_shows_side_by_side_diffs(tmp_path):
  from replay.report import Summary, render_html
  diff = "--- base\n+++ captured\n@@ -1,2 +1,2 @@\n STORE\n-  ADD dtypes.float\n+  MUL dtypes.float"
  s = Summary({"id": 1, "capture_run_id": 1, "base_ref": "main", "base_commit": "abc"},
              [{"capture_id": 3, "kind": "schedule", "name": "1 kernels", "location": "t.py:1", "status": "changed",
                "diff": diff,
                "reason": "", "metrics": "{}", "seconds": 0.1}])
  html = render_html(s)
  assert ('class="diff"' in html and "base (-)" in html and "captured (+)" in html
          and '<span class="diff_chg">MUL</span>' in html)


def test_list_and_show(captured):
  proc = cli("list", "--kind", "kernel", "--limit", "3", db=captured)
  assert proc.returncode == 0 and "kernel" in proc.stdout and "more (--limit 0 shows all)" in proc.stdout
  first_kernel = int(proc.stdout.splitlines()[2].split()[0])
  shown = cli("show", str(first_kernel), db=captured)
  assert shown.returncode == 0 and "void " in shown.stdout and "STORE" in shown.stdout and "location" in shown.stdout
  sched = cli("list", "--kind", "schedule", "--limit", "1", db=captured).stdout.splitlines()[2].split()[0]
  assert "=== kernel 0 (" in cli("show", sched, db=captured).stdout
  proc = cli("show", "999999", db=captured)
  assert proc.returncode == 2 and "no capture with id 999999" in proc.stderr   # issue 13.8: usage mistakes exit 2


def test_selection_filters_and_early_stop(captured):
  proc = cli("run", "--kind", "exec", "--location", "models.py", "--jobs", "1", db=captured)
  assert proc.returncode == 0
  assert "\nexec" in proc.stdout and "kernel          0" in proc.stdout
  proc = cli("run", "--max-changed", "abc", db=captured)
  assert proc.returncode == 2 and "--max-changed" in proc.stderr
  proc = cli("run", "--name", "no-such-name", db=captured)
  assert proc.returncode == 2 and "matched no captures" in proc.stderr


def test_usage_errors_exit_2_and_help_everywhere(captured):
  for cmd in ("capture", "run", "diff", "list", "show", "report", "reset"):
    proc = cli(cmd, "--help")
    assert proc.returncode == 0 and "Usage" in proc.stdout, cmd
  assert cli("report", "--format", "pdf", db=captured).returncode == 2
  assert cli("capture", db=captured).returncode == 2
  assert cli("nonsense").returncode == 2


def test_reset(tmp_path):
  db = tmp_path / "r.db"
  capture_workloads(db, "ref_add_const")
  assert cli("reset", "--yes", db=db).returncode == 0
  assert cli("list", db=db).returncode == 2


def test_usage_mistakes_exit_2_and_reading_an_empty_file_writes_nothing(tmp_path):
  """Issue 13.7, 13.8: no database yet, an empty file, no such replay or revision: one line, exit 2, nothing written."""
  for args in (("list",), ("show", "1"), ("report",), ("run",)):
    proc = cli(*args, db=tmp_path / "missing.db")
    assert proc.returncode == 2 and proc.stderr.startswith("replay: error: no replay database"), (args, proc.stderr)
  empty = tmp_path / "empty.db"
  empty.touch()
  assert cli("list", db=empty).returncode == 2 and empty.stat().st_size == 0
  assert not (tmp_path / "missing.db").exists()


def _hostile_summary():
  from replay.report import Summary
  evil = "<img src=x onerror=alert(5)>\x1b[2J\x00"
  outcomes = [
    {"capture_id": 1, "kind": evil, "name": evil, "location": evil, "status": "changed", "reason": "",
     "diff": "--- a\n+++ b\n-```\n+</details><script>alert(1)</script>\n+````\n", "metrics": "{}", "seconds": 0.1},
    {"capture_id": 2, "kind": "exec", "name": "n", "location": "l", "status": "mismatch", "reason": evil, "diff": "",
     "metrics": "{}"},
    {"capture_id": 3, "kind": "kernel", "name": "n", "location": "l", "status": evil, "reason": "", "diff": "",
     "metrics": "{}"},
  ]
  return Summary({"id": 1, "capture_run_id": 1, "base_ref": evil, "base_commit": "abc"}, outcomes)


def test_reports_escape_every_field_from_the_database():
  """Issue 13.6: fields from a database or a user cannot inject HTML, break markdown, invalidate XML or drive the
  terminal."""
  from replay import report
  s = _hostile_summary()
  page = report.render(s, "html")
  assert "<img" not in page and "<script" not in page and "&lt;img" in page
  md = report.render(s, "markdown")
  assert "\x1b" not in md and "\x00" not in md
  outside, fence = [], None   # raw text from the database may only appear inside code blocks it cannot close
  for line in md.splitlines():
    if fence is None and line.startswith("```"): fence = line[:len(line) - len(line.lstrip("`"))]
    elif fence is not None and line == fence: fence = None
    elif fence is None: outside.append(line)
  assert fence is None and not any("<img" in line or "<script" in line or "</details><" in line for line in outside)
  assert any(line.startswith("`````") for line in md.splitlines())   # longer than the four backticks the diff holds
  suites = ET.fromstring(report.render(s, "junit"))   # valid XML despite control characters
  assert any(evil_kind.get("name", "").startswith("replay.<img") for evil_kind in suites)   # unknown kinds are reported
  text = report.render(s, "text")
  assert "\x1b" not in text and "\\x1b" in text
  assert s.totals()["error"] == 1 and "unknown status" in s.outcomes[2]["reason"]   # unknown statuses count as errors
  s.outcomes[0]["metrics"] = "{not json"
  assert json.loads(report.render(s, "json"))["outcomes"][0]["metrics"] == {"unparsed": "{not json"}


def test_an_interrupted_replay_is_incomplete_and_report_uses_the_stored_policy(tmp_path):
  """Issue 13.4: a replay that did not finish is never reported as complete; report applies the policy it ran with."""
  from db import Store
  db = tmp_path / "r.db"
  capture_workloads(db, "ref_add_const", "ref_matmul")
  store = Store(str(db))
  caps = store.captures()
  half = store.add_replay(jobs=1, selected=len(caps), capture_run_id=caps[0]["run_id"], policy="{}")   # killed half-way
  store.add_outcomes([{"replay_id": half, "capture_id": c["id"], "status": "same", "reason": "", "diff": "",
                       "metrics": "{}", "seconds": 0.0}
                      for c in caps[:len(caps) // 2]])
  proc = cli("report", "--replay", str(half), db=db)
  assert proc.returncode == 4, proc.stdout
  assert f"INCOMPLETE: replayed {len(caps) // 2} of {len(caps)} selected captures" in proc.stdout
  promised = store.add_replay(jobs=1, selected=1, capture_run_id=caps[0]["run_id"],
                              policy=json.dumps({"expect_no_change": True}))
  store.add_outcomes([{"replay_id": promised, "capture_id": caps[0]["id"], "status": "changed", "reason": "",
                       "diff": "-a\n+b",
                       "metrics": "{}", "seconds": 0.0}])
  proc = cli("report", "--replay", str(promised), db=db)
  assert proc.returncode == 1 and "promised no kernel change" in proc.stdout, proc.stdout


def test_a_crashed_capture_run_fails_the_verdict(tmp_path):
  """Issue 18.2: diff/run/report say when the captured command failed, and exit 4."""
  import sys
  db = tmp_path / "r.db"
  code = "from scheduler import Tensor; (Tensor([1.0, 2.0]) * 2).realize(); raise SystemExit(3)"
  assert cli("capture", "--", sys.executable, "-c", code, db=db).returncode == 3
  proc = cli("run", db=db)
  assert proc.returncode == 4 and "exited with code 3" in proc.stdout, proc.stdout
  assert cli("report", db=db).returncode == 4


def _on_a_terminal(args, db, extra_env=None) -> str:
  """Run the CLI with stdout on a pseudo-terminal, as a user's shell would; returns what it printed."""
  import os, pty, subprocess, sys
  leader, follower = pty.openpty()
  env = {**os.environ, "PYTHONPATH": str(REPO), "REPLAY_DB": str(db), "PAGER": "cat", **(extra_env or {})}
  env.pop("NO_COLOR", None) if "NO_COLOR" not in (extra_env or {}) else None
  proc = subprocess.Popen([sys.executable, "-m", "replay", *args], cwd=REPO, env=env, stdout=follower,
                          stderr=subprocess.DEVNULL)
  os.close(follower)
  chunks = []
  while True:
    try: data = os.read(leader, 65536)
    except OSError: break
    if not data: break
    chunks.append(data)
  proc.wait(timeout=120)
  os.close(leader)
  return b"".join(chunks).decode(errors="replace")


def test_colors_on_a_terminal_only_and_never_with_no_color(captured):
  assert cli("run", "--jobs", "2", db=captured).returncode == 0
  assert "\x1b[" in _on_a_terminal(["report"], captured)
  assert "\x1b[" not in _on_a_terminal(["report"], captured, {"NO_COLOR": "1"})
  assert "\x1b[" not in cli("report", db=captured).stdout   # not a terminal


def test_colorize_paints_diff_lines_and_the_verdict():
  from replay.report import colorize
  painted = colorize("--- capture 1\n@@ -1 +1 @@\n-a\n+b\n same\nOK: fine").splitlines()
  assert (painted[2].startswith("\x1b[31m") and painted[3].startswith("\x1b[32m") and painted[4] == " same"
          and "\x1b[1m" in painted[5])


def test_runs_lists_runs_and_replays_and_prune_keeps_the_newest(tmp_path):
  from db import Store
  db = tmp_path / "r.db"
  for _ in range(3): capture_workloads(db, "ref_add_const", "--no-variants")
  assert cli("run", db=db).returncode == 0
  listing = cli("runs", db=db).stdout
  assert "python -m scripts.workloads --only ref_add_con" in listing and "OK: all" in listing and "2s 2k 2e" in listing
  cache = tmp_path / "cache"
  (cache / "overlays" / "deadbeef").mkdir(parents=True)
  env = {"REPLAY_CACHE_DIR": str(cache)}
  dry = cli("prune", "--keep", "1", "--dry-run", db=db, env_extra=env)
  assert dry.returncode == 0 and "would remove 2 runs (1, 2)" in dry.stdout and "1 cached worktrees" in dry.stdout
  assert len(Store(str(db)).runs()) == 3   # a dry run removes nothing
  proc = cli("prune", "--keep", "1", db=db, env_extra=env)
  assert proc.returncode == 0 and "removed 2 runs" in proc.stdout and not (cache / "overlays" / "deadbeef").exists()
  s = Store(str(db))
  assert [r["id"] for r in s.runs()] == [3] and s.integrity_ok()
  kept = {c["input_sha"] for c in s.captures()} | {c["output_sha"] for c in s.captures()} | \
    {r[0] for r in s.conn.execute("SELECT sha256 FROM capture_blobs")}   # parts and buffers the payloads refer to
  dictionaries = {r[0] for r in s.conn.execute("SELECT base FROM blobs WHERE base IS NOT NULL")}
  assert s.blob_count() == len(kept | dictionaries)   # and the zlib dictionaries of the deltas among them
  assert cli("run", db=db).returncode == 0   # what is left still replays
  (cache / "overlays" / "again").mkdir(parents=True)
  proc = cli("reset", "--yes", db=db, env_extra=env)
  assert "removed 1 cached worktrees and overlays" in proc.stdout and not (cache / "overlays" / "again").exists()


@pytest.mark.parametrize("args",
                         [["diff", "--base", "HEAD"], ["gate", "--base", "HEAD", "--", "true"],
                          ["bisect", "--good", "a", "--bad", "b"],
                                  ["coverage", "--base", "HEAD"]])
def test_commands_that_need_git_say_so_outside_a_repository(tmp_path, args):
  import subprocess, sys
  from tests.conftest import REPO
  outside = tmp_path / "not-a-repo"
  outside.mkdir()
  db = tmp_path / "r.db"
  env = {**__import__("os").environ, "PYTHONPATH": str(REPO), "REPLAY_DB": str(db),
         "GIT_CEILING_DIRECTORIES": str(tmp_path)}
  subprocess.run([sys.executable, "-m", "replay", "capture", "--", sys.executable, "-c",
                  "from scheduler import Tensor; (Tensor([1.0]) + 1).realize()"],
                 cwd=outside, env=env, capture_output=True)
  proc = subprocess.run([sys.executable, "-m", "replay", *args], cwd=outside, env=env, capture_output=True, text=True)
  assert (proc.returncode == 2 and "is not in a git repository" in proc.stderr
          and proc.stderr.count("\n") == 1), proc.stderr


def test_a_report_selection_that_matches_nothing_is_a_usage_mistake(captured):
  assert cli("run", db=captured).returncode == 0
  for args in (["--status", "mismatch"], ["--location", "no-such-place"], ["--kind", "kernel", "--status", "error"]):
    proc = cli("report", *args, db=captured)
    assert proc.returncode == 2 and "matched no outcome" in proc.stderr and "OK: all" in proc.stderr, proc.stderr
  assert cli("report", "--status", "same", db=captured).returncode == 0


def test_no_terminal_control_characters_from_a_database_reach_the_terminal(captured):
  import sqlite3
  evil = "\x1b[2J\x1b]0;pwned\x07"
  with sqlite3.connect(captured) as conn:
    conn.execute("UPDATE captures SET name = ?, location = ?, kind = kind WHERE id = (SELECT min(id) FROM captures)",
                 (f"n{evil}", f"l{evil}"))
    conn.execute("UPDATE runs SET argv = ?",
                 (f'["python", "{evil}"]'.replace("\x1b", "\\u001b").replace("\x07", "\\u0007"),))
  first = sqlite3.connect(captured).execute("SELECT min(id) FROM captures").fetchone()[0]
  assert cli("run", db=captured).returncode == 0
  for args in (["list"], ["show", str(first)], ["runs"], ["report", "--all"], ["show"]):
    proc = cli(*args, db=captured)
    assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout, (args, proc.stdout[:500])
    if args in (["list"], ["runs"], ["show", str(first)]):
      assert "\\x1b" in proc.stdout, args   # shown escaped, not dropped


def test_rows_a_damaged_file_holds_with_null_or_mistyped_columns_still_list_and_show(tmp_path):
  """SQLite keeps any value in any column: a file damaged by hand or by another tool may hold NULL names and
  locations, a number for a name and text for a time. Browsing shows what is there, marked, without a traceback."""
  import sqlite3
  db = tmp_path / "r.db"
  capture_workloads(db, "ref_add_const")
  with sqlite3.connect(db) as conn:
    first = conn.execute("SELECT min(id) FROM captures").fetchone()[0]
    conn.execute("UPDATE captures SET name = NULL, location = NULL WHERE id = ?", (first,))
    conn.execute("UPDATE captures SET name = 5, time = 'abc' WHERE id <> ?", (first,))
  for args in (["list", "--limit", "0"], ["show", str(first)], ["runs"]):
    proc = cli(*args, db=db)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, (args, proc.stderr[-500:])
  listed = cli("list", "--limit", "0", db=db).stdout
  assert " - " in listed and " 5 " in listed
