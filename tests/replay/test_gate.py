"""The CI gate's policy over the four cases, with exact exit codes, in a throw-away repository; the
pytest plugin under xdist; the example workflow and the gate script."""
import importlib.metadata, json, os, subprocess, sys
from xml.etree import ElementTree as ET
import pytest
import yaml
from tests.conftest import REPO
from tests.replay.conftest import cli, git, edit, commit_on_a, bump_contract, NO_REALIZE_EXPAND
from scheduler.device import find_c_compiler

CMD = ["--", sys.executable, "-m", "scripts.workloads", "--only", "ref_expand_of_expr", "ref_add_const",
       "ref_matmul_bias_relu"]
needs_cc = pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler")


def gate(repo, tmp_path, *extra, env_extra=None):
  return cli("gate", "--base", "main", *extra, *CMD, db=tmp_path / "r.db", cwd=repo, env_extra=env_extra)


@pytest.mark.slow
@needs_cc
def test_no_change_passes_and_writes_reports(repo, tmp_path):
  git(repo, "checkout", "-q", "main")
  summary, junit = tmp_path / "summary.md", tmp_path / "junit.xml"
  proc = gate(repo, tmp_path, "--junit", str(junit), env_extra={"GITHUB_STEP_SUMMARY": str(summary)})
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert "### replay" in summary.read_text() and "OK: all" in summary.read_text()
  assert ET.parse(junit).getroot().tag == "testsuites"


@pytest.mark.slow
@needs_cc
def test_kernel_change_fails_only_when_no_change_was_promised(repo, tmp_path):
  commit_on_a(repo, "fusion", lambda r: edit(r, *NO_REALIZE_EXPAND), message="change a fusion rule")
  proc = gate(repo, tmp_path)
  assert proc.returncode == 0 and "changed kernels" in proc.stdout, proc.stdout + proc.stderr
  assert gate(repo, tmp_path, "--expect-no-change").returncode == 1
  proc = gate(repo, tmp_path, env_extra={"PR_TITLE": "refactor [no-kernel-change]"})
  assert proc.returncode == 1 and "PR_TITLE" in proc.stderr
  commit_on_a(repo, "fusion-promise", lambda r: edit(r, *NO_REALIZE_EXPAND),
              message="tidy the scheduler [no-kernel-change]")
  proc = gate(repo, tmp_path)
  assert proc.returncode == 1 and "head commit message" in proc.stderr


@pytest.mark.slow
@needs_cc
def test_output_mismatch_fails_with_3(repo, tmp_path):
  commit_on_a(repo, "mul", lambda r: edit(r, "runtimes/cpu.py", '  if op is Ops.CAST: return f"({ct})({s[0]})"',
              '  if op is Ops.MUL and dtypes.is_float(dtype): return f"({ct})({s[0]}*{s[1]}*1.001f)"\n  if op is '
              'Ops.CAST: return f"({ct})({s[0]})"'))
  proc = gate(repo, tmp_path, "--allow-incompatible")
  assert proc.returncode == 3, proc.stdout + proc.stderr
  # the mismatching realize names the kernel whose source changed, with its diff
  assert "first changed kernel of this realize: capture" in proc.stdout and "*1.001f" in proc.stdout, proc.stdout


@pytest.mark.slow
@needs_cc
def test_incompatible_fails_with_4_unless_allowed(repo, tmp_path):
  commit_on_a(repo, "rename", bump_contract)
  assert gate(repo, tmp_path).returncode == 4
  assert gate(repo, tmp_path, "--allow-incompatible", "--allow-unguarded").returncode == 0   # the version is a constant
  proc = cli("gate", "--base", "nope", *CMD, db=tmp_path / "r.db", cwd=repo)
  assert proc.returncode == 2 and "unknown revision" in proc.stderr   # a usage mistake (issue 13.8)


SAMPLE_TESTS = '''
import numpy as np
import pytest
from scheduler import Tensor

@pytest.mark.parametrize("k", [1, 2, 3])
def test_scale(k):
  assert (Tensor(np.ones(4, np.float32)) * k).numpy().sum() == 4 * k

def test_matmul():
  x = Tensor(np.eye(3, dtype=np.float32))
  assert (x @ x).numpy().trace() == 3

def test_reduce():
  assert Tensor(np.arange(6, dtype=np.float32)).sum().item() == 15
'''


def plugin_args() -> list[str]:
  eps = importlib.metadata.entry_points(group="pytest11")
  return [] if any(ep.value == "replay.pytest_plugin" for ep in eps) else ["-p", "replay.pytest_plugin"]


def test_plugin_is_registered_as_a_pytest11_entry_point():
  text = (REPO / "pyproject.toml").read_text()
  assert '[project.entry-points.pytest11]\nreplay = "replay.pytest_plugin"' in text


@pytest.mark.slow
def test_xdist_workers_capture_into_one_run_with_node_ids(tmp_path):
  (tmp_path / "test_sample.py").write_text(SAMPLE_TESTS)
  db = tmp_path / "r.db"
  env = {**os.environ, "PYTHONPATH": str(REPO), "REPLAY_DB": str(db), "DEVICE": "PYTHON"}
  for k in ("PYTEST_CURRENT_TEST", "CAPTURE_PROCESS_REPLAY", "REPLAY_RUN_ID", "PYTEST_XDIST_WORKER",
            "PYTEST_XDIST_WORKER_COUNT"):
    env.pop(k, None)
  proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "xdist", "-n", "2", "--replay-capture",
                         *plugin_args(),
                         "-p", "no:cacheprovider",
                         "test_sample.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert "replay: captured" in proc.stdout and str(db) in proc.stdout
  from db import Store
  s = Store(str(db))
  caps = s.captures()
  assert len({c["run_id"] for c in caps}) == 1
  node_ids = {"test_sample.py::test_scale[1]", "test_sample.py::test_scale[2]", "test_sample.py::test_scale[3]",
              "test_sample.py::test_matmul", "test_sample.py::test_reduce"}
  for node in node_ids:
    kinds = {c["kind"] for c in caps if c["location"] == node}
    assert {"schedule", "exec"} <= kinds, (node, kinds)


def test_example_workflow_is_valid():
  """Capture once, replay N shards in a matrix, merge into one verdict (issue 16.6)."""
  wf = yaml.safe_load((REPO / ".github" / "workflows" / "replay.yml").read_text())
  jobs = wf["jobs"]
  assert set(jobs) == {"capture", "shard", "merge"}
  assert jobs["shard"]["needs"] == "capture" and jobs["merge"]["needs"] == "shard" and jobs["merge"]["if"] == "always()"
  for steps in (j["steps"] for j in jobs.values()):
    assert any(s.get("uses",
                     "").startswith("actions/setup-python") for s in steps) and "pip install" in json.dumps(steps)
  shard_steps = jobs["shard"]["steps"]
  assert any(s.get("uses", "").startswith("actions/checkout")
             and s.get("with", {}).get("fetch-depth") == 0 for s in shard_steps)
  assert jobs["shard"]["strategy"]["matrix"]["shard"] == list(range(1, int(wf["env"]["SHARDS"]) + 1))
  shard_text, merge_text = json.dumps(shard_steps), json.dumps(jobs["merge"]["steps"])
  assert ("replay diff --base origin/main --merge-base --shard ${{ matrix.shard }}/$SHARDS" in shard_text
          and "--format json" in shard_text)
  assert "replay merge shard-*.json" in merge_text
  assert "replay capture -- python -m scripts.workloads" in json.dumps(jobs["capture"]["steps"])
  assert any(s.get("uses", "").startswith("actions/upload-artifact") for s in jobs["merge"]["steps"])
  triggers = wf.get("on", wf.get(True))  # YAML 1.1 reads the key `on` as true
  assert "pull_request" in triggers


@pytest.mark.slow
@needs_cc
def test_ci_gate_script_runs_locally(repo, tmp_path):
  git(repo, "checkout", "-q", "main")
  env = {**os.environ, "PYTHONPATH": str(repo), "REPLAY_DB": str(tmp_path / "r.db"), "BASE": "main",
         "REPLAY_PYTHON": sys.executable,
         "REPLAY_HTML": str(tmp_path / "report.html")}
  env.pop("PYTEST_CURRENT_TEST", None)
  proc = subprocess.run(["bash", "scripts/ci_gate.sh", "--only", "ref_add_const"], cwd=repo, env=env,
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert (tmp_path / "report.html").read_text().startswith("<!doctype html>")


@pytest.mark.slow
@needs_cc
def test_a_capture_run_that_crashes_still_gets_a_report_of_what_it_stored(repo, tmp_path):
  git(repo, "checkout", "-q", "main")
  crash = ("from scheduler import Tensor\nprint('FAILED workload: doomed', flush=True)\n(Tensor([1.0, 2.0]) + "
           "1).realize()\n"
           "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
  proc = cli("gate", "--base", "main", "--no-coverage", "--", sys.executable, "-c", crash, db=tmp_path / "r.db",
             cwd=repo)
  assert proc.returncode == 4, proc.stdout + proc.stderr
  out = proc.stdout
  assert "kind" in out and "exec" in out   # the table of the captures that were stored
  assert "the captured command killed by signal 11" in out and "failed: FAILED workload: doomed" in out, out
  assert "FAIL: the captured command of run" in out and "the replay of what was captured: OK" in out, out


# bugs above the captured graph, which a plain replay cannot see: each must fail the gate as .ci/run runs it
ABOVE_THE_GRAPH = {
  "mul_gradient_swapped": (("scheduler/gradient.py", "Ops.MUL: lambda g, out: (out.src[1] * g, out.src[0] * g),",
                            "Ops.MUL: lambda g, out: (out.src[0] * g, out.src[1] * g),"), 3,
                           "produce different outputs"),
  "nesterov_dropped": (("scheduler/nn/optim.py",
                        "step = step + self.momentum * velocity if self.nesterov else velocity", "step = velocity"),
                       3, "produce different outputs"),
  "uint8_int8_promote_to_uint16": (("scheduler/dtype.py", "dtypes.uint8: (dtypes.int16, dtypes.uint16),",
                                    "dtypes.uint8: (dtypes.uint16,),"),
                                   3, "produce different outputs"),
  "flag_default_changed": (("scheduler/helpers.py", 'FUSE_ARANGE = ContextVar("FUSE_ARANGE", 0)',
                            'FUSE_ARANGE = ContextVar("FUSE_ARANGE", 1)'),
                           1, "run only while their module is imported"),
}


@pytest.mark.slow
@needs_cc
@pytest.mark.parametrize("name", list(ABOVE_THE_GRAPH))
def test_bugs_above_the_graph_fail_the_gate_as_ci_runs_it(repo, tmp_path, name):
  edit_args, code, reason = ABOVE_THE_GRAPH[name]
  commit_on_a(repo, name, lambda r: edit(r, *edit_args))
  proc = cli("gate", "--base", "main", "--allow-incompatible", "--", sys.executable, "-m", "scripts.workloads",
             "--only", "mlp_sgd",
             "mixed_dtypes", "ref_arange", "--no-variants", db=tmp_path / "r.db", cwd=repo)
  assert proc.returncode == code and reason in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]
