"""pytest plugin (entry point `pytest11`): `pytest --replay-capture` (or CAPTURE_PROCESS_REPLAY=1) captures
every compiler call of the session with test node ids as locations, into one run, and prints one line
at the end: captures by kind and the database. Works under pytest-xdist: every worker writes into the
same run of the same database.

Nothing of the harness is imported unless capture is on.
"""
from __future__ import annotations
import os


def pytest_addoption(parser):
  group = parser.getgroup("replay", "process replay")
  group.addoption("--replay-capture", action="store_true", default=False,
                  help="capture every schedule, kernel render and realize of the compiler into the replay database")


def _capturing(config) -> bool:
  return bool(config.getoption("replay_capture", False)) or os.getenv("CAPTURE_PROCESS_REPLAY", "0") not in ("", "0")


def pytest_configure(config):
  if not _capturing(config): return
  os.environ["CAPTURE_PROCESS_REPLAY"] = "1"
  import sys
  from replay import sut
  # a compiler imported before this hook read the environment already: its contract turns capture on
  if sut.contract_name().rsplit(".", 1)[0] in sys.modules: sut.contract().enable_capture()
  if hasattr(config, "workerinput"): return  # an xdist worker: the controller made the run and passed it down
  if not os.getenv("REPLAY_RUN_ID"):
    import pytest
    from db import Store, StoreError
    from replay.capture import run_info, this_command
    try: store = Store()
    except (StoreError, OSError) as e:
      raise pytest.UsageError(f"replay capture: cannot use the replay database: {e}") from None
    os.environ["REPLAY_RUN_ID"] = str(store.add_run(**run_info(this_command())))
    os.environ["REPLAY_DB"] = os.path.abspath(store.path)
    config._replay_store = store


def pytest_sessionfinish(session, exitstatus):
  if not _capturing(session.config): return
  from replay.capture import flush
  flush()   # an xdist worker's captures are in the database before the controller counts them


def pytest_terminal_summary(terminalreporter, exitstatus, config):
  store = getattr(config, "_replay_store", None)
  if store is None: return
  run_id = int(os.environ["REPLAY_RUN_ID"])
  store.finish_run(run_id)
  counts = store.capture_counts(run_id)
  terminalreporter.write_line(f"replay: captured {counts.get('schedule', 0)} schedule, {counts.get('kernel', 0)} "
                              f"kernel, "
                              f"{counts.get('exec', 0)} exec in run {run_id} of {store.path}")
