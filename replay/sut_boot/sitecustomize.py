"""Loaded at interpreter start-up of a command the harness reruns with another revision's system under test
(`replay diff --rerun`): this directory is put first on PYTHONPATH, so every Python process the command starts
imports the compiler only from the tree named in REPLAY_SUT_ROOT (see replay/isolation.py)."""
from replay import isolation

isolation.install()
