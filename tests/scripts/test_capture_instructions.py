"""The instruction bench reads callgrind's output: objects named once and referred to by number, a call's inclusive
cost left out of its caller's own."""
from scripts.bench.capture_instructions import self_cost_by_object

CALLGRIND = """# callgrind format
version: 1
events: Ir
summary: 1111

ob=(1) /lib/libpython.so
fl=(1) ceval.c
fn=(1) eval
10 100
+2 20
cob=(2) /lib/libcrypto.so
cfi=(2) ???
cfn=(2) sha256
calls=3 0
12 900
* 5

ob=(2)
fl=(2)
fn=(2)
0 800
-1 80
ob=(1)
fl=(1)
fn=(1)
20 1
"""


def test_own_cost_per_object_leaves_out_what_calls_carry():
  costs = self_cost_by_object(CALLGRIND.splitlines(keepends=True))
  # 100 + 20 + 5 + 1 own instructions in libpython (the 900 after `calls=` is sha256's, counted where it ran)
  assert costs == {"/lib/libpython.so": 126, "/lib/libcrypto.so": 880}


def test_an_object_defined_in_a_call_line_is_named_where_it_is_used():
  costs = self_cost_by_object(["cob=(7) /lib/libz.so\n", "calls=1 0\n", "3 50\n", "ob=(7)\n", "fn=(9) inflate\n",
                               "3 40\n"])
  assert costs == {"/lib/libz.so": 40}
