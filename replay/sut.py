"""The door from the harness to the system under test (SUT): its packages and its replay contract.

The SUT is `[tool.replay] sut` of the project's pyproject.toml (the nearest one above the working directory that has a
`[tool.replay]` table, else the harness's own), or the packages a parent process passed down in `REPLAY_SUT`. Its
contract is the module `contract` of the first package (`scheduler.contract` here): the one module of the compiler
the harness imports. Every use of the compiler in `replay/` goes through `contract()`.
"""
from __future__ import annotations
import hashlib, importlib, os, pathlib, sys
from typing import Any
from replay import isolation, revisions


class NoContract(ImportError):
  """The revision on the path has no replay contract this harness can use; the message says why."""


_configured: list[tuple[str, ...]] = []


def packages() -> tuple[str, ...]:
  """The SUT's top-level packages: those passed down by the harness process that started this one, else configured."""
  passed = os.environ.get(isolation.PACKAGES_ENV)
  if passed: return tuple(name for name in passed.split(",") if name)
  if not _configured: _configured.append(revisions.sut_packages())   # read once per process
  return _configured[0]


def contract_name() -> str: return f"{packages()[0]}.contract"


_loaded: dict[str, Any] = {}


def contract() -> Any:
  """The contract module of the SUT on the path (imported once per process); NoContract when there is none."""
  name = contract_name()
  if (module := _loaded.get(name)) is not None: return module
  try: module = importlib.import_module(name)
  except ImportError as e: raise NoContract(f"this revision has no replay contract ({name}: {e})") from None
  if not isinstance(getattr(module, "VERSION", None), int) or not hasattr(module, "READS"):
    raise NoContract(f"{name} does not declare a contract VERSION and the versions it READS")
  _loaded[name] = module
  return module


def package_path(filename: str) -> str:
  """A source file of the SUT as `package/module.py`, whatever tree it lives in (a worktree of the base, this one)."""
  parts, names = filename.replace("\\", "/").split("/"), set(packages())
  for i in range(len(parts) - 1, -1, -1):
    if parts[i] in names: return "/".join(parts[i:])
  return parts[-1]


def package_dirs() -> tuple[str, ...]:
  """The folders of the SUT's packages in the tree whose contract is loaded (without importing the packages)."""
  root = pathlib.Path(os.path.abspath(contract().__file__)).parents[1]   # as frames name files: links not followed
  return tuple(str(root / name) + os.sep for name in packages())


def source_stamp() -> str:
  """The code a capturing process runs, as far as its files' metadata tells: the path, size and time of last change
  of every source file of the SUT's packages and of the harness's pickle format, and the Python version, hashed (no
  file is read). Pickles of a graph made by processes with one stamp are the same bytes."""
  from replay import serialize
  stamp = hashlib.sha256(f"{sys.version_info[:2]}|{contract().VERSION}|{serialize.FORMAT!r}".encode())
  todo = [*package_dirs(), serialize.__file__]
  while todo:
    path = todo.pop()
    try:
      if os.path.isdir(path):
        todo.extend(sorted((entry.path for entry in os.scandir(path) if entry.name != "__pycache__"), reverse=True))
      elif path.endswith(".py"):
        info = os.stat(path)
        stamp.update(f"{path}|{info.st_size}|{info.st_mtime_ns}\n".encode())
    except OSError: stamp.update(f"{path}|gone\n".encode())
  return stamp.hexdigest()
