"""The Kubernetes manifests (docker/k8s/, docker/k8s-pod.yaml) checked against
Kubernetes' own API schema, as Debian packages it: the python3-kubernetes
client's OpenAPI models (one class per kind and sub-object, each listing its
fields and their types). No tool in Debian 12 validates manifests offline
(kubeconform and kubeval are not packaged; kubectl validates against a live
API server), so this walks each document against the models: every field
must exist where it is written and have the model's type, and the client's
deserializer must accept it (required fields present).

The models are Kubernetes 1.22's (python3-kubernetes 22.6). Newer API that
the manifests use is checked against the nearest model and listed here:
  - autoscaling/v2 HorizontalPodAutoscaler (GA in 1.23): the v2beta2 model,
    which has the same fields;
  - Probe.grpc (GA in 1.27): {port, service};
  - Container.restartPolicy (native sidecars, 1.28+): "Always" on an init
    container.
"""
from __future__ import annotations

import glob
import os
import subprocess

import pytest

yaml = pytest.importorskip("yaml")
k8s = pytest.importorskip("kubernetes.client")

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

KINDS = {
    ("v1", "Pod"): "V1Pod",
    ("v1", "Service"): "V1Service",
    ("v1", "Secret"): "V1Secret",
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("apps/v1", "Deployment"): "V1Deployment",
    ("autoscaling/v2", "HorizontalPodAutoscaler"): "V2beta2HorizontalPodAutoscaler",
}
# Fields newer than the models: (model, json name) -> the value's type.
NEWER = {
    ("V1Probe", "grpc"): {"port": int, "service": str},
    ("V1Container", "restartPolicy"): str,
}
PRIMITIVE = {"str": str, "int": int, "bool": bool, "float": (int, float), "object": object,
             "datetime": str, "date": str}


def check(value, type_name: str, path: str, errors: list) -> None:
    if type_name.startswith("list["):
        if not isinstance(value, list):
            errors.append(f"{path}: a list expected")
            return
        for i, v in enumerate(value):
            check(v, type_name[5:-1], f"{path}[{i}]", errors)
        return
    if type_name.startswith("dict("):
        if not isinstance(value, dict):
            errors.append(f"{path}: a map expected")
            return
        inner = type_name[5:-1].split(", ", 1)[1]
        for k, v in value.items():
            check(v, inner, f"{path}.{k}", errors)
        return
    if type_name in PRIMITIVE:
        want = PRIMITIVE[type_name]
        if type_name == "int" and isinstance(value, bool):
            errors.append(f"{path}: an integer expected, not {value!r}")
        elif not isinstance(value, want):
            errors.append(f"{path}: {type_name} expected, not {value!r}")
        return
    model = getattr(k8s, type_name)
    if not isinstance(value, dict):
        errors.append(f"{path}: an object ({type_name}) expected")
        return
    by_json = {j: model.openapi_types[a] for a, j in model.attribute_map.items()}
    for key, v in value.items():
        extra = NEWER.get((type_name, key))
        if extra is not None:
            if isinstance(extra, dict):
                unknown = set(v) - set(extra)
                if unknown:
                    errors.append(f"{path}.{key}: unknown fields {sorted(unknown)}")
                for k2, t in extra.items():
                    if k2 in v and not isinstance(v[k2], t):
                        errors.append(f"{path}.{key}.{k2}: {t.__name__} expected")
            elif not isinstance(v, extra):
                errors.append(f"{path}.{key}: {extra.__name__} expected")
            continue
        if key not in by_json:
            errors.append(f"{path}: {type_name} has no field {key!r}")
            continue
        check(v, by_json[key], f"{path}.{key}", errors)


def documents():
    files = sorted(glob.glob(os.path.join(REPO, "docker", "k8s", "*.yaml")))
    files.append(os.path.join(REPO, "docker", "k8s-pod.yaml"))
    for f in files:
        with open(f) as fh:
            for i, doc in enumerate(yaml.safe_load_all(fh)):
                if doc is not None:
                    yield os.path.relpath(f, REPO), i, doc


def validate(doc) -> list:
    errors: list = []
    kind = (doc.get("apiVersion"), doc.get("kind"))
    model = KINDS.get(kind)
    if model is None:
        return [f"{kind}: not a kind this check knows"]
    check(doc, model, doc["kind"], errors)
    if not errors:
        # The client's own deserializer: required fields, enum values.
        try:
            k8s.ApiClient()._ApiClient__deserialize(doc, model)
        except (ValueError, TypeError) as e:
            errors.append(f"{doc['kind']}: {e}")
    return errors


def test_the_checker_catches_what_it_must():
    good = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"},
            "spec": {"clusterIP": "None", "ports": [{"port": 7070, "targetPort": "decode"}]}}
    assert validate(good) == []
    typo = {**good, "spec": {"clusterIp": "None"}}
    assert any("no field 'clusterIp'" in e for e in validate(typo))
    wrong = {**good, "spec": {"ports": [{"port": "7070"}]}}
    assert any("int expected" in e for e in validate(wrong))
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
             "spec": {"containers": [{"name": "c", "readinessProbe": {"grpc": {"prot": 1}}}]}}
    assert any("unknown fields" in e for e in validate(probe))
    missing = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
               "spec": {"containers": [{"image": "x"}]}}
    assert validate(missing), "a container without its name"


@pytest.mark.parametrize("where,index,doc", list(documents()),
                         ids=lambda v: v if isinstance(v, str) else None)
def test_manifest_matches_the_kubernetes_schema(where, index, doc):
    assert validate(doc) == [], f"{where} document {index}"


def test_the_decode_manifests_fit_together(tmp_path):
    docs = {(d["kind"], d["metadata"]["name"]): d for _, _, d in documents()
            if d["metadata"]["name"].startswith("stoker-decode") or d["kind"] == "Pod"}
    dep = docs[("Deployment", "stoker-decode")]
    svc = docs[("Service", "stoker-decode")]
    assert svc["spec"]["clusterIP"] == "None"  # headless: every pod's address
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items())
    node = dep["spec"]["template"]["spec"]["containers"][0]
    assert "--decode-node" in node["args"]
    assert node["readinessProbe"]["grpc"]["port"] == 9090
    assert "--status-addr=0.0.0.0:9090" in node["args"]
    hpa = docs[("HorizontalPodAutoscaler", "stoker-decode")]
    assert hpa["spec"]["scaleTargetRef"]["name"] == "stoker-decode"
    # The trainer's sidecar dials the Service; make-certs.sh's Secrets are
    # the ones the pods mount, and the node certificate names the Service.
    pods = [d for _, _, d in documents() if d["kind"] == "Pod"]
    sidecar = [c for p in pods for c in p["spec"].get("initContainers", [])
               if any(a.startswith("--decode-nodes=") for a in c.get("args", []))]
    assert len(sidecar) == 1
    target = [a for a in sidecar[0]["args"] if a.startswith("--decode-nodes=")][0].split("=", 1)[1]
    assert target.startswith(svc["metadata"]["name"] + ".")
    out = subprocess.run([os.path.join(REPO, "docker", "k8s", "make-certs.sh"), "default"],
                         cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    secrets = {d["metadata"]["name"]: d for d in yaml.safe_load_all(out) if d}
    for s in secrets.values():
        assert validate(s) == []
    mounted = {v["secret"]["secretName"] for p in [dep["spec"]["template"], *pods]
               for v in p["spec"].get("volumes", []) if "secret" in v}
    assert mounted <= set(secrets), (mounted, set(secrets))
    san = subprocess.run(["openssl", "x509", "-in",
                          str(tmp_path / "stoker-decode-certs" / "node.crt"), "-noout", "-ext",
                          "subjectAltName"], capture_output=True, text=True, check=True).stdout
    assert target.rsplit(":", 1)[0] in san
