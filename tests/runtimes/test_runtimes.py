"""The C runtime against the numpy runtime, the compile cache, determinism of the lowering, and the
error a failing kernel raises."""
import os, pathlib, re
import numpy as np
import pytest
from scheduler import Tensor, Device, dtypes
from scheduler.ops import Ops
from scheduler.device import find_c_compiler
from scheduler.codegen.lowerer import lower
from scheduler.codegen.naming import kernel_name
from scheduler.realize import KernelError
from tests.conftest import reference_rows, needs_cc
from tests.scheduler.test_reference_workloads import build

ROWS = [r for r in reference_rows() if r["n_kernels"] != "ERR"]


def outputs_on(device: str, code: str) -> list[np.ndarray]:
  old = Device.DEFAULT
  Device.DEFAULT = device
  try:
    out = build(code)
    Tensor.realize(*out)
    return [o.numpy() for o in out]
  finally: Device.DEFAULT = old


@needs_cc
@pytest.mark.parametrize("row", ROWS, ids=[r["name"] for r in ROWS])
def test_cpu_matches_python_elementwise(row):
  for c, p in zip(outputs_on("CPU", row["tensor_code"]), outputs_on("PYTHON", row["tensor_code"])):
    assert c.dtype == p.dtype and c.shape == p.shape
    np.testing.assert_allclose(c.astype(np.float64), p.astype(np.float64), rtol=1e-5, atol=1e-6)


@needs_cc
def test_same_ast_renders_the_same_source_and_name():
  a = Tensor(np.arange(16, dtype=np.float32).reshape(4, 4)).realize()
  ast = ((a * 2).sum(1)).schedule()[-1].ast
  src1, prg1 = Device["CPU"].render(ast)
  src2, prg2 = Device["CPU"].render(ast)
  assert src1 == src2 and prg1.name == prg2.name == kernel_name(ast) == "r_4_4"
  assert lower(ast).listing() == lower(ast).listing()


@needs_cc
def test_compile_cache_builds_a_kernel_once(tmp_path, monkeypatch):
  monkeypatch.setenv("COMPILE_CACHE_DIR", str(tmp_path))
  calls = []
  import runtimes.cpu as cpu
  real = cpu._compile_c
  monkeypatch.setattr(cpu, "_compile_c", lambda src, out: (calls.append(1), real(src, out)))
  ast = (Tensor(np.ones(7, np.float32)).realize() * 3.25).schedule()[-1].ast
  Device["CPU"].compile(ast, "x")
  Device["CPU"].compile(ast, "x")
  assert len(calls) == 1 and len(list((tmp_path / "cpu").glob("*.so"))) == 1


@needs_cc
def test_the_kernels_of_a_schedule_build_together_before_the_first_runs(tmp_path, monkeypatch):
  """Issue 16.3: all new kernels of a schedule are built at once (in parallel threads when not as one unit), each
  exactly once."""
  import threading
  import runtimes.cpu as cpu
  from scheduler import realize
  monkeypatch.setenv("COMPILE_CACHE_DIR", str(tmp_path))
  monkeypatch.setattr(cpu, "UNIT_MIN_KERNELS", 1000)   # one compiler process per kernel
  builders, real = [], cpu._compile_c
  monkeypatch.setattr(cpu, "_compile_c", lambda src, out: (builders.append(threading.get_ident()), real(src, out)))
  monkeypatch.setattr(realize, "_program_cache", {})
  old = Device.DEFAULT
  Device.DEFAULT = "CPU"
  try:
    x = Tensor(np.arange(24, dtype=np.float32).reshape(4, 6)).realize()
    outs = [(x * 1.5).sum(1), (x + 2).max(0), (x - 1).exp().sum(), x.T.contiguous() * 3]
    sched = Tensor.schedule(*outs)
    ran = []
    real_get = realize.get_program
    monkeypatch.setattr(realize, "get_program", lambda d, ast: (ran.append(len(builders)), real_get(d, ast))[1])
    realize.run_schedule(sched)
  finally: Device.DEFAULT = old
  kernels = sum(1 for si in sched if si.ast.op is Ops.SINK)
  assert len(builders) == kernels >= 4 and ran[0] == kernels   # everything built before the first kernel ran
  np.testing.assert_allclose(outs[0].numpy(), (np.arange(24).reshape(4, 6) * 1.5).sum(1))


@needs_cc
def test_a_few_new_kernels_build_as_one_unit(tmp_path, monkeypatch):
  """Fewer than KERNELS_PER_UNIT new kernels of a schedule cost one compiler process, not one each."""
  import runtimes.cpu as cpu
  from scheduler import realize
  monkeypatch.setenv("COMPILE_CACHE_DIR", str(tmp_path))
  builds, real = [], cpu._compile_c
  monkeypatch.setattr(cpu, "_compile_c", lambda src, out: (builds.append(src.count("void ")), real(src, out)))
  monkeypatch.setattr(realize, "_program_cache", {})
  x = Tensor(np.arange(24, dtype=np.float32).reshape(4, 6), device="CPU").realize()
  outs = [(x * 3).sum(1), (x + 5).max(0), x.T.contiguous() * 7]
  sched = Tensor.schedule(*outs)
  realize.run_schedule(sched)
  kernels = sum(1 for si in sched if si.ast.op is Ops.SINK)
  assert 2 <= kernels < cpu.KERNELS_PER_UNIT and builds == [kernels]
  np.testing.assert_allclose(outs[1].numpy(), (np.arange(24).reshape(4, 6) + 5).max(0))


@needs_cc
def test_kernels_built_for_two_instruction_sets_share_a_unit(tmp_path, monkeypatch):
  """A vector kernel is a dispatcher and two versions (`<kernel>__avx2`, `<kernel>__base`); kernels of one name in a
  unit each rename all three, and each computes its own result whichever version the CPU runs."""
  import runtimes.cpu as cpu
  from scheduler import realize
  from scheduler.codegen import lowerer
  monkeypatch.setenv("COMPILE_CACHE_DIR", str(tmp_path))
  monkeypatch.setattr(lowerer, "UPCAST_MIN_WORK", 0)
  monkeypatch.setattr(cpu, "WIDE_VECTOR", 8)
  builds, real = [], cpu._compile_c
  monkeypatch.setattr(cpu, "_compile_c", lambda src, out: (builds.append(src), real(src, out)))
  monkeypatch.setattr(realize, "_program_cache", {})
  rng = np.random.default_rng(3)
  a, b = rng.standard_normal((16, 24)).astype(np.float32), rng.standard_normal((24, 32)).astype(np.float32)
  x, y = Tensor(a, device="CPU").realize(), Tensor(b, device="CPU").realize()
  z = Tensor(b[::-1].copy(), device="CPU").realize()
  outs = [x @ y, (x @ z).relu() * 3]   # two kernels of the same name
  sched = Tensor.schedule(*outs)
  realize.run_schedule(sched)
  assert len(builds) == 1 and builds[0].count('__attribute__((target("avx2")))') == 2, builds
  np.testing.assert_allclose(outs[0].numpy(), a @ b, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(outs[1].numpy(), np.maximum(a @ b[::-1], 0) * 3, rtol=1e-5, atol=1e-5)


@needs_cc
def test_many_new_kernels_build_as_one_translation_unit_per_core(tmp_path, monkeypatch):
  """Issue 16.3: a schedule with many new kernels costs one compiler process per core, not one per kernel; the same
  schedule built again (a fresh process: an empty program cache) takes the units from the disk cache."""
  import runtimes.cpu as cpu
  from scheduler import realize
  monkeypatch.setenv("COMPILE_CACHE_DIR", str(tmp_path))
  builds, real = [], cpu._compile_c
  monkeypatch.setattr(cpu, "_compile_c", lambda src, out: (builds.append(src.count("void ")), real(src, out)))
  old = Device.DEFAULT
  Device.DEFAULT = "CPU"
  try:
    for attempt in range(2):
      monkeypatch.setattr(realize, "_program_cache", {})
      x = Tensor(np.arange(24, dtype=np.float32).reshape(4, 6)).realize()
      outs = [(x * k).sum(1) + k for k in range(1, 11)]   # ten different kernels
      sched = Tensor.schedule(*outs)
      realize.run_schedule(sched)
      for k, o in enumerate(outs, start=1):
        np.testing.assert_allclose(o.numpy(), (np.arange(24).reshape(4, 6) * k).sum(1) + k)
      if attempt == 0:
        kernels = sum(1 for si in sched if si.ast.op is Ops.SINK)
        assert kernels >= cpu.UNIT_MIN_KERNELS and len(builds) <= (os.cpu_count()
                                                                   or 1) and sum(builds) >= kernels, builds
        first = len(builds)
    one_kernel = next(si.ast for si in sched if si.ast.op is Ops.SINK)
    Device["CPU"].compile(one_kernel, "alone")   # alone (as a replay worker needs it): found inside its unit
  finally: Device.DEFAULT = old
  assert len(builds) == first   # the second time, and the kernel alone, compiled nothing


@needs_cc
def test_compile_progress_is_reported_when_asked(tmp_path):
  import subprocess, sys
  from tests.conftest import REPO
  code = ("from scheduler import Tensor; import numpy as np; x = Tensor(np.ones(8, np.float32)); print(((x * 2).sum() "
          "+ (x + 3).max()).item())")
  env = {**os.environ, "COMPILE_CACHE_DIR": str(tmp_path), "COMPILE_PROGRESS": "1", "PYTHONPATH": str(REPO)}
  first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=REPO)
  assert first.returncode == 0 and first.stdout.strip() == "20.0"
  assert re.search(r"compiled [1-9]\d* kernels \(.* s of compiler time, \d+ in parallel\), 0 from the cache",
                   first.stderr), first.stderr
  again = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=REPO)
  assert re.search(r"compiled 0 kernels .*, [1-9]\d* from the cache", again.stderr), again.stderr
  quiet = subprocess.run([sys.executable, "-c", code], env={**env, "COMPILE_PROGRESS": "0"}, capture_output=True,
                         text=True, cwd=REPO)
  assert "compiled" not in quiet.stderr


@needs_cc
def test_compiler_failure_names_the_kernel_and_device(monkeypatch):
  monkeypatch.setenv("CC", "false")
  monkeypatch.setenv("COMPILE_CACHE_DIR", str(pathlib.Path(os.environ["COMPILE_CACHE_DIR"]) / "failing"))
  old = Device.DEFAULT
  Device.DEFAULT = "CPU"
  try:
    t = Tensor(np.ones(5, np.float32)).realize() * 17.5
    with pytest.raises(KernelError, match=r"kernel E_5 failed to compile on CPU"): t.realize()
  finally: Device.DEFAULT = old


def test_disk_tensor_reads_a_file(tmp_path):
  p = tmp_path / "data.bin"
  np.arange(10, dtype=np.float32).tofile(p)
  t = Tensor(p, dtype=dtypes.float32)
  assert t.device.startswith("DISK:")
  np.testing.assert_array_equal(t.to("PYTHON").numpy(), np.arange(10, dtype=np.float32))
  np.testing.assert_array_equal(t[2:5].to("PYTHON").numpy(), np.arange(2, 5, dtype=np.float32))


def test_numpy_input_is_not_copied():
  x = np.arange(6, dtype=np.float32)
  t = Tensor(x, device="NPY")
  assert np.shares_memory(t.lazydata.base.buffer.as_array(),
                          x) or t.lazydata.base.buffer.as_array().ctypes.data == x.ctypes.data


def test_buffer_views_share_memory_and_hold_their_base():
  import gc
  from scheduler.device import Buffer, DeviceError
  base = Buffer("PYTHON", 8, dtypes.float32).allocate()
  view = base.view(4, dtypes.float32, 8)
  view.copyin(np.arange(4, dtype=np.float32))
  assert base.numpy().tolist() == [0, 0, 0, 1, 2, 3, 0, 0] and base.view_count == 1
  with pytest.raises(DeviceError, match="1 live view"): base.deallocate()
  with pytest.raises(DeviceError, match="no memory of its own"): view.deallocate()
  del view
  gc.collect()
  base.deallocate()
  assert not base.is_allocated()
  with pytest.raises(ValueError, match="exceeds base"): base.view(8, dtypes.float32, 4)


@pytest.mark.parametrize("field", ["variable", "kernel name", "buffer index", "constant"])
def test_c_renderer_refuses_names_and_values_that_are_not_plain_c(field):
  """Issue 13.2: a crafted capture cannot put C (or preprocessor lines) into the source it makes us compile."""
  from scheduler.codegen.lowerer import Program, Instr
  from scheduler.ops import Ops
  from runtimes.cpu import render_c, UnsafeSourceError
  evil = 'i) {}\n#include <stdlib.h>\n__attribute__((constructor)) void f(void) { system("id"); } void g(int j'
  name, var, index, const = "E_1", "i", 0, 1.0
  if field == "variable": var = evil
  elif field == "kernel name": name = evil
  elif field == "buffer index": index = "0] = 0; system(\"id\"); data0[0"
  else: const = '1.0f; system("id")'
  instrs = [Instr(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(1), (), index),
            Instr(Ops.DEFINE_VAR, dtypes.int32, (), (var, 1, 10)),
            Instr(Ops.CONST, dtypes.float32, (), const)]
  prg = Program(name, instrs, [(index, dtypes.float32, 1)], [(var, 1, 10)])
  with pytest.raises(UnsafeSourceError, match="refusing|not an index|not a number"): render_c(prg)


def test_symbolic_kernels_still_render_their_variables():
  from scheduler import Variable
  from runtimes.cpu import render_c
  a = Tensor.arange(10).float().realize()
  sched, var_vals = a.shrink(((0, Variable("n", 1, 10).bind(4)),)).sum().schedule_with_vars()
  assert "int n" in render_c(lower(sched[-1].ast)) and list(var_vals.values()) == [4]


def test_small_kernels_build_unoptimized_and_large_ones_optimized(monkeypatch):
  """SMALL_KERNEL_STEPS: gcc's optimize("O0") on the kernel function of a small kernel only; both compute the same."""
  import runtimes.cpu as cpu
  from scheduler import realize
  def source(t: Tensor) -> str:
    return next(Device["CPU"].render(si.ast)[0] for si in t.schedule() if si.ast.op is Ops.SINK)
  small, large = Tensor.empty(16, 16, device="CPU").sum(1), Tensor.empty(256, 256, device="CPU").sum(1)
  assert '__attribute__((optimize("O0"))) void' in source(small) and "optimize" not in source(large)
  data = np.arange(256 * 256, dtype=np.float32).reshape(256, 256) % 7
  want = data.sum(1)
  if find_c_compiler() is None: return
  np.testing.assert_allclose(Tensor(data, device="CPU").sum(1).numpy(), want)
  monkeypatch.setattr(cpu, "SMALL_KERNEL_STEPS", 1 << 30)
  monkeypatch.setattr(realize, "_program_cache", {})
  assert "optimize" in source(Tensor(data, device="CPU").sum(1))
  np.testing.assert_allclose(Tensor(data, device="CPU").sum(1).numpy(), want)   # the same kernel at -O0


def test_python_device_runs_large_kernels_in_slices(monkeypatch):
  """A kernel that visits more positions than SLICE_POSITIONS runs in slices of an output axis, with the same result
  (a cumsum of 2^21 elements needed 24 GB in one piece)."""
  import runtimes.python as rp
  from scheduler import Tensor
  monkeypatch.setattr(rp, "SLICE_POSITIONS", 50)
  rng = np.random.default_rng(1)
  a, b = rng.standard_normal((9, 7)).astype(np.float32), rng.standard_normal((7, 5)).astype(np.float32)
  x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
  ta, tb, tx = (Tensor(v, device="PYTHON") for v in (a, b, x))
  np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(ta.sum(0).numpy(), a.sum(0), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(ta.max(1).numpy(), a.max(1))
  np.testing.assert_allclose(ta.cumsum(1).numpy(), np.cumsum(a, 1), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(ta.pad(((1, 2), (0, 3)), value=2.0).exp().numpy(),
                             np.exp(np.pad(a, ((1, 2), (0, 3)), constant_values=2.0)), rtol=1e-6)
  np.testing.assert_allclose(tx.max_pool2d(kernel_size=(2, 2)).numpy(), x.reshape(2, 3, 3, 2, 3, 2).max(axis=(3, 5)))
  np.testing.assert_allclose(Tensor.arange(200, device="PYTHON").reshape(10, 20).sum(1).numpy(),
                             np.arange(200).reshape(10, 20).sum(1))
