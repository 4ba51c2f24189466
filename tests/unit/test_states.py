"""The state machine table: every allowed arrow is allowed, every other pair is not."""

from __future__ import annotations

import itertools

import pytest

from clockd.core import states
from clockd.core.model import AttemptOutcome, OccurrenceState

S = OccurrenceState
ALLOWED = {(t.source, t.target) for t in states.OCCURRENCE_TRANSITIONS}


@pytest.mark.parametrize("transition", states.OCCURRENCE_TRANSITIONS, ids=lambda t: f"{t.step}:{t.source}->{t.target}")
def test_every_allowed_transition(transition: states.Transition) -> None:
    assert states.allowed(transition.source, transition.target)
    states.check(transition.step, transition.source, transition.target)
    assert transition.target in states.targets(transition.step)
    if transition.source is not None:
        assert transition.source in states.sources(transition.step)


@pytest.mark.parametrize(
    ("source", "target"),
    [pair for pair in itertools.product([None, *S], S) if pair not in ALLOWED],
    ids=str,
)
def test_every_forbidden_transition(source: S | None, target: S) -> None:
    assert not states.allowed(source, target)
    for step in states.STEPS:
        with pytest.raises(ValueError, match="cannot move"):
            states.check(step, source, target)


def test_terminal_states_leave_only_through_the_dead_letter_queue() -> None:
    for t in states.OCCURRENCE_TRANSITIONS:
        if t.source is not None and t.source.terminal:
            assert (t.source, t.step) in {(S.DEAD, "replay"), (S.DEAD, "drop")}


def test_every_state_is_reachable_and_every_non_terminal_state_has_a_way_on() -> None:
    assert {t.target for t in states.OCCURRENCE_TRANSITIONS} == set(S)
    for state in S:
        if not state.terminal:
            assert any(t.source is state for t in states.OCCURRENCE_TRANSITIONS), state


def test_single_target_steps_and_unknown_steps() -> None:
    assert states.target("relay") is S.ENQUEUED
    assert states.sources("claim") == (S.ENQUEUED, S.RETRY_WAIT)
    with pytest.raises(ValueError, match="several"):
        states.target("finish")
    with pytest.raises(KeyError):
        states.sources("teleport")


ATTEMPT_PAIRS = list(itertools.product([None, *AttemptOutcome], AttemptOutcome))


@pytest.mark.parametrize(("source", "target"), ATTEMPT_PAIRS, ids=str)
def test_attempt_transitions(source: AttemptOutcome | None, target: AttemptOutcome) -> None:
    expected = (source is None and target is AttemptOutcome.RUNNING) or (
        source is AttemptOutcome.RUNNING and target is not AttemptOutcome.RUNNING
    )
    assert states.attempt_allowed(source, target) is expected
