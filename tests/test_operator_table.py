"""The static operator table names each operator's family module, and each family's DEFS agree."""

from __future__ import annotations

from onemodel.graph.operators import optable


def test_every_family_defines_exactly_the_operators_the_table_names_for_it():
    listed: dict[str, set[tuple[str, str]]] = {}
    for key, family in optable.FAMILIES.items():
        listed.setdefault(family, set()).add(key)
    defined = {
        family: {(d.domain, d.op_type) for d in optable.family_definitions(family)}
        for family in listed
    }
    assert defined == listed


def test_the_whole_table_holds_every_family_definition_once():
    table = optable.definitions()
    assert table == optable.TABLE
    assert len({id(d) for d in table}) == len(table)
    assert {(d.domain, d.op_type) for d in table} == set(optable.FAMILIES)


def test_an_operator_outside_the_table_resolves_to_nothing():
    assert optable.resolve("", "NoSuchOperator", 17) is None
    assert optable.resolve("", "Gemm", 17).op_type == "Gemm"
    assert optable.resolve("", "Gemm", 0) is None
