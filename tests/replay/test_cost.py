"""The static cost of rendered kernels: operations weighted by loop trip counts, on real kernels of the compiler."""
import numpy as np
import pytest
from replay.cost import static_cost, growth, kernel_body
from scheduler import Tensor
from scheduler.device import Device, find_c_compiler

HELPER = "static int helper(int x) {\n  for (int i = 0; i < 100; i++) { x = x + 1; }\n  return x;\n}\n"


def test_operations_are_weighted_by_the_loops_around_them():
  src = HELPER + "\n".join([
    "void k(float* restrict data0, float* restrict data1, int n) {",
    "  for (int a = ((int)0); a < ((int)8); a++) {",
    "    float acc1 = 0.0f;",
    "    for (int b = ((int)0); b < ((int)4); b++) {",
    "      int alu2 = (int)(a*((int)4));",
    "      int alu3 = (int)(alu2+b);",
    "      float val4 = data1[alu3];",
    "      float alu5 = (float)(acc1+val4);",
    "      acc1 = alu5;",
    "    }",
    "    data0[a] = acc1;",
    "  }",
    "  for (int c = ((int)0); c < n; c++) {",
    "    int alu9 = (int)(c+((int)1));",
    "  }",
    "}"])
  cost = static_cost(src, "k")
  assert (cost["alu"] == 8 * (1 + 4 * 3) + 1 and cost["loads"] == 32 and cost["stores"] == 8
          and cost["bytes"] == 32 * 4 + 8 * 4)
  assert cost["cost"] == cost["alu"] + 4 * (cost["loads"] + cost["stores"])
  assert kernel_body(src, "k")[0].startswith("for (int a") and static_cost(src, "missing")["cost"] == 0


def test_growth_is_a_fraction_of_the_base_and_none_when_not_more():
  assert growth({"cost": 100}, {"cost": 150}) == 0.5 and growth({"cost": 100}, {"cost": 90}) is None
  assert growth({"cost": 0}, {"cost": 1}) == float("inf")


@pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler")
def test_a_bigger_reduce_costs_proportionally_more_on_real_kernels():
  def cost_of(n):
    t = Tensor(np.ones((n, 64), np.float32)).realize().sum(1)
    ast = [si.ast for si in t.schedule() if si.ast.op.name == "SINK"][-1]
    src, prg = Device["CPU"].render(ast)
    return static_cost(src, prg.name)
  small, big = cost_of(8), cost_of(32)
  assert big["loads"] == 4 * small["loads"] == 32 * 64 and big["stores"] == 32
  assert 3.5 < big["cost"] / small["cost"] <= 4.0
