"""The typed tree's machinery (infra/config_schema.py: `key`, `keys_of`, `build`, `Section.keyname`) on a
small tree built inside each test, so that a change to it shows in the test that reads it (the stack's
own tree is built once, at import, before any test runs;
bench/results/mutation/2026-12-06-data-verdict-verify-schema.md).

No `from __future__ import annotations` here: the key fields' annotations are written as the strings the
stack's modules get from it (`"int"`, `"Mapping[str, Any]"`), and the nested section as a class, so the
tree can be declared inside a function.
"""

import dataclasses
from collections.abc import Mapping  # noqa: F401 - read by typing.get_type_hints from this module's globals
from typing import Any  # noqa: F401 - the same

from infra.config_schema import Key, Section, between, build, key, keys_of

CHECK = between(1, 3)


def _tree():
    @dataclasses.dataclass(frozen=True)
    class Inner(Section):
        title = "Inner things"
        size: "int" = key("innerSize", 2, "How many.", check=CHECK)

    @dataclasses.dataclass(frozen=True)
    class Outer(Section):
        title = "Outer things"
        name: "str" = key("outerName", "x", "The name.")
        labels: "Mapping[str, Any]" = key("outerLabels", {"a": "1"}, "Labels.")
        inner: Inner = dataclasses.field(default_factory=Inner)
        derived: "int" = 0
        notes: "tuple[str, ...]" = ()  # neither a key nor a section

    return Outer, Inner


def test_keys_of_lists_every_key_in_declaration_order_with_nested_sections_in_place():
    """A field of a generic type that is no key (``notes``) is skipped, not taken for a section."""
    outer, _ = _tree()
    expected = (
        Key("outerName", "string", "x", "The name.", "Outer things", None, ("name",)),
        Key("outerLabels", "object", {"a": "1"}, "Labels.", "Outer things", None, ("labels",)),
        Key("innerSize", "integer", 2, "How many.", "Inner things", CHECK, ("inner", "size")),
    )
    got = keys_of(outer)
    assert got == expected, f"expected {expected}, got {got}"


def test_a_key_field_keeps_its_default():
    outer, inner = _tree()
    assert (outer().name, inner().size) == ("x", 2)


def test_an_object_key_gives_each_instance_its_own_copy_of_the_default():
    outer, _ = _tree()
    first, second = outer(), outer()
    first.labels["b"] = "2"
    assert second.labels == {"a": "1"}, f"the default was shared: {second.labels}"


def test_keyname_gives_the_stack_key_plain_or_prefixed_with_the_project():
    outer, _ = _tree()
    assert (outer.keyname("name"), outer.keyname("labels", prefixed=True)) == ("outerName", "ray-efa-eks:outerLabels")


def test_build_fills_keys_nested_sections_and_derived_fields():
    outer, inner = _tree()
    got = build(outer, {"outerName": "y", "outerLabels": {}, "innerSize": 3}, derived=5)
    assert got == outer(name="y", labels={}, inner=inner(size=3), derived=5), got
