"""Row <-> model encoding shared by the store adapters.

* Instants: aware UTC ``datetime`` at the boundary. SQLite stores them as INTEGER
  microseconds since the Unix epoch (sortable, exact, fast to compare);
  PostgreSQL uses ``timestamptz`` and needs only the JSON half of this module.
  Naive datetimes are refused, never guessed.
* Durations: integer microseconds (exact; a float of seconds is not).
* A schedule definition is split into queryable columns (tenant, name, kind, expr,
  tz, queue) and a JSON *spec* for the rest (target, retry, timeout, policies,
  labels). ``schedule_versions`` keeps the whole definition as one JSON document.
  Readers fill in defaults for keys a document lacks, so a later release may add
  keys without rewriting old rows.
* Strings round-trip unchanged: labels are a list of pairs (order and duplicates
  kept), JSON escapes control characters.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from json.encoder import encode_basestring
from typing import Any, TypeVar

from clockd.core.capabilities import required_of
from clockd.core.model import (
    Attempt,
    AttemptOutcome,
    MisfirePolicy,
    NoopTarget,
    Occurrence,
    OccurrenceState,
    OverlapPolicy,
    RetryPolicy,
    Schedule,
    ScheduleDef,
    ScheduleKind,
    ScheduleState,
    Target,
    target_from_json,
)
from clockd.core.notify import notifications_from_json, notifications_to_json
from clockd.core.planning import DueSchedule
from clockd.store import LagStats, ScheduleHistory, VersionRecord

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)
# Defaults for keys an older document lacks (the definition's own defaults).
_DEFAULT_RETRY = RetryPolicy()
_DEFAULT_DEF = ScheduleDef(name="", kind=ScheduleKind.ONCE, expr="", tz="UTC", target=NoopTarget())


# -- instants and durations ------------------------------------------------------------


def to_us(instant: datetime) -> int:
    """Microseconds since the epoch of an aware datetime (any zone; exact)."""
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError(f"naive datetime {instant.isoformat()} given to the store: pass aware UTC")
    return (instant - EPOCH) // _ONE_US


def from_us(us: int) -> datetime:
    """The aware UTC datetime of ``us`` microseconds since the epoch."""
    return EPOCH + timedelta(microseconds=us)


def minute_of(instant: datetime) -> datetime:
    """The UTC calendar minute ``instant`` falls in (tenant per-minute claim windows)."""
    return instant.astimezone(UTC).replace(second=0, microsecond=0)


def opt_to_us(instant: datetime | None) -> int | None:
    return None if instant is None else to_us(instant)


def opt_from_us(us: int | None) -> datetime | None:
    return None if us is None else EPOCH + timedelta(microseconds=us)


def duration_to_us(duration: timedelta) -> int:
    return duration // _ONE_US


def duration_from_us(us: int) -> timedelta:
    return timedelta(microseconds=us)


# -- schedule definitions ----------------------------------------------------------------


# One encoder for every call: ``json.dumps`` with any option builds a new JSONEncoder per
# call (~1 µs of the 3-6 µs a small document costs); ``encode`` is thread-safe.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


# What ``_ENCODER`` (``ensure_ascii=False``) writes for a str: the C encoder when built.
_json_string: Callable[[str], str] = encode_basestring


def dumps(data: Any) -> str:
    """Compact JSON; non-ASCII kept as is (control characters are still escaped)."""
    return _ENCODER.encode(data)


def retry_to_dict(retry: RetryPolicy) -> dict[str, Any]:
    return {
        "retries": retry.retries,
        "backoff_us": duration_to_us(retry.backoff),
        "backoff_max_us": duration_to_us(retry.backoff_max),
        "permanent_exit_codes": list(retry.permanent_exit_codes),
    }


def retry_from_dict(data: dict[str, Any]) -> RetryPolicy:
    default = _DEFAULT_RETRY
    return RetryPolicy(
        retries=int(data.get("retries", default.retries)),
        backoff=_duration(data, "backoff_us", default.backoff),
        backoff_max=_duration(data, "backoff_max_us", default.backoff_max),
        permanent_exit_codes=tuple(int(c) for c in data.get("permanent_exit_codes", ())),
    )


def spec_to_dict(definition: ScheduleDef) -> dict[str, Any]:
    """The part of a definition that has no column of its own."""
    return {
        "target": definition.target.to_json(),
        "retry": retry_to_dict(definition.retry),
        "timeout_us": None if definition.timeout is None else duration_to_us(definition.timeout),
        "misfire": definition.misfire.value,
        "max_lateness_us": duration_to_us(definition.max_lateness),
        "overlap": definition.overlap.value,
        "window_us": duration_to_us(definition.window),
        "labels": [[key, value] for key, value in definition.labels],
        "catch_up_limit": definition.catch_up_limit,
        **({"notify": notifications_to_json(definition.notify)} if definition.notify else {}),
    }


def definition_from_parts(
    *,
    name: str,
    kind: str,
    expr: str,
    tz: str,
    queue: str,
    tenant: str,
    spec: dict[str, Any],
) -> ScheduleDef:
    """Rebuild a definition from its columns and its spec document."""
    default = _DEFAULT_DEF
    timeout_us = spec.get("timeout_us")
    return ScheduleDef(
        name=name,
        kind=ScheduleKind(kind),
        expr=expr,
        tz=tz,
        target=target_from_json(spec["target"]),
        queue=queue,
        tenant=tenant,
        timeout=None if timeout_us is None else duration_from_us(int(timeout_us)),
        retry=retry_from_dict(spec.get("retry") or {}),
        misfire=MisfirePolicy(spec.get("misfire", default.misfire.value)),
        max_lateness=_duration(spec, "max_lateness_us", default.max_lateness),
        overlap=OverlapPolicy(spec.get("overlap", default.overlap.value)),
        window=_duration(spec, "window_us", default.window),
        labels=tuple((str(k), str(v)) for k, v in spec.get("labels", ())),
        catch_up_limit=int(spec.get("catch_up_limit", default.catch_up_limit)),
        notify=notifications_from_json(spec.get("notify")),
    )


def _columns_to_dict(definition: ScheduleDef) -> dict[str, Any]:
    """The part of a definition with columns of its own: the head of its whole document."""
    return {
        "name": definition.name,
        "kind": definition.kind.value,
        "expr": definition.expr,
        "tz": definition.tz,
        "queue": definition.queue,
        "tenant": definition.tenant,
    }


def definition_to_dict(definition: ScheduleDef) -> dict[str, Any]:
    """The whole definition as one document (``schedule_versions``)."""
    return {**_columns_to_dict(definition), **spec_to_dict(definition)}


def definition_from_dict(data: dict[str, Any]) -> ScheduleDef:
    return definition_from_parts(
        name=data["name"],
        kind=data["kind"],
        expr=data["expr"],
        tz=data["tz"],
        queue=data["queue"],
        tenant=data["tenant"],
        spec=data,
    )


# spec_json's texts by the fields they encode. The schedules of one apply (or of one API
# client) share their target and policies and differ by name and expression, so a create
# finds its spec here instead of building and encoding it (~9 µs of an apply's ~60 µs of
# encoding per create, twice: the spec column and the version's document). Values of a
# validated definition compare equal only when they encode alike (no 1 == 1.0 == True
# across fields of one type); a target with an unhashable field is encoded every time.
_SPEC_TEXTS: dict[tuple[Any, ...], str] = {}
_SPEC_TEXTS_MAX = 1024


def spec_json(definition: ScheduleDef) -> str:
    """``spec_to_dict`` as compact JSON (cached by the fields it encodes)."""
    d = definition
    key = (d.target, d.retry, d.timeout, d.misfire, d.max_lateness, d.overlap, d.window, d.labels,
           d.catch_up_limit, d.notify)  # fmt: skip
    try:
        text = _SPEC_TEXTS.get(key)
        cacheable = True
    except TypeError:  # a field that cannot be hashed: no caching
        text, cacheable = None, False
    if text is None:
        text = dumps(spec_to_dict(definition))
        if cacheable:
            if len(_SPEC_TEXTS) >= _SPEC_TEXTS_MAX:
                _SPEC_TEXTS.clear()
            _SPEC_TEXTS[key] = text
    return text


def definition_json(definition: ScheduleDef) -> str:
    """``definition_to_dict`` as compact JSON, the same text: the columns' object with the
    spec's text (from ``spec_json``'s cache; never empty, it always has a target) spliced in
    after their last key."""
    return definition_texts(definition)[1]


def definition_texts(definition: ScheduleDef) -> tuple[str, str]:
    """(``spec_json``, ``definition_json``) of ``definition``, the spec looked up once: what a
    create writes (the schedule's spec column and its first version's document). The
    columns' keys are written out (``_columns_to_dict``'s, in its order) around each value
    encoded as ``dumps`` encodes a string: the encoder's walk of that six-key object was
    ~4 µs of every create an apply encodes, this ~1 µs."""
    spec = spec_json(definition)
    d, s = definition, _json_string
    return spec, (
        f'{{"name":{s(d.name)},"kind":{s(d.kind.value)},"expr":{s(d.expr)},"tz":{s(d.tz)},'
        f'"queue":{s(d.queue)},"tenant":{s(d.tenant)},{spec[1:]}'
    )


def definition_from_json(text: str) -> ScheduleDef:
    data: dict[str, Any] = json.loads(text)
    return definition_from_dict(data)


# -- what a claim reads of a definition --------------------------------------------------

# What a claim takes from its definition: name, target, timeout, retry backoff, its
# maximum and the permanent exit codes (in Claim's field order).
ClaimParts = tuple[str, Target, timedelta | None, timedelta, timedelta, tuple[int, ...]]
_RetryParts = tuple[timedelta, timedelta, tuple[int, ...]]
_T = TypeVar("_T")

# The claim's decoded targets and retry policies by their JSON text. The schedules of one
# apply or one API client share them (as _SPEC_TEXTS says), so a burst of distinct
# schedules decodes each once instead of once per definition (a whole definition decoded
# was ~14 µs of a worker's CPU per distinct schedule in the top-of-hour drill). Text
# is the key: equal texts decode to equal values, and a decoded target is immutable, so
# claims may share it. Cleared when full: a fleet whose every target differs misses here
# and pays only the lookup.
_CLAIM_TARGETS: dict[str, Target] = {}
_CLAIM_RETRIES: dict[str, _RetryParts] = {}
_CLAIM_TEXTS_MAX = 1024


def claim_parts(name: str, target: str, retry: str | None, timeout_us: Any) -> ClaimParts:
    """A claim's share of a definition from the columns ``schedule_definitions`` reads:
    the name, the target's and the retry policy's JSON texts (a document without a retry
    key has the default policy), the timeout in microseconds (None: none)."""
    decoded = _decoded_once(_CLAIM_TARGETS, target, lambda text: target_from_json(json.loads(text)))
    backoff = _decoded_once(_CLAIM_RETRIES, retry or "{}", _retry_parts)
    timeout = None if timeout_us is None else duration_from_us(int(timeout_us))
    return (name, decoded, timeout, *backoff)


def _retry_parts(text: str) -> _RetryParts:
    policy = retry_from_dict(json.loads(text))
    return (policy.backoff, policy.backoff_max, policy.permanent_exit_codes)


def _decoded_once(table: dict[str, _T], text: str, decode: Callable[[str], _T]) -> _T:
    """``decode(text)``, kept in ``table`` (emptied when it holds _CLAIM_TEXTS_MAX)."""
    value = table.get(text)
    if value is None:
        value = decode(text)
        if len(table) >= _CLAIM_TEXTS_MAX:
            table.clear()
        table[text] = value
    return value


def _duration(data: dict[str, Any], key: str, default: timedelta) -> timedelta:
    value = data.get(key)
    return default if value is None else duration_from_us(int(value))


def histories_from_rows(
    rows: Sequence[Sequence[Any]],
    instant: Callable[[Any], datetime],
    definition: Callable[[Any], ScheduleDef],
) -> list[ScheduleHistory]:
    """``reconcile_versions`` lines (one per version, grouped by schedule) as histories.

    Both adapters share this; each passes its own decoders for an instant column
    (SQLite: microseconds, PostgreSQL: timestamptz) and a definition column (JSON text
    or jsonb)."""

    def opt(value: Any) -> datetime | None:
        return None if value is None else instant(value)

    out: list[ScheduleHistory] = []
    versions: list[VersionRecord] = []
    for index, row in enumerate(rows):
        (sid, tenant, name, state, version, next_run_at, created_at,
         v_version, v_state, valid_from, valid_to, document, v_next) = row  # fmt: skip
        versions.append(
            VersionRecord(
                version=int(v_version),
                state=ScheduleState(v_state),
                valid_from=instant(valid_from),
                valid_to=opt(valid_to),
                definition=definition(document),
                next_run_at=opt(v_next),
            )
        )
        if index + 1 == len(rows) or rows[index + 1][0] != sid:
            out.append(
                ScheduleHistory(
                    schedule_id=sid,
                    name=name,
                    tenant=tenant,
                    state=ScheduleState(state),
                    version=int(version),
                    next_run_at=opt(next_run_at),
                    created_at=instant(created_at),
                    versions=tuple(versions),
                )
            )
            versions = []
    return out


def schedule_from_row(
    row: Sequence[Any],
    instant: Callable[[Any], datetime],
    opt_instant: Callable[[Any], datetime | None],
    spec: Callable[[Any], dict[str, Any]],
) -> Schedule:
    """A ``schedules`` row (id, tenant, name, kind, expr, tz, queue, state, version,
    next_run_at, shard, created_at, updated_at, paused_at, spec) as a Schedule. Both
    adapters share this, with their own decoders for instants (SQLite: microseconds,
    PostgreSQL: timestamptz) and for the spec (JSON text or jsonb)."""
    (sid, tenant, name, kind, expr, tz, queue, state, version, next_run_at, shard,
     created_at, updated_at, paused_at, document) = row  # fmt: skip
    return Schedule(
        id=sid,
        version=int(version),
        state=ScheduleState(state),
        definition=_definition_of_row(name, kind, expr, tz, queue, tenant, document, spec),
        next_run_at=opt_instant(next_run_at),
        shard=int(shard),
        created_at=instant(created_at),
        updated_at=instant(updated_at),
        paused_at=opt_instant(paused_at),
    )


# The planning fields' decoders (``due_from_rows``): a dict lookup, not an enum call per
# row (an unknown value still raises the enum's ValueError, as a whole decode would).
_KINDS = {k.value: k for k in ScheduleKind}
_MISFIRES = {m.value: m for m in MisfirePolicy}
_OVERLAPS = {o.value: o for o in OverlapPolicy}


def due_from_rows(
    rows: Sequence[Sequence[Any]],
    instant: Callable[[Any], datetime],
    opt_instant: Callable[[Any], datetime | None],
) -> list[DueSchedule]:
    """``due_schedules`` rows (id, tenant, name, kind, expr, tz, queue, version,
    next_run_at, created_at, then from the spec: misfire, max_lateness_us, window_us,
    catch_up_limit, retry.retries, whether the target has a stdin, whether notify is a
    non-empty list, overlap) as DueSchedules: the planning inputs alone, defaults filled in for
    keys a document lacks exactly as ``definition_from_parts`` fills them. A spec number
    arrives as text from PostgreSQL (``->>``) and as an integer from SQLite; ``int``
    takes both."""
    default = _DEFAULT_DEF
    lateness, window = default.max_lateness, default.window
    out: list[DueSchedule] = []
    append = out.append  # the materializer's hot loop: up to a batch of rows per read
    for (sid, tenant, name, kind, expr, tz, queue, version, next_run_at, created_at,
         misfire, lateness_us, window_us, catch_up_limit, retries, stdin, notify, overlap) in rows:  # fmt: skip
        append(
            DueSchedule(
                id=sid,
                version=int(version),
                next_run_at=opt_instant(next_run_at),
                created_at=instant(created_at),
                name=name,
                kind=_KINDS.get(kind) or ScheduleKind(kind),
                expr=expr,
                tz=tz,
                queue=queue,
                tenant=tenant,
                misfire=default.misfire if misfire is None else _MISFIRES.get(misfire) or MisfirePolicy(misfire),
                max_lateness=lateness if lateness_us is None else timedelta(microseconds=int(lateness_us)),
                window=window if window_us is None else timedelta(microseconds=int(window_us)),
                catch_up_limit=default.catch_up_limit if catch_up_limit is None else int(catch_up_limit),
                max_attempts=(_DEFAULT_RETRY.retries if retries is None else int(retries)) + 1,
                requires=required_of(stdin=bool(stdin), notify=bool(notify)),
                notify=bool(notify),
                overlap=default.overlap if overlap is None else _OVERLAPS.get(overlap) or OverlapPolicy(overlap),
            )
        )
    return out


# Definitions decoded from rows, by everything but the name (SQLite's spec is JSON text):
# a page of schedules that share their shape (most do) decodes one spec, not one each
# (~30 µs a row: a 100-row page spent 3.3 ms of its ~6.5 ms of CPU here). Definitions
# are immutable, so one may be shared by every schedule of its shape.
# Bounded: at most _SHAPES_MAX shapes, each of a spec of at most _SHAPE_TEXT_MAX characters
# (a larger one, rare, is decoded each time).
_SHAPES: dict[tuple[Any, ...], ScheduleDef] = {}
_SHAPES_MAX = 4096
_SHAPE_TEXT_MAX = 4096


def _definition_of_row(
    name: str, kind: str, expr: str, tz: str, queue: str, tenant: str, document: Any,
    spec: Callable[[Any], dict[str, Any]],
) -> ScheduleDef:  # fmt: skip
    if not isinstance(document, str) or len(document) > _SHAPE_TEXT_MAX:  # PostgreSQL: jsonb arrives decoded
        return definition_from_parts(name=name, kind=kind, expr=expr, tz=tz, queue=queue, tenant=tenant,
                                     spec=spec(document))  # fmt: skip
    key = (kind, expr, tz, queue, tenant, document)
    shape = _SHAPES.get(key)
    if shape is None:
        shape = definition_from_parts(name="", kind=kind, expr=expr, tz=tz, queue=queue, tenant=tenant,
                                      spec=spec(document))  # fmt: skip
        if len(_SHAPES) >= _SHAPES_MAX:
            _SHAPES.clear()
        _SHAPES[key] = shape
    return dataclasses.replace(shape, name=name)


def occurrence_from_row(
    row: Sequence[Any],
    instant: Callable[[Any], datetime],
    opt_instant: Callable[[Any], datetime | None],
) -> Occurrence:
    """An occurrence row as the read queries select it (id, schedule_id, schedule name,
    version, scheduled_for, available_at, state, attempts, queue, manual, enqueued_at,
    started_at, finished_at, exit_code, reason) as an Occurrence (see schedule_from_row)."""
    (oid, schedule_id, name, version, scheduled_for, available_at, state, attempts, queue,
     manual, enqueued_at, started_at, finished_at, exit_code, reason) = row  # fmt: skip
    return Occurrence(
        id=oid,
        schedule_id=schedule_id,
        schedule_name=name,
        version=int(version),
        scheduled_for=instant(scheduled_for),
        available_at=instant(available_at),
        state=OccurrenceState(state),
        attempts=int(attempts),
        queue=queue,
        manual=bool(manual),
        enqueued_at=opt_instant(enqueued_at),
        started_at=opt_instant(started_at),
        finished_at=opt_instant(finished_at),
        exit_code=exit_code,
        reason=reason,
    )


def attempt_from_row(
    row: Sequence[Any],
    instant: Callable[[Any], datetime],
    opt_instant: Callable[[Any], datetime | None],
) -> Attempt:
    """An ``attempts_list`` row (occurrence_id, attempt, lease_token, worker_id, started_at,
    outcome, finished_at, exit_code, signal, output, error) as an Attempt (see
    schedule_from_row)."""
    occ, number, token, worker, started, outcome, finished, exit_code, signal, output, error = row
    return Attempt(
        occurrence_id=occ,
        number=number,
        lease_token=token,
        worker_id=worker,
        started_at=instant(started),
        outcome=AttemptOutcome(outcome),
        finished_at=opt_instant(finished),
        exit_code=exit_code,
        signal=signal,
        output=output,
        error=error,
    )


def neighbour_lag_stats(row: Sequence[Any]) -> LagStats:
    """``start_lag``'s row where SQL has no ``percentile_cont`` (SQLite): the count, then
    for p50, p95 and p99 the values (µs) at offsets floor((n-1)·p) and the next one,
    interpolated here as ``percentile_cont`` does (seconds out)."""
    count, *pairs = row
    if not count:
        return LagStats(0, None, None, None)
    p50, p95, p99 = (
        _interpolate(int(count), rank, pairs[2 * i], pairs[2 * i + 1]) for i, rank in enumerate((50, 95, 99))
    )
    return LagStats(int(count), p50, p95, p99)


def _interpolate(count: int, rank: int, low: int | None, high: int | None) -> float | None:
    if low is None:
        return None
    fraction = ((count - 1) * rank % 100) / 100
    upper = low if high is None else high
    return (low + (upper - low) * fraction) / 1e6
