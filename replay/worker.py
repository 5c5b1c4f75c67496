"""A replay worker process: `python -m replay.worker`, started by the runner with the compiler under
test on its path. Reads one capture at a time from stdin and answers with its outcome as JSON.

Whatever the compiler prints goes to stderr, so stdout carries only the protocol.
"""
from __future__ import annotations
import json, os, struct, sys


def read_exact(f, n: int) -> bytes:
  buf = b""
  while len(buf) < n:
    chunk = f.read(n - len(buf))
    if not chunk: raise EOFError
    buf += chunk
  return buf


def send(f, obj: dict) -> None:
  data = json.dumps(obj).encode()
  f.write(struct.pack(">I", len(data)) + data)
  f.flush()


def limit_memory() -> None:
  """Cap the worker's address space (REPLAY_WORKER_MEMORY_MB, set by the runner; 0 means no cap)."""
  try: megabytes = int(os.environ.get("REPLAY_WORKER_MEMORY_MB", "0"))
  except ValueError: return
  if megabytes <= 0: return
  try:
    import resource
    limit = megabytes * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
  except (ImportError, ValueError, OSError): pass   # not on this platform: no cap


def main() -> None:
  limit_memory()
  proto_out = os.fdopen(os.dup(1), "wb")
  os.dup2(2, 1)  # stray prints from the compiler land on stderr
  sys.stdout = sys.stderr
  os.environ["CAPTURE_PROCESS_REPLAY"] = "0"
  stdin = sys.stdin.buffer
  from replay import isolation
  isolation.install()   # the system under test comes from the tree under test, or not at all
  from replay import probes
  probes.install()   # `replay coverage`: probe which changed lines of the system under test the replays run
  from replay.replayers import replay_one, flag_defaults, evaluate
  send(proto_out, {"ready": True, "pid": os.getpid(), "flag_defaults": flag_defaults()})
  while True:
    try: (hlen,) = struct.unpack(">I", read_exact(stdin, 4))
    except EOFError: return
    header = json.loads(read_exact(stdin, hlen))
    input_data, output_data = read_exact(stdin, header["input_len"]), read_exact(stdin, header["output_len"])
    shared = {sha: read_exact(stdin, size) for sha, size in header.get("shared", [])}
    if header.get("evaluate"): result = evaluate(header["kind"], input_data, header["flags"])
    else:
      result = replay_one(header["kind"], input_data, output_data, header["flags"], header.get("tolerances"),
                          header.get("names"), bool(header.get("trace")), shared)
    if (foreign := isolation.foreign_modules()):
      result = {"status": "incompatible",
                "reason": "the system under test was not loaded from the tree under test: " + ", ".join(foreign[:5]),
                "diff": "", "metrics": {}, "compiler_seconds": 0.0}
    result["capture_id"] = header["capture_id"]
    send(proto_out, result)


if __name__ == "__main__": main()
