"""The mutation benchmark's planted edits still apply to this tree (a refactor that moves the text they edit
must update the benchmark, or the benchmark stops measuring anything)."""
import pathlib
import pytest
from scripts.bench.mutation_bench import MUTANTS

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_every_mutant_edit_finds_its_text(mutant):
  for path, old, new, *_ in mutant.edits:
    text = (ROOT / path).read_text()
    assert old in text, f"{mutant.name}: {old!r} is not in {path}"
    assert old != new
