#!/usr/bin/env python3
"""Check deploy/compose/ without pulling an image or starting a container (neither works on
these machines): the compose file parses and names what it needs; every file it mounts exists;
Prometheus's config, laid out as the prometheus container sees it, passes `promtool check
config` (which also checks the alert rules it loads); Grafana's provisioning parses and points
at the mounted dashboard and at the Prometheus service. `docker compose config` runs as well
where the compose plugin is installed. Under CI=true a missing tool is a failure."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
CI = os.environ.get("CI") == "true"


def fail(message):
    sys.exit(f"check-compose: {message}")


def missing(tool, why):
    if CI:
        fail(f"{tool} is missing ({why}); under CI=true that is a failure")
    print(f"!! SKIPPED: {tool} is missing ({why})", file=sys.stderr)


def mounts(service):
    """(source, target, is_path) of each volume of a service, short syntax."""
    out = []
    for volume in service.get("volumes", []):
        parts = volume.split(":")
        source, target = parts[0], parts[1]
        out.append((source, target, source.startswith((".", "/"))))
    return out


def main():
    with open(os.path.join(HERE, "compose.yaml")) as f:
        compose = yaml.safe_load(f)
    services = compose["services"]
    for name in ["vestibule", "origin", "prometheus", "grafana"]:
        if name not in services:
            fail(f"no {name} service")
    if services["origin"]["command"][0] != "origin":
        fail("the demo origin is not `vestibule origin`")
    context = os.path.join(HERE, services["secrets"]["build"]["context"])
    if not os.path.isfile(os.path.join(context, "Dockerfile")):
        fail(f"the build context {context} has no Dockerfile")
    named = set(compose.get("volumes", {}))
    for name, service in services.items():
        for source, target, is_path in mounts(service):
            if is_path:
                if not os.path.exists(os.path.join(HERE, source)):
                    fail(f"{name} mounts {source}, which does not exist")
            elif source not in named:
                fail(f"{name} mounts the volume {source}, which is not declared")

    # Prometheus, as its container sees its files.
    prometheus = services["prometheus"]
    config_flag = next(a for a in prometheus["command"] if a.startswith("--config.file="))
    config_path = config_flag.split("=", 1)[1]
    with tempfile.TemporaryDirectory() as root:
        for source, target, is_path in mounts(prometheus):
            dest = root + target
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if is_path:
                shutil.copy(os.path.join(HERE, source), dest)
            else:
                # The secrets volume: the file the scrape reads its token from.
                os.makedirs(dest, exist_ok=True)
                with open(os.path.join(dest, "admin-token"), "w") as f:
                    f.write("a-token-for-the-check\n")
        if shutil.which("promtool") is None:
            missing("promtool", "Debian: prometheus")
        else:
            run = subprocess.run(
                ["promtool", "check", "config", root + config_path],
                capture_output=True,
                text=True,
            )
            if run.returncode != 0:
                fail(f"promtool check config:\n{run.stdout}{run.stderr}")
            rules = re.search(r"SUCCESS: (\d+) rules found", run.stdout)
            if not rules or int(rules.group(1)) == 0:
                fail(f"promtool found no alert rules:\n{run.stdout}")
        with open(root + config_path) as f:
            prom = yaml.safe_load(f)
    targets = [t for job in prom["scrape_configs"] for s in job["static_configs"] for t in s["targets"]]
    if "vestibule:9901" not in targets:
        fail(f"Prometheus does not scrape vestibule's admin listener: {targets}")

    # Grafana's provisioning, and the dashboard it points at.
    grafana = services["grafana"]
    provisioning = next(s for s, t, p in mounts(grafana) if t == "/etc/grafana/provisioning")
    base = os.path.join(HERE, provisioning)
    with open(os.path.join(base, "datasources", "prometheus.yaml")) as f:
        sources = yaml.safe_load(f)["datasources"]
    if not any(s["type"] == "prometheus" and s["url"] == "http://prometheus:9090" and s.get("isDefault") for s in sources):
        fail("no default Prometheus data source at http://prometheus:9090")
    with open(os.path.join(base, "dashboards", "vestibule.yaml")) as f:
        providers = yaml.safe_load(f)["providers"]
    folder = providers[0]["options"]["path"]
    dashboards = [(s, t) for s, t, p in mounts(grafana) if p and os.path.dirname(t) == folder]
    if not dashboards:
        fail(f"nothing is mounted into the dashboards folder {folder}")
    for source, _ in dashboards:
        with open(os.path.join(HERE, source)) as f:
            dashboard = json.load(f)
        if not dashboard.get("uid") or not dashboard.get("panels"):
            fail(f"{source} is not a dashboard")

    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        run = subprocess.run(["docker", "compose", "-f", os.path.join(HERE, "compose.yaml"), "config", "-q"], capture_output=True, text=True)
        if run.returncode != 0:
            fail(f"docker compose config: {run.stderr}")
    else:
        # Not installable from Debian's archive (the compose plugin ships from Docker's own).
        print("!! not run: docker compose config (no compose plugin here)", file=sys.stderr)
    print("check-compose: ok", flush=True)


main()
