"""The corpus: every workload runs on CPU and PYTHON with equal results, training losses decrease,
and the command line lists, filters and reports failures."""
import subprocess, sys
import numpy as np
import pytest
from scheduler import Device
from scheduler.device import find_c_compiler
from scripts.workloads import WORKLOADS
from tests.conftest import REPO

MODEL_WORKLOADS = [n for n in WORKLOADS if not n.startswith("ref_")]


def run_on(device: str, name: str) -> dict:
  old = Device.DEFAULT
  Device.DEFAULT = device
  try: return WORKLOADS[name]()
  finally: Device.DEFAULT = old


@pytest.mark.slow
@pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler")
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_workload_equal_on_cpu_and_python(name):
  cpu, py = run_on("CPU", name), run_on("PYTHON", name)
  assert len(cpu["outputs"]) == len(py["outputs"])
  for a, b in zip(cpu["outputs"], py["outputs"]):
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(cpu.get("losses", []), py.get("losses", []), rtol=1e-4)


@pytest.mark.parametrize("name", ["mlp_sgd", "cnn_adam", "transformer_adamw"])
def test_training_loss_decreases(name):
  losses = WORKLOADS[name]()["losses"]
  assert losses[-1] < losses[0] and all(np.isfinite(losses))


def test_symbolic_workload_matches_numpy():
  out = WORKLOADS["symbolic_seq"]()["outputs"]
  rng = np.random.default_rng(6)
  x, w = rng.standard_normal((12, 8)).astype(np.float32), rng.standard_normal((8, 4)).astype(np.float32)
  for n, got in zip((3, 7, 12), out): np.testing.assert_allclose(got, np.maximum(x[:n] @ w, 0).sum(0), rtol=1e-4, atol=1e-5)


def test_command_line_lists_and_rejects_unknown_names():
  proc = subprocess.run([sys.executable, "-m", "scripts.workloads", "--list"], cwd=REPO, capture_output=True, text=True)
  assert proc.returncode == 0 and "mlp_sgd" in proc.stdout and "ref_matmul" in proc.stdout
  proc = subprocess.run([sys.executable, "-m", "scripts.workloads", "--only", "nope"], cwd=REPO, capture_output=True, text=True)
  assert proc.returncode == 2 and "unknown workload" in proc.stderr
  proc = subprocess.run([sys.executable, "-m", "scripts.workloads", "--only", "ref_add_const", "ref_sum_all"], cwd=REPO, capture_output=True, text=True)
  assert proc.returncode == 0 and "2/2 workloads ok" in proc.stdout
