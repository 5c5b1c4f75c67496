"""Every row of the reference table: kernel count, item kinds, counts under each flag, the ERR row,
and the first output's shape and checksum on CPU and PYTHON."""
import numpy as np, pathlib, pytest
from scheduler import Tensor, dtypes, Variable, Context, Device, nn
from scheduler.realize import run_schedule
from tests.conftest import reference_rows, DEVICES

ROWS = reference_rows()
# columns are named n_kernels_<FLAG><value>, e.g. n_kernels_SPLIT_REDUCEOP0
FLAG_COLUMNS = [c for c in ROWS[0] if c.startswith("n_kernels_")]


def build(code: str):
  env = {"Tensor": Tensor, "dtypes": dtypes, "np": np, "nn": nn, "Variable": Variable, "pathlib": pathlib}
  exec(code, env)
  out = env["out"]
  return out if isinstance(out, tuple) else (out,)


@pytest.fixture
def default_device(request):
  old = Device.DEFAULT
  Device.DEFAULT = request.param
  yield request.param
  Device.DEFAULT = old


def schedule_row(row):
  out = build(row["tensor_code"])
  sched, var_vals = out[0].schedule_with_vars(*out[1:])
  return out, sched, var_vals


@pytest.mark.parametrize("default_device", ["CPU"], indirect=True)
@pytest.mark.parametrize("row", ROWS, ids=[r["name"] for r in ROWS])
def test_kernel_count_and_kinds(row, default_device):
  if row["n_kernels"] == "ERR":
    with pytest.raises(RuntimeError, match=row["error"].split(": ", 2)[-1].rstrip(".")): schedule_row(row)
    return
  _, sched, _ = schedule_row(row)
  assert len(sched) == int(row["n_kernels"])
  assert ",".join(si.kind for si in sched) == row["item_kinds"]


@pytest.mark.parametrize("default_device", ["CPU"], indirect=True)
@pytest.mark.parametrize("column", FLAG_COLUMNS)
@pytest.mark.parametrize("row", ROWS, ids=[r["name"] for r in ROWS])
def test_kernel_count_under_flag(row, column, default_device):
  expected = row[column]
  flag_value = column[len("n_kernels_"):]
  flag, value = flag_value.rstrip("0123456789"), int(flag_value[len(flag_value.rstrip("0123456789")):])
  with Context(**{flag: value}):
    if expected == "ERR":
      with pytest.raises(RuntimeError): schedule_row(row)
      return
    _, sched, _ = schedule_row(row)
  assert len(sched) == int(expected)


@pytest.mark.parametrize("default_device", DEVICES, indirect=True)
@pytest.mark.parametrize("row", [r for r in ROWS if r["n_kernels"] != "ERR"],
                         ids=[r["name"] for r in ROWS if r["n_kernels"] != "ERR"])
def test_result_checksum(row, default_device):
  out, sched, var_vals = schedule_row(row)
  run_schedule(sched, var_vals)
  result = out[0].numpy()
  assert tuple(result.shape) == tuple(int(d) for d in row["out0_shape"].strip("()").split(",") if d)
  expected = float(row["out0_checksum"])
  assert result.astype(np.float64).sum() == pytest.approx(expected, rel=1e-4, abs=1e-4)


@pytest.mark.parametrize("default_device", ["CPU"], indirect=True)
def test_every_ast_passes_the_kernel_spec(default_device):
  from scheduler.spec import type_verify, ast_spec
  for row in ROWS:
    if row["n_kernels"] == "ERR": continue
    _, sched, _ = schedule_row(row)
    for si in sched:
      if si.ast.op.name == "SINK": type_verify(list(si.ast.toposort), ast_spec)


@pytest.mark.parametrize("default_device", DEVICES, indirect=True)
@pytest.mark.parametrize("column", FLAG_COLUMNS)
@pytest.mark.parametrize("row", [r for r in ROWS if r["n_kernels"] != "ERR"],
                         ids=[r["name"] for r in ROWS if r["n_kernels"] != "ERR"])
def test_result_checksum_under_flag(row, column, default_device):
  """Issue 11.4: every flag column also computes the reference result (counts alone hid D1)."""
  if row[column] == "ERR": pytest.skip("the reference cannot schedule this row under the flag")
  flag_value = column[len("n_kernels_"):]
  flag = flag_value.rstrip("0123456789")
  with Context(**{flag: int(flag_value[len(flag):])}):
    out, sched, var_vals = schedule_row(row)
    run_schedule(sched, var_vals)
  result = out[0].numpy()
  assert result.astype(np.float64).sum() == pytest.approx(float(row["out0_checksum"]), rel=1e-4, abs=1e-4)
