"""Shared test setup: the reference table, the devices to test on, and a fresh compile cache per session."""
import csv, os, pathlib
import pytest
from scheduler.device import find_c_compiler

REPO = pathlib.Path(__file__).resolve().parents[1]
SPEC = pathlib.Path(os.getenv("REFERENCE_SPEC", REPO.parent / "shared" / "spec" / "reference_workloads.tsv"))
if not SPEC.exists(): SPEC = REPO / "scripts" / "workloads" / "reference_workloads.tsv"


# every device a test runs on: PYTHON always, CPU where a C compiler exists
DEVICES = ["PYTHON"] + (["CPU"] if find_c_compiler() else [])
needs_cc = pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler")


def reference_rows() -> list[dict]:
  with open(SPEC) as f: return list(csv.DictReader(f, delimiter="\t"))


@pytest.fixture(autouse=True, scope="session")
def _compile_cache(tmp_path_factory):
  os.environ.setdefault("COMPILE_CACHE_DIR", str(tmp_path_factory.mktemp("compile_cache")))
  yield


import scheduler.schedule  # noqa: E402,F401  (sets the recursion limit before hypothesis records it)
