"""NPY device: numpy arrays handed to `Tensor(...)` become buffers without a copy; nothing runs here."""
from __future__ import annotations
from scheduler.device import HostDevice


def open_device(name: str) -> HostDevice: return NpyDevice(name)


class NpyDevice(HostDevice):
  def compile(self, ast, name: str):
    raise RuntimeError("the NPY device only holds numpy inputs; kernels run on CPU or PYTHON")
