"""Lowering of kernel ASTs to loops (see `lowerer.py`) and their deterministic names (`naming.py`)."""
