#!/usr/bin/env python3
"""Check deploy/kubernetes/ offline (no cluster here):
- every manifest against the Kubernetes schemas (`kubernetes-validate --strict`, which bundles
  them), for the newest version it knows and for 1.29; the ServiceMonitor is a Prometheus
  Operator resource with no schema there, so its fields are checked below;
- what the schemas cannot see: selectors that match the pods, ports named as the containers
  name them, probes that ask /healthz and /readyz with the mounted config, the Secret's keys
  where the config reads them, config and Secret mounted as folders (a subPath mount is never
  updated, so a hot reload would never come), kustomization listing every manifest;
- the ConfigMap's vestibule.toml passes `vestibule --check` (its secrets and origin replaced by
  local ones), with the binary given as the first argument.
Under CI=true a missing tool is a failure."""

import os
import shutil
import subprocess
import sys
import tempfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
CI = os.environ.get("CI") == "true"
VERSIONS = ["1.37.0", "1.29.0"]


def fail(message):
    sys.exit(f"check-kubernetes: {message}")


def missing(tool, why):
    if CI:
        fail(f"{tool} is missing ({why}); under CI=true that is a failure")
    print(f"!! SKIPPED: {tool} is missing ({why})", file=sys.stderr, flush=True)


def main():
    with open(os.path.join(HERE, "kustomization.yaml")) as f:
        listed = yaml.safe_load(f)["resources"]
    files = sorted(n for n in os.listdir(HERE) if n.endswith(".yaml") and n != "kustomization.yaml")
    if sorted(listed) != files:
        fail(f"kustomization.yaml lists {sorted(listed)}, the folder holds {files}")
    docs = {}
    for name in files:
        with open(os.path.join(HERE, name)) as f:
            for doc in yaml.safe_load_all(f):
                docs[(doc["kind"], doc["metadata"]["name"])] = doc

    core = [os.path.join(HERE, n) for n in files if n != "servicemonitor.yaml"]
    if shutil.which("kubernetes-validate") is None:
        missing("kubernetes-validate", "pip install kubernetes-validate")
    else:
        for version in VERSIONS:
            run = subprocess.run(
                ["kubernetes-validate", "--strict", "--quiet", "-k", version, *core],
                capture_output=True,
                text=True,
            )
            if run.returncode != 0 or "ERROR" in run.stdout + run.stderr:
                fail(f"kubernetes-validate ({version}):\n{run.stdout}{run.stderr}")

    deployment = docs[("Deployment", "vestibule")]
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]

    def selects(selector):
        return all(labels.get(k) == v for k, v in selector.items())

    if not selects(deployment["spec"]["selector"]["matchLabels"]):
        fail("the Deployment's selector misses its pods")
    if deployment["spec"]["replicas"] < 2:
        fail("fewer than 2 replicas")
    pdb = docs[("PodDisruptionBudget", "vestibule")]
    if not selects(pdb["spec"]["selector"]["matchLabels"]):
        fail("the PodDisruptionBudget selects no vestibule pod")
    service = docs[("Service", "vestibule")]
    if not selects(service["spec"]["selector"]):
        fail("the Service selects no vestibule pod")
    container = pod["spec"]["containers"][0]
    port_names = {p["name"] for p in container["ports"]}
    for port in service["spec"]["ports"]:
        if port["targetPort"] not in port_names:
            fail(f"the Service's {port['name']} port targets {port['targetPort']}, not a container port")

    config_arg = container["args"][container["args"].index("--config") + 1]
    probes = {}
    for kind in ["startupProbe", "livenessProbe", "readinessProbe"]:
        command = container[kind]["exec"]["command"]
        if command[:2] != ["vestibule", "probe"] or config_arg not in command:
            fail(f"{kind} does not run `vestibule probe` on {config_arg}: {command}")
        probes[kind] = command[command.index("--path") + 1]
    if probes["livenessProbe"] != "/healthz" or probes["readinessProbe"] != "/readyz":
        fail(f"probes ask {probes}")

    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    for name in ["config", "secrets"]:
        if "subPath" in mounts[name]:
            fail(f"the {name} volume is mounted with subPath: kubelet never updates it")
    if os.path.dirname(config_arg) != mounts["config"]["mountPath"]:
        fail(f"{config_arg} is not in the ConfigMap's mount {mounts['config']['mountPath']}")
    configmap = docs[("ConfigMap", volumes["config"]["configMap"]["name"])]
    config_text = configmap["data"][os.path.basename(config_arg)]
    secret_dir = mounts["secrets"]["mountPath"]
    secret_name = volumes["secrets"]["secret"]["secretName"]
    secret_keys = {i["path"]: i["key"] for i in volumes["secrets"]["secret"]["items"]}
    for needed in ["keys.toml", "admin-token"]:
        if f'"{secret_dir}/{needed}"' not in config_text:
            fail(f"the config does not read {secret_dir}/{needed}")
        if needed not in secret_keys:
            fail(f"the Secret volume does not project {needed}")
    if 'store = "redis"' not in config_text:
        fail("the replicas share no Redis")
    redis_service = docs[("Service", "vestibule-redis")]
    if f"redis://{redis_service['metadata']['name']}:{redis_service['spec']['ports'][0]['port']}/" not in config_text:
        fail("the config's redis URL is not the Redis Service")

    monitor = docs[("ServiceMonitor", "vestibule")]
    if not all(service["metadata"]["labels"].get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items()):
        fail("the ServiceMonitor selects no Service")
    endpoint = monitor["spec"]["endpoints"][0]
    if endpoint["port"] not in {p["name"] for p in service["spec"]["ports"]} or endpoint["path"] != "/metrics":
        fail(f"the ServiceMonitor scrapes {endpoint['port']}{endpoint['path']}")
    credentials = endpoint["authorization"]["credentials"]
    if credentials["name"] != secret_name or credentials["key"] not in secret_keys.values():
        fail("the ServiceMonitor's token is not the Secret's admin-token")

    binary = sys.argv[1] if len(sys.argv) > 1 else None
    if not binary:
        missing("the vestibule binary (first argument)", "to check the ConfigMap's config")
    else:
        check_config(binary, config_text, secret_dir)
    print("check-kubernetes: ok", flush=True)


def check_config(binary, text, secret_dir):
    with tempfile.TemporaryDirectory() as tmp:
        secrets = os.path.join(tmp, "secrets")
        os.makedirs(secrets)
        key = subprocess.run([binary, "keygen"], capture_output=True, text=True, check=True).stdout.strip()
        with open(os.path.join(secrets, "keys.toml"), "w") as f:
            f.write(f'active = "k1"\n[ring]\nk1 = "{key}"\n')
        with open(os.path.join(secrets, "admin-token"), "w") as f:
            f.write("a-token-for-the-check\n")
        conf = os.path.join(tmp, "conf")
        os.makedirs(conf)
        shutil.copytree(os.path.join(HERE, "..", "..", "pages"), os.path.join(tmp, "pages"))
        local = text.replace(secret_dir, secrets).replace(
            '"shop.default.svc.cluster.local:80"', '"127.0.0.1:8000"'
        )
        path = os.path.join(conf, "vestibule.toml")
        with open(path, "w") as f:
            f.write(local)
        run = subprocess.run([binary, "--check", "--config", path], capture_output=True, text=True)
        if run.returncode != 0 or run.stdout.strip() != "ok":
            fail(f"the ConfigMap's config does not validate:\n{run.stdout}{run.stderr}")


main()
