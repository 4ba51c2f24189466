"""The bench suites that run clockd's own statements with parameters they build themselves
(``bench.staging``, ``bench.occurrence_keys``) supply every parameter those statements
name, and ``bench.claim_variants`` finds the parts of the claim it
rewrites. ``make test`` runs no bench code, so a schema change that adds a column to
the occurrence insert (0018 did) used to surface only as ``make bench`` stopping at the
staging suite, twenty minutes in."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from bench import occurrence_keys, staging
from clockd.store.postgres.store import Q

PLACEHOLDER = re.compile(r"%\((\w+)\)[sb]")
AT = datetime(2026, 12, 5, tzinfo=UTC)
SCHEDULE = "0193a3c0-0000-7000-8000-000000000000"
CLAIM_VARIANTS = [
    "clockd",
    "judged",
    "judged, schedule probe",
    "judged, no re-fetch",
    "plain, no re-fetch",
    "plain, by ctid",
]


def named(statement: str) -> set[str]:
    return set(PLACEHOLDER.findall(Q[statement]))


@pytest.mark.parametrize("statement", ["materialize_insert", "materialize_insert_enqueued"])
def test_the_staging_suite_supplies_every_parameter_of_the_inserts_it_runs(statement: str) -> None:
    given = set(staging._params(SCHEDULE, AT, 2, 0)) | set(staging.RULE)
    assert named(statement) <= given, f"bench.staging lacks {sorted(named(statement) - given)}"


def test_the_occurrence_key_suite_supplies_every_parameter_of_its_insert() -> None:
    given = set(occurrence_keys._params("public", [SCHEDULE], AT))
    missing = named("materialize_insert_enqueued") - given
    assert not missing, f"bench.occurrence_keys lacks {sorted(missing)}"


def test_the_claim_variants_are_made_from_this_releases_claim_statements() -> None:
    """``bench.claim_variants`` rewrites ``claim_lease`` by text (it exits when a piece it
    replaces is gone): every variant exists, names itself, and is a claim."""
    from bench import claim_variants

    found = claim_variants.variants(Q[claim_variants.PLAIN], Q[claim_variants.JUDGED])
    assert set(found) == set(CLAIM_VARIANTS)
    for name, text in found.items():
        assert text.startswith(f"/* claim variant: {name} */")
        assert "FOR UPDATE SKIP LOCKED" in text and "INSERT INTO claim_batches" in text


def test_the_claim_variants_still_find_what_they_rewrite_in_the_claim() -> None:
    """``bench.claim_variants`` rewrites parts of claim_lease it finds by their text, and
    stops (SystemExit) when a part is gone: a change to the claim surfaced only when that
    suite ran."""
    from bench import claim_variants

    found = claim_variants.variants(Q["claim_plain"], Q["claim_lease"])
    assert list(found) == CLAIM_VARIANTS
    assert all(text.startswith(f"/* claim variant: {name} */") for name, text in found.items())
