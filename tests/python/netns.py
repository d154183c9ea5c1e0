"""Machines on one machine, for decode-node tests and bench/scaleout.py: each
node in its own network namespace, linked to this one by a veth pair with
addresses the harness picks (10.213.N.0/30), optionally rate-limited (tc
tbf) and partitioned (the link taken down), and its CPU held to a quota by
a cgroup. Everything it creates it removes (close(), or the `with` block).

Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2; `available()` says
whether this machine allows it, and why not. Latency and loss need tc's
netem, a kernel module these machines' kernels lack (`netem_available()`);
latency is added instead by delay_proxy.py run in the node's namespace
(`Node.delay_proxy`), in front of the node's port.

    with Host() as host:
        n = host.node(cpus=0.5, rate_mbit=10000)
        subprocess.Popen(n.wrap(["stokerd", ...]))   # runs inside n's namespace
        n.address                                     # "10.213.1.2"
        n.partition(); n.heal()
"""
from __future__ import annotations

import os
import subprocess
from typing import List, Optional, Tuple

_counter = [0]


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, check=check)


def available() -> Tuple[bool, str]:
    """Whether namespaces, veth pairs, tbf and a CPU cgroup can be made here."""
    if os.geteuid() != 0:
        return False, "needs root (network namespaces, veth pairs, cgroups)"
    name = f"stkprobe{os.getpid()}"
    r = _run("ip", "netns", "add", name, check=False)
    if r.returncode != 0:
        return False, f"ip netns add: {r.stderr.strip()}"
    try:
        r = _run("ip", "link", "add", name + "a", "type", "veth", "peer", "name", name + "b",
                 check=False)
        if r.returncode != 0:
            return False, f"veth: {r.stderr.strip()}"
        r = _run("tc", "qdisc", "add", "dev", name + "a", "root", "tbf", "rate", "100mbit",
                 "burst", "64kb", "latency", "50ms", check=False)
        _run("ip", "link", "del", name + "a", check=False)
        if r.returncode != 0:
            return False, f"tc tbf: {r.stderr.strip()}"
    finally:
        _run("ip", "netns", "del", name, check=False)
    if _cgroup_root() is None:
        return False, "no writable cpu cgroup (v1 cpu controller or v2 cpu.max)"
    return True, ""


def netem_available() -> bool:
    if os.geteuid() != 0:
        return False
    name = f"stknetem{os.getpid()}"
    if _run("ip", "link", "add", name + "a", "type", "veth", "peer", "name", name + "b",
            check=False).returncode != 0:
        return False
    try:
        return _run("tc", "qdisc", "add", "dev", name + "a", "root", "netem", "delay", "1ms",
                    check=False).returncode == 0
    finally:
        _run("ip", "link", "del", name + "a", check=False)


def _cgroup_root() -> Optional[Tuple[str, int]]:
    """(folder, version) where CPU-limited cgroups can be made."""
    v2 = "/sys/fs/cgroup"
    if os.path.exists(os.path.join(v2, "cgroup.controllers")):
        with open(os.path.join(v2, "cgroup.controllers")) as f:
            if "cpu" in f.read().split() and os.access(v2, os.W_OK):
                return v2, 2
    v1 = "/sys/fs/cgroup/cpu"
    if os.path.exists(os.path.join(v1, "cpu.cfs_quota_us")) and os.access(v1, os.W_OK):
        return v1, 1
    return None


class CpuLimit:
    """A cgroup whose processes together get `cpus` CPUs (a CFS quota)."""

    def __init__(self, name: str, cpus: float) -> None:
        root = _cgroup_root()
        assert root is not None, "no cpu cgroup"
        base, self.version = root
        self.path = os.path.join(base, name)
        os.makedirs(self.path, exist_ok=True)
        period = 100000
        quota = max(1000, int(cpus * period))
        if self.version == 2:
            with open(os.path.join(self.path, "cpu.max"), "w") as f:
                f.write(f"{quota} {period}")
        else:
            with open(os.path.join(self.path, "cpu.cfs_period_us"), "w") as f:
                f.write(str(period))
            with open(os.path.join(self.path, "cpu.cfs_quota_us"), "w") as f:
                f.write(str(quota))

    def procs_file(self) -> str:
        return os.path.join(self.path, "cgroup.procs")

    def add(self, pid: int) -> None:
        with open(self.procs_file(), "w") as f:
            f.write(str(pid))

    def wrap(self, cmd: List[str]) -> List[str]:
        """`cmd`, started inside this cgroup (it and its children)."""
        return ["sh", "-c", f'echo $$ > "{self.procs_file()}" && exec "$@"', "sh", *cmd]

    def close(self) -> None:
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except OSError:
                import time
                time.sleep(0.1)  # its last processes are still being reaped


class Node:
    """One namespace, its veth link to the host namespace, maybe a CPU quota."""

    def __init__(self, index: int, cpus: Optional[float], rate_mbit: Optional[float]) -> None:
        tag = f"{os.getpid() % 10000}x{index}"
        self.ns = f"stk{tag}"
        self.host_if, self.node_if = f"stkh{tag}", f"stkn{tag}"
        octet = 1 + (os.getpid() + index) % 250
        self.host_address = f"10.213.{octet}.1"
        self.address = f"10.213.{octet}.2"
        _run("ip", "netns", "add", self.ns)
        _run("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.node_if)
        _run("ip", "link", "set", self.node_if, "netns", self.ns)
        _run("ip", "addr", "add", self.host_address + "/30", "dev", self.host_if)
        _run("ip", "link", "set", self.host_if, "up")
        self._in("ip", "addr", "add", self.address + "/30", "dev", self.node_if)
        self._in("ip", "link", "set", self.node_if, "up")
        self._in("ip", "link", "set", "lo", "up")
        self.cpu = CpuLimit(self.ns, cpus) if cpus is not None else None
        if rate_mbit is not None:
            self.rate(rate_mbit)

    def _in(self, *args: str) -> None:
        _run("ip", "netns", "exec", self.ns, *args)

    def rate(self, mbit: float) -> None:
        """Both directions of the link at most `mbit` megabit/s (tc tbf)."""
        burst = max(64, int(mbit * 1000 / 8 / 250))  # KB: ~4 ms of traffic
        for where, dev in ((None, self.host_if), (self.ns, self.node_if)):
            cmd = ["tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{mbit}mbit",
                   "burst", f"{burst}kb", "latency", "100ms"]
            if where is None:
                _run(*cmd)
            else:
                self._in(*cmd)

    def delay_proxy(self, port: int, target_port: int, delay_ms: float):
        """A delay_proxy.py in this namespace: `port` on the node's address
        forwards to `target_port` there, `delay_ms` later each way. The
        process (started, listening); the caller kills it."""
        here = os.path.dirname(os.path.abspath(__file__))
        p = subprocess.Popen(self.wrap_net(["/usr/bin/python3", os.path.join(here, "delay_proxy.py"),
                                            self.address, str(port), self.address,
                                            str(target_port), str(delay_ms)]),
                             stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "listening"
        return p

    def partition(self) -> None:
        """No packets either way (the link down); connections hang, not reset."""
        _run("ip", "link", "set", self.host_if, "down")

    def heal(self) -> None:
        _run("ip", "link", "set", self.host_if, "up")

    def wrap_net(self, cmd: List[str]) -> List[str]:
        """`cmd` run in this namespace, outside its CPU quota (a helper of the
        harness, such as delay_proxy.py)."""
        return ["ip", "netns", "exec", self.ns, *cmd]

    def wrap(self, cmd: List[str]) -> List[str]:
        """`cmd` run in this namespace (and under its CPU quota)."""
        # The cgroup first: `ip netns exec` mounts a sysfs of the namespace's,
        # without the cgroup folders.
        inner = ["ip", "netns", "exec", self.ns, *cmd]
        return self.cpu.wrap(inner) if self.cpu is not None else inner

    def close(self) -> None:
        _run("ip", "link", "del", self.host_if, check=False)
        _run("ip", "netns", "del", self.ns, check=False)
        if self.cpu is not None:
            self.cpu.close()


class Host:
    """The nodes made for one test or benchmark; removes them all on close."""

    def __init__(self) -> None:
        self.nodes: List[Node] = []
        self.limits: List[CpuLimit] = []

    def node(self, cpus: Optional[float] = None, rate_mbit: Optional[float] = None) -> Node:
        _counter[0] += 1
        n = Node(_counter[0], cpus, rate_mbit)
        self.nodes.append(n)
        return n

    def cpu_limit(self, cpus: float) -> CpuLimit:
        """A CPU quota for a process of this namespace (the trainer node)."""
        _counter[0] += 1
        c = CpuLimit(f"stk{os.getpid() % 10000}c{_counter[0]}", cpus)
        self.limits.append(c)
        return c

    def close(self) -> None:
        for n in self.nodes:
            n.close()
        for c in self.limits:
            c.close()

    def __enter__(self) -> "Host":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
