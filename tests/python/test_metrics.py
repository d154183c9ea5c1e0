"""stokerd --metrics-addr: Prometheus metrics over real HTTP from a real
daemon, equal to its Status after real sessions (one with a corrupt file)."""

import os
import re
import urllib.error
import urllib.request

import pytest

from conftest import make_dataset


def scrape(port, path="/metrics"):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return r.read().decode()


def samples(text):
    """Every sample, as Debian's python3-prometheus-client parser reads the
    text (it raises on anything malformed): [(name, labels, value)]."""
    from prometheus_client.parser import text_string_to_metric_families
    return [(s.name, s.labels, s.value)
            for fam in text_string_to_metric_families(text) for s in fam.samples]


def value(text, name, **labels):
    """The sample `name{labels...}`; every label given must match."""
    for n, have, v in samples(text):
        if n == name and all(have.get(k) == str(x) for k, x in labels.items()):
            return v
    raise KeyError(f"{name}{labels} not in the metrics")


def test_metrics_equal_the_status(stoker, daemon_factory):
    d = daemon_factory(workers=2, extra_args=["--metrics-addr", "127.0.0.1:0"])
    port = int(re.search(r"Prometheus metrics on http://\S+ \(port (\d+)\)", d.log()).group(1))
    root = os.path.join(d.data_root, "imgs")
    make_dataset(root, classes=2, per_class=12, seed=9)
    with open(os.path.join(root, "class_01", "img_0003.jpg"), "wb") as f:
        f.write(b"not a jpeg at all")  # no format stoker reads: unimplemented
    with open(os.path.join(root, "class_00", "img_0005.jpg"), "r+b") as f:
        f.truncate(200)  # a JPEG cut inside its header
    with stoker.Loader("imgs", socket=d.socket, batch_size=4, size=32, epochs=1,
                       client_name="metrics \"test\"", rank=0, world_size=1) as ld:
        n = sum(len(y) for _, y in ld)
        st = stoker.Client(d.socket).status()
        text = scrape(port)
    assert n == 24
    (s,) = st["sessions"]
    who = {"session": s["session_id"], "client": 'metrics "test"', "rank": 0}
    assert value(text, "stoker_up") == 1
    assert value(text, "stoker_samples_delivered_total", **who) == int(s["samples_produced"])
    assert value(text, "stoker_samples_replaced_total", **who) == int(s["samples_replaced"]) == 2
    reasons = s["failed_by_reason"]
    assert sum(int(v) for v in reasons.values()) == 2 and reasons["unimplemented"] == "1", reasons
    for reason, count in reasons.items():
        assert value(text, "stoker_samples_failed_total", reason=reason, **who) == int(count)
    assert value(text, "stoker_bytes_read_total", **who) == int(s["bytes_read"]) > 0
    assert value(text, "stoker_batches_consumed_total", **who) == int(s["batches_consumed"])
    assert value(text, "stoker_workers") == 2
    assert value(text, "stoker_worker_restarts_total") == 0
    # The histograms: one wait per batch taken, one decode per sample decoded.
    waits = value(text, "stoker_trainer_wait_seconds_count", **who)
    assert waits == int(s["client_wait"]["count"]) >= 6
    assert value(text, "stoker_trainer_wait_seconds_bucket", le="+Inf", **who) == waits
    decodes = value(text, "stoker_stage_seconds_count", stage="decode", **who)
    assert decodes == int(s["decode"]["count"]) == 24
    # Buckets are cumulative and end at the count.
    buckets = [float(v) for v in re.findall(
        r'^stoker_stage_seconds_bucket\{[^}]*stage="decode",le="[^"]+"\} (\S+)$', text, re.M)]
    assert buckets == sorted(buckets) and buckets[-1] == decodes

    # The daemon-wide totals per dataset equal the session's while it runs.
    ds = {"dataset": s["dataset"]}
    assert value(text, "stoker_dataset_samples_delivered_total", **ds) == int(s["samples_produced"])
    assert value(text, "stoker_dataset_samples_failed_total", reason="unimplemented", **ds) == 1

    # After the session: its series are gone, the daemon's stay, and the
    # dataset's totals keep what it did.
    after = scrape(port)
    assert "stoker_samples_delivered_total{" not in after
    assert value(after, "stoker_sessions_attached_total") == 1
    assert value(after, "stoker_dataset_samples_delivered_total", **ds) == int(s["samples_produced"])
    assert value(after, "stoker_dataset_samples_replaced_total", **ds) == 2
    assert value(after, "stoker_dataset_sessions_total", **ds) == 1
    assert value(after, "stoker_dataset_bytes_read_total", **ds) == int(s["bytes_read"])
    assert value(after, "stoker_dataset_decode_seconds_total", **ds) > 0
    # A second session adds to them: they only grow (rate() over a day works).
    with stoker.Loader("imgs", socket=d.socket, batch_size=4, size=32, epochs=1) as ld:
        assert sum(len(y) for _, y in ld) == 24
    again = scrape(port)
    assert (value(again, "stoker_dataset_samples_delivered_total", **ds)
            == 2 * int(s["samples_produced"]))
    assert value(again, "stoker_dataset_sessions_total", **ds) == 2
    with pytest.raises(urllib.error.HTTPError) as e:
        scrape(port, "/")
    assert e.value.code == 404


def test_a_bad_metrics_address_is_refused_with_the_fix(build_dir, tmp_short):
    import subprocess
    r = subprocess.run([os.path.join(build_dir, "bin", "stokerd"), "--socket",
                        os.path.join(tmp_short, "s.sock"), "--data-root", tmp_short,
                        "--metrics-addr", "9464"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "HOST:PORT" in r.stderr


def check_consistent(text):
    """One scrape: no series twice; each histogram's buckets cumulative, its
    +Inf bucket equal to its count."""
    seen = set()
    hist = {}
    for name, labels, v in samples(text):
        key = (name, tuple(sorted(labels.items())))
        assert key not in seen, key
        seen.add(key)
        if name.endswith("_bucket"):
            rest = tuple(sorted((k, x) for k, x in labels.items() if k != "le"))
            hist.setdefault((name[:-7], rest), []).append((float(labels["le"]), v))
    counts = {(n[:-6], tuple(sorted(lb.items()))): v for n, lb, v in samples(text)
              if n.endswith("_count")}
    for key, buckets in hist.items():
        values = [v for _, v in sorted(buckets)]
        assert values == sorted(values), key
        assert values[-1] == counts[key], key
    return {n: v for n, lb, v in samples(text) if not lb}


def test_scrapes_during_a_storm_of_attaches_and_detaches_are_consistent(stoker,
                                                                         daemon_factory):
    import threading
    d = daemon_factory(workers=2, extra_args=["--metrics-addr", "127.0.0.1:0"])
    port = int(re.search(r"\(port (\d+)\)", d.log()).group(1))
    make_dataset(os.path.join(d.data_root, "imgs"), classes=2, per_class=8, seed=3)
    stop = threading.Event()
    errors = []

    def storm(k):
        try:
            while not stop.is_set():
                with stoker.Loader("imgs", socket=d.socket, batch_size=4, size=32, epochs=1,
                                   client_name=f"storm-{k}") as ld:
                    for i, _ in enumerate(ld):
                        if i == k:
                            break
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=storm, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    try:
        last = {}
        for _ in range(25):
            daemon_wide = check_consistent(scrape(port))
            for name in ("stoker_sessions_attached_total", "stoker_worker_restarts_total"):
                assert daemon_wide[name] >= last.get(name, 0), name
            last = daemon_wide
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not errors, errors
    assert last["stoker_sessions_attached_total"] >= 3


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_dashboard_and_the_pod_read_metrics_stokerd_serves(stoker, daemon_factory):
    """docker/grafana-dashboard.json asks only for metrics a real daemon
    exports (a renamed metric would leave a panel empty), its first panel is
    the data stall; docker/k8s-pod.yaml's scrape annotations name the port
    its sidecar serves them on."""
    import json
    d = daemon_factory(workers=1, extra_args=["--metrics-addr", "127.0.0.1:0"])
    port = int(re.search(r"\(port (\d+)\)", d.log()).group(1))
    make_dataset(os.path.join(d.data_root, "imgs"), classes=2, per_class=4, seed=1)
    with stoker.Loader("imgs", socket=d.socket, batch_size=4, size=32, epochs=1) as ld:
        assert sum(len(y) for _, y in ld) == 8
        served = set(re.findall(r"^# TYPE (\w+) ", scrape(port), re.M))
    with open(os.path.join(REPO, "docker", "grafana-dashboard.json")) as f:
        dash = json.load(f)
    assert "stall" in dash["panels"][0]["title"].lower()
    asked = set()
    for p in dash["panels"]:
        for t in p["targets"]:
            asked |= {re.sub(r"_(bucket|sum|count)$", "", m)
                      for m in re.findall(r"\bstoker_\w+", t["expr"])}
    assert asked and asked <= served, asked - served
    with open(os.path.join(REPO, "docker", "k8s-pod.yaml")) as f:
        pod = f.read()
    ann = re.search(r'prometheus.io/port: "(\d+)"', pod).group(1)
    assert re.search(rf'"--metrics-addr", "0\.0\.0\.0:{ann}"', pod)
    assert re.search(rf"containerPort: {ann}\b", pod)
