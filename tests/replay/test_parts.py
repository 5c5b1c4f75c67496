"""Parts of capture payloads (`replay/parts.py`): a realize's graph is one blob for its schedule and exec captures, each
kernel AST one blob for the schedule that made it and the kernel capture that rendered it; readers join them back,
a missing part is an outcome naming it, and payloads from before parts still replay."""
import os
import numpy as np
from db import Store
from replay import parts, serialize
from replay.replayers import replay_one


def _capture_a_realize(replay_db, rows: int):
  """A realize of two kernels, of a shape no other test of this process compiles (so its kernels are rendered)."""
  from scheduler import Tensor
  from scheduler.helpers import Context
  data = np.arange(rows * 13, dtype=np.float32).reshape(rows, 13)
  x = Tensor(data)
  with Context(CAPTURE_PROCESS_REPLAY=1): y = ((x * 2 + 1).relu().contiguous().sum(axis=1) + x.max(axis=1)).realize()
  assert np.allclose(y.numpy(), (data * 2 + 1).sum(1) + data.max(1))
  return Store(str(replay_db))


def test_a_realize_stores_its_graph_and_each_kernel_ast_once(replay_db):
  store = _capture_a_realize(replay_db, 37)
  by_kind = {kind: store.captures(kinds=[kind]) for kind in ("schedule", "kernel", "exec")}
  (schedule,), (execution,), kernels = by_kind["schedule"], by_kind["exec"], by_kind["kernel"]
  raw = {c["id"]: (serialize.loads(store.get_blob(c["input_sha"])), serialize.loads(store.get_blob(c["output_sha"])))
         for caps in by_kind.values() for c in caps}
  # one graph for the realize's two captures: the schedule's input is the graph part the exec capture names
  graph = raw[execution["id"]][0][parts.GRAPH]
  assert schedule["input_sha"] == graph and raw[schedule["id"]][0].op.name == "SINK"
  ast_shas = _ast_shas(store, schedule)
  # every kernel rendered is one of the schedule's ASTs (the others are copies, which are not rendered)
  assert len(kernels) >= 2 and {raw[k["id"]][0][parts.AST] for k in kernels} <= set(ast_shas)
  # the schedule names them by their places among its blobs, sorted, and says how many blobs it has
  blobs = sorted(store.shared_blob_shas(schedule["id"]))
  assert raw[schedule["id"]][1][parts.AST_PLACES] == (len(blobs), [blobs.index(sha) for sha in ast_shas])
  referenced = {sha for caps in by_kind.values() for c in caps for sha in store.shared_blob_shas(c["id"])}
  assert {graph, *ast_shas} <= referenced and graph not in blobs
  # joined, the payloads are what captures held before parts: the same AST objects in schedule and kernel captures
  inp, out, _ = parts.load_capture(store, schedule)
  assert inp["graph"] is raw[schedule["id"]][0]
  assert isinstance(parts.load_capture(store, execution)[0]["graph_pickle"], bytes)
  rendered = [parts.load_capture(store, k)[0]["ast"] for k in kernels]
  assert all(any(ast is a for a in out["asts"]) for ast in rendered)
  for cap in (schedule, execution, *kernels):
    result = replay_one(cap["kind"], store.get_blob(cap["input_sha"]), store.get_blob(cap["output_sha"]), {},
                        shared=store.shared_blobs(cap["id"]))
    assert result["status"] == "same", (cap["kind"], result)


def _ast_shas(store, schedule) -> list[str]:
  """The hashes of a schedule capture's kernel ASTs, in order (its payload names them by places among its blobs)."""
  count, places = serialize.loads(store.get_blob(schedule["output_sha"]))[parts.AST_PLACES]
  blobs = sorted(store.shared_blob_shas(schedule["id"]))
  assert count == len(blobs)
  return [blobs[i] for i in places]


def test_schedules_captured_with_prefixes_or_full_hashes_still_join(replay_db):
  """Captures of schema 15 named ASTs by prefixes of their hashes, earlier ones in full; a prefix naming two blobs is
  an error naming it."""
  store = _capture_a_realize(replay_db, 36)
  (schedule,) = store.captures(kinds=["schedule"])
  shared = store.shared_blobs(schedule["id"])
  shas = _ast_shas(store, schedule)
  by_place = parts.join_output("schedule", serialize.loads(store.get_blob(schedule["output_sha"])), shared)["asts"]
  prefixed = {parts.ASTS: [sha[:parts.REF_HEX] for sha in shas], "var_vals": {}}
  assert parts.join_output("schedule", prefixed, shared)["asts"] == by_place
  clash = {**shared, shas[0][:parts.REF_HEX] + "f" * 48: b"another blob"}
  try: parts.join_output("schedule", prefixed, clash)
  except parts.PartError as e: assert f"the kernel AST {shas[0][:parts.REF_HEX]} of the payload names 2" in str(e)
  else: raise AssertionError("a prefix naming two blobs was joined")
  assert parts.join_output("schedule", {parts.ASTS: shas, "var_vals": {}}, clash)["asts"] == by_place
  # before a schedule's input was its graph part, the input named the graph among the capture's blobs
  graph = store.get_blob(schedule["input_sha"])
  wrapped = serialize.dumps({parts.GRAPH: schedule["input_sha"]}, plain=True)
  old_out = serialize.dumps({parts.ASTS: [sha[:parts.REF_HEX] for sha in shas], "var_vals": {}}, plain=True)
  result = replay_one("schedule", wrapped, old_out, {}, shared={**shared, schedule["input_sha"]: graph})
  assert result["status"] == "same", result


def test_places_among_other_blobs_than_the_capture_has_are_refused(replay_db):
  store = _capture_a_realize(replay_db, 35)
  (schedule,) = store.captures(kinds=["schedule"])
  shared, payload = store.shared_blobs(schedule["id"]), serialize.loads(store.get_blob(schedule["output_sha"]))
  count, places = payload[parts.AST_PLACES]
  for found, message in [({**shared, "f" * 64: b"a blob added"}, f"among {count} blobs; the capture has {count + 1}"),
                         (shared, "not places among")]:
    wrong = {**payload, parts.AST_PLACES: (count, [*places, count])} if found is shared else payload
    try: parts.join_output("schedule", wrong, found)
    except parts.PartError as e: assert message in str(e), str(e)
    else: raise AssertionError(f"joined: {message}")
  result = replay_one("schedule", store.get_blob(schedule["input_sha"]), store.get_blob(schedule["output_sha"]), {},
                      shared={**shared, "f" * 64: b"a blob added"})
  assert result["status"] == "incompatible" and "the capture has" in result["reason"], result


def test_a_missing_part_is_incompatible_and_named(replay_db):
  store = _capture_a_realize(replay_db, 38)
  (schedule,), (execution,) = store.captures(kinds=["schedule"]), store.captures(kinds=["exec"])
  kernel = store.captures(kinds=["kernel"])[0]
  for cap, what in ((execution, "the graph "), (kernel, "the kernel AST "), (schedule, "the capture has 0")):
    result = replay_one(cap["kind"], store.get_blob(cap["input_sha"]), store.get_blob(cap["output_sha"]), {},
                        shared={})
    assert result["status"] == "incompatible" and what in result["reason"], result
    assert cap is schedule or "is not among the capture's blobs" in result["reason"]
  try: parts.join_output("schedule", {parts.ASTS: "not a list"}, {})
  except parts.PartError as e: assert "not a list" in str(e)
  else: raise AssertionError("a malformed list of parts was joined")


def test_payloads_from_before_parts_still_replay(replay_db):
  store = _capture_a_realize(replay_db, 39)
  (schedule,), kernel = store.captures(kinds=["schedule"]), store.captures(kinds=["kernel"])[0]
  for cap in (schedule, kernel):
    inp, out, _ = parts.load_capture(store, cap)   # the joined payload is the older form, stored inline
    old_in, old_out = serialize.dumps(inp), serialize.dumps(out)
    assert parts.GRAPH not in inp and parts.AST not in inp and parts.ASTS not in out
    assert replay_one(cap["kind"], old_in, old_out, {}, shared={})["status"] == "same"


def _as_new_process(monkeypatch):
  """The capture module's state as a new process has it: a new run, nothing pickled yet."""
  import weakref
  import replay.capture as capture
  monkeypatch.setattr(capture, "SINK", capture._Sink())
  monkeypatch.setattr(capture, "_ast_parts", weakref.WeakKeyDictionary())
  monkeypatch.setattr(capture, "_schedule_outputs", {})
  pickled = []
  real = serialize.dumps
  monkeypatch.setattr(capture.serialize, "dumps", lambda obj, *a, **k: (pickled.append(obj), real(obj, *a, **k))[1])
  return pickled


def test_a_kernel_ast_the_database_holds_is_not_pickled_again_by_the_same_code(replay_db, monkeypatch):
  import replay.capture as capture
  from replay import sut
  store = _capture_a_realize(replay_db, 41)
  capture.SINK.fold()   # the captures, then the index entries of the parts they hold
  (first,) = store.captures(kinds=["schedule"])
  first_asts = _ast_shas(store, first)
  assert set(first_asts) <= set(store.part_index(sut.source_stamp()).values())
  pickled = _as_new_process(monkeypatch)
  _capture_a_realize(replay_db, 41)
  capture.SINK.fold()
  second = store.captures(kinds=["schedule"])[-1]
  assert second["id"] != first["id"]
  inp, out, _ = parts.load_capture(store, second)
  assert _ast_shas(store, second) == first_asts
  assert pickled and not any(any(obj is ast for ast in out["asts"]) for obj in pickled)   # the graph only
  result = replay_one("schedule", store.get_blob(second["input_sha"]), store.get_blob(second["output_sha"]), {},
                      shared=store.shared_blobs(second["id"]))
  assert result["status"] == "same", result
  # an entry naming a blob the database does not hold (pruned, or damaged) is not used: the AST is pickled again
  store.conn.execute("UPDATE part_index SET sha256 = ?", ("0" * 64,))
  pickled = _as_new_process(monkeypatch)
  _capture_a_realize(replay_db, 41)
  capture.SINK.fold()
  third = store.captures(kinds=["schedule"])[-1]
  assert _ast_shas(store, third) == first_asts
  assert sum(any(obj is ast for ast in out["asts"]) for obj in pickled) == len(first_asts)
  assert set(store.part_index(sut.source_stamp()).values()) >= set(first_asts)   # and the index names them again


def test_the_source_stamp_changes_with_any_source_file_of_the_compiler(tmp_path, monkeypatch):
  from replay import sut
  package = tmp_path / "pkg"
  (package / "sub").mkdir(parents=True)
  (package / "a.py").write_text("x = 1\n")
  (package / "sub" / "b.py").write_text("y = 2\n")
  (package / "notes.txt").write_text("not code")
  monkeypatch.setattr(sut, "package_dirs", lambda: (str(package) + os.sep,))
  stamp = sut.source_stamp()
  assert sut.source_stamp() == stamp
  (package / "notes.txt").write_text("still not code")
  assert sut.source_stamp() == stamp
  os.utime(package / "sub" / "b.py", ns=(1, 1))
  changed = sut.source_stamp()
  assert changed != stamp
  (package / "sub" / "c.py").write_text("")
  assert sut.source_stamp() != changed
