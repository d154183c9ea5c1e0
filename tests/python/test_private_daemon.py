"""Zero set-up: a Loader with no daemon address starts a private stokerd.

The private daemon is found beside the module (build/python/stoker/bin in a
build tree, stoker/bin in a pip install), serves the dataset's folder, and
goes away with the last loader, or with the trainer if it is killed, leaving
no socket, no shared memory and no process behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from conftest import make_dataset, ring_fd_path, ring_mapping, stoker_shm_objects, wait_until

pytest.importorskip("torch")


@pytest.fixture
def no_socket_env(monkeypatch):
    monkeypatch.delenv("STOKER_SOCKET", raising=False)
    monkeypatch.delenv("STOKERD", raising=False)


@pytest.fixture(scope="module")
def small_set(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("private"))
    make_dataset(os.path.join(root, "imgs"), classes=2, per_class=9, sizes=(40, 120), seed=31)
    return os.path.join(root, "imgs")


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_loader_without_socket_starts_and_stops_a_private_daemon(stoker, no_socket_env,
                                                                 small_set, monkeypatch):
    from stoker import _private
    shm_before = set(stoker_shm_objects())
    monkeypatch.chdir(os.path.dirname(small_set))
    a = stoker.Loader("imgs", batch_size=4, size=32, num_workers=1, epochs=1, seed=2)
    b = stoker.Loader("imgs", batch_size=6, size=40, num_workers=1, epochs=1, seed=2,
                      shuffle=False)
    assert a.socket is None  # nothing started before the first use
    n = sum(len(labels) for _, labels in a)
    assert n == 18 and a.class_names == ["class_00", "class_01"]
    labels = [int(x) for _, y in b for x in y]
    assert labels == [0] * 9 + [1] * 9  # ImageFolder's order
    (d,) = _private.running()  # one daemon for both loaders of this data root
    assert a.socket == b.socket == d.socket
    assert os.stat(d.socket).st_mode & 0o777 == 0o600
    pid = d.proc.pid
    cfg = stoker.Client(d.socket).status()["config"]
    # Without data_root=, "/": the daemon reads what this user can (issue 34).
    assert cfg["data_root"] == "/" and cfg["workers"] == 1
    a.close()
    assert _alive(pid)  # b still uses it
    b.close()
    assert not _alive(pid) and _private.running() == []
    assert not os.path.exists(d.socket)
    assert set(stoker_shm_objects()) <= shm_before


def test_a_killed_trainer_leaves_nothing_behind(build_dir, no_socket_env, small_set):
    shm_before = stoker_shm_objects()
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {os.path.join(build_dir, "python")!r})
        import stoker
        from stoker import _private
        ld = stoker.Loader({small_set!r}, batch_size=4, size=32, num_workers=2)
        it = iter(ld)
        next(it)
        (d,) = _private.running()
        print(d.proc.pid, d.socket, ld.info["ring_name"], flush=True)
        time.sleep(600)
    """)
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                         env={k: v for k, v in os.environ.items() if k != "STOKER_SOCKET"})
    try:
        line = p.stdout.readline().split()
        assert len(line) == 3, f"the trainer did not start: {line}"
        pid, sock, ring = int(line[0]), line[1], line[2]
        # The ring is a memfd the daemon holds, named in no file system.
        assert _alive(pid) and os.path.exists(sock) and ring_fd_path(pid, ring) is not None
        assert stoker_shm_objects() == shm_before
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
        # The daemon sees its parent gone, drains and removes its ring and socket.
        wait_until(lambda: not _alive(pid), 20, "the private daemon to exit")
        assert not os.path.exists(sock) and not os.path.exists(sock + ".ring")
        assert stoker_shm_objects() == shm_before
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_no_daemon_to_start_is_a_clear_error(stoker, no_socket_env, small_set, monkeypatch,
                                             tmp_path):
    monkeypatch.setenv("STOKERD", str(tmp_path / "nope"))
    with pytest.raises(stoker.DaemonUnavailableError, match="STOKERD") as ei:
        next(iter(stoker.Loader(small_set, batch_size=4, size=32)))
    assert ei.value.code == "UNAVAILABLE"
    with pytest.raises(stoker.InvalidRequestError, match="does not exist"):
        monkeypatch.delenv("STOKERD")
        next(iter(stoker.Loader(str(tmp_path / "missing"), batch_size=4, size=32)))


def test_a_start_interrupted_by_ctrl_c_leaves_no_daemon(stoker, no_socket_env, small_set,
                                                        monkeypatch):
    from stoker import _private
    started = []
    real_popen = subprocess.Popen

    def popen(*args, **kw):
        p = real_popen(*args, **kw)
        started.append(p)
        return p

    def interrupted(self, exe, timeout_s):
        raise KeyboardInterrupt

    monkeypatch.setattr(_private.subprocess, "Popen", popen)
    monkeypatch.setattr(_private.PrivateDaemon, "_wait_healthy", interrupted)
    with pytest.raises(KeyboardInterrupt):
        next(iter(stoker.Loader(small_set, batch_size=4, size=32, num_workers=1)))
    (p,) = started
    assert p.poll() is not None, "the private stokerd outlived the interrupted start"
    assert _private.running() == []


def test_a_loader_collected_while_a_daemon_starts_releases_its_own(stoker, no_socket_env,
                                                                   small_set):
    """The garbage collector may finalize a Loader (release(), under the
    module's lock) in the middle of acquire() on the same thread, which holds
    that lock: it must not wait for itself."""
    import threading
    from stoker import _private
    d, _path = _private.acquire(small_set, 1)
    done = threading.Event()

    def nested():
        with _private._lock:  # as acquire() holds it while a daemon starts
            _private.release(d)
        done.set()

    t = threading.Thread(target=nested, daemon=True)
    t.start()
    t.join(timeout=30)
    assert done.is_set(), "release() under acquire()'s lock waited for itself"
    assert d.proc is None and _private.running() == []


def test_a_private_daemon_killed_by_the_oom_killer_leaves_no_ring_behind(stoker, no_socket_env,
                                                                          small_set):
    """SIGKILL, as the OOM killer sends it: the daemon cannot clean up, yet its
    rings, memfds named nowhere, leave nothing in /dev/shm; the trainer holds
    its mapping (and reads the batch it has) until it lets go, and gets a
    clear error for the next."""
    from stoker import _private
    shm_before = stoker_shm_objects()
    ld = stoker.Loader(small_set, batch_size=4, size=32, num_workers=1, epochs=None)
    try:  # closed whatever happens: a private daemon left running would hold later tests
        it = iter(ld)
        images, _ = next(it)
        (d,) = _private.running()
        ring = ld.info["ring_name"]
        assert ring.startswith("memfd:stoker-") and ring_mapping(ring) is not None
        assert ring_fd_path(d.proc.pid, ring) is not None
        os.kill(d.proc.pid, signal.SIGKILL)
        d.proc.wait(timeout=10)
        assert stoker_shm_objects() == shm_before
        assert float(images.float().sum()) >= 0  # still readable
        del images  # (batches made before the kill may still come; none may be held)
        with pytest.raises(stoker.DaemonUnavailableError):
            for _ in range(50):
                next(it)
    finally:
        ld.close()
    assert stoker_shm_objects() == shm_before


def test_names_squatted_in_dev_shm_block_no_attach(stoker, daemon_factory, tmp_path):
    """Another user could create /dev/shm/stoker-* names in advance, as the
    rings were once named there; rings are memfds now, so no name can block
    an attach."""
    d = daemon_factory(workers=1)
    make_dataset(os.path.join(d.data_root, "imgs"), classes=2, per_class=4, seed=3)
    squatted = []
    for tag in ("", d.pid):
        for n in range(1, 6):
            path = f"/dev/shm/stoker-{tag or 'x'}-{d.pid}-{n}"
            with open(path, "w"):
                pass
            squatted.append(path)
    try:
        for _ in range(5):
            with stoker.Loader("imgs", socket=d.socket, batch_size=4, size=32,
                               epochs=1) as ld:
                assert sum(len(y) for _, y in ld) == 8
    finally:
        for p in squatted:
            os.unlink(p)


def test_a_symlink_farm_works_with_a_private_daemon_and_data_root_confines_it(
        stoker, no_socket_env, tmp_path):
    # An ImageFolder whose files are links into a pool beside it (git-annex,
    # DVC, a subset of ImageNet made of links): the private daemon reads
    # what its user can, so it needs no data_root= (issue 34).
    pool = tmp_path / "pool"
    make_dataset(str(pool), classes=2, per_class=3, sizes=(40, 80), seed=33)
    farm = tmp_path / "farm"
    for cls in sorted(os.listdir(pool)):
        os.makedirs(farm / cls)
        for name in sorted(os.listdir(pool / cls)):
            os.symlink(os.path.join("..", "..", "pool", cls, name), farm / cls / name)
    with stoker.Loader(str(farm), batch_size=2, size=32, num_workers=1, epochs=1) as ld:
        assert sum(len(labels) for _, labels in ld) == 6
    with stoker.Loader(str(farm), batch_size=2, size=32, num_workers=1, epochs=1,
                       data_root=str(tmp_path)) as ld:
        assert sum(len(labels) for _, labels in ld) == 6
    # data_root= confines it: the links lead out of the farm.
    with pytest.raises(stoker.InvalidRequestError, match="data root"):
        next(iter(stoker.Loader(str(farm), batch_size=2, size=32, num_workers=1,
                                data_root=str(farm))))
    with pytest.raises(stoker.InvalidRequestError, match="beneath"):
        stoker.Loader(str(farm), batch_size=2, data_root=str(pool)).attach()


def test_private_daemons_share_the_cpus_among_local_ranks(monkeypatch):
    """Each local rank's private daemon (--workers auto) gets its share of the
    CPUs as its --cpu-budget; alone or pinned, stokerd reads its own."""
    from stoker import _private
    monkeypatch.setattr(_private.os, "cpu_count", lambda: 16)
    monkeypatch.setattr(_private.os, "sched_getaffinity", lambda pid: set(range(16)))
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert _private.rank_cpu_share() is None
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert _private.rank_cpu_share() == 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "32")
    assert _private.rank_cpu_share() == 1
    # Ranks pinned to their own CPUs already (numactl, SLURM --cpu-bind):
    # the affinity is the share, and stokerd reads it itself.
    monkeypatch.setattr(_private.os, "cpu_count", lambda: 64)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert _private.rank_cpu_share() is None


def test_a_private_daemon_sizes_itself(stoker, no_socket_env, small_set, monkeypatch):
    """Without num_workers the private daemon runs --workers auto, within this
    rank's share of the CPUs."""
    from stoker import _private
    monkeypatch.chdir(os.path.dirname(small_set))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setattr(_private.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(_private.os, "sched_getaffinity", lambda pid: {0, 1})
    with stoker.Loader("imgs", batch_size=4, size=32, epochs=1) as ld:
        assert sum(len(labels) for _, labels in ld) == 18
        (d,) = _private.running()
        st = stoker.Client(d.socket).status()
        assert st["config"]["workers"] == 0  # auto
        at = st["autotune"]
        assert at["mode"] == "auto" and at["cpu_budget"] == 1
        assert at["cpu_budget_source"] == "--cpu-budget"
        assert at["workers"] == 1 and at["max_workers"] == 1


def test_a_release_during_acquire_waits_until_acquire_has_counted(stoker, no_socket_env,
                                                                  small_set, monkeypatch):
    """The last other user of a daemon finalized (by the garbage collector)
    inside acquire(), between the lookup and the count: the daemon handed
    out must not be stopped under its new user."""
    from stoker import _private
    d, _path = _private.acquire(small_set, 1)
    original = _private._daemons

    class FinalizedMidway(dict):
        def get(self, key, default=None):
            _private.release(d)
            return dict.get(self, key, default)

    monkeypatch.setattr(_private, "_daemons", FinalizedMidway(original))
    again, _path = _private.acquire(small_set, 1)
    assert again is d and d.refs == 1
    assert d.proc is not None and d.proc.poll() is None, "stopped under its new user"
    _private.release(again)
    assert d.proc is None
    for key in [k for k, v in original.items() if v is d]:
        del original[key]


def test_the_private_daemons_command_line_comes_from_the_daemons_own_table(stoker):
    """No stokerd flag is spelled in Python: names are DaemonConfig's fields,
    spelled by the native table (proto/stoker/v1/config.proto)."""
    from stoker import _native, _private
    table = {f["field"]: f for f in _native.daemon_flags()}
    assert table["data_root"]["flag"] == "--data-root"
    assert table["data_root"]["env"] == "STOKER_DATA_ROOT" and table["data_root"]["required"]
    assert table["workers"]["default"] == "auto" and table["workers"]["zero_word"] == "auto"
    assert table["fault_hang_substring"]["hidden"]
    assert _private.daemon_args(data_root="/x", log_json=True, cpu_budget=1.5, workers="auto") == [
        "--data-root=/x", "--log-json=on", "--cpu-budget=1.5", "--workers=auto"]
    with pytest.raises(TypeError, match="no setting 'shm_budget_mb'"):
        _private.daemon_args(shm_budget_mb=3)


def test_any_daemon_setting_reaches_a_private_daemon_through_the_environment(
        stoker, no_socket_env, small_set, monkeypatch):
    """STOKER_<NAME> sets the private daemon's flag (it runs --from-env); what
    the Loader must decide (socket, data root, workers) stays the Loader's."""
    from stoker import _private
    monkeypatch.chdir(os.path.dirname(small_set))
    monkeypatch.setenv("STOKER_MAX_SESSIONS", "7")
    monkeypatch.setenv("STOKER_LOG_LEVEL", "info")
    monkeypatch.setenv("STOKER_DATA_ROOT", "/nonexistent")  # the Loader's own wins
    with stoker.Loader("imgs", batch_size=4, size=32, epochs=1, num_workers=1) as ld:
        assert sum(len(labels) for _, labels in ld) == 18
        (d,) = _private.running()
        cfg = stoker.Client(d.socket).status()["config"]
    assert cfg["max_sessions"] == 7 and cfg["log_level"] == "info"
    assert cfg["data_root"] == "/" and cfg["workers"] == 1


def test_a_bad_daemon_setting_in_the_environment_is_a_clear_error(stoker, no_socket_env,
                                                                  small_set, monkeypatch):
    monkeypatch.chdir(os.path.dirname(small_set))
    monkeypatch.setenv("STOKER_MAX_SESSIONS", "lots")
    with pytest.raises(stoker.DaemonUnavailableError,
                       match="STOKER_MAX_SESSIONS: --max-sessions lots: takes an integer >= 1"):
        next(iter(stoker.Loader("imgs", batch_size=4, size=32, epochs=1, num_workers=1)))
