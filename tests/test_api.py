"""The public API (issue 27, items 3 and 5): every public name importable from ``hybridsql``,
declared the same in its three places, and typed: every parameter and return of a public
function or method has a hint (mypy checks them in CI: .ci/run)."""

import ast
import inspect
import os

import hybridsql


def type_checking_imports() -> set:
    """The names hybridsql/__init__.py imports under ``if TYPE_CHECKING:`` (what a type checker
    sees)."""
    with open(hybridsql.__file__, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    (guard,) = [
        n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
    ]
    return {alias.name for node in guard.body for alias in node.names}


def test_the_public_names_are_declared_the_same_three_times():
    homes = {name for names in hybridsql._HOMES.values() for name in names}
    assert sorted(hybridsql.__all__) == sorted(homes) == sorted(type_checking_imports())
    assert len(hybridsql.__all__) == len(set(hybridsql.__all__))


def test_each_public_name_comes_from_its_home_module():
    for home, names in hybridsql._HOMES.items():
        for name in names:
            assert getattr(hybridsql, name).__module__.startswith(home), name
    for name in ("HybridIndex", "SearchOptions", "SearchResult", "MemoryStore", "connect", "load"):
        assert name in hybridsql.__all__


def test_an_unknown_name_is_an_attribute_error_naming_it():
    try:
        hybridsql.NoSuchThing  # noqa: B018
    except AttributeError as e:
        assert str(e) == "module 'hybridsql' has no attribute 'NoSuchThing'"
    else:
        raise AssertionError("hybridsql.NoSuchThing did not raise")


def unhinted(function, where: str) -> list:
    """``where: parameter NAME`` for each parameter of ``function`` without a hint, and
    ``where: return`` when its return has none (``__init__`` returns None)."""
    signature = inspect.signature(function)
    missing = [
        f"{where}: parameter {p.name}"
        for p in signature.parameters.values()
        if p.name not in ("self", "cls") and p.annotation is inspect.Parameter.empty
    ]
    if signature.return_annotation is inspect.Signature.empty and not where.endswith("__init__"):
        missing.append(f"{where}: return")
    return missing


def test_every_public_function_and_method_is_typed():
    missing = []
    for name in hybridsql.__all__:
        obj = getattr(hybridsql, name)
        if inspect.isclass(obj):
            if issubclass(obj, BaseException):
                continue
            for attr in ["__init__", *dir(obj)]:
                member = inspect.getattr_static(obj, attr, None)
                if isinstance(member, (staticmethod, classmethod)):
                    member = member.__func__
                public = attr == "__init__" or not attr.startswith("_")
                if (
                    public
                    and inspect.isfunction(member)
                    and member.__module__.startswith("hybridsql")
                ):
                    missing += unhinted(member, f"{name}.{attr}")
        else:
            missing += unhinted(obj, name)
    assert sorted(set(missing)) == []


def test_the_package_says_it_is_typed():
    assert os.path.isfile(os.path.join(os.path.dirname(hybridsql.__file__), "py.typed"))
