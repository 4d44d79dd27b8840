"""Which private names of faust, mode, aiokafka and pyarrow our code uses, found by
reading the code (an AST walk), for the inventory test of docs/faust-internals.md.

A private name is one with a leading underscore that is not a dunder. A use in one
of our modules is:

- an attribute read, call or assignment (``consumer._fetcher``, ``x._m = f``),
- a ``getattr``/``setattr``/``hasattr``/``delattr`` with a literal name,
- an import of a private module or name (``from pyarrow import _compute``),
- a method or attribute defined in one of our classes that overrides a private
  member of a third-party base class (``def _drain_messages`` in a Faust
  consumer subclass).

Whose name it is, is decided by where it is defined, not by its spelling:

- on ``self``/``cls``/``super()`` inside one of our classes, the name is the third
  party's when a third-party class in that class's MRO defines it (in its body,
  or as ``self.<name> = ...`` in one of its methods), else it is ours;
- on any other object, the name is the third party's when it is defined anywhere
  in the installed third-party sources and nowhere in our code (an override does
  not count as ours). A name defined on both sides is *ambiguous* and reported
  apart, so that no collision hides a use.

Assignments to a third-party attribute (private or public) of an object that is
not ``self`` are the runtime patches; they are collected apart too.

Our modules are read, never imported; the third-party classes our classes derive
from are imported, to walk their MRO. What the walk cannot see: a name reached
through a string it does not read (``operator.attrgetter("_x")``, a ``type()``
namespace), or a private name of another library (prometheus_client, the stdlib).
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

THIRD_PARTY = ("faust", "mode", "aiokafka", "pyarrow")
_REFLECTION = {"getattr", "setattr", "hasattr", "delattr"}
# Cython sources of pyarrow (and aiokafka's C records): the names they define.
_CYTHON_DEFINITION = re.compile(
    r"^\s*(?:cdef\s+class|cdef|cpdef|def|class)\s+(?:[\w\[\].*]+\s+)*?(\w+)\s*[(:]", re.M
)
_CYTHON_SELF_ATTRIBUTE = re.compile(r"\bself\.(\w+)\s*=[^=]")


def is_private(name: str) -> bool:
    """A leading underscore, and not a dunder."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


class Use(NamedTuple):
    """One use of a third-party private name in one of our modules."""

    module: str
    """Our module's path relative to the repository root, e.g. ``scorer/io/columnar.py``."""
    name: str
    owners: frozenset[str]
    """The third-party packages that define the name (one, when resolved through an MRO)."""
    kind: str
    """``read``, ``set`` (assigned), ``override``, ``import`` or ``reflection``."""
    line: int


class Patch(NamedTuple):
    """An attribute of a third-party object replaced at runtime by one of our modules."""

    module: str
    name: str
    line: int


class Ambiguous(NamedTuple):
    """A name used on an object of unknown type (not ``self``) that both our code and
    a third-party package define: a private name read or assigned, or any name
    assigned. Whose it is takes a person's decision (``find_uses``'s ``decisions``)."""

    module: str
    receiver: str
    """The object's expression as written, e.g. ``producer``."""
    name: str
    line: int

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.module, self.receiver, self.name)


@dataclass
class ThirdPartyNames:
    """Every name the installed third-party packages define, by package, and the
    members of each of their classes."""

    packages: dict[str, set[str]] = field(default_factory=dict)
    """Package -> every name it defines (functions, classes, module and class level
    assignments, attributes assigned anywhere, ``__slots__``, module file names)."""
    class_members: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    """(module, qualified class name) -> the names its body and its methods' ``self.``
    assignments define."""

    def owners(self, name: str) -> frozenset[str]:
        return frozenset(p for p, names in self.packages.items() if name in names)

    def mro_owner(self, bases: Iterable[type], name: str) -> str | None:
        """The package of the first third-party class in the MROs of ``bases`` that
        defines ``name``, or None."""
        for base in bases:
            for klass in base.__mro__:
                root = klass.__module__.split(".")[0]
                if root not in THIRD_PARTY:
                    continue
                members = self.class_members.get((klass.__module__, klass.__qualname__), set())
                if name in members or name in vars(klass):
                    return root
        return None


def _package_root(package: str) -> Path:
    return Path(importlib.import_module(package).__file__ or "").parent


def _module_name(root: Path, package: str, path: Path) -> str:
    parts = [package, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _scan_class(node: ast.ClassDef, methods: bool = True) -> set[str]:
    """The names a class body defines, and (``methods``) those its methods assign on
    their first parameter (``self.<name> = ...``)."""
    names: set[str] = set()
    for item in node.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(item.name)
            if methods and isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                names.update(_self_assignments(item))
        else:
            names.update(_assigned_names(item))
    return names


def _self_assignments(method: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    if not method.args.args or any(_dotted(d) == "staticmethod" for d in method.decorator_list):
        return set()
    first = method.args.args[0].arg
    return {
        sub.attr
        for sub in ast.walk(method)
        if isinstance(sub, ast.Attribute)
        and isinstance(sub.ctx, ast.Store)
        and isinstance(sub.value, ast.Name)
        and sub.value.id == first
    }


def _assigned_names(statement: ast.stmt) -> set[str]:
    """Names bound by a module or class level statement."""
    names: set[str] = set()
    targets: list[ast.expr] = []
    if isinstance(statement, ast.Assign):
        targets = statement.targets
        if any(isinstance(t, ast.Name) and t.id == "__slots__" for t in targets):
            names.update(
                c.value
                for c in ast.walk(statement.value)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
            )
    elif isinstance(statement, ast.AnnAssign | ast.AugAssign):
        targets = [statement.target]
    elif isinstance(statement, ast.Import | ast.ImportFrom):
        names.update((a.asname or a.name).split(".")[0] for a in statement.names)
    elif isinstance(statement, ast.If | ast.Try):
        for inner in ast.walk(statement):
            if isinstance(inner, ast.stmt) and inner is not statement:
                if isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    names.add(inner.name)
                elif not isinstance(inner, ast.If | ast.Try):
                    names.update(_assigned_names(inner))
    for target in targets:
        for sub in ast.walk(target):
            if isinstance(sub, ast.Name):
                names.add(sub.id)
    return names


def _scan_python(source: str, module: str, found: ThirdPartyNames, names: set[str]) -> None:
    tree = ast.parse(source)
    for statement in tree.body:
        names.update(_assigned_names(statement))

    def classes(body: list[ast.stmt], prefix: str) -> None:
        for item in body:
            if isinstance(item, ast.ClassDef):
                qualname = prefix + item.name
                members = found.class_members[(module, qualname)] = _scan_class(item)
                names.update(members)
                classes(item.body, qualname + ".")

    classes(tree.body, "")
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)


def scan_third_party(packages: Iterable[str] = THIRD_PARTY) -> ThirdPartyNames:
    """Read the installed sources of ``packages`` (Python, and Cython where the
    package ships it) for the names they define."""
    found = ThirdPartyNames()
    for package in packages:
        root = _package_root(package)
        names: set[str] = set()
        for path in sorted(root.rglob("*")):
            if path.is_dir() or "tests" in path.relative_to(root).parts:
                continue
            stem = path.name.split(".")[0]
            if path.suffix in {".py", ".pyx", ".pxd", ".so", ".pyi"}:
                names.add(stem)  # a module is an attribute of its package
            if path.suffix == ".py":
                _scan_python(
                    path.read_text(encoding="utf-8", errors="replace"),
                    _module_name(root, package, path),
                    found,
                    names,
                )
            elif path.suffix in {".pyx", ".pxd", ".pxi"}:
                text = path.read_text(encoding="utf-8", errors="replace")
                names.update(_CYTHON_DEFINITION.findall(text))
                names.update(_CYTHON_SELF_ATTRIBUTE.findall(text))
        for directory in (p for p in root.rglob("*") if p.is_dir()):
            names.add(directory.name)
        found.packages[package] = names
    return found


def _module_imports(tree: ast.Module, module: str) -> dict[str, str]:
    """Local name -> dotted path, for the module's imports (at any level; a relative
    one resolved as from a plain module, not a package's ``__init__``: our code has
    no relative imports)."""
    imports: dict[str, str] = {}
    package = module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    imports[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    imports[root] = root
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            for alias in node.names:
                imports[alias.asname or alias.name] = f"{base}.{alias.name}"
    return imports


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


def _resolve(path: str) -> object | None:
    """The object a dotted path names, importing the longest module prefix."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for part in parts[cut:]:
                value = getattr(value, part)
        except AttributeError:
            return None
        return value
    return None


class OurModule(NamedTuple):
    path: str
    """Relative to the repository root."""
    name: str
    """Dotted."""
    tree: ast.Module


def our_modules(repo: Path, packages: Iterable[str]) -> list[OurModule]:
    """Every Python module under the given top-level packages of ``repo``."""
    modules = []
    for package in packages:
        for path in sorted((repo / package).rglob("*.py")):
            relative = path.relative_to(repo)
            parts = list(relative.with_suffix("").parts)
            dotted = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules.append(
                OurModule(relative.as_posix(), dotted, ast.parse(path.read_text(encoding="utf-8")))
            )
    return modules


@dataclass
class Inventory:
    """What :func:`find_uses` found."""

    uses: list[Use]
    patches: list[Patch]
    ambiguous: list[Ambiguous]
    """The uses no decision settles."""
    decided: set[tuple[str, str, str]]
    """The decisions that matched a use (the others are stale)."""

    def names(self) -> dict[tuple[str, str], frozenset[str]]:
        """(module, name) -> the packages that may own it."""
        found: dict[tuple[str, str], frozenset[str]] = {}
        for use in self.uses:
            key = (use.module, use.name)
            found[key] = found.get(key, frozenset()) | use.owners
        return found


class _Class(NamedTuple):
    """One of our classes, with what the walk needs to resolve ``self`` in it."""

    third_party_bases: tuple[type, ...]
    """The third-party classes it derives from, directly or through our classes."""
    node: ast.ClassDef


def find_uses(
    modules: list[OurModule],
    third_party: ThirdPartyNames | None = None,
    decisions: Mapping[tuple[str, str, str], bool] | None = None,
) -> Inventory:
    """Every use of a third-party private name, and every runtime patch, in ``modules``
    (see the module docstring). ``decisions`` settles ambiguous uses: (module,
    receiver, name) -> True when the name is the third party's (a use, or a patch when
    assigned), False when it is ours; the ones it does not settle are returned in
    :attr:`Inventory.ambiguous`."""
    third_party = third_party or scan_third_party()
    imports = {m.name: _module_imports(m.tree, m.name) for m in modules}
    class_nodes: dict[str, tuple[OurModule, ast.ClassDef]] = {}
    for module in modules:
        for node in ast.walk(module.tree):
            if isinstance(node, ast.ClassDef):
                class_nodes.setdefault(f"{module.name}.{node.name}", (module, node))

    resolved_classes: dict[int, _Class] = {}

    def our_class(module: OurModule, node: ast.ClassDef) -> _Class:
        if id(node) in resolved_classes:
            return resolved_classes[id(node)]
        bases: list[type] = []
        for base in node.bases:
            dotted = _dotted(base)
            if dotted is None:
                continue
            head, _, rest = dotted.partition(".")
            local = {n.name for n in module.tree.body if isinstance(n, ast.ClassDef)}
            if head in local and not rest:
                path = f"{module.name}.{head}"
            else:
                origin = imports[module.name].get(head)
                if origin is None:
                    continue
                path = f"{origin}.{rest}" if rest else origin
            if path in class_nodes:
                bases.extend(our_class(*class_nodes[path]).third_party_bases)
            elif path.split(".")[0] in THIRD_PARTY:
                value = _resolve(path)
                if not isinstance(value, type):
                    # Unresolved, every self. name of the class would pass for ours.
                    raise LookupError(
                        f"{module.path}:{node.lineno}: base class {path} of {node.name} "
                        "is not a class of the installed package"
                    )
                bases.append(value)
        resolved_classes[id(node)] = _Class(tuple(bases), node)
        return resolved_classes[id(node)]

    # Our own definitions: a name defined in one of our classes (not as an override of
    # a third-party member), by a self. assignment in its methods, or at module level.
    ours: set[str] = set()
    overrides: list[Use] = []
    for module in modules:
        for statement in module.tree.body:
            ours.update(_assigned_names(statement))
            if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                ours.add(statement.name)
        for node in ast.walk(module.tree):
            if not isinstance(node, ast.ClassDef):
                continue
            klass = our_class(module, node)
            for name in _scan_class(node, methods=False):
                owner = third_party.mro_owner(klass.third_party_bases, name)
                if owner is None:
                    ours.add(name)
                elif is_private(name):
                    line = _definition_line(node, name)
                    overrides.append(Use(module.path, name, frozenset({owner}), "override", line))
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    ours.update(
                        name
                        for name in _self_assignments(item)
                        if third_party.mro_owner(klass.third_party_bases, name) is None
                    )

    uses = list(overrides)
    patches: list[Patch] = []
    ambiguous: list[Ambiguous] = []
    decided: set[tuple[str, str, str]] = set()
    for module in modules:
        walker = _Walker(
            module, third_party, ours, decisions or {}, lambda n, m=module: our_class(m, n)
        )
        walker.visit(module.tree)
        uses.extend(walker.uses)
        patches.extend(walker.patches)
        ambiguous.extend(walker.ambiguous)
        decided.update(walker.decided)
    return Inventory(uses, patches, ambiguous, decided)


def _is_method_of(klass: ast.ClassDef, function: ast.AST) -> bool:
    return any(function is item for item in klass.body)


def _definition_line(node: ast.ClassDef, name: str) -> int:
    for sub in ast.walk(node):
        if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef) and sub.name == name:
            return sub.lineno
        if isinstance(sub, ast.Attribute) and sub.attr == name:
            return sub.lineno
        if isinstance(sub, ast.Name) and sub.id == name:
            return sub.lineno
    return node.lineno


class _Walker(ast.NodeVisitor):
    """Walks one of our modules, tracking the class and the ``self`` name in scope."""

    def __init__(
        self,
        module: OurModule,
        third_party: ThirdPartyNames,
        ours: set[str],
        decisions: Mapping[tuple[str, str, str], bool],
        our_class: Callable[[ast.ClassDef], _Class],
    ) -> None:
        self.module = module
        self.third_party = third_party
        self.ours = ours
        self.decisions = decisions
        self.our_class = our_class
        self.scopes: list[tuple[_Class, str | None]] = []
        """(enclosing class, its method's first parameter) for each class entered."""
        self.uses: list[Use] = []
        self.patches: list[Patch] = []
        self.ambiguous: list[Ambiguous] = []
        self.decided: set[tuple[str, str, str]] = set()

    # ---------------------------------------------------------------- scopes

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scopes.append((self.our_class(node), None))
        for child in ast.iter_child_nodes(node):
            self.visit(child)
        self.scopes.pop()

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if (
            self.scopes
            and self.scopes[-1][1] is None
            and _is_method_of(self.scopes[-1][0].node, node)
        ):
            klass, _ = self.scopes[-1]
            static = any(_dotted(d) == "staticmethod" for d in node.decorator_list)
            first = node.args.args[0].arg if node.args.args and not static else None
            self.scopes[-1] = (klass, first)
            self.generic_visit(node)
            self.scopes[-1] = (klass, None)
        else:
            self.generic_visit(node)

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    # ---------------------------------------------------------------- uses

    def _on_self(self, receiver: ast.expr) -> _Class | None:
        """Our class when ``receiver`` is its ``self``, ``cls`` or ``super()``."""
        if not self.scopes:
            return None
        klass, first = self.scopes[-1]
        if isinstance(receiver, ast.Name) and first is not None and receiver.id == first:
            return klass
        if (
            isinstance(receiver, ast.Call)
            and isinstance(receiver.func, ast.Name)
            and receiver.func.id == "super"
        ):
            return klass
        return None

    def _attribute(self, receiver: ast.expr, name: str, store: bool, line: int, kind: str) -> None:
        klass = self._on_self(receiver)
        if klass is not None:
            if not is_private(name):
                return
            owner = self.third_party.mro_owner(klass.third_party_bases, name)
            if owner is not None:
                self.uses.append(Use(self.module.path, name, frozenset({owner}), kind, line))
            return
        owners = self.third_party.owners(name)
        dunder = name.startswith("__") and name.endswith("__")  # Python's, not a package's
        if not owners or dunder or not (store or is_private(name)):
            return
        candidate = Ambiguous(self.module.path, ast.unparse(receiver), name, line)
        decision = self.decisions.get(candidate.key)
        if decision is not None:
            self.decided.add(candidate.key)
        if decision is False:
            return
        if decision is None and name in self.ours:
            self.ambiguous.append(candidate)
            return
        if store:
            self.patches.append(Patch(self.module.path, name, line))
        if is_private(name):
            self.uses.append(Use(self.module.path, name, owners, kind, line))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        store = isinstance(node.ctx, ast.Store)
        self._attribute(node.value, node.attr, store, node.lineno, "set" if store else "read")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if (
            isinstance(node.func, ast.Name)
            and node.func.id in _REFLECTION
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            store = node.func.id == "setattr"
            self._attribute(node.args[0], node.args[1].value, store, node.lineno, "reflection")
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._import(alias.name.split("."), node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module:
            return
        parts = node.module.split(".")
        self._import(parts, node.lineno)
        if parts[0] in THIRD_PARTY:
            for alias in node.names:
                if is_private(alias.name):
                    self.uses.append(
                        Use(
                            self.module.path,
                            alias.name,
                            frozenset({parts[0]}),
                            "import",
                            node.lineno,
                        )
                    )

    def _import(self, parts: list[str], line: int) -> None:
        if parts[0] not in THIRD_PARTY:
            return
        for part in parts[1:]:
            if is_private(part):
                self.uses.append(Use(self.module.path, part, frozenset({parts[0]}), "import", line))


def iter_table_rows(markdown: str, heading: str) -> Iterator[tuple[int, list[str]]]:
    """The cells of every table row in the section under ``heading`` (a ``##`` line),
    with the line number, header and separator rows left out."""
    lines = markdown.splitlines()
    inside = False
    for number, line in enumerate(lines, start=1):
        if line.startswith("## "):
            inside = line[3:].strip() == heading
            continue
        if not inside or not line.startswith("|"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if all(set(cell) <= set("-: ") for cell in cells):
            continue
        if number > 1 and not lines[number - 2].startswith("|"):
            continue  # the header row
        yield number, cells


def unquote(cell: str) -> str:
    """``\\`name\\``` -> ``name``."""
    return cell.strip().strip("`")
