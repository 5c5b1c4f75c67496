"""`replay fuzz`: generated programs as workloads. They are captured at the current tree, replayed at the base
plain and end to end (`--rerun`), and reported like a diff; each program's captures carry the location
`fuzz:SEED:INDEX`, and a program that shows a difference can be saved as a standalone pytest file.

The programs come from `scripts/fuzz` (the project's generator, run as a command like any captured workload); this
module only picks the count, collects the differing programs and writes their files.
"""
from __future__ import annotations
import pathlib, re, subprocess, sys
from typing import Optional

# capture on two devices, plain replay and reruns: ~0.12 s measured with a warm compile cache
SECONDS_PER_PROGRAM = 0.5
LOCATION = re.compile(r"fuzz:(\d+):(\d+)")


def program_count(budget: float, count: Optional[int]) -> int:
  """The programs to run: `count` if given, else as many as the budget allows (at least 5)."""
  return count if count is not None else max(5, int(budget / SECONDS_PER_PROGRAM))


def capture_command(seed: int, count: int) -> list[str]:
  return [sys.executable, "-m", "scripts.fuzz", "--capture", "--seed", str(seed), "--count", str(count)]


def differing_programs(outcomes: list[dict]) -> list[tuple[int, int]]:
  """(seed, index) of each program with a capture whose outcome is not `same`, in order."""
  found: list[tuple[int, int]] = []
  for o in outcomes:
    if o["status"] == "same" or not (m := LOCATION.search(o.get("location") or "")): continue
    key = (int(m.group(1)), int(m.group(2)))
    if key not in found: found.append(key)
  return found


def save_programs(programs: list[tuple[int, int]], directory: pathlib.Path) -> list[pathlib.Path]:
  """Each program as `test_fuzz_SEED_INDEX.py` in `directory` (printed by the generator of this tree)."""
  directory.mkdir(parents=True, exist_ok=True)
  written = []
  for seed, index in programs:
    source = subprocess.run([sys.executable, "-m", "scripts.fuzz", "--print", f"{seed}:{index}"], capture_output=True,
                            text=True,
                            check=True).stdout
    path = directory / f"test_fuzz_{seed}_{index}.py"
    path.write_text(source)
    written.append(path)
  return written
