"""Keeping a replay worker honest about which code it runs: the system under test (SUT) may only be imported
from the tree the replay is about (the overlay of a base revision, or the working tree for `replay run`).

Without this, a base that lacks a package would silently import the current tree's copy (through an installed or
editable package further down `sys.path`) and every capture would replay `same`. `install` puts a finder first on
`sys.meta_path` that resolves the SUT's top-level packages only inside the tree; `foreign_modules` lists any SUT
module that nevertheless came from elsewhere. The runner passes the tree and the package names in the environment.
"""
from __future__ import annotations
import importlib.machinery, os, sys
from typing import Optional

ROOT_ENV, PACKAGES_ENV = "REPLAY_SUT_ROOT", "REPLAY_SUT"


class MissingPackage(ModuleNotFoundError):
  """The tree under test has no such package."""


class _TreeOnlyFinder:   # a meta path finder (importlib.abc costs a capturing process its import)
  def __init__(self, root: str, packages: tuple[str, ...]): self.root, self.packages = root, packages

  def find_spec(self, fullname: str, path=None, target=None) -> Optional[importlib.machinery.ModuleSpec]:
    if fullname not in self.packages: return None
    spec = importlib.machinery.PathFinder.find_spec(fullname, [self.root])
    if spec is None: raise MissingPackage(f"the revision under test has no package {fullname!r}", name=fullname)
    return spec


def settings() -> Optional[tuple[str, tuple[str, ...]]]:
  root, names = os.environ.get(ROOT_ENV), os.environ.get(PACKAGES_ENV)
  if not root or not names: return None
  return root, tuple(n for n in names.split(",") if n)


def install() -> None:
  if (found := settings()) is not None: sys.meta_path.insert(0, _TreeOnlyFinder(*found))


def foreign_modules() -> list[str]:
  """SUT modules loaded from outside the tree under test, as 'module (path)'."""
  if (found := settings()) is None: return []
  root, packages = found
  prefix = os.path.join(os.path.abspath(root), "")
  out = []
  for name, module in list(sys.modules.items()):
    if name.split(".")[0] not in packages: continue
    origin = getattr(module, "__file__", None)
    if origin and not os.path.abspath(origin).startswith(prefix): out.append(f"{name} ({origin})")
  return sorted(out)
