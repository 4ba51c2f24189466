"""Who a job runs as, and whether its tenant may: the worker-side half of ``allowed_users``.

Every command job has an *identity*: its target's ``user`` (and ``group``), or,
when it names none, the worker's own user — on a root worker that is root, as
with cron. ``allowed_users`` (daemon config, tenant → user names) decides::

    a tenant may use identity U  ⇔  U is listed for the tenant or for "*",
                                     or "*" is listed and U is not root (uid 0)

Root (any uid-0 name) is only ever allowed by name. The default,
``{"default": ["*", "root"]}``, keeps the single-admin, cron-like setup working
(whoever can write the embedded store is already that admin); every other tenant
may run nothing until it is listed.

Secrets follow the same authority: a tenant allowed the worker's own identity
has its secret files read with the worker's permissions and may read the
worker's environment (``${env:…}``); any other tenant's references are read with
the permissions of the job's user, and ``${env:…}`` is refused. HTTP targets run
inside the worker, so their references need the worker's identity.

A worker that is not root cannot switch users: a job naming any user other than
the worker's own is refused, never run as the worker's user.
"""

from __future__ import annotations

import functools
import grp
import os
import pwd
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from clockd.config import DEFAULT_ALLOWED_USERS
from clockd.errors import ClockdError
from clockd.runner.secrets import Reader

ANY = "*"
ROOT = "root"


class Refused(ClockdError):
    """The job may not run as this identity."""


@dataclass(frozen=True, slots=True)
class Identity:
    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str
    shell: str
    switch: bool  # the job runs as someone other than the worker


@functools.cache
def worker_identity() -> Identity:
    """This worker's own user (looked up once: the effective uid never changes)."""
    uid, gid = os.geteuid(), os.getegid()
    try:
        entry = pwd.getpwuid(uid)
        name, home, shell = entry.pw_name, entry.pw_dir, entry.pw_shell
    except KeyError:
        name, home, shell = str(uid), "/", "/bin/sh"
    return Identity(name, uid, gid, tuple(os.getgroups()), home, shell or "/bin/sh", switch=False)


def job_identity(user: str, group: str | None) -> Identity:
    """The identity for a target's ``user``/``group``; :class:`Refused` if this worker
    cannot take it on (unknown here, or a switch needed and the worker is not root)."""
    me = worker_identity()
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise Refused(f"cannot run as user {user!r}: no such user on this worker") from None
    gid = entry.pw_gid
    if group is not None:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            raise Refused(f"cannot run as group {group!r}: no such group on this worker") from None
    if os.geteuid() != 0 and (entry.pw_uid != me.uid or gid != me.gid):
        raise Refused(f"cannot run as user {user!r}: clockd worker is not root")
    groups = tuple(sorted(set(os.getgrouplist(entry.pw_name, gid))))
    return Identity(
        entry.pw_name,
        entry.pw_uid,
        gid,
        groups,
        entry.pw_dir,
        entry.pw_shell or "/bin/sh",
        switch=entry.pw_uid != me.uid or gid != me.gid,
    )


class UserPolicy:
    """``allowed_users`` as the worker applies it (see the module docstring)."""

    def __init__(self, allowed: Mapping[str, Sequence[str]] | None = None) -> None:
        source = DEFAULT_ALLOWED_USERS if allowed is None else allowed
        self._allowed = {tenant: frozenset(users) for tenant, users in source.items()}

    def allows(self, tenant: str, identity: Identity) -> bool:
        names = self._allowed.get(tenant, frozenset()) | self._allowed.get(ANY, frozenset())
        if identity.name in names:
            return True
        if identity.uid == 0:
            return ROOT in names
        return ANY in names

    def check(self, tenant: str, identity: Identity) -> None:
        if not self.allows(tenant, identity):
            raise Refused(
                f"tenant {tenant!r} may not run jobs as user {identity.name!r} (allowed_users in the daemon config)"
            )

    def reader(self, tenant: str, identity: Identity) -> Reader:
        """The permissions a job's secret references are read with."""
        worker = worker_identity()
        if self.allows(tenant, worker):
            return Reader()
        gids = frozenset(identity.groups) | {identity.gid}
        return Reader(uid=identity.uid, gids=gids, name=identity.name, environ=False)

    def http_reader(self, tenant: str) -> Reader:
        worker = worker_identity()
        if not self.allows(tenant, worker):
            raise Refused(
                f"tenant {tenant!r} may not use secret references in HTTP targets: the worker reads "
                f"them as its own user {worker.name!r}, which allowed_users does not grant the tenant"
            )
        return Reader()
