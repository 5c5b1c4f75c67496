"""End to end across revisions in a throw-away repository built from this project: an unchanged head,
a fusion-rule change, broken arithmetic in the C renderer, a renamed module, and a base whose kernels
crash or hang."""
import json, re, sys
import pytest
from tests.replay.conftest import (cli, capture_workloads, git, edit, commit_on_a, rename_view_module, bump_contract,
                                   NO_REALIZE_EXPAND)
from scheduler.device import find_c_compiler
from replay.report import STATUSES

pytestmark = [pytest.mark.slow, pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler")]
WORKLOADS = ["ref_expand_of_expr", "ref_add_const", "ref_matmul_bias_relu"]


CRASH, SPIN = "*(volatile int*)0 = 1;", "for (volatile int spin = 1; spin; ) {}"


def plant_at_constants(root, plants: dict) -> None:
  """A C renderer that emits the given statement into every kernel using the given constant (a crash, a hang)."""
  planted = "".join(f"      if x.arg == {value!r}: line({statement!r})\n" for value, statement in plants.items())
  edit(root, "runtimes/cpu.py", "    if op is Ops.CONST: names[i] = render_const(x.arg, x.dtype)\n",
       "    if op is Ops.CONST:\n      names[i] = render_const(x.arg, x.dtype)\n" + planted)


def statuses(stdout: str) -> dict:
  """The table of a text report: kind -> {total, status -> count}."""
  rows = {}
  for line in stdout.splitlines():
    parts = line.split()
    if parts and parts[0] in ("schedule", "kernel", "exec") and len(parts) == 2 + len(STATUSES):
      rows[parts[0]] = dict(zip(("total", *STATUSES), map(int, parts[1:])))
  return rows


def test_head_equal_to_base_is_all_same(repo, tmp_path):
  git(repo, "checkout", "-q", "main")
  db = tmp_path / "r.db"
  capture_workloads(db, *WORKLOADS, cwd=repo)
  proc = cli("diff", "--base", "main", db=db, cwd=repo)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  st = statuses(proc.stdout)
  assert all(v["same"] == v["total"] > 0 for v in st.values()), proc.stdout
  assert cli("run", db=db, cwd=repo).returncode == 0


def test_fusion_rule_change_is_changed_with_a_readable_diff(repo, tmp_path):
  # head B no longer realizes an elementwise op before an expand
  commit_on_a(repo, "no-realize-expand", lambda r: edit(r, *NO_REALIZE_EXPAND))
  db = tmp_path / "r.db"
  capture_workloads(db, *WORKLOADS, cwd=repo)
  proc = cli("diff", "--base", "main", db=db, cwd=repo)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  st = statuses(proc.stdout)
  assert st["schedule"]["changed"] >= 1 and st["exec"]["mismatch"] == 0 and st["exec"]["same"] == st["exec"]["total"]
  assert re.search(r"kernels? \d+.* (changed|removed|fused into|added)",
                   proc.stdout) and "\n-" in proc.stdout and "\n+" in proc.stdout
  assert "STORE" in proc.stdout
  proc = cli("diff", "--base", "main", "--expect-no-change", db=db, cwd=repo)
  assert proc.returncode == 1 and "promised no kernel change" in proc.stdout
  # --max-changed stops on purpose: the verdict is the one of what ran, never INCOMPLETE, now and in a later report
  stopped = cli("diff", "--base", "main", "--max-changed", "1", "--jobs", "1", db=db, cwd=repo)
  assert (stopped.returncode == 0 and "stopped early" in stopped.stderr
          and "INCOMPLETE" not in stopped.stdout), stopped.stdout
  later = cli("report", db=db, cwd=repo)
  assert later.returncode == 0 and "INCOMPLETE" not in later.stdout
  for bad in ("0", "-3", "150%", "five"):
    assert cli("diff", "--base", "main", "--max-changed", bad, db=db, cwd=repo).returncode == 2


def test_broken_c_arithmetic_is_a_mismatch(repo, tmp_path):
  # float multiplies come out 0.1% too large (index math is int and stays right)
  commit_on_a(repo, "broken-mul", lambda r: edit(r, "runtimes/cpu.py", '  if op is Ops.CAST: return f"({ct})({s[0]})"',
              '  if op is Ops.MUL and dtypes.is_float(dtype): return f"({ct})({s[0]}*{s[1]}*1.001f)"\n  if op is '
              'Ops.CAST: return f"({ct})({s[0]})"'))
  db = tmp_path / "r.db"
  capture_workloads(db, *WORKLOADS, cwd=repo)
  proc = cli("diff", "--base", "main", db=db, cwd=repo)
  assert proc.returncode == 3, proc.stdout + proc.stderr
  st = statuses(proc.stdout)
  assert st["exec"]["mismatch"] >= 1 and st["kernel"]["changed"] >= 1
  assert "elements differ" in proc.stdout
  # the output is named by dtype, shape, the function and the line of the workload that made it
  assert re.search(r"output \d+ \(float\[[0-9, ]*\] \w+ from <string>:1 <module>\): \d+ of \d+ elements differ",
                   proc.stdout), proc.stdout


def test_renamed_internal_module_replays_and_a_new_contract_version_is_incompatible(repo, tmp_path):
  # captures name the contract's reconstructors, not internal modules: renaming one breaks no replay, either way
  renamed = commit_on_a(repo, "renamed", rename_view_module)
  db = tmp_path / "r.db"
  capture_workloads(db, *WORKLOADS, cwd=repo)
  proc = cli("diff", "--base", "main", db=db, cwd=repo)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert all(v["same"] == v["total"] > 0 for v in statuses(proc.stdout).values()), proc.stdout
  git(repo, "checkout", "-q", "main")
  older = tmp_path / "older.db"
  capture_workloads(older, *WORKLOADS, cwd=repo)
  proc = cli("diff", "--base", renamed, db=older, cwd=repo)
  assert (proc.returncode == 0
          and all(v["same"] == v["total"] > 0 for v in statuses(proc.stdout).values())), proc.stdout + proc.stderr
  # a head whose contract changed meaning (version 2, reading only 2): its captures are incompatible at the base, which
  # says why
  git(repo, "checkout", "-q", renamed)
  bump_contract(repo)
  git(repo, "commit", "-qam", "contract v2")
  newer = tmp_path / "newer.db"
  capture_workloads(newer, *WORKLOADS, cwd=repo)
  proc = cli("diff", "--base", "main", db=newer, cwd=repo)
  assert proc.returncode == 4, proc.stdout + proc.stderr
  st = statuses(proc.stdout)
  assert all(v["incompatible"] == v["total"] > 0 for v in st.values()), proc.stdout
  assert "captured under replay contract v2; this revision's scheduler.contract reads v1" in proc.stdout
  assert cli("diff", "--base", "main", "--allow-incompatible", db=newer, cwd=repo).returncode == 0


def test_crashing_and_hanging_kernels_are_errors_and_the_run_completes(repo, tmp_path):
  crashy = commit_on_a(repo, "crashy", lambda r: plant_at_constants(r, {1234.5: CRASH, 4321.5: SPIN}))
  git(repo, "checkout", "-q", "main")
  script = tmp_path / "w.py"
  script.write_text("import numpy as np\nfrom scheduler import Tensor\nx = Tensor(np.arange(8, "
                    "dtype=np.float32)).realize()\n"
                    "for c in (2.0, 1234.5, 3.0, 4321.5, 5.0): (x * c).realize()\n")
  db = tmp_path / "r.db"
  assert cli("capture", "--", sys.executable, str(script), db=db, cwd=repo).returncode == 0
  proc = cli("diff", "--base", crashy, "--timeout", "8", "--jobs", "2", "--kind", "exec", db=db, cwd=repo)
  assert proc.returncode == 4, proc.stdout + proc.stderr
  st = statuses(proc.stdout)
  assert st["exec"]["error"] == 2 and st["exec"]["same"] == st["exec"]["total"] - 2
  assert "SIGSEGV" in proc.stdout or "crashed" in proc.stdout
  assert "timed out" in proc.stdout


def test_bad_revision_and_empty_database_are_clear_errors(repo, tmp_path):
  git(repo, "checkout", "-q", "main")
  db = tmp_path / "r.db"
  proc = cli("diff", "--base", "main", db=db, cwd=repo)
  assert proc.returncode == 2 and "capture something first" in proc.stderr and "Traceback" not in proc.stderr
  capture_workloads(db, "ref_add_const", cwd=repo)
  proc = cli("diff", "--base", "no-such-branch", db=db, cwd=repo)
  assert proc.returncode == 2 and "unknown revision" in proc.stderr and "Traceback" not in proc.stderr
  proc = cli("diff", db=db, cwd=repo)
  assert proc.returncode == 2 and "--base" in proc.stderr


def test_a_base_without_a_package_is_incompatible_and_never_replays_the_current_code(repo, tmp_path):
  """Issue 13.1: with the project installed, a base that lacks `runtimes` must not fall back to this tree's copy."""
  commit_on_a(repo, "no-runtimes", lambda r: git(r, "rm", "-rq", "runtimes"))
  git(repo, "checkout", "-q", "main")
  db = tmp_path / "r.db"
  capture_workloads(db, *WORKLOADS, cwd=repo)
  proc = cli("diff", "--base", "no-runtimes", db=db, cwd=repo)
  st = statuses(proc.stdout)
  assert proc.returncode == 4 and st["kernel"]["incompatible"] == st["kernel"]["total"] > 0, proc.stdout
  assert "no package 'runtimes'" in proc.stdout


def test_a_half_made_worktree_is_rebuilt_before_use(repo, tmp_path):
  """Issue 13.1: a worktree left incomplete (a kill during checkout) is not reused."""
  from replay import revisions
  git(repo, "checkout", "-q", "main")
  sha = git(repo, "rev-parse", "HEAD")
  tree = revisions.worktree(sha, repo)
  (tree / "scheduler" / "ops.py").unlink()
  assert not revisions._valid_worktree(tree, sha)
  again = revisions.worktree(sha, repo)
  assert again == tree and (tree / "scheduler" / "ops.py").exists() and revisions._valid_worktree(tree, sha)


def test_sut_entries_must_be_plain_package_names(tmp_path):
  from replay import revisions
  (tmp_path / "pyproject.toml").write_text('[tool.replay]\nsut = ["scheduler", "../elsewhere"]\n')
  with pytest.raises(revisions.RevisionError, match="plain package names"): revisions.sut_packages(tmp_path)
  (tmp_path / "pyproject.toml").write_text('[tool.replay]\nsut = ["scheduler", "runtimes"]\n')
  assert revisions.sut_packages(tmp_path) == ("scheduler", "runtimes")


@pytest.mark.parametrize("text,read", [
  ('[tool.replay]\nsut = ["scheduler", "runtimes"]\n', True),
  ("[tool.replay]\nsut = ['a','b',]  # c\n[x]\nsut=['z']\n", True),
  ('[tool.replay]\n"sut" = ["k"]\n', True),
  ('[tool.replay]\nsut = []\n', True),
  ('[tool.replay]\nsut = ["a"]\n[tool.replay.more]\nsut = 1\n', True),
  ('[tool.replay]\nsut = [\n "a",\n "b"]\n', False),
  ('[tool]\nreplay.sut = ["q"]\n', False),
  ('[tool.replay]\nother = 1\n', False),
  ('[tool.replay]\nsut = "scheduler"\n', False),
  ('x = """\n[tool.replay]\nsut = ["zz"]\n"""\n', False)])
def test_the_sut_read_line_by_line_is_what_tomllib_reads(text, read):
  """The one-line list is read without tomllib (its import cost every capturing process a few ms); any form it does
  not read is left to tomllib (None)."""
  tomllib = pytest.importorskip("tomllib")
  from replay import revisions
  fast = revisions._one_line_sut(text)
  assert (fast is not None) == read
  if read: assert fast == tomllib.loads(text)["tool"]["replay"]["sut"]


def test_without_tomllib_the_first_one_line_sut_is_read_whatever_else_the_file_holds():
  """Python 3.10 has no tomllib: the line reader is all there is, so the file's other contents do not stop it."""
  from replay import revisions
  text = 'description = """\nmany lines\n"""\n[tool.replay]\nsut = ["scheduler", \'runtimes\']  # ours\n'
  assert revisions._one_line_sut(text) is None and revisions._one_line_sut(text, whole_file=False) == ["scheduler",
                                                                                                        "runtimes"]
  assert revisions._one_line_sut('[tool.replay]\nsut = [\n "a"]\n', whole_file=False) is None   # the default then


def test_a_compile_flag_change_is_a_kernel_change_with_the_option_diff(repo, tmp_path):
  """Issue 18.1: kernel captures compare the compile options (flags, compiler), not only the source."""
  commit_on_a(repo, "fast-math",
              lambda r: edit(r, "runtimes/cpu.py", '"-ffp-contract=off", "-nostdlib")',
                             '"-ffp-contract=off", "-nostdlib", "-ffast-math")'))
  db = tmp_path / "r.db"
  capture_workloads(db, "ref_add_const", cwd=repo)
  proc = cli("diff", "--base", "main", "--kind", "kernel", db=db, cwd=repo)
  st = statuses(proc.stdout)
  assert st["kernel"]["changed"] == st["kernel"]["total"] > 0, proc.stdout
  assert "compile options changed" in proc.stdout and "-ffast-math" in proc.stdout
  git(repo, "checkout", "-q", "main")


def test_outputs_that_drift_within_tolerance_are_reported_and_fail_only_on_request(repo, tmp_path):
  # float multiplies come out one ulp too large: within every tolerance, but not the same bits
  commit_on_a(repo, "drift-mul", lambda r: edit(r, "runtimes/cpu.py", '  if op is Ops.CAST: return f"({ct})({s[0]})"',
              '  if op is Ops.MUL and dtype == dtypes.float32: return f"({ct})({s[0]}*{s[1]}*1.00000012f)"\n  if op is '
              'Ops.CAST: return f"({ct})({s[0]})"'))
  db = tmp_path / "r.db"
  capture_workloads(db, *WORKLOADS, cwd=repo)
  proc = cli("diff", "--base", "main", db=db, cwd=repo)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert re.search(r"drift: \d+ captures \(\d+ elements\) give other bits within tolerance, at most \d+ ulp",
                   proc.stdout), proc.stdout
  assert statuses(proc.stdout)["exec"]["mismatch"] == 0
  doc = json.loads(cli("report", "--format", "json", db=db, cwd=repo).stdout)
  assert doc["drift"]["captures"] >= 1 and doc["drift"]["max_ulp"] >= 1
  for fmt in ("markdown", "html", "junit"): assert "drift" in cli("report", "--format", fmt, db=db, cwd=repo).stdout
  proc = cli("diff", "--base", "main", "--fail-on-drift", db=db, cwd=repo)
  assert proc.returncode == 3 and "--fail-on-drift" in proc.stdout, proc.stdout


def test_kernels_that_keep_values_but_cost_more_are_flagged_slower(repo, tmp_path):
  # index math is no longer simplified: the same values, more arithmetic per element
  commit_on_a(repo, "no-index-simplify", lambda r: edit(r, "scheduler/codegen/lowerer.py",
              "return idx.simplify(), valid.simplify()",
              "return idx, valid"))
  db = tmp_path / "r.db"
  capture_workloads(db, *WORKLOADS, cwd=repo)
  proc = cli("diff", "--base", "main", db=db, cwd=repo)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  st = statuses(proc.stdout)
  assert st["kernel"]["changed"] >= 1 and st["exec"]["mismatch"] == 0
  assert re.search(r"\[kernel\] changed \(slower \+\d+%\)",
                   proc.stdout) and "slower: static cost" in proc.stdout, proc.stdout
  assert re.search(r"slower: \d+ changed captures cost more than the base's", proc.stdout)
  doc = json.loads(cli("report", "--format", "json", db=db, cwd=repo).stdout)
  assert doc["slower"] and all(item["growth"] > 0 for item in doc["slower"])
  proc = cli("diff", "--base", "main", "--max-cost-increase", "5", db=db, cwd=repo)
  assert proc.returncode == 1 and "--max-cost-increase 5%" in proc.stdout, proc.stdout


@pytest.mark.parametrize("sig, code", [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_signal_ends_the_replay_with_its_code_and_kills_a_worker_stuck_in_a_kernel(repo, tmp_path, sig, code):
  import os, signal, subprocess, time
  from tests.conftest import REPO
  stuck = commit_on_a(repo, "stuck", lambda r: plant_at_constants(r, {4321.5: SPIN}))
  git(repo, "checkout", "-q", "main")
  script = tmp_path / "w.py"
  script.write_text("import numpy as np\nfrom scheduler import Tensor\nx = Tensor(np.arange(8, "
                    "dtype=np.float32)).realize()\n"
                    "(x * 4321.5).realize()\n")
  db = tmp_path / "r.db"
  assert cli("capture", "--", sys.executable, str(script), db=db, cwd=repo).returncode == 0
  env = {**os.environ, "PYTHONPATH": str(REPO), "REPLAY_DB": str(db)}
  proc = subprocess.Popen([sys.executable, "-m", "replay", "diff", "--base", stuck, "--timeout", "600", "--kind",
                           "exec", "--jobs", "1"], cwd=repo,
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  # wait until the worker is spinning in the kernel: a child process of the replay that has used 3 s of CPU time. CPU
  # time, not a CPU share: on a loaded machine a spinning worker gets a small share, but its time keeps adding up
  def cpu_seconds(pid: str) -> float:
    try: fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError: return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")   # utime + stime
  deadline, busy = time.time() + 600, []
  while time.time() < deadline and not busy and proc.poll() is None:
    # ours only
    children = subprocess.run(["pgrep", "-P", str(proc.pid), "-f", "replay.worker"], capture_output=True,
                              text=True).stdout.split()
    busy = [pid for pid in children if cpu_seconds(pid) > 3.0]
    time.sleep(0.5)
  assert busy, "the worker never got stuck"
  proc.send_signal(getattr(signal, sig))
  assert proc.wait(timeout=30) == code, proc.stderr.read()
  time.sleep(0.5)
  assert all(subprocess.run(["ps", "-p", pid],
                            capture_output=True).returncode != 0 for pid in busy), "a stuck worker outlived the replay"
  report = cli("report", db=db, cwd=repo)   # the replay it cut short is stored as such
  assert report.returncode == 4 and "INCOMPLETE" in report.stdout, report.stdout


def test_concurrent_diffs_against_the_same_new_base_share_one_valid_worktree(repo, tmp_path):
  """Issue 13.1: processes that make the worktree and overlay of one revision at the same moment all get a
  complete checkout of it (none fails, none sees a half-made tree, no stray build folders remain)."""
  import subprocess
  from replay import revisions
  git(repo, "checkout", "-q", "main")
  sha = git(repo, "rev-parse", "HEAD")
  cache = tmp_path / "cache"
  script = ("import sys; from pathlib import Path; from replay import revisions; "
            f"path = revisions.overlay({sha!r}, Path({str(repo)!r})); "
            "print(sorted(p.name for p in path.iterdir()))")
  env = {**__import__("os").environ, "REPLAY_CACHE_DIR": str(cache)}
  procs = [subprocess.Popen([sys.executable, "-c", script], cwd=repo, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
           for _ in range(6)]
  results = [(p.wait(timeout=300), *p.communicate()) for p in procs]
  assert all(code == 0 for code, _, _ in results), [err for code, _, err in results if code]
  assert len({out for _, out, _ in results}) == 1 and "scheduler" in results[0][1]
  tree = cache / "worktrees" / sha
  assert revisions._valid_worktree(tree, sha)
  assert sorted(p.name for p in (cache / "worktrees").iterdir()) == [sha]
