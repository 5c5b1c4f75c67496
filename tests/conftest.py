"""Shared test setup: the reference table and a fresh compile cache per session."""
import csv, os, pathlib
import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
SPEC = pathlib.Path(os.getenv("REFERENCE_SPEC", REPO.parent / "shared" / "spec" / "reference_workloads.tsv"))
if not SPEC.exists(): SPEC = REPO / "scripts" / "workloads" / "reference_workloads.tsv"


def reference_rows() -> list[dict]:
  with open(SPEC) as f: return list(csv.DictReader(f, delimiter="\t"))


@pytest.fixture(autouse=True, scope="session")
def _compile_cache(tmp_path_factory):
  os.environ.setdefault("COMPILE_CACHE_DIR", str(tmp_path_factory.mktemp("compile_cache")))
  yield


import scheduler.schedule  # noqa: E402,F401  (sets the recursion limit before hypothesis records it)
