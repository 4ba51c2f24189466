"""Where a tenant's HTTP targets may connect: the egress policy.

An HTTP target is a request the *daemon* makes, from inside the network, on a tenant's
behalf — so without a policy any tenant could reach loopback services, etcd's JSON API,
the metrics endpoint or a cloud metadata service. The rule, for a tenant, host and
each address the host resolves to:

1. **clockd's own servers** (the store's PostgreSQL and the etcd endpoints, by address
   and port) are always refused;
2. an ``http_deny`` entry of the tenant (or of ``"*"``) matching the host or address: refused;
3. an ``http_allow`` entry of the tenant (or of ``"*"``) matching: allowed — except that a
   **metadata address** (169.254.169.254, fd00:ec2::254, 100.100.100.200, …) is allowed
   only by an entry naming exactly that address;
4. a **default-denied** address — loopback, link-local, unspecified, multicast, reserved,
   metadata, and the private ranges (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7) —
   or a local name (``localhost``, ``*.localhost``, ``metadata.google.internal``): refused;
5. anything else (public addresses): allowed.

Entries are CIDRs (``10.1.0.0/16``), addresses, host names, or ``*.suffix`` patterns.
IPv4-mapped IPv6 addresses are judged as the IPv4 address they carry.

Where it is checked: when a schedule is written (``Ops``: a host or literal address the
policy refuses is refused with exit 2 — no DNS there, names may resolve differently on
the workers), and on **every connection** the HTTP runner opens, *after* DNS resolution
(:class:`GuardedBackend`, an httpcore network backend: the runner connects to the very
address it checked, so a name re-pointed at a denied address is still refused). A host
resolving to several addresses is refused if any of them is. Redirects are not followed;
if they ever are, each hop opens its connection through the same backend.

``http_allow``/``http_deny`` change live: SIGHUP (``clockd.daemon.reload``) replaces the
daemon's :class:`LiveEgress`, which the HTTP runner, the API and ``schedules_dir`` read.
The runner then opens new connection pools under the new policy; a pooled connection
opened under the old one is never reused (a host just denied cannot be reached through it).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

import httpcore

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

METADATA: Final = tuple(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "fd00:ec2::254", "169.254.170.2", "100.100.100.200", "168.63.129.16")
)
PRIVATE: Final = tuple(
    ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")
)
LOCAL_NAMES: Final = ("localhost", "*.localhost", "metadata.google.internal", "metadata", "*.internal")


class LiveEgress:
    """The daemon's egress policy as it is now; ``generation`` counts the replacements
    (the HTTP runner keys its connection pools by it). Calling it gives the current policy."""

    def __init__(self, policy: EgressPolicy) -> None:
        self._policy = policy
        self.generation = 0

    def __call__(self) -> EgressPolicy:
        return self._policy

    def replace(self, policy: EgressPolicy) -> None:
        self._policy = policy
        self.generation += 1


class EgressDenied(Exception):
    """A connection the tenant's egress policy refuses; ``str()`` says why."""


@dataclass(frozen=True, slots=True)
class Entries:
    """One list of ``http_allow``/``http_deny``: networks and host patterns."""

    networks: tuple[Network, ...] = ()
    hosts: tuple[str, ...] = ()

    @classmethod
    def parse(cls, items: Iterable[str]) -> Entries:
        networks: list[Network] = []
        hosts: list[str] = []
        for item in items:
            network = parse_network(item)
            if network is not None:
                networks.append(network)
            else:
                hosts.append(item.lower().rstrip("."))
        return cls(tuple(networks), tuple(hosts))

    def host(self, host: str) -> bool:
        return any(_host_matches(pattern, host) for pattern in self.hosts)

    def address(self, address: Address, *, exact: bool = False) -> bool:
        for network in self.networks:
            if address in network and (not exact or network.num_addresses == 1):
                return True
        return False


def parse_network(item: str) -> Network | None:
    """A CIDR or an address as a network; None when ``item`` is a host name."""
    with contextlib.suppress(ValueError):
        return ipaddress.ip_network(item.strip("[]"), strict=False)
    return None


def _host_matches(pattern: str, host: str) -> bool:
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and host != pattern[2:]
    return host == pattern


def _plain(address: Address) -> Address:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def default_denied(address: Address) -> str | None:
    """Why ``address`` is refused unless allowed, or None."""
    if address in METADATA:
        return "a cloud metadata address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_unspecified or address.is_multicast or address.is_reserved:
        return "not a unicast address"
    if any(address in network for network in PRIVATE) or address.is_private:
        return "a private address"
    return None


@dataclass(frozen=True, slots=True)
class EgressPolicy:
    """The daemon's egress policy (see the module docstring). ``own``: clockd's servers."""

    allow: Mapping[str, Entries] = field(default_factory=dict)
    deny: Mapping[str, Entries] = field(default_factory=dict)
    own: frozenset[tuple[str, int]] = frozenset()  # (host or address, port)

    @classmethod
    def from_settings(
        cls, allow: Mapping[str, Iterable[str]], deny: Mapping[str, Iterable[str]], store: str, etcd: Iterable[str]
    ) -> EgressPolicy:
        own: set[tuple[str, int]] = set()
        for url, port in ((store, 5432), *((e, 2379) for e in etcd)):
            endpoint = _endpoint(url, port)
            if endpoint is not None:
                own.add(endpoint)
                # By address too (resolved once, at start): a target may name it by IP.
                with contextlib.suppress(OSError, UnicodeError):
                    for info in socket.getaddrinfo(endpoint[0], endpoint[1], type=socket.SOCK_STREAM):
                        own.add((str(_plain(ipaddress.ip_address(str(info[4][0]).split("%")[0]))), endpoint[1]))
        return cls(
            {t: Entries.parse(v) for t, v in allow.items()},
            {t: Entries.parse(v) for t, v in deny.items()},
            frozenset(own),
        )

    def _lists(self, rules: Mapping[str, Entries], tenant: str) -> list[Entries]:
        return [e for e in (rules.get(tenant), rules.get("*")) if e is not None]

    def check_host(self, tenant: str, host: str, port: int) -> str | None:
        """Why a connection to ``host`` (a name or a literal address) is refused before
        any DNS lookup, or None."""
        host = host.lower().rstrip(".").strip("[]")
        network = parse_network(host)
        if network is not None and network.num_addresses == 1:
            return self.check_address(tenant, host, network.network_address, port)
        if (host, port) in self.own:
            return f"{host}:{port} is one of clockd's own servers"
        if any(e.host(host) for e in self._lists(self.deny, tenant)):
            return f"{host} is denied to tenant {tenant!r} (http_deny)"
        if any(e.host(host) for e in self._lists(self.allow, tenant)):
            return None
        if any(_host_matches(p, host) for p in LOCAL_NAMES):
            return f"{host} is a local name, not allowed for tenant {tenant!r} (add it to http_allow)"
        return None

    def check_address(self, tenant: str, host: str, address: Address, port: int) -> str | None:
        """Why connecting to ``address`` (which ``host`` resolved to) is refused, or None."""
        address = _plain(address)
        shown = str(address) if str(address) == host else f"{host} ({address})"
        if (str(address), port) in self.own or (host, port) in self.own:
            return f"{shown}:{port} is one of clockd's own servers"
        if any(e.address(address) or e.host(host) for e in self._lists(self.deny, tenant)):
            return f"{shown} is denied to tenant {tenant!r} (http_deny)"
        why = default_denied(address)
        exact = address in METADATA
        allowed = self._lists(self.allow, tenant)
        if any(e.address(address, exact=exact) or (e.host(host) and not exact) for e in allowed):
            return None
        if why is not None:
            return f"{shown} is {why}, not allowed for tenant {tenant!r} (add it to http_allow)"
        return None

    def check_url(self, tenant: str, url: str) -> str | None:
        parts = urlsplit(url)
        if not parts.hostname:
            return None
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
        return self.check_host(tenant, parts.hostname, port)


def _endpoint(url: str, default_port: int) -> tuple[str, int] | None:
    """(host, port) of a DSN or endpoint URL; None for a file store or a socket path."""
    if "://" not in url:
        return None
    try:
        parts = urlsplit(url)
        port = parts.port or default_port
    except ValueError:
        return None
    if not parts.hostname or parts.hostname.startswith("/"):
        return None
    return parts.hostname.lower(), port


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """An httpcore network backend that resolves the host itself, checks every address
    against the tenant's policy, and connects to a checked address (never re-resolving),
    so DNS cannot hand the connection a different address than the one judged.
    TLS still verifies the URL's host name (httpcore passes it as the SNI name)."""

    def __init__(self, policy: EgressPolicy, tenant: str, inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self._policy = policy
        self._tenant = tenant
        self._inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109  (httpcore's interface names it)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        reason = self._policy.check_host(self._tenant, host, port)
        if reason is not None:
            raise EgressDenied(reason)
        network = parse_network(host)
        if network is not None:
            addresses: list[Address] = [network.network_address]
        else:
            loop = asyncio.get_running_loop()
            infos = await asyncio.wait_for(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout)
            addresses = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos))
        for address in addresses:
            reason = self._policy.check_address(self._tenant, host, address, port)
            if reason is not None:
                raise EgressDenied(reason)
        last: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    str(address), port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        raise last if last is not None else httpcore.ConnectError(f"{host} has no address")

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109  (httpcore's interface names it)
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise EgressDenied("unix sockets are not reachable from HTTP targets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)
