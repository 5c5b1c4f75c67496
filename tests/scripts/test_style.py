"""Python lines are at most 120 characters; scripts/style/wrap_lines.py wraps long ones without changing the code."""
import ast, subprocess
from scripts.style.wrap_lines import wrap_source, long_lines, same_code
from tests.conftest import REPO


def test_no_python_line_is_longer_than_120_characters():
  listed = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True)
  files = listed.stdout.split()
  texts = {f: (REPO / f).read_text() for f in files if (REPO / f).exists()}
  too_long = {f: found for f, text in texts.items() if (found := long_lines(text))}
  assert too_long == {}, "run python -m scripts.style.wrap_lines on these files"


def _sample() -> str:
  """A function whose lines are too long in each way the wrapper knows (built here, so this file stays short)."""
  names = ", ".join(f"arg{i}" for i in range(12))
  test = " and ".join(f"arg{i} is not None" for i in range(8))
  total = " + ".join(f"arg{i} * {i}" for i in range(14))
  return "\n".join([
    f"def f({names}):",
    f"  if {test}: return [{names}]",
    f"  value = arg0 if arg1 else {total}",
    f"  first = 1; second = 2; third = [{names}, {names}]",
    f"  message = g(f\"a long message about {{arg0}} and {{arg1}} that goes on and on {'and on ' * 10}until it ends\")",
    f"  assert {test}, 'why'",
    f"  call(arg0, arg1)   # a comment that explains why this call is here, {'at length ' * 10}",
    f"  return {{k: v for k, v in zip([{names}], [{names}]) if k is not None and v is not None}}", ""])


def test_wrapping_keeps_the_code_and_the_limit():
  sample = _sample()
  assert len(long_lines(sample)) == 7
  wrapped = wrap_source(sample)
  assert long_lines(wrapped) == [] and same_code(sample, wrapped)
  assert ast.dump(ast.parse(wrapped)) == ast.dump(ast.parse(sample))
