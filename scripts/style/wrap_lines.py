"""Wrap Python lines longer than the limit (120 characters) without changing what the code means.

    python -m scripts.style.wrap_lines FILE... [--check]

A long line is broken, in this order of preference: a one-line compound statement (`if x: y`) at its header's colon;
statements joined by `;` into lines of their own; a trailing comment moved above its line; inside a bracket, after
a comma (or before `and`/`or`/`if`/`else`/`for`), continuing under the bracket, the outermost bracket first; a
string literal inside a bracket, split into two adjacent literals; the right-hand side of an assignment or a `return`
put in parentheses so that it can break; a comment line reflowed. A wrapped line is kept only if the file's syntax
tree stays the same. With --check nothing is
written and the exit code says whether a line is still too long.
"""
from __future__ import annotations
import argparse, ast, io, pathlib, sys, textwrap, tokenize
from typing import Optional

LIMIT = 120
COMPOUND = ("if", "elif", "else", "for", "while", "try", "except", "finally", "with", "def", "class")


def _tokens(line: str) -> list[tokenize.TokenInfo]:
  """The tokens of one line read alone (a bracket it leaves open ends the reading, keeping what was read)."""
  out = []
  try:
    for tok in tokenize.generate_tokens(io.StringIO(line + "\n").readline): out.append(tok)
  except (tokenize.TokenError, IndentationError, SyntaxError): pass
  return out


def _top_level(line: str, inside: bool = False) -> list[tuple[tokenize.TokenInfo, int, Optional[int]]]:
  """Each token with its bracket depth and the column after the innermost open bracket (f-string insides skipped);
  a line `inside` a bracket opened on an earlier line continues under its own indentation."""
  opened: list[int] = [len(_indent(line))] if inside else []
  in_fstring, out = 0, []
  for tok in _tokens(line):
    if tok.type == getattr(tokenize, "FSTRING_START", -1): in_fstring += 1
    elif tok.type == getattr(tokenize, "FSTRING_END", -1): in_fstring -= 1
    if in_fstring: continue
    if tok.type == tokenize.OP and tok.string in ")]}" and opened: opened.pop()
    out.append((tok, len(opened), opened[-1] if opened else None))
    if tok.type == tokenize.OP and tok.string in "([{": opened.append(tok.end[1])
  return out


def _indent(line: str) -> str: return line[:len(line) - len(line.lstrip())]


def _split_compound(line: str) -> Optional[list[str]]:
  """`if x: y` -> `if x:` and `y` one level deeper (only a simple statement after the colon)."""
  stripped = line.lstrip()
  if stripped.split(" ", 1)[0].rstrip(":") not in COMPOUND: return None
  lambdas = 0
  for tok, depth, _ in _top_level(line):
    if depth: continue
    if tok.type == tokenize.NAME and tok.string == "lambda": lambdas += 1
    if tok.type == tokenize.OP and tok.string == ":":
      if lambdas: lambdas -= 1; continue
      body = line[tok.end[1]:].strip()
      if not body or body.startswith("#") or body.split(" ", 1)[0].rstrip(":") in COMPOUND: return None
      return [line[:tok.end[1]], _indent(line) + "  " + body]
  return None


def _split_statements(line: str) -> Optional[list[str]]:
  """`a = 1; b = 2` -> one statement per line (not after a compound header on the same line)."""
  if line.lstrip().split(" ", 1)[0].rstrip(":") in COMPOUND: return None
  cuts = [tok.start[1] for tok, depth, _ in _top_level(line) if depth == 0 and tok.type == tokenize.OP
          and tok.string == ";"]
  if not cuts: return None
  parts, start = [], 0
  for cut in cuts + [len(line)]:
    if (part := line[start:cut].strip()): parts.append(_indent(line) + part)
    start = cut + 1
  return parts if len(parts) > 1 else None


def _move_comment(line: str) -> Optional[list[str]]:
  for tok, _, _ in _top_level(line):
    if (tok.type == tokenize.COMMENT and tok.start[1] > len(_indent(line))
        and not tok.string.startswith(("# type:", "# noqa"))):
      return [_indent(line) + tok.string, line[:tok.start[1]].rstrip()]
  return None


def _bracket_break(line: str, limit: int, inside: bool = False) -> Optional[list[str]]:
  points, targets = [], set()   # targets: depths inside a `for ... in` (its commas separate loop variables)
  for tok, depth, inner in _top_level(line, inside):
    if tok.type == tokenize.NAME and tok.string == "for": targets.add(depth)
    elif tok.type == tokenize.NAME and tok.string == "in": targets.discard(depth)
    if not depth or inner is None or depth in targets: continue
    if tok.type == tokenize.OP and tok.string == ",": points.append((tok.end[1], inner, depth))
    elif tok.type == tokenize.NAME and tok.string in ("and", "or", "if", "else", "for") or tok.string == "+":
      points.append((tok.start[1] - 1, inner, depth))   # before the keyword or the operator
  fits = [(col, indent, depth) for col, indent, depth in points if col <= limit and indent < col
          and indent <= limit - 30
          and line[col:].strip() and not line[col:].strip().startswith("#")]
  if not fits: return None
  outer = min(depth for _, _, depth in fits)
  col, indent, _ = max(p for p in fits if p[2] == outer)   # the outermost bracket that can break, as late as it fits
  return [line[:col].rstrip(), " " * indent + line[col:].lstrip()]


def _string_split(line: str, limit: int, inside: bool = False) -> Optional[list[str]]:
  for tok, depth, _ in _top_level(line, inside):
    if tok.type != tokenize.STRING or depth <= 0 or tok.end[1] <= limit or tok.start[1] > limit - 12: continue
    text = tok.string
    quote_at = min(i for i in (text.find("'"), text.find('"')) if i >= 0)
    prefix, quote = text[:quote_at], text[quote_at]
    if text[quote_at:quote_at + 3] == quote * 3: continue
    braces, best = 0, None
    for i in range(quote_at + 1, len(text) - 1):
      ch = text[i]
      if "f" in prefix.lower() and ch in "{}": braces += 1 if ch == "{" else -1
      if ch == " " and braces == 0 and text[i - 1] != "\\" and tok.start[1] + i + 2 <= limit and i > quote_at + 10:
        best = i
    if best is None: continue
    column = tok.start[1]
    return [line[:column] + text[:best + 1] + quote,
            " " * column + prefix + quote + text[best + 1:] + line[tok.end[1]:]]
  return None


def _parenthesize(line: str) -> Optional[list[str]]:
  """Put the expression of a statement in parentheses so that it can break inside them: the right-hand side of an
  assignment, what `return` returns, the condition of `assert` (not its message) and of an `if`/`elif`/`while`
  header."""
  stripped, top = line.lstrip(), [(t, d) for t, d, _ in _top_level(line)]
  tokens = [t for t, depth in top if depth == 0]
  if not tokens or line.rstrip().endswith(("(", "[", "{", ",")) or any(t.type == tokenize.COMMENT for t in tokens):
    return None
  end = len(line.rstrip())
  first = stripped.split(" ", 1)[0]
  if first in ("return", "assert", "if", "elif", "while"):
    start = len(_indent(line)) + len(first) + 1
    if first == "assert" and (commas := [t for t in tokens if t.type == tokenize.OP and t.string == ","]):
      end = commas[0].start[1]
    if first in ("if", "elif", "while"):
      if not line.rstrip().endswith(":"): return None
      end -= 1
  else:
    assign = [t for t in tokens if t.type == tokenize.OP and t.string in ("=", "+=", "-=", "*=", "|=", "&=")]
    if not assign or first in COMPOUND + ("lambda",): return None
    start = assign[0].end[1] + 1
  body = line[start:end].rstrip()
  if not body or (body.startswith("(") and body.endswith(")")): return None
  return [line[:start] + "(" + body + ")" + line[start + len(body):]]


def _reflow_comment(line: str, limit: int) -> Optional[list[str]]:
  stripped = line.lstrip()
  if not stripped.startswith("# "): return None
  prefix = _indent(line) + "# "
  return textwrap.wrap(stripped[2:], width=limit, initial_indent=prefix, subsequent_indent=prefix,
                       break_long_words=False) or None


def _parenthesize_import(line: str) -> Optional[list[str]]:
  """`from x import a, b` -> `from x import (a, b)`."""
  stripped = line.lstrip()
  if not stripped.startswith("from ") or " import " not in stripped or "(" in stripped or "#" in stripped: return None
  head, names = line.split(" import ", 1)
  return [f"{head} import ({names.rstrip()})"]


def wrap_line(line: str, limit: int = LIMIT, depth: int = 0, inside: bool = False) -> list[str]:
  """The line wrapped; `inside`: it starts within a bracket opened on an earlier line."""
  if len(line) <= limit or depth > 12: return [line]
  breaks = [lambda x: _bracket_break(x, limit, inside), lambda x: _string_split(x, limit, inside)]
  steps = [(step, False) for step in ([] if inside else [_split_compound, _split_statements, _move_comment])]
  for step, continues in steps + [(step, True) for step in breaks] + [(lambda x: _reflow_comment(x, limit), False)]:
    if (parts := step(line)) and parts != [line]:
      return [out for i, part in enumerate(parts) for out in wrap_line(part, limit, depth + 1, inside
                                                                       or (continues and i > 0))]
  for rewrite in ([] if inside else [_parenthesize, _parenthesize_import]):
    if (wrapped := rewrite(line)) and (parts := _bracket_break(wrapped[0], limit) or _string_split(wrapped[0], limit)):
      return [out for i, part in enumerate(parts) for out in wrap_line(part, limit, depth + 1, i > 0)]
  return [line]


def wrap_source(text: str, limit: int = LIMIT) -> str:
  """The source with its long lines wrapped, each kept only if the code stays the same (lines inside multi-line
  strings are left alone)."""
  lines = text.split("\n")
  for number in reversed(long_lines(text, limit)):
    candidate = "\n".join(lines[:number - 1] + _wrapped(text, number, limit) + lines[number:])
    if same_code(text, candidate): lines = candidate.split("\n")
  return "\n".join(lines)


def _wrapped(text: str, number: int, limit: int) -> list[str]:
  """Line `number` (1-based) wrapped, or as it is when it lies inside a multi-line string."""
  line, depth = text.split("\n")[number - 1], 0
  try:
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
      if tok.type == tokenize.STRING and tok.start[0] < number <= tok.end[0]: return [line]
      if tok.start[0] >= number: break
      if tok.type == tokenize.OP and tok.string in "([{": depth += 1
      elif tok.type == tokenize.OP and tok.string in ")]}": depth -= 1
  except (tokenize.TokenError, SyntaxError): return [line]
  return wrap_line(line, limit, inside=depth > 0)


def same_code(a: str, b: str) -> bool:
  try: return ast.dump(ast.parse(a)) == ast.dump(ast.parse(b))
  except SyntaxError: return False


def long_lines(text: str, limit: int = LIMIT) -> list[int]:
  return [i for i, line in enumerate(text.split("\n"), 1) if len(line) > limit]


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("files", nargs="+", type=pathlib.Path)
  parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if any line is longer than the limit")
  args = parser.parse_args()
  remaining = 0
  for path in args.files:
    text = path.read_text()
    new = text if args.check else wrap_source(text)
    if new != text: path.write_text(text := new)
    for number in long_lines(text):
      remaining += 1
      print(f"{path}:{number}: {len(text.split(chr(10))[number - 1])} characters", file=sys.stderr)
  return 1 if remaining else 0


if __name__ == "__main__": sys.exit(main())
