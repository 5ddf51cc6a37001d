"""The layering of DESIGN.md §6, enforced: the core is pure, the store knows no core."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import boxmq

SRC = Path(boxmq.__file__).parent


def _is_boxmq_module(name: str) -> bool:
    """Whether `name` (dotted) is a module or package of boxmq's source."""
    first, *rest = name.split(".")
    path = SRC.joinpath(*rest)
    return first == "boxmq" and (
        path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()
    )


def _imported(source: str, module: str) -> set[str]:
    """The modules the module `module` (dotted, `boxmq.core.queue`) whose text is `source`
    imports: `import x.y`'s x.y, `from x import y`'s x, and x.y too where y is a module of
    boxmq (`from boxmq import store`), a relative `from ..x import y` read from `module`'s
    package. Before, `from boxmq import store` counted as `boxmq` alone, and a relative
    import as its bare tail (`..store` as `store`), so neither broke a layering rule."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".")[: -node.level]
                base = ".".join([*package, *([base] if base else [])])
            names.add(base)
            names.update(
                f"{base}.{alias.name}"
                for alias in node.names
                if _is_boxmq_module(f"{base}.{alias.name}")
            )
    return names


def _imports(package: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in sorted((SRC / package).rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = (*parts[:-1], "__init__")  # its package is itself: `.x` is a sibling of it
        module = ".".join(("boxmq", *parts))
        found[str(path.relative_to(SRC))] = _imported(path.read_text(), module)
    return found


def _offenders(package: str, forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{module} imports {name}"
        for module, names in _imports(package).items()
        for name in sorted(names)
        if any(name == f or name.startswith(f + ".") for f in forbidden)
    ]


def test_the_core_imports_no_io_no_store_no_front_end() -> None:
    forbidden = (
        "asyncio",
        "threading",
        "os",
        "time",
        "socket",
        "select",
        "boxmq.store",
        "boxmq.client",
        "boxmq.runtime",
        "boxmq.cli",
        "boxmq.mqtt",
        "boxmq.xmpp",
        "boxmq.spark",
        "boxmq.http",
    )
    assert _offenders("core", forbidden) == []


def test_the_store_never_imports_the_core_or_the_client() -> None:
    assert _offenders("store", ("boxmq.core", "boxmq.client", "boxmq.runtime")) == []


@pytest.mark.parametrize("package", ["core", "store"])
def test_the_check_sees_every_module(package: str) -> None:
    # Guard against a test that passes because it looked at nothing.
    assert len(_imports(package)) >= 4


def test_public_names_are_sorted_and_exported() -> None:
    assert boxmq.__all__ == sorted(boxmq.__all__)
    for name in boxmq.__all__:
        assert hasattr(boxmq, name), name


def test_the_lazy_homes_name_exactly_the_public_names() -> None:
    # boxmq/__init__.py lists each name thrice (its type-checking imports, __all__, and the
    # table of where each lives, from which a computed __all__ mypy could not read): a name
    # in the table alone was `boxmq.X` though no part of the API, which the test above
    # (__all__'s names, each found) cannot see.
    assert sorted(boxmq._HOMES) == boxmq.__all__


def _type_checking_imports() -> dict[str, str]:
    """Each name the `if TYPE_CHECKING:` block of boxmq/__init__.py imports, and its module."""
    tree = ast.parse((SRC / "__init__.py").read_text())
    blocks = [
        node
        for node in tree.body
        if isinstance(node, ast.If)
        and isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
    ]
    assert len(blocks) == 1
    return {
        alias.asname or alias.name: node.module or ""
        for node in blocks[0].body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def test_the_type_checking_imports_name_each_public_name_from_its_lazy_home() -> None:
    # The third list: mypy and an editor see the API only through these imports, and neither
    # reads a computed form of them (or of __all__), so the three lists stay written out and
    # this test holds the imports to the table the runtime uses. A name imported from another
    # module than its home would type-check against a class the user never gets; one missing
    # would be an attribute mypy says boxmq does not have.
    assert _type_checking_imports() == boxmq._HOMES


def test_spark_is_an_edge_nothing_below_imports_and_it_never_imports_the_core() -> None:
    # DESIGN.md §6: spark uses the client and the store; the core and the store never know it.
    # Save core.durations, values only: how a duration is written, read alike by every door.
    for package in ("core", "store", "client"):
        assert _offenders(package, ("boxmq.spark", "pyspark", "pyarrow", "pandas")) == []
    core = _offenders("spark", ("boxmq.core",))
    assert core == ["spark/options.py imports boxmq.core.durations"]
    assert len(_imports("spark")) >= 4


def test_xmpp_is_a_door_nothing_below_imports_it() -> None:
    # DESIGN.md §6: the core, the store and the client never know the XMPP door or slixmpp;
    # only the component (the edge) may await, and the service never opens a socket.
    for package in ("core", "store", "client"):
        assert _offenders(package, ("boxmq.xmpp", "slixmpp")) == []
    pure = {m: n for m, n in _imports("xmpp").items() if not m.endswith("component.py")}
    for module, names in pure.items():
        assert not {"asyncio", "socket", "threading"} & names, module
    assert len(_imports("xmpp")) >= 8


def test_mqtt_is_a_door_nothing_below_imports_it() -> None:
    # DESIGN.md §6: the core, the store and the client never know the MQTT door, nor do the
    # other doors (the CLI and `serve` above it may); xmpp and spark had this guard, mqtt not.
    for package in ("core", "store", "client", "spark", "xmpp"):
        assert _offenders(package, ("boxmq.mqtt", "boxmq.runtime", "boxmq.cli")) == []
    assert len(_imports("mqtt")) >= 8


@pytest.mark.parametrize(
    ("module", "statement", "forbidden"),
    [
        ("boxmq.core.queue", "from boxmq import store", "boxmq.store"),
        ("boxmq.core.queue", "from boxmq import errors, mqtt", "boxmq.mqtt"),
        ("boxmq.core.queue", "from .. import mqtt", "boxmq.mqtt"),
        ("boxmq.core.queue", "from ..store import names", "boxmq.store"),
        ("boxmq.core.queue", "from ..store.names import encode", "boxmq.store"),
        ("boxmq.core.__init__", "from ..client import box", "boxmq.client"),
        ("boxmq.core.queue", "from boxmq.store import dropbox", "boxmq.store"),
        ("boxmq.core.queue", "import boxmq.runtime", "boxmq.runtime"),
        ("boxmq.core.queue", "if True:\n    from boxmq import xmpp", "boxmq.xmpp"),
    ],
)
def test_every_form_of_import_of_a_forbidden_module_is_seen(
    module: str, statement: str, forbidden: str
) -> None:
    # The old reading saw only `from boxmq.store import dropbox` and `import boxmq.runtime`
    # here: `from boxmq import store` was read as an import of `boxmq`, and a relative import
    # as its bare tail (`store`, or nothing at all for `from .. import mqtt`).
    names = _imported(statement, module)
    assert any(name == forbidden or name.startswith(forbidden + ".") for name in names), names


def test_a_name_imported_from_a_module_is_no_module() -> None:
    # `from boxmq.errors import Conflict` imports boxmq.errors, not a module `Conflict`; and
    # `from . import queue` in the core is the core's own.
    assert _imported("from boxmq.errors import Conflict", "boxmq.core.queue") == {"boxmq.errors"}
    assert _imported("from . import queue", "boxmq.core.dispatch") == {
        "boxmq.core",
        "boxmq.core.queue",
    }
