"""CI step: the clean-room provenance check (`shared/tools/provenance/check.py`) with a shrinking
list of files still waiting for their rewrite.

Every file not listed below must stay under the checker's per-file threshold, and those files together
under its total threshold. A listed file that is already clean fails the check too, so the list can
only shrink. When the checker is not found (a checkout without `shared/` beside it), the step is
skipped with a message; `PROVENANCE_REQUIRED=1` turns that into a failure.

    python scripts/check_provenance.py [--checker PATH]
"""
from __future__ import annotations
import argparse, json, os, subprocess, sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CHECKER = REPO.parent / "shared" / "tools" / "provenance" / "check.py"

# Files whose clean-room rewrite has not landed yet, and the issue that owns each (none left: every file is checked).
PENDING_REWRITE: dict[str, str] = {}


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--checker", type=Path, default=Path(os.environ.get("PROVENANCE_CHECKER", DEFAULT_CHECKER)))
  args = parser.parse_args(argv)
  if not args.checker.is_file():
    message = f"provenance check skipped: checker not found at {args.checker}"
    if os.environ.get("PROVENANCE_REQUIRED") == "1":
      print(f"FAIL: {message}", file=sys.stderr)
      return 1
    print(message)
    return 0
  proc = subprocess.run([sys.executable, str(args.checker), str(REPO), "--json"], capture_output=True, text=True)
  if proc.returncode not in (0, 1):
    print(f"FAIL: the provenance checker failed: {proc.stderr.strip()}", file=sys.stderr)
    return 1
  report = json.loads(proc.stdout)
  max_percent, max_total, min_tokens = report["max_percent"], report["max_total_percent"], report["min_tokens"]

  def over(covered: int, percent: float, limit: float) -> bool: return covered >= min_tokens and percent > limit

  problems, tokens, covered = [], 0, 0
  for entry in report["files"]:
    path, pending = entry["path"], entry["path"] in PENDING_REWRITE
    if pending:
      if not over(entry["covered"], entry["percent"], max_percent):
        problems.append(f"{path} is clean now ({entry['percent']}%): remove it from PENDING_REWRITE")
      continue
    tokens, covered = tokens + entry["tokens"], covered + entry["covered"]
    if over(entry["covered"], entry["percent"], max_percent):
      problems.append(f"{path}: {entry['percent']}% of its tokens match tinygrad (limit {max_percent}%)")
  total_percent = 100.0 * covered / max(tokens, 1)
  if over(covered, total_percent, max_total):
    problems.append(f"total over the checked files: {total_percent:.2f}% (limit {max_total}%)")
  missing = sorted(set(PENDING_REWRITE) - {entry["path"] for entry in report["files"]})
  problems += [f"{path} is listed as pending but does not exist: remove it" for path in missing]
  for problem in problems: print(f"FAIL: {problem}", file=sys.stderr)
  pending_list = ", ".join(f"{p} ({owner})" for p, owner in PENDING_REWRITE.items()) or "none"
  print(f"provenance: {total_percent:.2f}% over {tokens} tokens of checked files; pending rewrite: {pending_list}")
  return 1 if problems else 0


if __name__ == "__main__":
  sys.exit(main())
