"""Reports: most severe first, identical differences grouped with their count and locations, hotspots by location
and kernel, filters that select what is shown but never the verdict, truncation that says how to see the rest,
and an HTML page whose structure a browser's DOM parser sees (table of contents, verdict, per-kernel tables)."""
import json
from html.parser import HTMLParser
import pytest
from replay import report as rpt


def outcome(i, status, kind="schedule", diff="", location="loc", name="x", metrics="{}"):
  return {"capture_id": i, "status": status, "kind": kind, "diff": diff, "reason": "", "location": location,
          "name": name, "metrics": metrics,
          "seconds": 0.0}


KERNEL_DIFF = "schedule: 2 kernels in the base, 2 captured\nkernel 1 (r_4) changed\n\n" \
              "--- base kernel 1 (r_4)\n+++ captured kernel 1 (r_4)\n" \
              "@@ -1,2 +1,2 @@\n SINK\n-  ADD\n+  MUL\n@@ -9,2 +9,2 @@\n x\n-  A\n+  B"


def summary(outcomes, **kw):
  return rpt.Summary({"id": 1, "capture_run_id": 1, "base_ref": "main", "base_commit": "abc"}, outcomes, **kw)


def sample():
  return summary([outcome(1, "changed", diff=KERNEL_DIFF, location="a.py:1 f"),
                  outcome(2, "changed", diff=KERNEL_DIFF, location="b.py:2 g"),
                  outcome(3, "same"),
                  outcome(4, "mismatch", "exec", "output 0 (float[4]): 1 of 4 elements differ\n-  [0] 1.0\n+  [0] 2.0",
                                                                   location="c.py:3 h"),
                  outcome(5, "changed", "kernel", "--- base\n+++ captured\n@@ -1 +1 @@\n-a\n+b", name="E_4"),
                  outcome(6, "changed", "kernel", "--- base\n+++ captured\n@@ -1 +1 @@\n-c\n+d", name="r_4")])


def test_mismatches_come_first_and_identical_differences_are_one_group():
  s = sample()
  groups = s.groups()
  assert [g[0]["status"] for g in groups] == ["mismatch", "changed", "changed", "changed"]
  assert [len(g) for g in groups][:2] == [1, 2]
  text = rpt.render_text(s)
  assert text.index("mismatch") < text.index("2 captures [schedule] changed with the same difference")
  assert "a.py:1 f; b.py:2 g (captures 1, 2)" in text
  assert "by location:" in text and "by kernel: E_4 (1); r_4 (1)" in text


def test_truncation_says_how_many_are_left_and_how_to_see_them_and_all_shows_everything():
  s = sample()
  text = rpt.render_text(s, max_diffs=2)
  assert "... 2 more groups of differences (2 captures) are not shown; `replay report --all` shows every one" in text
  s.show_all = True
  assert "more groups" not in rpt.render_text(s, max_diffs=2)
  long = summary([outcome(1, "changed", diff="\n".join(f"+line {i}" for i in range(100)))])
  assert "(60 more lines; `replay show 1` shows all)" in rpt.render_text(long)


def test_filters_select_what_is_shown_but_the_verdict_stays_the_replays():
  s = sample()
  s.view = {"statuses": ["changed"], "kinds": ["kernel"]}
  assert {o["capture_id"] for o in s.shown()} == {5, 6}
  text = rpt.render_text(s)
  assert "mismatch" not in text.split("\n---", 1)[1].rsplit("\n\n", 1)[0] and s.verdict()[0] == rpt.EXIT_MISMATCH
  s.view = {"location": "c.py"}
  assert [o["capture_id"] for o in s.shown()] == [4]
  s.view = {"statuses": ["same"]}
  assert [o["capture_id"] for o in s.shown()] == [3]


def test_markdown_groups_and_json_keeps_every_outcome():
  s = sample()
  md = rpt.render_markdown(s, max_diffs=1)
  assert md.count("<details>") == 1 and "more groups of differences" in md
  doc = json.loads(rpt.render_json(s))
  assert len(doc["outcomes"]) == 6


class _Dom(HTMLParser):
  def __init__(self):
    super().__init__()
    self.stack, self.found, self.title = [], [], ""
  def handle_starttag(self, tag, attrs):
    self.stack.append(tag)
    self.found.append((tag, dict(attrs)))
  def handle_endtag(self, tag):
    while self.stack and self.stack.pop() != tag: pass
  def handle_data(self, data):
    if self.stack and self.stack[-1] == "title": self.title += data


def test_html_has_contents_a_styled_verdict_and_one_table_per_hunk():
  page = rpt.render_html(sample())
  dom = _Dom()
  dom.feed(page)
  tags = dom.found
  assert ("p", {"class": "verdict fail", "id": "verdict"}) in tags
  toc_links = [a["href"] for t, a in tags if t == "a" and a.get("href", "").startswith("#g")]
  sections = [a["id"] for t, a in tags if t == "section"]
  assert toc_links == ["#" + s for s in sections] and len(sections) == 4
  # the schedule group: its summary, then one diff table per hunk (two hunks)
  assert page.count("class=\"diff\"") >= 2 and "<h4>base kernel 1 (r_4) / captured kernel 1 (r_4)</h4>" in page
  assert "<span class='minus'>-  [0] 1.0</span>" in page


def _browser():
  import shutil
  return next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


def _browser_dom(page: str, tmp_path) -> str:
  """The page as a real headless browser parsed it (its DOM, serialized), after any script ran."""
  import subprocess
  path = tmp_path / "report.html"
  path.write_text(page)
  proc = subprocess.run([_browser(), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", path.as_uri()],
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0 and "<html" in proc.stdout, proc.stderr[-2000:]
  shot = tmp_path / "report.png"
  subprocess.run([_browser(), "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1200,1600",
                  f"--screenshot={shot}", path.as_uri()],
                 capture_output=True, timeout=120)
  # the page rendered
  assert shot.exists() and shot.stat().st_size > 5000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  return proc.stdout



@pytest.mark.skipif(_browser() is None, reason="no headless chromium (the CI script installs it)")
def test_a_real_browser_sees_the_structure_and_nothing_injected(tmp_path):
  """Issue 15.7 and 13.6 in a real browser: the DOM it builds has the contents, the verdict and one table per hunk,
  and database text that looks like markup (a kind, a location, a diff) stays text."""
  hostile = "<img src=x onerror=alert(5)></details></pre><script>document.title='pwned'</script>"
  s = summary([*sample().outcomes,
               outcome(7, "changed", kind=hostile, diff="@@ -1 +1 @@\n-" + hostile + "\n+b", location=hostile)])
  dom = _Dom()
  dom.feed(_browser_dom(rpt.render_html(s), tmp_path))
  tags = dom.found
  assert not [t for t, _ in tags if t in ("img", "script")], "markup from the database became elements"
  assert ("p", {"class": "verdict fail", "id": "verdict"}) in tags
  toc_links = [a["href"] for t, a in tags if t == "a" and a.get("href", "").startswith("#g")]
  sections = [a["id"] for t, a in tags if t == "section"]
  assert toc_links == ["#" + s for s in sections] and len(sections) == 5
  assert sum(1 for t, a in tags if t == "table" and "diff" in a.get("class", "")) >= 3
  assert "pwned" not in dom.title


def test_each_mismatch_and_changed_schedule_group_offers_the_reduce_command():
  s = sample()
  command = "replay reduce 4 --base abc"
  assert f"reduce to a standalone test: {command}" in rpt.render_text(s)
  assert "replay reduce 1 --base abc" in rpt.render_text(s)          # the changed schedule group
  assert "replay reduce 5" not in rpt.render_text(s)                 # kernels are reduced through their schedule
  assert f"`{command}`" in rpt.render_markdown(s) and f"<code>{command}</code>" in rpt.render_html(s)
  against_the_tree = rpt.Summary({"id": 2, "capture_run_id": 1, "base_ref": None, "base_commit": None}, s.outcomes)
  assert "replay reduce" not in rpt.render_text(against_the_tree)    # `replay run`: there is no base to reduce against
