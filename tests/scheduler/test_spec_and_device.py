"""Specs name the UOp that breaks them; tensor graphs of the reference rows pass the tensor spec;
the default device falls back to PYTHON with a warning when there is no C compiler."""
import os, subprocess, sys
import pytest
from scheduler import dtypes
from scheduler.ops import UOp, Ops
from scheduler.spec import type_verify, tensor_uop_spec, ast_spec, SpecError
from tests.conftest import reference_rows, REPO
from tests.scheduler.test_reference_workloads import build


def test_reference_tensor_graphs_pass_the_tensor_spec():
  for row in reference_rows():
    if row["n_kernels"] == "ERR": continue
    out = build(row["tensor_code"])
    type_verify(list(UOp.sink(*[o.lazydata for o in out]).toposort), tensor_uop_spec)


def test_spec_error_names_the_uop():
  bad = UOp(Ops.RANGE, dtypes.int32, (), 0).sink()
  with pytest.raises(SpecError, match=r"UOp 0 fails the spec: Ops.RANGE"): type_verify(list(bad.toposort), ast_spec)
  wrong_arity = UOp(Ops.ADD, dtypes.int32, (UOp.const(dtypes.int32, 1),))
  with pytest.raises(SpecError, match="Ops.ADD"): type_verify([wrong_arity], tensor_uop_spec)


def test_default_device_without_a_c_compiler_is_python_with_a_warning():
  env = {k: v for k, v in os.environ.items() if k != "DEVICE"}
  env.update(CC="/nonexistent/cc", PYTHONPATH=str(REPO))
  code = "from scheduler import Device, Tensor\nprint(Device.DEFAULT, (Tensor([1.0, 2.0]) * 3).tolist())"
  proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
  assert proc.stdout.strip() == "PYTHON [3.0, 6.0]"
  assert proc.stderr.count("\n") == 1 and "no C compiler" in proc.stderr
  proc = subprocess.run([sys.executable, "-c", code], env={**env, "DEVICE": "TPU"}, capture_output=True, text=True)
  assert proc.returncode != 0 and "unknown device 'TPU'" in proc.stderr
