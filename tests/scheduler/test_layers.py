"""Issue 11.6: the core of the compiler is layered. Lower modules never import higher ones, not even inside a
function (a function-local import would only hide the cycle): helpers, dtype, device, ops, symbolic, shape."""
import ast, pathlib
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LAYERS = ["scheduler.helpers", "scheduler.dtype", "scheduler.device", "scheduler.ops", "scheduler.symbolic",
          "scheduler.shape.view",
          "scheduler.shape.shapetracker"]


def imported_modules(path: pathlib.Path) -> list[tuple[str, int]]:
  """Every scheduler module `path` imports, anywhere in the file, except under `if TYPE_CHECKING:` (types only)."""
  tree = ast.parse(path.read_text())
  type_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
               and getattr(node.test, "id", "") == "TYPE_CHECKING"
               for n in ast.walk(node)}
  out = []
  for node in ast.walk(tree):
    if id(node) in type_only: continue
    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("scheduler"):
      out += [(f"{node.module}.{a.name}" if node.module == "scheduler" else node.module,
               node.lineno) for a in node.names]
    elif isinstance(node, ast.Import):
      out += [(a.name, node.lineno) for a in node.names if a.name.startswith("scheduler")]
  return out


def layer_of(module: str) -> int:
  matches = [i for i, layer in enumerate(LAYERS) if module == layer or module.startswith(layer + ".")]
  return matches[0] if matches else len(LAYERS)


@pytest.mark.parametrize("module", LAYERS)
def test_a_core_module_imports_only_modules_below_it(module):
  path = ROOT / (module.replace(".", "/") + ".py")
  upward = [(m, line) for m, line in imported_modules(path) if layer_of(m) >= LAYERS.index(module) and m != module]
  assert not upward, f"{module} imports higher layers: {upward}"


def test_the_ir_gets_views_and_simplification_from_the_layers_above_once_the_package_is_imported():
  import scheduler  # noqa: F401
  from scheduler.ops import UOp, _Above
  from scheduler.dtype import dtypes
  assert _Above.ShapeTracker is not None and _Above.symbolic is not None
  assert UOp.const(dtypes.float32, 1.0, "CPU", (2, 3)).shape == (2, 3)
  x = UOp.variable("n", 1, 8)
  assert (x * 2 + x * 3).simplify().render() == "(n*5)" and (x * 2).vmax == 16
