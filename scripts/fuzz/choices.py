"""Where the generator's decisions come from: Hypothesis (for tests, with shrinking) or a seeded random stream.

`scripts/fuzz/generate.py` draws every decision through one of these. Under Hypothesis each draw is part of the
example, so a failing program shrinks to a minimal one; a `SeededChoices` stream gives the same programs for the
same seed in every process (what `replay fuzz` needs to re-run a program at another revision).
"""
from __future__ import annotations
import random
from typing import Sequence


class SeededChoices:
  def __init__(self, seed: int): self.rng = random.Random(seed)
  def integer(self, low: int, high: int) -> int: return self.rng.randint(low, high)
  def choice(self, options: Sequence): return options[self.rng.randrange(len(options))]
  def boolean(self, p: float = 0.5) -> bool: return self.rng.random() < p


class HypothesisChoices:
  """Draws from a Hypothesis `data` object; smaller integers and earlier options are what it shrinks toward."""
  def __init__(self, data):
    from hypothesis import strategies as st
    self.data, self.st = data, st
  def integer(self, low: int, high: int) -> int: return self.data.draw(self.st.integers(low, high))
  def choice(self, options: Sequence): return options[self.data.draw(self.st.integers(0, len(options) - 1))]
  def boolean(self, p: float = 0.5) -> bool:
    return self.data.draw(self.st.integers(0, 999)) >= 1000 * (1 - p)
