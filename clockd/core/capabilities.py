"""What a worker can honour, so that a mixed-version cluster never runs a job wrong.

A schedule's definition may use a feature that an older worker does not know. Such a
worker would not refuse the job: it reads the definition, ignores the key it does not
know, and runs the job without it (a job fed no ``stdin``, a failure nobody is told of).
So each feature added after the first release is a **capability**: a worker advertises
the ones it honours (its etcd member key, ``"capabilities"``), and the materializer
plans a schedule only while every live worker advertises every capability the
schedule's definition needs (``clockd.modes.materializer``). A worker that advertises
nothing — every release before capabilities existed — honours the baseline only.

Invariants: ``required(definition) ⊆ WORKER_CAPABILITIES`` for every definition this
release can store; a new feature that an older worker would silently ignore adds a
name here (and to ``required``, ``required_of`` and the flags ``Store.due_schedules``
selects) in the same change.
"""

from __future__ import annotations

from clockd.core.model import CommandTarget, ScheduleDef

STDIN = "stdin"  # CommandTarget.stdin: text fed to the job's standard input
NOTIFY = "notify"  # ScheduleDef.notify: notifications on outcome, sent by the worker too

# Everything this release's workers honour beyond the baseline (argv, shell, env, cwd,
# user and group, env files, rlimits, HTTP and no-op targets, timeouts, retries).
WORKER_CAPABILITIES: frozenset[str] = frozenset({STDIN, NOTIFY})


def advertised(modes: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """What a node running ``modes`` advertises: this release's worker capabilities when
    it runs the worker mode, else nothing."""
    return tuple(sorted(WORKER_CAPABILITIES)) if "worker" in modes else ()


def required(definition: ScheduleDef) -> frozenset[str]:
    """The capabilities a worker needs to run ``definition`` as written."""
    target = definition.target
    return required_of(stdin=isinstance(target, CommandTarget) and target.stdin is not None,
                       notify=bool(definition.notify))  # fmt: skip


def required_of(*, stdin: bool, notify: bool) -> frozenset[str]:
    """:func:`required` from the features a definition uses, as the materializer reads
    them (``Store.due_schedules`` selects these flags, not the whole definition: a new
    capability adds its flag there too)."""
    return _REQUIRED[stdin, notify]


_REQUIRED = {
    (stdin, notify): frozenset(name for name, used in ((STDIN, stdin), (NOTIFY, notify)) if used)
    for stdin in (False, True)
    for notify in (False, True)
}


def offered(advertised: list[tuple[str, ...]]) -> frozenset[str] | None:
    """What every live worker honours, from the capabilities each advertised; None when
    there is no live worker (nothing to hold a schedule back for)."""
    if not advertised:
        return None
    common = set(advertised[0])
    for caps in advertised[1:]:
        common &= set(caps)
    return frozenset(common)
