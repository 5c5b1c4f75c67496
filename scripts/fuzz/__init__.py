"""Generated programs as the compiler's oracle: random Tensor programs, each with the numpy code that computes
what it must give (`generate.py`, `reference.py`), run on every device (`run.py`); `python -m scripts.fuzz` runs
them for a time budget and prints each failure shrunk to a standalone program, and `replay fuzz` captures them to
replay at another revision."""
