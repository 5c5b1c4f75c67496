"""Loaded at interpreter start-up of a command the harness runs (this directory is put first on PYTHONPATH):
- a rerun with another revision's system under test (`replay diff --rerun`, the gate): every Python process the
  command starts imports the compiler only from the tree named in REPLAY_SUT_ROOT (see replay/isolation.py);
- the gate's capture run: the changed modules of the system under test load with probes (see replay/probes.py).
Each does nothing unless its environment variables are set."""
from replay import isolation, probes

isolation.install()
probes.install()
