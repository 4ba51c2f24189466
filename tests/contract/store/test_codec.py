"""The shared row <-> model encoding (clockd.store.codec): exact and lossless."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clockd.core.model import (
    CommandTarget,
    MisfirePolicy,
    NoopTarget,
    OverlapPolicy,
    RetryPolicy,
    Schedule,
    ScheduleDef,
    ScheduleKind,
    ScheduleState,
)
from clockd.store import codec

# Any text a user may type, NUL aside (PostgreSQL text cannot hold it) and lone
# surrogates aside (not encodable as UTF-8).
_SURROGATES: tuple[Literal["Cs"]] = ("Cs",)  # typed: mypy reads a bare ("Cs",) as tuple[str]
texts = st.text(st.characters(blacklist_categories=_SURROGATES, blacklist_characters="\x00"), max_size=20)
durations = st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=400))

definitions = st.builds(
    ScheduleDef,
    name=texts,
    kind=st.sampled_from(ScheduleKind),
    expr=texts,
    tz=texts,
    target=st.one_of(
        st.just(NoopTarget()),
        st.builds(
            CommandTarget,
            argv=st.lists(texts, min_size=1, max_size=4).map(tuple),
            shell=st.booleans(),
            env=st.dictionaries(texts, texts, max_size=3).map(lambda d: tuple(sorted(d.items()))),
            cwd=st.none() | texts,
        ),
    ),
    queue=texts,
    tenant=texts,
    timeout=st.none() | durations,
    retry=st.builds(
        RetryPolicy,
        retries=st.integers(0, 20),
        backoff=durations,
        backoff_max=durations,
        permanent_exit_codes=st.lists(st.integers(0, 255), max_size=3).map(tuple),
    ),
    misfire=st.sampled_from(MisfirePolicy),
    max_lateness=durations,
    overlap=st.sampled_from(OverlapPolicy),
    window=durations,
    labels=st.lists(st.tuples(texts, texts), max_size=4).map(tuple),
    catch_up_limit=st.integers(0, 10_000),
)


@given(definitions)
def test_definitions_round_trip(definition: ScheduleDef) -> None:
    assert codec.definition_from_json(codec.definition_json(definition)) == definition
    spec = codec.spec_to_dict(definition)
    rebuilt = codec.definition_from_parts(
        name=definition.name,
        kind=definition.kind.value,
        expr=definition.expr,
        tz=definition.tz,
        queue=definition.queue,
        tenant=definition.tenant,
        spec=spec,
    )
    assert rebuilt == definition


def _compact(data: object) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


@given(definitions, definitions, texts)
def test_spec_and_definition_texts_are_their_documents_whatever_was_encoded_before(
    first: ScheduleDef, second: ScheduleDef, name: str
) -> None:
    """spec_json keeps its texts by the fields they encode, and definition_json splices the
    spec's text in after the columns: each text is still exactly the compact encoding of
    its document, in any order of calls, for definitions sharing a spec or not."""
    renamed = replace(first, name=name, expr=second.expr, tenant=second.tenant)  # the same spec as first
    for d in (first, second, renamed, first, second):
        assert codec.spec_json(d) == _compact(codec.spec_to_dict(d))
        assert codec.definition_json(d) == _compact(codec.definition_to_dict(d))


@given(definitions, texts)
def test_schedule_rows_round_trip_whether_their_shape_was_decoded_before(definition: ScheduleDef, other: str) -> None:
    """Rows of one shape share a decoded definition (SQLite's JSON spec): each keeps its name."""

    def row(d: ScheduleDef) -> tuple[object, ...]:
        spec = codec.spec_json(d)
        return ("id", d.tenant, d.name, d.kind.value, d.expr, d.tz, d.queue, "active", 1, None, 0, 0, 0, None, spec)

    second = replace(definition, name=other)
    for d in (definition, second, definition):
        decoded = codec.schedule_from_row(row(d), codec.from_us, codec.opt_from_us, json.loads)
        assert isinstance(decoded, Schedule) and decoded.state is ScheduleState.ACTIVE
        assert decoded.definition == d


@given(st.datetimes(timezones=st.just(UTC)))
def test_instants_round_trip_to_the_microsecond(instant: datetime) -> None:
    assert codec.from_us(codec.to_us(instant)) == instant


def test_instants_are_utc_and_zone_independent() -> None:
    paris = datetime(2026, 3, 1, 1, 0, tzinfo=timezone(timedelta(hours=1)))
    assert codec.to_us(paris) == codec.to_us(datetime(2026, 3, 1, tzinfo=UTC))
    assert codec.from_us(0) == datetime(1970, 1, 1, tzinfo=UTC)
    assert codec.from_us(codec.to_us(paris)).tzinfo is UTC
    assert codec.opt_to_us(None) is None
    assert codec.opt_from_us(None) is None


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        codec.to_us(datetime(2026, 3, 1))  # noqa: DTZ001 - the point of the test


def test_missing_keys_take_the_defaults() -> None:
    minimal = {"name": "n", "kind": "cron", "expr": "* * * * *", "tz": "UTC", "queue": "q", "tenant": "t"}
    definition = codec.definition_from_dict({**minimal, "target": {"type": "noop"}})
    assert definition == ScheduleDef(
        name="n", kind=ScheduleKind.CRON, expr="* * * * *", tz="UTC", target=NoopTarget(), queue="q", tenant="t"
    )
