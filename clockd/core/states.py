"""The occurrence and attempt state machines: every allowed transition, as one table.

DESIGN.md §1 draws the occurrence's states; this module is where the arrows live. The
store engine (``clockd.store.engine``) takes the expected and the next state of each of
its conditional writes from here and passes them to the dialect's SQL as parameters
(``… SET state = :next WHERE state IN (:expected)``), so a state name is written once.

Invariants:

* A transition is named by the store step that performs it (``relay``, ``claim``,
  ``finish``, …); one step may have several arrows (``finish``: RUNNING → SUCCEEDED,
  DEAD or RETRY_WAIT). ``None`` as a source means "the row does not exist yet".
* Terminal states (``OccurrenceState.terminal``) have no way out except ``replay`` and
  ``drop`` from DEAD (the dead-letter queue).
* ``tests/unit/test_states.py`` walks every allowed arrow and every forbidden pair.
"""

from __future__ import annotations

from dataclasses import dataclass

from clockd.core.model import AttemptOutcome, OccurrenceState

S = OccurrenceState


@dataclass(frozen=True, slots=True)
class Transition:
    """One arrow: ``step`` moves an occurrence from ``source`` (None: a new row) to ``target``."""

    step: str
    source: OccurrenceState | None
    target: OccurrenceState


# Every allowed transition of an occurrence. Order: the path of one occurrence.
OCCURRENCE_TRANSITIONS: tuple[Transition, ...] = (
    Transition("materialize", None, S.SCHEDULED),
    Transition("materialize", None, S.MISSED),  # already too late when planned
    Transition("relay", S.SCHEDULED, S.ENQUEUED),
    Transition("claim", S.ENQUEUED, S.RUNNING),
    Transition("claim", S.RETRY_WAIT, S.RUNNING),
    Transition("overlap_skip", S.ENQUEUED, S.SKIPPED_OVERLAP),
    Transition("overlap_skip", S.RETRY_WAIT, S.SKIPPED_OVERLAP),
    Transition("finish", S.RUNNING, S.SUCCEEDED),
    Transition("finish", S.RUNNING, S.DEAD),
    Transition("finish", S.RUNNING, S.RETRY_WAIT),
    Transition("release", S.RUNNING, S.ENQUEUED),  # given back before its first attempt ran
    Transition("release", S.RUNNING, S.RETRY_WAIT),  # given back on a later attempt
    Transition("reap_retry", S.RUNNING, S.RETRY_WAIT),
    Transition("reap_dead", S.RUNNING, S.DEAD),
    Transition("misfire", S.ENQUEUED, S.MISSED),
    Transition("misfire", S.RETRY_WAIT, S.MISSED),
    Transition("cancel", S.SCHEDULED, S.CANCELED),
    Transition("cancel", S.ENQUEUED, S.CANCELED),
    Transition("cancel", S.RETRY_WAIT, S.CANCELED),
    Transition("replay", S.DEAD, S.ENQUEUED),
    Transition("drop", S.DEAD, S.CANCELED),
)

# Every allowed transition of an attempt: it starts RUNNING (at the claim) and ends once.
# ``release`` removes a running attempt that never started its target (no arrow: it is gone).
ATTEMPT_TRANSITIONS: frozenset[tuple[AttemptOutcome | None, AttemptOutcome]] = frozenset(
    {(None, AttemptOutcome.RUNNING)}
    | {(AttemptOutcome.RUNNING, outcome) for outcome in AttemptOutcome if outcome is not AttemptOutcome.RUNNING}
)

STEPS: frozenset[str] = frozenset(t.step for t in OCCURRENCE_TRANSITIONS)


def allowed(source: OccurrenceState | None, target: OccurrenceState) -> bool:
    """Whether any step may move an occurrence from ``source`` to ``target``."""
    return any(t.source is source and t.target is target for t in OCCURRENCE_TRANSITIONS)


def attempt_allowed(source: AttemptOutcome | None, target: AttemptOutcome) -> bool:
    return (source, target) in ATTEMPT_TRANSITIONS


def sources(step: str) -> tuple[OccurrenceState, ...]:
    """The states ``step`` may move an occurrence out of (its conditional write's WHERE),
    in table order. ``KeyError`` for an unknown step."""
    if step not in STEPS:
        raise KeyError(f"no transition step {step!r}")
    found: list[OccurrenceState] = []
    for t in OCCURRENCE_TRANSITIONS:
        if t.step == step and t.source is not None and t.source not in found:
            found.append(t.source)
    return tuple(found)


def target(step: str) -> OccurrenceState:
    """The one state ``step`` leads to. ``ValueError`` when the step has several targets
    (``finish``, ``release``, ``materialize``: the caller names the one it writes)."""
    targets = {t.target for t in OCCURRENCE_TRANSITIONS if t.step == step}
    if not targets:
        raise KeyError(f"no transition step {step!r}")
    if len(targets) > 1:
        raise ValueError(f"step {step!r} leads to several states: {sorted(targets)}")
    return next(iter(targets))


def check(step: str, source: OccurrenceState | None, target_state: OccurrenceState) -> None:
    """``ValueError`` unless ``step`` has the arrow ``source`` → ``target_state``."""
    if not any(t == Transition(step, source, target_state) for t in OCCURRENCE_TRANSITIONS):
        raise ValueError(f"{step} cannot move an occurrence from {source} to {target_state}")


def targets(step: str) -> frozenset[OccurrenceState]:
    """Every state ``step`` may lead to."""
    found = frozenset(t.target for t in OCCURRENCE_TRANSITIONS if t.step == step)
    if not found:
        raise KeyError(f"no transition step {step!r}")
    return found
