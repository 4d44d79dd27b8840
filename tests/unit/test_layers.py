"""The packages' layering, as scorer/__init__.py states it: each package imports
only the packages before it in ``LAYERS`` (lazy imports inside functions too).
``scorer/__init__.py`` itself is the public facade and may import any of them."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LAYERS = (
    "schemas",
    "scorer.settings",
    "scorer.core",
    "scorer.analysis",
    "scorer.io",
    "scorer.offline",
    "scorer.kafka",
    "scorer.page",
    "scorer.stream",
    "scorer.cli",
)


def layer_of(module: str) -> int | None:
    for index, layer in enumerate(LAYERS):
        if module == layer or module.startswith(layer + "."):
            return index
    return None


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if layer_of(node.module) is None:  # from scorer import core
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
            else:
                names.add(node.module)
    return names


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def upward_imports(root: Path = ROOT) -> list[str]:
    found = []
    for path in sorted([*root.glob("scorer/**/*.py"), *root.glob("schemas/**/*.py")]):
        if path == root / "scorer" / "__init__.py":
            continue
        own = layer_of(module_name(path, root))
        assert own is not None, f"{path.relative_to(root)} is in no layer of LAYERS"
        for name in sorted(imported_modules(path)):
            theirs = layer_of(name)
            if theirs is not None and theirs > own:
                found.append(f"{path.relative_to(root)} imports {name}")
    return found


def test_every_package_imports_only_the_layers_below_it() -> None:
    assert upward_imports() == []


def test_every_package_has_its_init() -> None:
    missing = [
        str(folder.relative_to(ROOT))
        for base in ("scorer", "schemas")
        for folder in [ROOT / base, *(ROOT / base).rglob("*")]
        if folder.is_dir()
        and folder.name != "__pycache__"
        and any(folder.glob("*.py"))
        and not (folder / "__init__.py").exists()
    ]
    assert missing == []


def test_the_check_sees_a_lazy_upward_import(tmp_path: Path) -> None:
    (tmp_path / "scorer" / "core").mkdir(parents=True)
    (tmp_path / "scorer" / "core" / "probe.py").write_text(
        "from scorer.core.metrics import score\n\n"
        "def f():\n    from scorer.stream.app import create_app\n"
    )
    assert upward_imports(tmp_path) == ["scorer/core/probe.py imports scorer.stream.app"]
