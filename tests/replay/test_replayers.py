"""Replayers in-process: fresh buffers never merge with captured ones, and comparisons follow the policy."""
import numpy as np
from scheduler.ops import UOp, Ops, _buffer_num
from scheduler.dtype import dtypes
from replay.replayers import _fresh_buffers
from replay.compare import compare_arrays


def test_fresh_buffers_do_not_collide_with_captured_numbers():
  n = _buffer_num[0]
  dev = UOp(Ops.DEVICE, arg="PYTHON")
  # captured buffers numbered exactly as this process's next new buffers will be
  a, b = UOp(Ops.BUFFER, dtypes.float32, (dev,), (n + 1, 4)), UOp(Ops.BUFFER, dtypes.float32, (dev,), (n + 2, 4))
  graph = UOp.sink(a, b)
  out = _fresh_buffers(graph, {a: np.full(4, 1.0, np.float32), b: np.full(4, 2.0, np.float32)})
  fa, fb = out.src
  assert fa is not fb and fa not in (a, b) and fb not in (a, b)
  assert fa.buffer.numpy().tolist() == [1.0] * 4 and fb.buffer.numpy().tolist() == [2.0] * 4


def test_numeric_policy():
  ok, m = compare_arrays(np.array([1.0, np.nan, np.inf], np.float32),
                         np.array([1.0 + 1e-7, np.nan, np.inf], np.float32))
  assert ok and m["mismatches"] == 0
  ok, m = compare_arrays(np.array([1.0, 2.0], np.float32), np.array([1.0, 2.1], np.float32))
  assert not ok and m["mismatches"] == 1 and abs(m["max_abs_err"] - 0.1) < 1e-5
  ok, _ = compare_arrays(np.array([1, 2], np.int32), np.array([1, 3], np.int32))
  assert not ok
  ok, m = compare_arrays(np.array([1, 2], np.int32), np.array([1, 2], np.int64))
  assert not ok and "int64" in m["reason"]
  ok, _ = compare_arrays(np.array([np.inf], np.float32), np.array([-np.inf], np.float32))
  assert not ok
  # nan or inf against another value: the error metrics cover finite pairs, and the message says how many are not
  from replay.compare import compare_exec
  got = compare_exec({"outputs": [np.array([np.nan, 1.0, 2.0], np.float32)]},
                     {"outputs": [np.array([8e-45, 1.0, 2.5], np.float32)]})
  assert got.status == "mismatch" and "2 of 3 elements differ, max abs err 0.5" in got.diff
  assert "(1 of them nan or inf against another value)" in got.diff
  ok, _ = compare_arrays(np.array([1.0], np.float32), np.array([1.5], np.float32), {"float32": (0.5, 0.0)})
  assert ok


def test_a_capture_never_touches_the_disk_paths_it_names(tmp_path):
  """Issue 13.2: copies to DISK:<path> (and reads from one) replay against temporary files."""
  from scheduler import Tensor
  from replay.replayers import _fresh_buffers
  target = tmp_path / "sitecustomize.py"
  source = tmp_path / "source.bin"
  source.write_bytes(bytes(range(16)))
  graph = Tensor([1.0, 2.0, 3.0]).to(f"DISK:{target}").lazydata.sink(Tensor(source).to("PYTHON").lazydata)
  scratch = tmp_path / "scratch"
  scratch.mkdir()
  fresh = _fresh_buffers(graph, {}, str(scratch))
  devices = {u.arg for u in fresh.toposort if u.op.name == "DEVICE" and u.arg.startswith("DISK:")}
  assert devices and all(d.startswith(f"DISK:{scratch}") for d in devices)
  assert not target.exists()


def test_one_bad_blob_is_an_error_for_its_capture_and_the_rest_replays(tmp_path):
  """Issue 13.3: a corrupt blob does not stop the run."""
  import sqlite3, zlib
  from tests.replay.conftest import cli, capture_workloads
  db = tmp_path / "r.db"
  capture_workloads(db, "ref_add_const", "ref_matmul")
  conn = sqlite3.connect(db)
  victim, sha = conn.execute("SELECT id, input_sha FROM captures WHERE kind = 'kernel' ORDER BY id LIMIT 1").fetchone()
  conn.execute("UPDATE blobs SET data = ? WHERE sha256 = ?", (zlib.compress(b"tampered"), sha))
  conn.commit()
  proc = cli("run", db=db)
  assert proc.returncode == 4, proc.stdout + proc.stderr
  total = conn.execute("SELECT count(*) FROM captures").fetchone()[0]
  rows = conn.execute("SELECT capture_id, status, reason FROM outcomes").fetchall()
  assert len(rows) == total
  bad = [r for r in rows if r[1] != "same"]
  assert [r[0] for r in bad] == [victim] and "does not match its sha256" in bad[0][2]


def test_workers_run_under_a_memory_limit(tmp_path):
  """Issue 13.2: a capture that asks for more memory than --worker-memory allows is an error, not a dead machine."""
  import os, subprocess, sys
  from tests.conftest import REPO
  code = ("import os, resource; from replay.worker import limit_memory; limit_memory(); "
          "print(resource.getrlimit(resource.RLIMIT_AS)[0]); bytearray(600 * 1024 * 1024)")
  proc = subprocess.run([sys.executable, "-c", code],
                        env={**os.environ, "PYTHONPATH": str(REPO), "REPLAY_WORKER_MEMORY_MB": "512"},
                        capture_output=True, text=True, timeout=60)
  assert proc.stdout.split()[0] == str(512 * 1024 * 1024) and proc.returncode != 0 and "MemoryError" in proc.stderr


def test_kernel_comparison_includes_compile_options():
  from replay.compare import compare_kernel
  base = {"src": "void k() {}", "name": "E_4", "options": {"cflags": ["-O2"], "compiler": "cc 12"}}
  assert compare_kernel(base, dict(base)).status == "same"
  assert compare_kernel({"src": "void k() {}", "name": "E_4"}, base).status == "same"   # an old capture without options
  changed = compare_kernel({**base, "options": {"cflags": ["-O2", "-ffast-math"], "compiler": "cc 12"}}, base)
  assert changed.status == "changed" and "compile options changed" in changed.diff and "+cflags" in changed.diff


def test_drift_counts_other_bits_within_tolerance_in_ulps():
  a = np.array([1.0, 2.0, np.nan, 3.0, 4.0], np.float32)
  b = a.copy()
  b[0] = np.nextafter(np.float32(1), np.float32(2))                          # 1 ulp up
  b[3] = np.nextafter(np.nextafter(np.float32(3), np.float32(0)), np.float32(0))   # 2 ulp down
  b[2] = np.float32("nan")
  ok, m = compare_arrays(a, b)
  assert ok and m["drift"] == 2 and m["max_ulp"] == 2 and 0 < m["drift_max_rel_err"] < 1e-6
  ok, m = compare_arrays(a, a.copy())
  assert ok and "drift" not in m
  ok, m = compare_arrays(np.array([1.0], np.float64), np.array([1.0 + 2 ** -52], np.float64))
  assert ok and m["drift"] == 1 and m["max_ulp"] == 1
