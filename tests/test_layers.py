"""The package's layers: every import points down (or sideways), and no module loops.

The layers, from the ground up (a module may import its own layer's and
lower layers' modules, never a higher one's):

1. `version`, `compat`, `io_utils`, `validation`, `lazy_exports`, `quiet_startup`,
   `missing_dependency`: no keras_sentemb imports but each other.
2. `augment`, `losses`, `model_card`: functions and layers on tensors; `kernels`: which
   kernel each op of an encoder runs, its precision and threads (it takes the layers it
   works on as arguments and never imports the encoder).
3. `models`: the encoder and its parts.
4. `data`: tf.data pipelines (they tokenize with an encoder).
5. `trainers`, `evaluation`, `export`, `beam`, `quantization`, `hard_negatives`: what is done
   with encoders.
6. `pipelines`: the scaffold every method's run shares (arguments, callbacks,
   backups, schedules) over the trainers, data and evaluation.
7. `methods`: the registry, the runner and one folder per training method (its config,
   presets, method class and trainer).
8. `api`, then `cli` and `__main__` at the top; the package's `__init__`
   loads the public names lazily and is imported by no module.

Imports inside functions count as much as those at the top of a module: a
loop hidden in a function is still a loop.
"""

import ast
import collections
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "keras_sentemb"
LAYERS = {
    "version": 1, "compat": 1, "io_utils": 1, "validation": 1, "lazy_exports": 1, "quiet_startup": 1,
    "missing_dependency": 1,
    "augment": 2, "losses": 2, "model_card": 2, "kernels": 2,
    "models": 3,
    "data": 4,
    "trainers": 5, "evaluation": 5, "export": 5, "beam": 5, "quantization": 5,
    "hard_negatives": 5,
    "pipelines": 6,
    "methods": 7,
    "api": 8,
    "cli": 9,
    "__main__": 10,
}


def _modules():
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_graph():
    """`{module: {imported keras_sentemb modules}}`, function-local imports included."""
    modules = _modules()
    graph = collections.defaultdict(set)
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                           for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target.startswith("keras_sentemb") and target != name:
                    graph[name].add(target)
    return modules, graph


def _area(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_module_has_a_layer():
    modules, _ = import_graph()
    missing = sorted({_area(m) for m in modules} - set(LAYERS) - {"__init__"})
    assert not missing, f"give these a layer in LAYERS: {missing}"


def test_no_import_points_up():
    _, graph = import_graph()
    upward = sorted(
        (a, b) for a, targets in graph.items() for b in targets
        if _area(a) != "__init__" and (
            _area(b) == "__init__" or LAYERS[_area(b)] > LAYERS[_area(a)]
        )
    )
    assert not upward, "imports that point up a layer:\n" + "\n".join(
        f"  {a} -> {b}" for a, b in upward)


def test_no_import_cycles():
    modules, graph = import_graph()
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(modules):
        if module not in index:
            visit(module)
    assert not cycles, f"import cycles: {cycles}"


def test_the_checks_see_a_planted_upward_import_and_cycle(tmp_path, monkeypatch):
    """The checks above fail when the code breaks the rules."""
    fake = tmp_path / "keras_sentemb"
    (fake / "models").mkdir(parents=True)
    (fake / "pipelines").mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "models" / "__init__.py").write_text("")
    (fake / "pipelines" / "__init__.py").write_text("")
    (fake / "models" / "a.py").write_text(
        "def f():\n    from keras_sentemb.pipelines import b\n")
    (fake / "pipelines" / "b.py").write_text("from keras_sentemb.models import a\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["x"]), "PACKAGE", fake)
    _, graph = import_graph()
    assert graph["keras_sentemb.models.a"] == {"keras_sentemb.pipelines.b"}
    for check in (test_no_import_points_up, test_no_import_cycles):
        try:
            check()
        except AssertionError:
            continue
        raise AssertionError(f"{check.__name__} missed the planted import")
