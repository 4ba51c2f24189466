"""Network faults for the drills: a process in its own network namespace, whose links
to chosen servers can be black-holed (packets dropped, connections left open), made
lossy, or slowed down.

Shape (all of it created by the test, on this machine only)::

    host namespace                          namespace <name>
    127.0.0.1:<etcd>  <- Relay <- 10.213.X.Y+1 ==veth== 10.213.X.Y+2  clockd
    127.0.0.1:<pg>    <- Relay <-        (a private /30)

* The servers keep listening on 127.0.0.1 only. A :class:`Relay` in the test process
  listens on the host end of the veth pair and forwards to the loopback server, so a
  namespaced process reaches it at ``ns.host_ip:relay.port``.
* ``blackhole(port)`` adds an nftables rule *inside the namespace* that drops every
  packet to and from that relay port: no RST, no FIN — the peer's TCP just hears
  nothing, as across a broken switch. ``heal(port)`` removes it; the connections
  that survived resume.
* ``lossy(port, percent)`` drops that share of packets at random (``numgen``).
* Delay: this kernel has no ``sch_netem`` (``CONFIG_NET_SCH_NETEM`` is not set), so
  ``tc netem`` cannot be used; the relay delays each chunk by ``relay.delay`` seconds
  per direction instead, keeping order (a userspace netem for TCP streams).

Invariants: names and addresses are unique per instance (random /30 in 10.213.0.0/16,
checked against the host's addresses); ``close()`` deletes the namespace (which deletes
the veth pair and every rule with it) and is safe to call twice; nothing listens on or
sends to an address the test did not create.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import secrets
import subprocess
import threading
import time
from collections.abc import Sequence

from .procs import free_port, require_binary

_TABLE = "clockd_drill"


def _run(argv: Sequence[str]) -> str:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def _host_addresses() -> set[ipaddress.IPv4Address]:
    out = _run(["ip", "-4", "-o", "addr", "show"])
    found = set()
    for line in out.splitlines():
        parts = line.split()
        if "inet" in parts:
            found.add(ipaddress.IPv4Interface(parts[parts.index("inet") + 1]).ip)
    return found


class Namespace:
    """One network namespace joined to the host namespace by a veth pair."""

    def __init__(self) -> None:
        require_binary("ip")
        require_binary("nft")
        tag = secrets.token_hex(3)
        self.name = f"clockd-{tag}"
        self.host_dev, self.ns_dev = f"cdh{tag}", f"cdn{tag}"
        taken = _host_addresses()
        while True:
            base = ipaddress.IPv4Address(f"10.213.{secrets.randbelow(256)}.{4 * secrets.randbelow(64)}")
            host, peer = base + 1, base + 2
            if host not in taken and peer not in taken:
                break
        self.host_ip, self.ns_ip = str(host), str(peer)
        self._open = False

    def create(self) -> Namespace:
        _run(["ip", "netns", "add", self.name])
        self._open = True
        try:
            _run(["ip", "link", "add", self.host_dev, "type", "veth", "peer", "name", self.ns_dev])
            _run(["ip", "link", "set", self.ns_dev, "netns", self.name])
            _run(["ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_dev])
            _run(["ip", "link", "set", self.host_dev, "up"])
            _run(["ip", "-n", self.name, "addr", "add", f"{self.ns_ip}/30", "dev", self.ns_dev])
            _run(["ip", "-n", self.name, "link", "set", self.ns_dev, "up"])
            _run(["ip", "-n", self.name, "link", "set", "lo", "up"])
            ruleset = f"""
table inet {_TABLE} {{
    set blocked {{ type inet_service; }}
    set lossy {{ type inet_service; }}
    chain out {{
        type filter hook output priority 0; policy accept;
        ip daddr {self.host_ip} tcp dport @blocked drop
        ip daddr {self.host_ip} tcp dport @lossy numgen random mod 100 < $loss drop
    }}
    chain in {{
        type filter hook input priority 0; policy accept;
        ip saddr {self.host_ip} tcp sport @blocked drop
        ip saddr {self.host_ip} tcp sport @lossy numgen random mod 100 < $loss drop
    }}
}}
"""
            self._loss = 0
            self._ruleset = ruleset
            self._load_rules(0)
        except BaseException:
            self.close()
            raise
        return self

    def _load_rules(self, loss: int) -> None:
        # The loss rate is a constant of the rule: reload the table to change it (the sets
        # are carried over, so a black hole stays in place).
        blocked = self._elements("blocked") if self._loss or loss else []
        lossy = self._elements("lossy") if self._loss or loss else []
        with contextlib.suppress(RuntimeError):
            self.nft(f"delete table inet {_TABLE}")
        self.nft(self._ruleset.replace("$loss", str(loss)))
        self._loss = loss
        for port in blocked:
            self.nft(f"add element inet {_TABLE} blocked {{ {port} }}")
        for port in lossy:
            self.nft(f"add element inet {_TABLE} lossy {{ {port} }}")

    def _elements(self, set_name: str) -> list[int]:
        out = self.nft(f"list set inet {_TABLE} {set_name}")
        if "elements" not in out:
            return []
        inside = out.split("elements = {", 1)[1].split("}", 1)[0]
        return [int(p) for p in inside.replace(",", " ").split() if p.isdigit()]

    def nft(self, script: str) -> str:
        """Run an nftables script inside the namespace."""
        proc = subprocess.run(
            [*self.prefix, "nft", "-f", "-"],
            input=script, capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"nft {script.strip()[:60]!r} exited {proc.returncode}: {proc.stderr.strip()}")
        return proc.stdout

    @property
    def prefix(self) -> list[str]:
        """argv prefix that runs a command inside the namespace (same PID: ip execs it)."""
        return ["ip", "netns", "exec", self.name]

    def blackhole(self, port: int) -> None:
        """Drop every packet between the namespace and ``host_ip:port``, both ways."""
        self.nft(f"add element inet {_TABLE} blocked {{ {port} }}")

    def heal(self, port: int) -> None:
        with contextlib.suppress(RuntimeError):
            self.nft(f"delete element inet {_TABLE} blocked {{ {port} }}")

    def lossy(self, port: int, percent: int) -> None:
        """Drop ``percent`` % of the packets to and from ``host_ip:port`` (0 to stop)."""
        if percent <= 0:
            with contextlib.suppress(RuntimeError):
                self.nft(f"delete element inet {_TABLE} lossy {{ {port} }}")
            return
        self._load_rules(percent)
        self.nft(f"add element inet {_TABLE} lossy {{ {port} }}")

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        with contextlib.suppress(RuntimeError):
            _run(["ip", "link", "del", self.host_dev])
        with contextlib.suppress(RuntimeError):
            _run(["ip", "netns", "del", self.name])

    def __enter__(self) -> Namespace:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.close()


class Relay:
    """A TCP relay from ``listen_host:port`` to ``127.0.0.1:target_port``, on its own event
    loop thread. ``delay`` (seconds, settable while running) holds each chunk that long
    in each direction, in order."""

    def __init__(self, listen_host: str, target_port: int) -> None:
        self.listen_host, self.target_port = listen_host, target_port
        self.port = 0
        self.delay = 0.0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"relay-{target_port}", daemon=True)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> Relay:
        self._thread.start()
        last: BaseException | None = None
        for _ in range(5):
            port = free_port()
            try:
                asyncio.run_coroutine_threadsafe(self._listen(port), self._loop).result(10)
                self.port = port
                return self
            except OSError as exc:
                last = exc
        raise RuntimeError(f"relay could not listen on {self.listen_host}: {last}")

    async def _listen(self, port: int) -> None:
        self._server = await asyncio.start_server(self._serve, self.listen_host, port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        pumps = [
            asyncio.ensure_future(self._pump(reader, up_writer)),
            asyncio.ensure_future(self._pump(up_reader, writer)),
        ]
        for task in pumps:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        for task in pumps:
            task.cancel()
        for w in (writer, up_writer):
            w.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    return
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()

        sender = asyncio.ensure_future(deliver())
        try:
            while True:
                data = await reader.read(65536)
                await queue.put((time.monotonic() + self.delay, data))
                if not data:
                    break
            await sender
        finally:
            sender.cancel()
            with contextlib.suppress(OSError, RuntimeError):
                writer.write_eof()

    def stop(self) -> None:
        async def _close() -> None:
            if self._server is not None:
                self._server.close()
            for task in list(self._tasks):
                task.cancel()

        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(_close(), self._loop).result(5)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)


def ns_supported() -> bool:
    """True when this process may create network namespaces (root with CAP_NET_ADMIN)."""
    return os.geteuid() == 0
