"""The process-replay harness: capture, serialization, replayers, comparison, runner, revisions, reports, CLI."""
