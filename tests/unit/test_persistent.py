"""core/pmap's PMap and PSet against dict and frozenset, and core/frozen's evolve: a change
gives a new value with the change and leaves the old one as it was."""

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringleader.core.frozen import evolve
from ringleader.core.pmap import PMap, PSet
from tests.properties import examples

KEYS = st.one_of(st.integers(-50, 5000), st.text(max_size=3))
CHANGES = st.lists(st.tuples(st.sampled_from(["set", "delete"]), KEYS, st.integers()))


@settings(max_examples=examples(300), deadline=None)
@given(start=st.dictionaries(KEYS, st.integers()), changes=CHANGES)
def test_a_pmap_changes_like_a_dict_and_every_earlier_version_stays(
    start: dict[object, int], changes: list[tuple[str, object, int]]
) -> None:
    pmap = PMap(start)
    versions = [(pmap, dict(start))]
    model = dict(start)
    for kind, key, value in changes:
        if kind == "set":
            pmap, model[key] = pmap.set(key, value), value
        else:
            pmap = pmap.delete(key)
            model.pop(key, None)
        versions.append((pmap, dict(model)))
    for version, expected in versions:
        assert dict(version.items()) == expected
        assert len(version) == len(expected)
        assert all(key in version for key in expected)


@settings(max_examples=examples(300), deadline=None)
@given(
    start=st.frozensets(KEYS),
    changes=st.lists(st.tuples(st.booleans(), KEYS)),
)
def test_a_pset_changes_like_a_frozenset_and_every_earlier_version_stays(
    start: frozenset[object], changes: list[tuple[bool, object]]
) -> None:
    pset = PSet(start)
    versions = [(pset, start)]
    model = start
    for adding, item in changes:
        pset = pset.add(item) if adding else pset.discard(item)
        model = model | {item} if adding else model - {item}
        versions.append((pset, model))
    for version, expected in versions:
        assert frozenset(version) == expected and version == PSet(expected)
        assert len(version) == len(expected)
        assert (version - {1}) == expected - {1}  # the Set operators work too


@dataclass(frozen=True)
class Pair:
    left: int
    right: tuple[int, ...] = ()


def test_evolve_changes_the_named_fields_of_a_copy_only() -> None:
    pair = Pair(1, (2,))
    changed = evolve(pair, right=(3,))
    assert changed == Pair(1, (3,)) and pair == Pair(1, (2,))
    assert type(changed) is Pair


def test_evolve_names_a_field_that_does_not_exist() -> None:
    with pytest.raises(TypeError, match="Pair has no field middle"):
        evolve(Pair(1), middle=2)
