"""DISK device: `DISK:<path>` buffers backed by an mmap of the file; serves BUFFER_VIEW and COPY only."""
from __future__ import annotations
import mmap, os
import numpy as np


def open_device(name: str) -> "DiskDevice": return DiskDevice(name)


class DiskDevice:
  def __init__(self, name: str):
    self.name, self.path = name, name[len("DISK:"):]
    self._mm = None

  def allocate(self, nbytes: int) -> np.ndarray:
    if not os.path.exists(self.path) or os.path.getsize(self.path) < nbytes:
      with open(self.path, "ab") as f:
        f.truncate(max(nbytes, os.path.getsize(self.path) if os.path.exists(self.path) else 0))
    if nbytes == 0: return np.zeros(0, dtype=np.uint8)
    fd = os.open(self.path, os.O_RDWR)
    try: self._mm = mmap.mmap(fd, os.path.getsize(self.path))
    finally: os.close(fd)
    return np.frombuffer(self._mm, dtype=np.uint8)[:nbytes]

  def compile(self, ast, name: str):
    raise RuntimeError(f"the DISK device cannot run kernels ({name}); copy the tensor to CPU or PYTHON first")

  def synchronize(self): pass
