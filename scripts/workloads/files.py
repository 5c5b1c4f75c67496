"""Fixed file paths for the DISK workloads, held exclusively while a workload uses them.

The DISK device's name (its file's path) is part of the captured graph, so a workload writes to the same path in
every run: two runs then store the same payloads and an end-to-end comparison pairs them. But two runs at once (a
gate and a test, two test workers) would truncate and rewrite a file the other has memory-mapped, and a read of a
truncated mapping is SIGBUS. A workload therefore holds an exclusive lock on its folder while it runs.
"""
from __future__ import annotations
import contextlib, os, tempfile
from typing import Iterator
try: import fcntl
except ImportError: fcntl = None   # no POSIX locks (Windows): runs of the DISK workloads must not overlap


@contextlib.contextmanager
def exclusive_folder(name: str) -> Iterator[str]:
  """The folder `name` under the temporary directory (one per user), locked against other processes meanwhile."""
  folder = os.path.join(tempfile.gettempdir(), f"{name}-{os.getuid() if hasattr(os, 'getuid') else 0}")
  os.makedirs(folder, exist_ok=True)
  with open(os.path.join(folder, ".lock"), "w") as lock:
    if fcntl is not None: fcntl.flock(lock, fcntl.LOCK_EX)
    try: yield folder
    finally:
      if fcntl is not None: fcntl.flock(lock, fcntl.LOCK_UN)
