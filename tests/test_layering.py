"""The package's layers point one way, no modules import each other in a circle, and no module imports another
module's private names (docs/architecture.md).

Imports are read from the source with `ast`, function-local (lazy) imports included: they are real
dependencies. `from pkg import name` counts as importing `pkg.name` where that is a module, else `pkg`.
A new subpackage must be given its place in `ALLOWED` before the test passes.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# Subpackage (its first name under gbxcule) -> the subpackages its modules may import. "" is gbxcule/__init__.py.
ALLOWED: dict[str, set[str]] = {
    "": set(),
    "core": {"core"},
    "asm": {"core", "asm"},
    "roms": {"core", "asm", "roms"},
    "kernels": {"core", "kernels"},
    "backends": {"core", "kernels", "backends"},
    "harness": {"core", "asm", "roms", "backends", "harness"},
    "rl": {"core", "asm", "roms", "backends", "rl"},  # the kernels only through backends (WarpVecBackend)
    "cli": {"core", "asm", "roms", "kernels", "backends", "harness", "rl", "cli"},
    "__main__": {"cli"},
}
PURE = ("core", "asm", "roms")  # importable without Warp or PyBoy


def find_modules(src: Path, package: str = "gbxcule") -> dict[str, Path]:
    """Dotted module name -> source file, for every module of `package` under `src`."""
    out = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(name: str, path: Path, mods: dict[str, Path]) -> list[tuple[str, int]]:
    """(imported module of the package, line) for every import statement in the module, lazy ones too."""
    root = name.split(".")[0]
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []

    def known(target: str) -> str:
        while target not in mods and "." in target:
            target = target.rpartition(".")[0]
        return target

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(known(a.name), node.lineno) for a in node.names if a.name.split(".")[0] == root]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[:len(pkg.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] != root:
                continue
            for a in node.names:
                out.append((f"{module}.{a.name}" if f"{module}.{a.name}" in mods else known(module), node.lineno))
    return list(dict.fromkeys(out))


def graph(src: Path, package: str = "gbxcule") -> tuple[dict[str, Path], dict[str, list[tuple[str, int]]]]:
    mods = find_modules(src, package)
    return mods, {name: imports(name, path, mods) for name, path in mods.items()}


def layer(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer_violations(src: Path, allowed: dict[str, set[str]], package: str = "gbxcule") -> list[str]:
    mods, edges = graph(src, package)
    bad = []
    for name, targets in edges.items():
        own = layer(name)
        if own not in allowed:
            bad.append(f"{mods[name].relative_to(src)}: subpackage {own!r} has no place in ALLOWED")
            continue
        for target, line in targets:
            if target not in (name, package) and layer(target) not in allowed[own]:  # the root imports nothing
                bad.append(f"{mods[name].relative_to(src)}:{line} imports {target}: {own or package} may import "
                           f"only {', '.join(sorted(allowed[own])) or 'nothing of the package'}")
    return bad


def cycles(src: Path, package: str = "gbxcule") -> list[list[str]]:
    """Each import cycle (one per strongly connected group of modules), as a closed path of module names."""
    _, edges = graph(src, package)
    succ = {n: sorted({t for t, _ in ts if t != n}) for n, ts in edges.items()}
    index, low, stack, on, groups = {}, {}, [], set(), []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in succ[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(set(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(succ)))
    for v in sorted(succ):
        if v not in index:
            visit(v)
    out = []
    for group in groups:  # a shortest closed path through the group's first module
        start = min(group)
        paths, seen = {start: [start]}, {start}
        frontier = [start]
        while frontier:
            nxt = []
            for v in frontier:
                for w in succ[v]:
                    if w == start:
                        out.append(paths[v] + [start])
                        nxt = []
                        break
                    if w in group and w not in seen:
                        seen.add(w)
                        paths[w] = paths[v] + [w]
                        nxt.append(w)
                else:
                    continue
                break
            frontier = nxt
    return out


def private_imports(src: Path, package: str = "gbxcule") -> list[str]:
    """Every import of an underscore name (not a dunder) of one module of the package by another: `from
    pkg.x import _y` (relative and lazy ones too) and `import pkg._x`. A name used across modules is public
    in the module that owns it."""
    mods = find_modules(src, package)
    private = lambda n: n.startswith("_") and not (n.startswith("__") and n.endswith("__"))  # noqa: E731
    bad = []
    for name, path in mods.items():
        pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            where = f"{path.relative_to(src)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")[:len(pkg.split(".")) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                if module.split(".")[0] != package:
                    continue
                parts = module.split(".")
                bad += [f"{where} imports {module}.{a.name}" for a in node.names
                        if (private(a.name) or any(map(private, parts))) and module != name]
            elif isinstance(node, ast.Import):
                bad += [f"{where} imports {a.name}" for a in node.names
                        if a.name.split(".")[0] == package and any(map(private, a.name.split(".")))]
    return bad


def test_layers_point_one_way():
    assert layer_violations(SRC, ALLOWED) == []


def test_no_import_cycles():
    assert [" -> ".join(c) for c in cycles(SRC)] == []


def test_no_private_names_across_modules():
    assert private_imports(SRC) == []


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / "pkg" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return root


def test_checker_names_a_wrong_way_import_and_a_cycle(tmp_path):
    src = _write(tmp_path, {
        "__init__.py": "", "core/__init__.py": "", "kernels/__init__.py": "",
        "core/a.py": "def f():\n    from pkg.kernels import b\n",  # lazy, still a dependency
        "kernels/b.py": "from . import c\n", "kernels/c.py": "import pkg.kernels.b\n",
    })
    allowed = {"": set(), "core": {"core"}, "kernels": {"core", "kernels"}}
    assert layer_violations(src, allowed, "pkg") == [
        "pkg/core/a.py:2 imports pkg.kernels.b: core may import only core"]
    assert cycles(src, "pkg") == [["pkg.kernels.b", "pkg.kernels.c", "pkg.kernels.b"]]


def test_private_import_checker_names_each_kind(tmp_path):
    src = _write(tmp_path, {
        "__init__.py": "__version__ = '1'\n", "core/__init__.py": "", "rl/__init__.py": "",
        "core/a.py": "_x = 1\ny = 2\n",
        "core/_hidden.py": "z = 3\n",
        "rl/b.py": "from pkg import __version__\nfrom pkg.core.a import y\n\n\ndef f():\n"
                   "    from pkg.core.a import _x\n",  # lazy
        "rl/c.py": "from ..core.a import y, _x\nimport pkg.core._hidden\nfrom pkg.core._hidden import z\n",
    })
    assert sorted(private_imports(src, "pkg")) == [
        "pkg/rl/b.py:6 imports pkg.core.a._x", "pkg/rl/c.py:1 imports pkg.core.a._x",
        "pkg/rl/c.py:2 imports pkg.core._hidden", "pkg/rl/c.py:3 imports pkg.core._hidden.z"]


_NO_WARP = """
import importlib, pkgutil, sys

class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("warp", "pyboy"):
            raise ImportError(f"blocked: {name}")
        return None

sys.meta_path.insert(0, Block())
names = [sys.argv[1]]
for pkg in sys.argv[2:]:
    mod = importlib.import_module("gbxcule." + pkg)
    names += [m.name for m in pkgutil.walk_packages(mod.__path__, mod.__name__ + ".")]
for name in names:
    importlib.import_module(name)
assert not any(m.split(".")[0] in ("warp", "pyboy") for m in sys.modules)
print(len(names))
"""


def _import_without_warp(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _NO_WARP, *args], capture_output=True, text=True,
                          env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}, timeout=120)


def test_pure_layers_import_without_warp_or_pyboy():
    r = _import_without_warp("gbxcule.core.savestate", *PURE)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) > 40  # every module of core, asm and roms


def test_import_without_warp_check_can_fail():
    r = _import_without_warp("gbxcule.kernels.state")
    assert r.returncode != 0 and "blocked: warp" in r.stderr


def rl_inner_violations(src: Path, package: str = "gbxcule") -> list[str]:
    """Inside rl: an algorithm (rl.algos.X) imports the env, the session and the shared pieces, never another
    algorithm or the registry (rl.algos); adapters (rl.adapters) import the env and its parts only; only the
    registry imports an algorithm, only the room's front door (rl.training) the registry, and only rl/__init__
    (which registers the Gymnasium ids) an adapter."""
    mods, edges = graph(src, package)
    algos, adapters = f"{package}.rl.algos", f"{package}.rl.adapters"
    env_parts = {f"{package}.rl.{m}" for m in ("env", "goals", "tasks", "starts")}
    bad = []
    for name, targets in edges.items():
        if not name.startswith(f"{package}.rl"):
            continue
        for target, line in targets:
            where = f"{mods[name].relative_to(src)}:{line} imports {target}"
            if name.startswith(algos + "."):
                own = name.split(".")[3]
                if target == algos or (target.startswith(algos + ".") and target.split(".")[3] != own):
                    bad.append(f"{where}: an algorithm imports no other algorithm and not the registry")
                if target.startswith(adapters):
                    bad.append(f"{where}: an algorithm imports no adapter")
            elif name.startswith(adapters):
                if target.startswith(f"{package}.rl") and not (target in env_parts or target.startswith(adapters)
                                                              or target == f"{package}.rl"):
                    bad.append(f"{where}: adapters import the env and its parts only")
            elif target.startswith(algos + ".") and name != algos:
                bad.append(f"{where}: only the registry ({algos}) imports an algorithm")
            elif target == algos and name != f"{package}.rl.training":
                bad.append(f"{where}: only the room's front door ({package}.rl.training) imports the registry")
            elif target.startswith(adapters) and name != f"{package}.rl":
                bad.append(f"{where}: only rl/__init__ imports adapters")
    return bad


# The trainer room (docs/architecture.md): the modules that exist for training and nothing else.
ROOM = ("rl/config.py", "rl/rundir.py", "rl/session.py", "rl/training.py", "rl/returns.py", "rl/replay.py",
        "rl/dist.py", "rl/algos/__init__.py")


def test_the_trainer_room_is_small_and_every_algorithm_is_one_readable_file():
    rl = SRC / "gbxcule" / "rl"
    algos = sorted(p for p in (rl / "algos").iterdir() if p.name != "__pycache__")
    assert all(p.is_file() and p.suffix == ".py" for p in algos), "an algorithm is one file in rl/algos/"
    room = [rl.parent / r for r in ROOM] + [p for p in algos if p.name != "__init__.py"]
    assert all(p.is_file() for p in room)
    assert len(room) <= 12, f"the trainer room has {len(room)} files"
    for p in algos:
        lines = len(p.read_text().splitlines())
        assert lines <= 400, f"{p.relative_to(SRC)} has {lines} lines"
    registry = (rl / "algos" / "__init__.py").read_text()
    assert "elif" not in registry and registry.count("if ") == 1  # a list and a lookup, not a chain


def test_rl_inner_layers():
    assert rl_inner_violations(SRC) == []


def test_rl_inner_checker_names_an_algorithm_importing_another(tmp_path):
    src = _write(tmp_path, {
        "__init__.py": "", "rl/__init__.py": "", "rl/env.py": "", "rl/session.py": "",
        "rl/algos/__init__.py": "from pkg.rl.algos.a import x\n", "rl/algos/a.py": "x = 1\n",
        "rl/algos/b.py": "from pkg.rl.algos import a\n",
        "rl/adapters/__init__.py": "", "rl/adapters/g.py": "from pkg.rl import session\n",
        "rl/evaluate.py": "from pkg.rl.algos import a\n",
    })
    bad = sorted(rl_inner_violations(src, "pkg"))
    assert [b.split(" imports ")[0] for b in bad] == ["pkg/rl/adapters/g.py:1", "pkg/rl/algos/b.py:1",
                                                     "pkg/rl/evaluate.py:1"]
    assert "adapters import the env" in bad[0] and "no other algorithm" in bad[1] and "only the registry" in bad[2]


def private_reads(src: Path, package: str = "gbxcule", allowed: tuple[str, ...] = ("self.pyboy._",)) -> list[str]:
    """`x._name` where x is not `self` or `cls`: a module reading another object's private attribute (an object of
    another module, or another instance of its own class). `allowed`: third-party internals with no public way
    (PyBoy's serial buffer)."""
    bad = []
    for path in sorted((src / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
                text = ast.unparse(node)
                if not text.startswith(allowed):
                    bad.append(f"{path.relative_to(src)}:{node.lineno} reads {text}")
    return bad


def test_no_module_reads_another_objects_private_attributes(tmp_path):
    assert private_reads(SRC) == []
    src = _write(tmp_path, {"__init__.py": "", "rl/__init__.py": "", "rl/t.py": "def f(env):\n    return env._ram\n"})
    assert private_reads(src, "pkg") == ["pkg/rl/t.py:2 reads env._ram"]
