"""``definition_from_body`` keeps validated definitions by their body without the name
(clockd.api.views): a second body of the same shape gives what the loader gives, and a
bad name still gets the loader's own 422."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from clockd.api.problems import Problem
from clockd.api.views import definition_from_body
from clockd.core.model import ScheduleDef
from clockd.formats.schedfile import Location, job_from_mapping


def _loader(body: dict[str, Any], tenant: str) -> ScheduleDef:
    job, errors = job_from_mapping(body, Location("body", 1))
    assert job is not None and not errors
    return dataclasses.replace(job.definition, tenant=tenant)


@pytest.mark.parametrize(
    "shape",
    [
        {"schedule": "*/5 * * * *", "tz": "Europe/Paris", "noop": True},
        {"every": "90m", "command": ["/bin/true", "x"], "labels": {"team": "a"}, "retries": 2},
    ],
)
def test_a_second_body_of_one_shape_is_the_loaders_definition(shape: dict[str, Any]) -> None:
    first = definition_from_body({"name": "one", **shape}, "acme")
    second = definition_from_body({"name": "two", **shape}, "other")
    assert first == _loader({"name": "one", **shape}, "acme")
    assert second == _loader({"name": "two", **shape}, "other")


@pytest.mark.parametrize("name", ["", "   ", "bad\x00name", "tab\tname", "x" * 201, 7])
def test_a_bad_name_in_a_known_shape_gets_the_loaders_refusal(name: Any) -> None:
    shape = {"schedule": "0 3 * * *", "noop": True}
    definition_from_body({"name": "fine", **shape}, "acme")
    with pytest.raises(Problem) as known:
        definition_from_body({"name": name, **shape}, "acme")
    with pytest.raises(Problem) as fresh:  # a shape never seen: the loader alone answers
        definition_from_body({"name": name, "schedule": "0 4 * * *", "noop": True}, "acme")
    assert known.value.document() == fresh.value.document()
    assert [e.pointer for e in known.value.errors] == ["/name"]
