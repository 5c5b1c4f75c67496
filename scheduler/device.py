"""Devices and buffers: the registry that finds `runtimes/<name>.py` by device name, `Buffer`, and the
base classes and on-disk cache that the runtimes implement.

Sits below the scheduler's realize step; the scheduler only ever names devices as strings.
"""
from __future__ import annotations
import atexit, concurrent.futures, hashlib, importlib, os, pathlib, shutil, sys, tempfile, threading, time, weakref
from typing import Any, Optional
import numpy as np
from scheduler.dtype import DType, to_np_dtype
from scheduler.helpers import RECONSTRUCTORS


class DeviceError(RuntimeError):
  """A device could not be opened, or a buffer operation is not possible on it."""


class _Device:
  """`Device["CPU"]` opens (once) the runtime for a device name; `Device.DEFAULT` is the default name."""
  _names = ("CPU", "PYTHON", "NPY", "DISK")

  def __init__(self):
    self._opened: dict[str, Any] = {}
    self._default: Optional[str] = None

  @staticmethod
  def canonicalize(device: Optional[str]) -> str:
    if device is None: return Device.DEFAULT
    if not isinstance(device, str): raise TypeError(f"device must be a string, got {device!r}")
    if device.upper().startswith("DISK:"): return "DISK:" + device[5:]
    dev = device.split(":")[0].upper()
    if dev not in _Device._names:
      raise DeviceError(f"unknown device {device!r}; known devices: {', '.join(_Device._names)}")
    return dev

  def __getitem__(self, name: str):
    name = self.canonicalize(name)
    if name not in self._opened:
      base = name.split(":")[0]
      module = importlib.import_module(f"runtimes.{base.lower()}")
      self._opened[name] = module.open_device(name)
    return self._opened[name]

  @property
  def DEFAULT(self) -> str:
    if self._default is None:
      env = os.getenv("DEVICE")
      if env: self._default = self.canonicalize(env)
      elif find_c_compiler() is not None: self._default = "CPU"
      else:
        print("warning: no C compiler found (set CC); using the PYTHON (numpy) device", file=sys.stderr)
        self._default = "PYTHON"
    return self._default

  @DEFAULT.setter
  def DEFAULT(self, name: str): self._default = self.canonicalize(name)


Device = _Device()


def find_c_compiler() -> Optional[str]:
  cc = os.getenv("CC", "cc")
  return shutil.which(cc)


class Buffer:
  """Memory of `size` elements of `dtype` on a device, allocated on first use; views share their base's memory."""
  def __init__(self, device: str, size: int, dtype: DType, opaque: Any = None, base: Optional[Buffer] = None,
               offset: int = 0):
    if size < 0: raise ValueError(f"buffer size must be non-negative, got {size}")
    self.device, self.size, self.dtype, self.offset = device, size, dtype, offset
    self._base = base
    self._mem: Optional[np.ndarray] = None  # flat uint8 memory
    self.view_count = 0  # live views of this (base) buffer: memory is not freed under them
    # set while a schedule that writes this buffer has been made (tensors already point here) but has not run; a string
    # names what the buffer is, for the error a reader gets
    self.pending_write: bool | str = False
    if base is not None:
      if offset + self.nbytes > base.nbytes:
        raise ValueError(f"buffer view of {self.nbytes} bytes at {offset} exceeds base of {base.nbytes}")
      base.view_count += 1
      weakref.finalize(self, base._view_gone)
    if opaque is not None: self.allocate(opaque)

  @property
  def base(self) -> Buffer: return self._base.base if self._base is not None else self
  @property
  def nbytes(self) -> int: return self.size * self.dtype.itemsize

  def is_allocated(self) -> bool: return self._base.is_allocated() if self._base is not None else self._mem is not None

  def _view_gone(self) -> None: self.view_count -= 1

  def deallocate(self) -> None:
    """Free the memory; refused while views of it are alive."""
    if self._base is not None: raise DeviceError("a buffer view has no memory of its own to free; free its base")
    if self.view_count: raise DeviceError(f"cannot free a buffer with {self.view_count} live view(s)")
    self._mem = None

  def ensure_allocated(self) -> Buffer: return self if self.is_allocated() else self.allocate()

  def allocate(self, opaque: Any = None) -> Buffer:
    if self._base is not None:
      self._base.ensure_allocated()
      return self
    if opaque is not None:
      arr = np.ascontiguousarray(opaque) if isinstance(opaque, np.ndarray) else np.frombuffer(opaque, dtype=np.uint8)
      mem = arr.reshape(-1).view(np.uint8)
      if mem.nbytes != self.nbytes: raise ValueError(f"buffer of {self.nbytes} bytes given {mem.nbytes} bytes")
      self._mem = mem
    else:
      self._mem = Device[self.device].allocate(self.nbytes)
    return self

  @property
  def mem(self) -> np.ndarray:
    """The flat bytes of this buffer (a view into the base's memory)."""
    if self._base is not None: return self._base.mem[self.offset:self.offset + self.nbytes]
    if self._mem is None: raise DeviceError(f"buffer on {self.device} of {self.size} {self.dtype} is not allocated")
    return self._mem

  def numpy(self) -> np.ndarray:
    """A copy of the contents as a 1-D numpy array of the buffer's dtype."""
    return self.mem.view(to_np_dtype(self.dtype)).copy()

  def as_array(self) -> np.ndarray:
    """The contents as a writable 1-D numpy array sharing memory with the buffer."""
    return self.mem.view(to_np_dtype(self.dtype))

  def copyin(self, data: np.ndarray | bytes | memoryview) -> Buffer:
    if isinstance(data, np.ndarray): src = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    else: src = np.frombuffer(bytes(data), dtype=np.uint8)
    if src.nbytes != self.nbytes: raise ValueError(f"copyin of {src.nbytes} bytes into a buffer of {self.nbytes}")
    self.ensure_allocated()
    self.mem[:] = src
    return self

  def view(self, size: int, dtype: DType, offset: int) -> Buffer:
    """A buffer over part of this one's memory: `offset` in bytes."""
    return Buffer(self.device, size, dtype, base=self.base, offset=self.offset + offset)

  def __repr__(self):
    return f"<buf device:{self.device} size:{self.size} dtype:{self.dtype}" + (f" offset:{self.offset}"
                                                                               if self._base is not None else "") + ">"

  def __reduce__(self):
    data = self.numpy() if self.is_allocated() else None
    return RECONSTRUCTORS["buffer"], (self.device, self.size, self.dtype.name, data)


class HostDevice:
  """A device whose memory is host memory (numpy bytes): the base of CPU, PYTHON and NPY."""
  def __init__(self, name: str): self.name = name
  def allocate(self, nbytes: int) -> np.ndarray: return np.zeros(max(nbytes, 0), dtype=np.uint8)
  def synchronize(self): pass


# ***** the on-disk cache of compiled programs *****

def cache_dir() -> pathlib.Path:
  root = os.getenv("COMPILE_CACHE_DIR") or os.path.join(os.getenv("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                                                        "process-replay")
  return pathlib.Path(root)


def cache_path(kind: str, source: str) -> pathlib.Path:
  """Where `cached_build` keeps the product of `source` (it may not exist yet)."""
  return cache_dir() / kind / f"{hashlib.sha256(source.encode()).hexdigest()}.so"


def cached_build(kind: str, source: str, build, kernels: int = 1) -> pathlib.Path:
  """The path of `build(source, out_path)`'s product, built at most once per source hash (also across processes);
  `kernels` is how many kernels the source holds (for the build counts)."""
  path = cache_path(kind, source)
  folder = path.parent
  folder.mkdir(parents=True, exist_ok=True)
  if path.exists():
    BUILDS.record(built=False, kernels=kernels)
    return path
  t0 = time.perf_counter()
  fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
  os.close(fd)
  try:
    build(source, tmp)
    os.replace(tmp, path)  # atomic: a concurrent builder never sees a half-written file
  finally:
    if os.path.exists(tmp): os.unlink(tmp)
  BUILDS.record(built=True, seconds=time.perf_counter() - t0, kernels=kernels)
  return path


def build_all(kind: str, sources: list[Optional[str]], build,
              kernels: Optional[list[int]] = None) -> list[pathlib.Path | Exception | None]:
  """`cached_build` of many sources at once, in parallel threads (each build is a compiler process); a failure is
  that source's exception, a None source stays None."""
  todo = [i for i, src in enumerate(sources) if src is not None]
  out: list[pathlib.Path | Exception | None] = [None] * len(sources)
  def one(i: int):
    try: out[i] = cached_build(kind, sources[i], build, kernels[i] if kernels else 1)   # type: ignore[arg-type]
    except Exception as e: out[i] = e
  workers = min(len(todo), os.cpu_count() or 1)
  if workers <= 1:
    for i in todo: one(i)
  else:
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool: list(pool.map(one, todo))
  return out


class BuildStats:
  """Kernels built and found in the cache by this process. With COMPILE_PROGRESS=1 the builds are reported on
  stderr as they happen (one updating line on a terminal, a line every 50 builds otherwise) and summed up at exit."""
  def __init__(self):
    self.lock = threading.Lock()
    self.built = self.cached = 0
    self.seconds = 0.0
    self.reported_at = 0.0
    self.reported_bucket = 0
    self.registered = False

  def record(self, built: bool, seconds: float = 0.0, kernels: int = 1) -> None:
    with self.lock:
      if built: self.built, self.seconds = self.built + kernels, self.seconds + seconds
      else: self.cached += kernels
      if os.getenv("COMPILE_PROGRESS", "0") in ("", "0"): return
      if not self.registered:
        self.registered = True
        atexit.register(self.summary)
      if built: self._progress()

  def _progress(self) -> None:
    terminal = sys.stderr.isatty()
    now = time.monotonic()
    if terminal and now - self.reported_at > 0.2:
      self.reported_at = now
      sys.stderr.write(f"\rcompiling kernels: {self.built} built ({self.seconds:.1f} s of compiler time), "
                       f"{self.cached} from the cache ")
      sys.stderr.flush()
    elif not terminal and self.built // 50 > self.reported_bucket:
      self.reported_bucket = self.built // 50
      sys.stderr.write(f"compiling kernels: {self.built} built so far ({self.seconds:.1f} s of compiler time), "
                       f"{self.cached} from the cache\n")

  def summary(self) -> None:
    if self.built or self.cached:
      lead = "\r" if sys.stderr.isatty() else ""
      sys.stderr.write(f"{lead}compiled {self.built} kernels ({self.seconds:.1f} s of compiler time, "
                       f"{os.cpu_count() or 1} in parallel), "
                       f"{self.cached} from the cache {cache_dir()}\n")


BUILDS = BuildStats()
