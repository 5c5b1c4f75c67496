"""The process-replay harness: capture, serialization, replayers, comparison, runner, revisions, reports, CLI.

The one name programs import from here is `replay_location`, which labels a region of a program for captures."""
from replay.locations import replay_location

__all__ = ["replay_location"]
