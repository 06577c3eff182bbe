#!/usr/bin/env python3
"""tests/deploy/check_manifests.py - every manifest under deploy/ is valid and consistent.

    python tests/deploy/check_manifests.py      (make test-deploy; needs kubernetes-validate)

1. Each kustomize overlay (deploy/k8s/overlays/*) is rendered (`kustomize build`, or `kubectl
   kustomize`), and every core object in it is validated with kubernetes-validate in strict mode
   (unknown fields are errors) against the oldest Kubernetes these manifests need (1.29: native
   sidecar containers) and the newest the package knows.
2. The custom resources (ServiceMonitor, ServingRuntime, InferenceService), for which there is no
   schema here, are checked for the fields their CRDs require; the ServingRuntime's containers and
   volumes are validated as a Pod's.
3. Consistency across objects: selectors find their targets, probes ask normd's v2 health routes,
   and terminationGracePeriodSeconds covers preStop plus normd's drain (--drain-seconds).
"""
import glob
import os
import re
import shutil
import subprocess
import sys

import kubernetes_validate
import yaml

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
VERSIONS = ["1.29.0", kubernetes_validate.latest_version()]
CUSTOM_KINDS = {"ServiceMonitor", "ServingRuntime", "InferenceService"}
DEFAULT_DRAIN_S = 30  # normd's --drain-seconds default
SPARE_S = 5           # at least this much of the grace period left after preStop and the drain

passed = failed = 0


def check(name, ok, why=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok   {name}")
    else:
        failed += 1
        print(f"FAIL {name}{': ' + why if why else ''}")
    return ok


def kustomize_cmd():
    if os.environ.get("KUSTOMIZE"):
        return os.environ["KUSTOMIZE"].split()
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    venv_kubectl = os.path.join(os.path.dirname(sys.executable), "kubectl")
    if os.access(venv_kubectl, os.X_OK):
        return [venv_kubectl, "kustomize"]
    sys.exit("check_manifests: needs kustomize or kubectl on PATH (or KUSTOMIZE='cmd build')")


def render(overlay):
    out = subprocess.run(kustomize_cmd() + [overlay], capture_output=True, text=True)
    if not check(f"{rel(overlay)}: renders", out.returncode == 0, out.stderr.strip()):
        return []
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def rel(path):
    return os.path.relpath(path, ROOT)


def get(obj, *path):
    """obj[path[0]][path[1]]..., or None where a step is missing."""
    for p in path:
        if isinstance(obj, dict):
            obj = obj.get(p)
        elif isinstance(obj, list) and isinstance(p, int) and p < len(obj):
            obj = obj[p]
        else:
            return None
    return obj


def name(doc):
    return f"{doc.get('kind')}/{get(doc, 'metadata', 'name')}"


def validate_core(where, doc):
    for v in VERSIONS:
        try:
            kubernetes_validate.validate(doc, v, strict=True)
            check(f"{where}: {name(doc)} valid (strict) for Kubernetes {v}", True)
        except kubernetes_validate.ValidationError as e:
            check(f"{where}: {name(doc)} valid (strict) for Kubernetes {v}", False,
                  f"{'.'.join(map(str, e.path))}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError:
            check(f"{where}: {name(doc)} has a schema", False, "not a core kind")


def require(where, doc, paths):
    """Each path (a tuple of keys) must lead to a value of the given type."""
    for path, typ in paths:
        v = get(doc, *path)
        ok = isinstance(v, typ) and (v != [] and v != {} and v != "")
        check(f"{where}: {name(doc)} has {'.'.join(map(str, path))}", ok,
              f"missing or not a non-empty {typ.__name__}")


def selects(selector, labels):
    match = (selector or {}).get("matchLabels", selector or {})
    return bool(match) and all((labels or {}).get(k) == v for k, v in match.items())


def env_of(container):
    return {e["name"]: e.get("value") for e in container.get("env", []) if "name" in e}


def normd_containers(pod):
    for key in ("containers", "initContainers"):
        for c in pod.get(key, []) or []:
            if c.get("name") in ("normd", "kserve-container") or "normd" in str(c.get("image")):
                yield c


def probe_path(probe):
    """The path an httpGet probe asks, or the URL's path in an exec probe's command."""
    if not probe:
        return None
    if "httpGet" in probe:
        return probe["httpGet"].get("path")
    cmd = " ".join(get(probe, "exec", "command") or [])
    m = re.search(r"https?://[^/\s]+(/\S*)", cmd)
    return m.group(1) if m else None


def check_normd_pod(where, owner, pod, grace_applies=True):
    for c in normd_containers(pod):
        what = f"{where}: {owner} container {c['name']}"
        check(f"{what}: readiness asks /v2/health/ready",
              probe_path(c.get("readinessProbe")) == "/v2/health/ready")
        check(f"{what}: liveness asks /v2/health/live",
              probe_path(c.get("livenessProbe")) == "/v2/health/live")
        env = env_of(c)
        drain = int(env.get("NORMD_DRAIN_SECONDS") or DEFAULT_DRAIN_S)
        sleep = get(c, "lifecycle", "preStop", "exec", "command") or []
        pre = int(sleep[1]) if len(sleep) == 2 and sleep[0] == "sleep" else 0
        grace = pod.get("terminationGracePeriodSeconds", 30)
        if grace_applies:
            check(f"{what}: grace period {grace} s covers preStop {pre} s + drain {drain} s",
                  grace >= pre + drain + SPARE_S)
        listen = env.get("NORMD_LISTEN", "")
        if listen and listen != "off" and not listen.startswith(("127.", "[::1]", "localhost")):
            check(f"{what}: listens beyond loopback with an admin token file",
                  bool(env.get("NORMD_ADMIN_TOKEN_FILE")))
            check(f"{what}: does not take the image's open admin routes",
                  env.get("NORMD_ALLOW_OPEN_ADMIN") == "0")


def check_overlay(overlay):
    where = rel(overlay)
    docs = render(overlay)
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d.get("kind"), []).append(d)
        if d.get("kind") not in CUSTOM_KINDS:
            validate_core(where, d)
    deployments = by_kind.get("Deployment", [])
    check(f"{where}: has a Deployment", bool(deployments))
    for dep in deployments:
        pod = get(dep, "spec", "template", "spec") or {}
        check(f"{where}: {name(dep)} selector matches its pods",
              selects(get(dep, "spec", "selector"), get(dep, "spec", "template", "metadata",
                                                        "labels")))
        check(f"{where}: {name(dep)} runs normd", any(True for _ in normd_containers(pod)))
        check_normd_pod(where, name(dep), pod)
        for c in pod.get("containers", []) + pod.get("initContainers", []):
            check(f"{where}: {name(dep)} container {c['name']} requests resources",
                  bool(get(c, "resources", "requests")))
    pod_labels = [get(d, "spec", "template", "metadata", "labels") for d in deployments]
    for svc in by_kind.get("Service", []):
        check(f"{where}: {name(svc)} selects the Deployment's pods",
              any(selects(get(svc, "spec", "selector"), l) for l in pod_labels))
    for pdb in by_kind.get("PodDisruptionBudget", []):
        check(f"{where}: {name(pdb)} selects the Deployment's pods",
              any(selects(get(pdb, "spec", "selector"), l) for l in pod_labels))
    for hpa in by_kind.get("HorizontalPodAutoscaler", []):
        ref = get(hpa, "spec", "scaleTargetRef") or {}
        check(f"{where}: {name(hpa)} scales a Deployment here",
              any(ref.get("kind") == "Deployment" and ref.get("name") == get(d, "metadata", "name")
                  for d in deployments))
        metrics = [get(m, "pods", "metric", "name") for m in get(hpa, "spec", "metrics") or []]
        check(f"{where}: {name(hpa)} scales on normd_queue_depth", "normd_queue_depth" in metrics)
    for sm in by_kind.get("ServiceMonitor", []):
        require(where, sm, [(("apiVersion",), str), (("metadata", "name"), str),
                            (("spec", "selector"), dict), (("spec", "endpoints"), list)])
        svcs = [s for s in by_kind.get("Service", [])
                if selects(get(sm, "spec", "selector"), get(s, "metadata", "labels"))]
        check(f"{where}: {name(sm)} selects a Service here", bool(svcs))
        ports = {p.get("name") for s in svcs for p in get(s, "spec", "ports") or []}
        for ep in get(sm, "spec", "endpoints") or []:
            check(f"{where}: {name(sm)} endpoint port {ep.get('port')} is a Service port",
                  ep.get("port") in ports)
            check(f"{where}: {name(sm)} endpoint scrapes /metrics", ep.get("path") == "/metrics")
    return by_kind


def check_kserve(paths):
    docs = [(rel(p), d) for p in paths for d in load(p)]
    runtimes = [(w, d) for w, d in docs if d.get("kind") == "ServingRuntime"]
    services = [(w, d) for w, d in docs if d.get("kind") == "InferenceService"]
    check("deploy/kserve: has a ServingRuntime and an InferenceService",
          bool(runtimes) and bool(services))
    for where, rt in runtimes:
        check(f"{where}: {name(rt)} apiVersion", rt.get("apiVersion") == "serving.kserve.io/v1alpha1")
        require(where, rt, [(("metadata", "name"), str), (("spec", "containers"), list),
                            (("spec", "supportedModelFormats"), list),
                            (("spec", "protocolVersions"), list)])
        for f in get(rt, "spec", "supportedModelFormats") or []:
            check(f"{where}: {name(rt)} model format has a name", bool(f.get("name")))
        check(f"{where}: {name(rt)} speaks v2", "v2" in (get(rt, "spec", "protocolVersions") or []))
        # The pod parts are core types: validate them as a Pod's.
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": get(rt, "metadata", "name")},
               "spec": {"containers": get(rt, "spec", "containers") or []}}
        if get(rt, "spec", "volumes"):
            pod["spec"]["volumes"] = get(rt, "spec", "volumes")
        validate_core(f"{where}: {name(rt)} containers", pod)
        check_normd_pod(where, name(rt), pod["spec"], grace_applies=False)
        ports = [p.get("containerPort") for c in pod["spec"]["containers"]
                 for p in c.get("ports", [])]
        check(f"{where}: {name(rt)} serves on 8080 (KServe's port)", 8080 in ports)
    for where, isvc in services:
        check(f"{where}: {name(isvc)} apiVersion",
              isvc.get("apiVersion") == "serving.kserve.io/v1beta1")
        require(where, isvc, [(("metadata", "name"), str), (("spec", "predictor"), dict),
                              (("spec", "predictor", "model", "modelFormat", "name"), str)])
        model = get(isvc, "spec", "predictor", "model") or {}
        check(f"{where}: {name(isvc)} uses protocol v2", model.get("protocolVersion") == "v2")
        fmt = get(model, "modelFormat", "name")
        match = [rt for _, rt in runtimes
                 if (not model.get("runtime") or model["runtime"] == get(rt, "metadata", "name"))
                 and any(f.get("name") == fmt for f in get(rt, "spec", "supportedModelFormats")
                         or [])]
        check(f"{where}: {name(isvc)} finds a runtime for format {fmt}", bool(match))
        check(f"{where}: {name(isvc)} is named after an operator (the v2 model name)",
              get(isvc, "metadata", "name") in
              ("layernorm", "rmsnorm", "softmax", "log_softmax", "prelu"))


def main():
    overlays = sorted(os.path.dirname(p) for p in
                      glob.glob(os.path.join(ROOT, "deploy/k8s/overlays/*/kustomization.yaml")))
    check("deploy/k8s: overlays sidecar and standalone exist",
          {os.path.basename(o) for o in overlays} >= {"sidecar", "standalone"})
    kinds = {}
    for o in overlays:
        kinds[os.path.basename(o)] = check_overlay(o)
    sa = kinds.get("standalone", {})
    for k in ("Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler",
              "ServiceMonitor"):
        check(f"standalone overlay has a {k}", k in sa)
    gpu = [get(c, "resources", "limits", "nvidia.com/gpu") for d in sa.get("Deployment", [])
           for c in normd_containers(get(d, "spec", "template", "spec") or {})]
    check("standalone overlay: normd requests nvidia.com/gpu", any(gpu))
    side = [get(d, "spec", "template", "spec") or {} for d in kinds.get("sidecar", {}).get(
        "Deployment", [])]
    shares = False
    for pod in side:
        mounts = [{m["name"] for m in c.get("volumeMounts", [])}
                  for c in pod.get("containers", []) + pod.get("initContainers", [])]
        empty = {v["name"] for v in pod.get("volumes", []) if "emptyDir" in v}
        shares = len(mounts) >= 2 and bool(set.intersection(*mounts) & empty)
        unix = [env_of(c).get("NORMD_UNIX") for c in normd_containers(pod)]
        check("sidecar overlay: normd listens on a UNIX socket", any(unix))
        # shared memory: normd allows it, and every container sees the same memory-backed
        # emptyDir at /dev/shm (a container without it would have a /dev/shm of its own)
        shm_allowed = [env_of(c).get("NORMD_ALLOW_CLIENT_SHM") == "1"
                       for c in normd_containers(pod)]
        memory = {v["name"] for v in pod.get("volumes", [])
                  if (v.get("emptyDir") or {}).get("medium") == "Memory"}
        at_shm = [{m["name"] for m in c.get("volumeMounts", []) if m.get("mountPath") == "/dev/shm"}
                  for c in pod.get("containers", []) + pod.get("initContainers", [])]
        check("sidecar overlay: normd allows client shared memory", any(shm_allowed))
        check("sidecar overlay: every container mounts one memory-backed emptyDir at /dev/shm",
              len(at_shm) >= 2 and bool(set.intersection(*at_shm) & memory))
    check("sidecar overlay: the containers share an emptyDir", shares)
    check_kserve(sorted(glob.glob(os.path.join(ROOT, "deploy/kserve/*.yaml"))))
    print(f"manifests: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
