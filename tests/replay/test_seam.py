"""The seam between the harness and the compiler: `replay/` and `db/` reach the compiler through its contract module
alone, read statically from their imports and watched at run time through a capture and a replay of every kind."""
import ast, json, os, pathlib, subprocess, sys, textwrap
from tests.conftest import REPO

SUT = ("scheduler", "runtimes")
HARNESS = ("replay", "db")


def imported_names(path: pathlib.Path) -> set[str]:
  """Every absolute module name a file imports: import statements, `__import__("x")`, `importlib.import_module("x")`."""
  names: set[str] = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Import): names |= {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
      names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0],
                                                                 ast.Constant) and isinstance(node.args[0].value, str):
      func = node.func
      called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
      if called in ("__import__", "import_module"): names.add(node.args[0].value)
  return names


def test_the_harness_imports_no_compiler_module_by_name():
  offenders = {str(path.relative_to(REPO)): sorted(n for n in imported_names(path) if n.split(".")[0] in SUT)
               for package in HARNESS for path in sorted((REPO / package).rglob("*.py"))}
  assert {k: v for k, v in offenders.items() if v} == {}


WATCH = textwrap.dedent('''
  import builtins, importlib, json, os, sys
  SUT, HARNESS, seen = ("scheduler", "runtimes"), ("replay", "db"), set()
  real_import, real_import_module = builtins.__import__, importlib.import_module
  def watched(name, globals=None, locals=None, fromlist=(), level=0):
    importer = (globals or {}).get("__name__", "")
    if level == 0 and importer.split(".")[0] in HARNESS and name.split(".")[0] in SUT: seen.add(name)
    return real_import(name, globals, locals, fromlist, level)
  def watched_module(name, package=None):
    importer = sys._getframe(1).f_globals.get("__name__", "")
    if importer.split(".")[0] in HARNESS and name.split(".")[0] in SUT: seen.add(name)
    return real_import_module(name, package)
  builtins.__import__, importlib.import_module = watched, watched_module
  import numpy as np
  from scheduler import Tensor
  x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
  ((x * 2 + 1).relu().sum(axis=1)).realize()
  from db import Store
  from replay.replayers import replay_one
  from replay.compare import schedule_text
  from replay import parts
  store, statuses = Store(), {}
  for cap in store.captures():
    args = (cap["kind"], store.get_blob(cap["input_sha"]), store.get_blob(cap["output_sha"]), json.loads(cap["flags"]))
    out = replay_one(*args, shared=store.shared_blobs(cap["id"]))
    statuses[cap["kind"]] = statuses.get(cap["kind"], []) + [out["status"]]
    if cap["kind"] == "schedule":
      schedule_text(parts.load_capture(store, cap)[1]["asts"])
      assert replay_one(*args, trace=True, shared=store.shared_blobs(cap["id"]))["trace"]
  print(json.dumps({"statuses": statuses, "imported": sorted(seen)}))
''')


def test_capture_and_replay_import_only_the_contract(tmp_path):
  env = {**os.environ, "PYTHONPATH": str(REPO), "CAPTURE_PROCESS_REPLAY": "1", "REPLAY_DB": str(tmp_path / "r.db")}
  env.pop("PYTEST_CURRENT_TEST", None)
  proc = subprocess.run([sys.executable, "-c", WATCH], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr
  found = json.loads(proc.stdout.strip().splitlines()[-1])
  assert set(found["statuses"]) == {"schedule", "kernel", "exec"}, found
  assert all(s == "same" for statuses in found["statuses"].values() for s in statuses), found
  assert found["imported"] == ["scheduler.contract"]
