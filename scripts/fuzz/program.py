"""A generated program: Tensor code and the numpy code that computes what it must give, line by line.

Made by `scripts/fuzz/generate.py`, run by `scripts/fuzz/run.py`. A program is text on both sides, so what runs
is exactly what a failure prints: `source()` is a standalone pytest file that reproduces it.
"""
from __future__ import annotations
import math
from dataclasses import dataclass, field


@dataclass
class Check:
  """One comparison: Tensor expression `tensor` against numpy expression `expected`, as `dtype`, with an absolute
  tolerance (floats; 0 means the dtype's default). `across_devices` checks equality of devices instead of numpy."""
  tensor: str
  expected: str
  dtype: str
  atol: float = 0.0
  rtol: float = None
  across_devices: bool = False
  scaled: bool = False          # atol relative to the largest |expected| (finite differences)
  overflow: bool = False        # an infinity or NaN may stand for a finite expected value (a sum of huge values)


def _literal(value) -> str:
  """A number as Python source that runs on its own (repr(inf) is `inf`, a name no test file defines)."""
  return f"float({str(value)!r})" if isinstance(value, float) and not math.isfinite(value) else repr(value)


@dataclass
class Program:
  family: str
  tensor_lines: list[str] = field(default_factory=list)
  numpy_lines: list[str] = field(default_factory=list)
  checks: list[Check] = field(default_factory=list)
  ops: set = field(default_factory=set)
  dtypes: set = field(default_factory=set)

  def add(self, tensor_line: str, numpy_line: str) -> None:
    self.tensor_lines.append(tensor_line)
    self.numpy_lines.append(numpy_line)

  def tensor_source(self) -> str: return "\n".join(self.tensor_lines)
  def numpy_source(self) -> str: return "\n".join(self.numpy_lines)

  def source(self, name: str = "test_program") -> str:
    """A standalone pytest file: the program on each device, checked against numpy."""
    body = "\n".join(f"  {line}" for line in self.tensor_lines)
    expected = "\n".join(f"  {line}" for line in self.numpy_lines)
    checks = "\n".join(f"  ref.assert_close({c.tensor}, {c.expected}, {c.dtype!r}, atol={_literal(c.atol)}, "
                       f"rtol={_literal(c.rtol)}" + (", scaled=True" if c.scaled else "")
                       + (", overflow=True)" if c.overflow else ")")
                       for c in self.checks if not c.across_devices)
    return (f'"""A generated program ({self.family}) that the compiler gets wrong."""\n'
            "import numpy as np\nimport pytest\n"
            "from scheduler import Tensor, dtypes, Variable, nn\nfrom scripts.fuzz import reference as ref\n\n\n"
            '@pytest.mark.parametrize("DEV", ["CPU", "PYTHON"])\n'
            f"def {name}(DEV):\n{body}\n{expected}\n{checks or '  pass'}\n")
