"""Decode nodes for the tests (stokerd --decode-node) and what the tests need
around them: credentials (a CA, node and trainer certificates, made with
Debian's openssl), the node's Info read without generated stubs, and a rogue
node that answers garbage.

    certs = make_certs(dir)                  # {"ca", "node_cert", ...: paths}
    node = DecodeNode(build, workdir, data_root, tls=certs).start()
    node.port; node.info(); node.kill(); node.pause(); node.resume()
    digests(stoker, socket, ...)             # one hash per batch: same batches, same list
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from concurrent import futures
from typing import Callable, Dict, Iterable, List, Optional

INFO = "/stoker.v1.DecodeNode/Info"
PIPELINE = {"pipeline": "train", "size": 56}
BATCH = 4
DECODE = "/stoker.v1.DecodeNode/Decode"


def digests(stoker, socket: str, epochs: int = 2, seed: int = 7, dataset: str = "ds",
            on_batch: Optional[Callable[[int], None]] = None, gaps: Optional[List[float]] = None,
            all_ok: bool = True) -> List[str]:
    """One hash per batch (pixels and labels) of a shuffled train run of
    `dataset` (PIPELINE, BATCH); with `all_ok` every sample must be ok.
    on_batch(i) runs after batch i is read; `gaps` gets each batch's wait."""
    import hashlib

    import numpy as np
    s = stoker.Client(socket).attach(dataset, batch_size=BATCH, shuffle=True, seed=seed,
                                     epochs=epochs, pipeline=dict(PIPELINE))
    out: List[str] = []
    last = time.monotonic()
    try:
        while True:
            try:
                raw = s.next(60000)
            except stoker.EndOfData:
                break
            now = time.monotonic()
            if gaps is not None:
                gaps.append(now - last)
            last = now
            if all_ok:
                assert raw[3].tolist() == [0] * len(raw[3]), f"batch {len(out)}: {raw[3]}"
            h = hashlib.sha256(np.ascontiguousarray(raw[0]["image"][0]).tobytes())
            h.update(np.ascontiguousarray(raw[0]["label"][0]).tobytes())
            out.append(h.hexdigest())
            if on_batch is not None:
                on_batch(len(out) - 1)
    finally:
        s.detach()
    return out


def make_certs(folder: str, node_ips: Iterable[str] = ()) -> Dict[str, str]:
    """A CA, a node certificate for 127.0.0.1/localhost (and `node_ips`), a
    trainer (client) certificate, and a rogue client certificate signed by
    another CA."""
    os.makedirs(folder, exist_ok=True)
    p = lambda name: os.path.join(folder, name)  # noqa: E731

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    def ca(name: str) -> None:
        run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", p(name + ".key"), "-out", p(name + ".pem"), "-days", "2",
            "-subj", f"/CN={name}")

    def leaf(name: str, ca_name: str, san: Optional[str]) -> None:
        run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", p(name + ".key"), "-out", p(name + ".csr"), "-subj", f"/CN={name}")
        ext = p(name + ".ext")
        with open(ext, "w") as f:
            f.write(f"subjectAltName={san}\n" if san else "basicConstraints=CA:FALSE\n")
        run("x509", "-req", "-in", p(name + ".csr"), "-CA", p(ca_name + ".pem"), "-CAkey",
            p(ca_name + ".key"), "-CAcreateserial", "-out", p(name + ".pem"), "-days", "2",
            "-extfile", ext)

    ca("ca")
    ca("rogue-ca")
    leaf("node", "ca", ",".join(["IP:127.0.0.1", "DNS:localhost",
                                 *(f"IP:{ip}" for ip in node_ips)]))
    leaf("trainer", "ca", "DNS:trainer")
    leaf("rogue", "rogue-ca", "DNS:trainer")
    for name in os.listdir(folder):
        if name.endswith(".key"):
            os.chmod(p(name), 0o600)
    return {"ca": p("ca.pem"), "node_cert": p("node.pem"), "node_key": p("node.key"),
            "trainer_cert": p("trainer.pem"), "trainer_key": p("trainer.key"),
            "rogue_cert": p("rogue.pem"), "rogue_key": p("rogue.key")}


def write_token(folder: str, token: str = "0123456789abcdef0123456789abcdef") -> str:
    path = os.path.join(folder, "decode.token")
    with open(path, "w") as f:
        f.write(token + "\n")
    os.chmod(path, 0o600)
    return path


def trainer_auth(certs: Optional[Dict[str, str]] = None, token: Optional[str] = None) -> list:
    """A trainer daemon's flags for decode traffic."""
    if certs is not None:
        return ["--tls-ca", certs["ca"], "--tls-cert", certs["trainer_cert"], "--tls-key",
                certs["trainer_key"]]
    return ["--decode-token-file", token]


def parse_proto(data: bytes) -> Dict[int, object]:
    """A message's fields by number: varints as ints, length-delimited as
    bytes (enough for DecodeNodeInfo)."""
    out: Dict[int, object] = {}
    i = 0

    def varint() -> int:
        nonlocal i
        v = shift = 0
        while True:
            b = data[i]
            i += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return v

    while i < len(data):
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            out[field] = varint()
        elif wire == 2:
            n = varint()
            out[field] = data[i:i + n]
            i += n
        else:
            raise ValueError(f"wire type {wire}")
    return out


INFO_FIELDS = {1: "workers", 2: "version", 3: "fingerprint", 4: "streams_open",
               5: "streams_total", 6: "tasks_done", 7: "tasks_failed", 8: "bytes_in",
               9: "bytes_out", 10: "worker_restarts", 11: "arena_used_bytes",
               12: "files_held", 13: "files_bytes", 14: "files_received",
               15: "prepared_entries", 16: "prepared_hits"}


def channel(port: int, certs: Optional[Dict[str, str]] = None, client: str = "trainer",
            host: str = "127.0.0.1"):
    """A grpc channel to the node: TLS with `client`'s certificate ("trainer",
    "rogue", or None for no client certificate) when `certs`, else clear text."""
    import grpc
    target = f"{host}:{port}"
    if certs is None:
        return grpc.insecure_channel(target)
    read = lambda k: open(certs[k], "rb").read()  # noqa: E731
    creds = grpc.ssl_channel_credentials(
        root_certificates=read("ca"),
        private_key=read(client + "_key") if client else None,
        certificate_chain=read(client + "_cert") if client else None)
    return grpc.secure_channel(target, creds)


def call_info(ch, metadata=(), timeout: float = 5.0) -> Dict[str, object]:
    """Info over `ch`; raises grpc.RpcError as the node answers."""
    raw = ch.unary_unary(INFO, request_serializer=lambda b: b,
                         response_deserializer=lambda b: b)(b"", metadata=list(metadata),
                                                           timeout=timeout)
    fields = parse_proto(raw)
    out = {}
    for k, v in fields.items():
        name = INFO_FIELDS.get(k, str(k))
        out[name] = v.decode() if isinstance(v, bytes) else v
    for name in INFO_FIELDS.values():
        out.setdefault(name, "" if name in ("version", "fingerprint") else 0)
    return out


def fingerprint_of(ch, metadata=()) -> str:
    """The node's build fingerprint, as it names it refusing a wrong one."""
    import grpc
    try:
        call_info(ch, [*metadata, ("stoker-protocol", "not-a-build")])
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.FAILED_PRECONDITION, e
        m = re.search(r"this decode node runs (\S+),", e.details())
        assert m, e.details()
        return m.group(1)
    raise AssertionError("a wrong fingerprint was accepted")


class DecodeNode:
    """stokerd --decode-node as this process's child, on 127.0.0.1 (port
    chosen by the kernel unless `port`)."""

    def __init__(self, build_dir: str, workdir: str, data_root: str, workers: int = 2,
                 certs: Optional[Dict[str, str]] = None, token: Optional[str] = None,
                 port: int = 0, extra_args: Iterable[str] = (), host: str = "127.0.0.1",
                 wrap=None) -> None:
        """`host`: the address it listens on and is dialled at; `wrap`: makes
        its command run elsewhere (netns.Node.wrap: in a namespace, under a
        CPU quota)."""
        self.build_dir, self.workdir, self.data_root = build_dir, workdir, data_root
        self.host, self.wrap = host, wrap
        self.workers, self.certs, self.token = workers, certs, token
        self.port = port
        self.extra_args = list(extra_args)
        self.log_path = os.path.join(workdir, f"node-{time.monotonic_ns()}.log")
        self.proc: Optional[subprocess.Popen] = None

    def command(self) -> list:
        auth = (["--tls-ca", self.certs["ca"], "--tls-cert", self.certs["node_cert"],
                 "--tls-key", self.certs["node_key"]] if self.certs is not None
                else ["--decode-token-file", self.token])
        cmd = [os.path.join(self.build_dir, "bin", "stokerd"), "--decode-node", "--listen",
               f"{self.host}:{self.port}", "--data-root", self.data_root, "--workers",
               str(self.workers), *auth, *self.extra_args,
               *os.environ.get("STOKER_TEST_DAEMON_ARGS", "").split()]
        return self.wrap(cmd) if self.wrap is not None else cmd

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout_s: float = 20.0) -> "DecodeNode":
        os.makedirs(self.data_root, exist_ok=True)
        log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = open(self.log_path).read()
            m = re.search(r"listening on \S+ \(port (\d+)", text)
            if m:
                self.port = int(m.group(1))
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"decode node exited {self.proc.returncode}:\n{text}")
            time.sleep(0.02)
        raise RuntimeError(f"decode node not listening in {timeout_s} s:\n{self.log_tail()}")

    def log_tail(self, n: int = 30) -> str:
        return "".join(open(self.log_path).readlines()[-n:])

    def metadata(self) -> list:
        return [("stoker-token", open(self.token).read().strip())] if self.token else []

    def info(self) -> Dict[str, object]:
        ch = channel(self.port, self.certs, host=self.host)
        try:
            md = self.metadata()
            return call_info(ch, [*md, ("stoker-protocol", fingerprint_of(ch, md))])
        finally:
            ch.close()

    def pause(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)
        for pid in _children(self.proc.pid):
            os.kill(pid, signal.SIGSTOP)

    def resume(self) -> None:
        for pid in _children(self.proc.pid):
            os.kill(pid, signal.SIGCONT)
        os.kill(self.proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            kids = _children(self.proc.pid)
            self.proc.kill()
            self.proc.wait(timeout=10)
            for pid in kids:  # its workers see their channel close and exit
                _wait_gone(pid, 10)

    def stop(self, timeout_s: float = 15.0) -> int:
        """SIGTERM; the exit status (asserting it exited)."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.resume()
        self.proc.terminate()
        rc = self.proc.wait(timeout=timeout_s)
        return rc


def _children(pid: int) -> list:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _wait_gone(pid: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(") ")[1].startswith("Z"):
                    return
        except OSError:
            return
        time.sleep(0.02)


class RogueNode:
    """A decode node that answers every task with a result of the wrong size
    (a node cut off for a malformed answer); Info answers 2 workers."""

    def __init__(self, address: str = "127.0.0.1:0") -> None:
        import grpc
        self.tasks = 0
        rogue = self

        def info(request, context):
            return b"\x08\x02"  # workers: 2

        def decode(requests, context):
            for _ in requests:
                rogue.tasks += 1
                # DecodeResult{result: 5 bytes}: not a ResultMsg.
                yield b"\x0a\x05hello"

        handler = grpc.method_handlers_generic_handler("stoker.v1.DecodeNode", {
            "Info": grpc.unary_unary_rpc_method_handler(
                info, request_deserializer=lambda b: b, response_serializer=lambda b: b),
            "Decode": grpc.stream_stream_rpc_method_handler(
                decode, request_deserializer=lambda b: b, response_serializer=lambda b: b),
        })
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port(address)
        self.server.start()

    def stop(self) -> None:
        self.server.stop(0)


if __name__ == "__main__":
    # `decode_nodes.py rogue HOST:PORT`: a RogueNode as a process of its own
    # (in a network namespace: netns.Node.wrap_net); prints "listening".
    import sys
    assert sys.argv[1:2] == ["rogue"], "usage: decode_nodes.py rogue HOST:PORT"
    node = RogueNode(sys.argv[2])
    print("listening", flush=True)
    node.server.wait_for_termination()
