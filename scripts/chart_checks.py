#!/usr/bin/env python3
"""Checks on the ax chart's rendered manifests that schemas cannot express.

Used by scripts/check-chart.sh, once per rendered values case:

    chart_checks.py CASE RENDERED.yaml RULES.yaml OUT_DIR
    chart_checks.py values-doc VALUES.yaml README.md

It writes the built-in Kubernetes kinds to OUT_DIR/builtin.yaml (for kubernetes-validate, which
has no schema for CustomResourceDefinitions) and checks the rest itself:

- the Prometheus Operator kinds (ServiceMonitor, PrometheusRule) have the structure their CRDs
  require, and the PrometheusRule holds exactly the groups of alert-rules/ax-rules.yaml;
- the ConfigMap's ax.toml parses and uses only the keys of the configuration contract, the
  commands ([worker.commands.<name>]) included;
- every pod runs non-root with a read-only root file system, no capabilities, RuntimeDefault
  seccomp, probes on /healthz and /readyz, the pod name as AX_INSTANCE_ID, ax's secrets only
  as mounted files (no secret variable, no secretKeyRef or secretRef into AX_ variables), and a
  termination grace period longer than the shutdown grace (plus
  the longest command kill grace);
- the chart renders no Secret (secrets are referenced by name only);
- the Grafana dashboards ConfigMap, where a case switches it on, holds every file of
  charts/ax/dashboards/ as the same, valid JSON, with the label and namespace the Grafana
  sidecar looks for;
- the kinds each case switches on are there.

The values-doc form checks that every value is documented, in values.yaml and in the chart
README. Exits 1 with one line per problem.
"""

import ipaddress
import json
import os
import re
import sys
import tomllib

import yaml

CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}

# The configuration contract's TOML keys (engine-bin implements them).
CONTRACT = {
    "etcd": {"endpoints", "prefix", "username", "password", "ca_file", "cert_file", "key_file", "timeout",
             "quota_backend_bytes"},
    "redis": {"url", "password", "ca_file", "cert_file", "key_file", "key_prefix", "queue_partitions"},
    "instance": {"id", "roles"},
    "election": {"lease_ttl"},
    "scheduler": {"tick", "catch_up_window", "max_clock_skew", "enqueue_rate_limit", "backlog_alert_threshold",
                  "shards", "placement"},
    "worker": {"concurrency", "prefetch", "queues", "shutdown_grace", "visibility_timeout",
               "http_allow_cidrs", "http_allow_hosts", "commands_allow_root", "commands", "queue_limits",
               "secrets_dir", "secret_destinations"},
    "http": {"listen", "api_token", "tokens", "public_url"},
    "limits": {
        "max_request_bytes",
        "max_tasks_per_namespace",
        "triggers_per_task_per_minute",
        "operate_actions_per_minute",
        "reads_per_minute",
        "scheduled_per_minute",
        "max_backfill_fires",
        "max_list_scan",
    },
    "alerts": {"feishu_webhook", "feishu_secret", "webhook_url", "min_level"},
}
# The keys of one [worker.commands.<name>] table.
COMMAND_KEYS = {"path", "args", "task_args", "arg_patterns", "env", "allow_env", "working_dir", "max_output_bytes", "kill_grace"}
# ax's variables that carry a secret: never set in a pod (their *_FILE twins are).
SECRET_ENV = ("AX_ETCD_PASSWORD", "AX_REDIS_PASSWORD", "AX_REDIS_URL", "AX_FEISHU_WEBHOOK",
              "AX_FEISHU_SECRET", "AX_ALERT_WEBHOOK_URL", "AX_API_TOKEN")
# Secrets never belong in the ConfigMap.
SECRET_KEYS = {("etcd", "password"), ("redis", "password"), ("http", "api_token"),
               ("alerts", "feishu_webhook"), ("alerts", "feishu_secret")}

# Kinds each case must render (and, for the default case, must not).
EXPECTED = {
    "default": {"StatefulSet": 1, "Service": 2, "ConfigMap": 1, "PodDisruptionBudget": 1,
                "ServiceAccount": 1, "NetworkPolicy": 1},
    "all-features": {"StatefulSet": 1, "Service": 2, "Ingress": 1, "ServiceMonitor": 1,
                     "PrometheusRule": 1, "NetworkPolicy": 1, "ConfigMap": 2},
    "dashboards-custom": {"ConfigMap": 2},
    "packaged": {"ConfigMap": 2},
    "split": {"StatefulSet": 1, "Deployment": 1, "HorizontalPodAutoscaler": 1,
              "PodDisruptionBudget": 2, "ServiceMonitor": 1, "PrometheusRule": 1},
    "alternatives": {"Deployment": 2, "Service": 1, "PodDisruptionBudget": 2,
                     "ServiceMonitor": 1, "PrometheusRule": 1},
    "deployment": {"Deployment": 1, "Service": 1, "ConfigMap": 1},
}
ABSENT = {
    "default": {"Deployment", "HorizontalPodAutoscaler", "Ingress", "ServiceMonitor", "PrometheusRule"},
    "deployment": {"StatefulSet", "PodDisruptionBudget", "ServiceAccount", "HorizontalPodAutoscaler"},
    "alternatives": {"StatefulSet", "HorizontalPodAutoscaler"},
}


# The dashboards ConfigMap each case renders: its labels, annotations and namespace (None:
# the release's, left to Helm). Cases not listed render none.
DASHBOARDS = {
    "all-features": {"labels": {"grafana_dashboard": "1", "team": "platform"},
                     "annotations": {"grafana_folder": "ax"}, "namespace": None},
    "dashboards-custom": {"labels": {"grafana_dashboard": "ax"}, "annotations": {},
                          "namespace": "monitoring"},
    "packaged": {"labels": {"grafana_dashboard": "1"}, "annotations": {}, "namespace": None},
}
DASHBOARD_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "charts", "ax",
                             "dashboards")


def check_dashboards(case, docs, err):
    """The dashboards ConfigMap: the chart's dashboard files, intact, labelled for the sidecar."""
    cms = [d for d in docs if d["kind"] == "ConfigMap"
           and d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "dashboards"]
    want = DASHBOARDS.get(case)
    if want is None:
        if cms:
            err("dashboards ConfigMap rendered but not switched on")
        return
    if len(cms) != 1:
        err(f"expected 1 dashboards ConfigMap, rendered {len(cms)}")
        return
    (cm,) = cms
    meta = cm["metadata"]
    for key, value in want["labels"].items():
        if meta.get("labels", {}).get(key) != value:
            err(f"dashboards ConfigMap: label {key} must be {value!r}, is {meta.get('labels', {}).get(key)!r}")
    for key, value in want["annotations"].items():
        if (meta.get("annotations") or {}).get(key) != value:
            err(f"dashboards ConfigMap: annotation {key} must be {value!r}")
    if meta.get("namespace") != want["namespace"]:
        err(f"dashboards ConfigMap: namespace {meta.get('namespace')!r}, want {want['namespace']!r}")
    files = sorted(f for f in os.listdir(DASHBOARD_DIR) if f.endswith(".json"))
    data = cm.get("data") or {}
    if sorted(data) != files:
        err(f"dashboards ConfigMap holds {sorted(data)}, the chart has {files}")
    for name in files:
        if name not in data:
            continue
        try:
            rendered = json.loads(data[name])
        except json.JSONDecodeError as e:
            err(f"dashboards ConfigMap: {name} is not valid JSON: {e}")
            continue
        with open(os.path.join(DASHBOARD_DIR, name), encoding="utf-8") as f:
            if rendered != json.load(f):
                err(f"dashboards ConfigMap: {name} differs from charts/ax/dashboards/{name}")
        if not (rendered.get("uid") and rendered.get("title") and rendered.get("panels")):
            err(f"dashboards ConfigMap: {name} lacks a uid, title or panels")
    # A ConfigMap holds at most 1 MiB.
    size = sum(len(v.encode()) for v in data.values())
    if size > 1024 * 1024:
        err(f"dashboards ConfigMap is {size} bytes, over the 1 MiB a ConfigMap holds")


# Addresses the default policy must never let a replica reach as "public": the cloud
# metadata services, loopback, private ranges, and IPv4 hidden in IPv6.
MUST_BE_EXCEPTED = {"4": ["169.254.169.254/32", "100.100.100.200/32", "10.0.0.0/8", "127.0.0.1/32",
                          "172.16.0.0/12", "192.168.0.0/16"],
                    "6": ["::1/128", "::ffff:a9fe:a9fe/128", "::ffff:0:a9fe:a9fe/128", "fd00:ec2::254/128",
                          "fe80::1/128", "64:ff9b::a9fe:a9fe/128", "2002:a9fe:a9fe::/48", "2001::1/128"]}


def check_network_policy(docs, err):
    """Every NetworkPolicy restricts egress where it says so: DNS, the backends' ports, and
    public addresses only (each non-public block in MUST_BE_EXCEPTED left out)."""
    for d in docs:
        if d["kind"] != "NetworkPolicy":
            continue
        spec = d["spec"]
        if "Ingress" not in spec.get("policyTypes", []):
            err("NetworkPolicy: must restrict ingress")
        if "Egress" not in spec.get("policyTypes", []):
            continue
        rules = spec.get("egress") or []
        ports = {(p.get("port"), p.get("protocol", "TCP")) for r in rules for p in r.get("ports") or []}
        for want in ((53, "UDP"), (53, "TCP")):
            if want not in ports:
                err(f"NetworkPolicy: egress misses DNS {want}")
        for r in rules:
            if not r.get("ports") and not r.get("to"):
                err("NetworkPolicy: an egress rule without ports or peers opens everything")
            for peer in r.get("to") or []:
                block = peer.get("ipBlock")
                if not block:
                    continue
                net = ipaddress.ip_network(block["cidr"])
                excepted = [ipaddress.ip_network(e) for e in block.get("except") or []]
                for e in excepted:
                    if not e.subnet_of(net):
                        err(f"NetworkPolicy: except {e} is not inside {net}")
                if net.prefixlen == 0:
                    for inner in MUST_BE_EXCEPTED[str(net.version)]:
                        inner = ipaddress.ip_network(inner)
                        if not any(inner.subnet_of(e) for e in excepted):
                            err(f"NetworkPolicy: {net} lets replicas reach {inner}")


def seconds(duration):
    """Seconds of a humantime duration made of s/m/h parts ("90s", "1m30s")."""
    parts = re.findall(r"(\d+)(h|m|s)", duration)
    if not parts or "".join(n + u for n, u in parts) != duration:
        return None
    return sum(int(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)


def main():
    case, rendered, rules_path, out_dir = sys.argv[1:5]
    errors = []

    def err(msg):
        errors.append(f"{case}: {msg}")

    with open(rendered, encoding="utf-8") as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    kinds = {}
    for d in docs:
        kinds[d["kind"]] = kinds.get(d["kind"], 0) + 1

    builtin = [d for d in docs if d["kind"] not in CRD_KINDS]
    with open(os.path.join(out_dir, "builtin.yaml"), "w", encoding="utf-8") as f:
        yaml.safe_dump_all(builtin, f, sort_keys=False)

    for kind, n in EXPECTED.get(case, {}).items():
        if kinds.get(kind, 0) != n:
            err(f"expected {n} {kind}, rendered {kinds.get(kind, 0)}")
    for kind in ABSENT.get(case, set()):
        if kind in kinds:
            err(f"{kind} rendered but not switched on")
    if "Secret" in kinds:
        err("the chart must not render Secrets; it references existing ones by name")

    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    if len(names) != len(docs):
        err("two resources of one kind share a name")

    # ConfigMap: the ax.toml of the contract.
    toml_cfg = None
    check_dashboards(case, docs, err)
    check_network_policy(docs, err)
    for d in docs:
        if d["kind"] == "ConfigMap" and "ax.toml" in (d.get("data") or {}):
            try:
                toml_cfg = tomllib.loads(d["data"]["ax.toml"])
            except (KeyError, tomllib.TOMLDecodeError) as e:
                err(f"ConfigMap ax.toml does not parse: {e}")
                continue
            for section, table in toml_cfg.items():
                if section not in CONTRACT or not isinstance(table, dict):
                    err(f"ax.toml: unknown section [{section}]")
                    continue
                for key in table:
                    if key not in CONTRACT[section]:
                        err(f"ax.toml: unknown key {section}.{key}")
                    if (section, key) in SECRET_KEYS:
                        err(f"ax.toml: secret {section}.{key} must come from a Secret, not the ConfigMap")
    if toml_cfg is None:
        err("no ConfigMap with ax.toml")
        toml_cfg = {}
    commands = toml_cfg.get("worker", {}).get("commands", {})
    for name, cmd in commands.items():
        if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
            err(f"ax.toml: worker.commands.{name}: not a command name")
        if not isinstance(cmd, dict) or not isinstance(cmd.get("path"), str) or not cmd["path"].startswith("/"):
            err(f"ax.toml: worker.commands.{name} needs an absolute path")
            continue
        for key in cmd:
            if key not in COMMAND_KEYS:
                err(f"ax.toml: unknown key worker.commands.{name}.{key}")
    if case == "all-features" and not commands:
        err("ax.toml: the all-features case renders no [worker.commands.<name>]")
    grace = seconds(toml_cfg.get("worker", {}).get("shutdown_grace", "30s"))
    # A command stopped at the end of the shutdown grace gets its own kill grace.
    kill_graces = [seconds(c.get("kill_grace", "5s")) or 0 for c in commands.values() if isinstance(c, dict)]
    if grace is not None and kill_graces:
        grace += max(kill_graces)

    # Pods.
    for d in docs:
        if d["kind"] not in ("Deployment", "StatefulSet"):
            continue
        where = f'{d["kind"]} {d["metadata"]["name"]}'
        spec = d["spec"]["template"]["spec"]
        psc = spec.get("securityContext", {})
        if psc.get("runAsNonRoot") is not True:
            err(f"{where}: pod securityContext.runAsNonRoot must be true")
        if psc.get("seccompProfile", {}).get("type") != "RuntimeDefault":
            err(f"{where}: pod seccompProfile must be RuntimeDefault")
        if spec.get("automountServiceAccountToken") is not False:
            err(f"{where}: the service account token must not be mounted")
        tgps = spec.get("terminationGracePeriodSeconds")
        if grace is not None and (tgps is None or tgps <= grace):
            err(f"{where}: terminationGracePeriodSeconds {tgps} must exceed shutdown_grace plus the longest "
                f"command kill_grace, {grace}s")
        for c in spec["containers"]:
            sc = c.get("securityContext", {})
            if sc.get("readOnlyRootFilesystem") is not True:
                err(f"{where}: container {c['name']} needs readOnlyRootFilesystem")
            if sc.get("allowPrivilegeEscalation") is not False:
                err(f"{where}: container {c['name']} must not allow privilege escalation")
            if sc.get("capabilities", {}).get("drop") != ["ALL"]:
                err(f"{where}: container {c['name']} must drop ALL capabilities")
            if c.get("livenessProbe", {}).get("httpGet", {}).get("path") != "/healthz":
                err(f"{where}: liveness probe must be GET /healthz")
            if c.get("readinessProbe", {}).get("httpGet", {}).get("path") != "/readyz":
                err(f"{where}: readiness probe must be GET /readyz")
            if not c.get("resources"):
                err(f"{where}: container {c['name']} has no resources")
            env = {e["name"]: e for e in c.get("env", [])}
            iid = env.get("AX_INSTANCE_ID", {}).get("valueFrom", {}).get("fieldRef", {})
            if iid.get("fieldPath") != "metadata.name":
                err(f"{where}: AX_INSTANCE_ID must come from the pod name")
            mounts = {m["mountPath"] for m in c.get("volumeMounts", [])}
            # ax's secrets are files: a variable would be inherited by children and readable
            # in /proc/<pid>/environ.
            for name in SECRET_ENV:
                if name in env:
                    err(f"{where}: {name} puts a secret in the environment; mount the Secret and "
                        f"set {name}_FILE")
                path = env.get(f"{name}_FILE", {}).get("value")
                if path and os.path.dirname(path) not in mounts:
                    err(f"{where}: {name}_FILE {path} is not in a mounted volume")
            for e in c.get("env", []):
                if e["name"].startswith("AX_") and "secretKeyRef" in e.get("valueFrom", {}):
                    err(f"{where}: {e['name']} takes a Secret into the environment; mount it as a file")
            for e in c.get("envFrom", []):
                if "secretRef" in e:
                    err(f"{where}: envFrom secretRef puts a Secret in the environment; mount it as files")
            if "/etc/ax" not in mounts:
                err(f"{where}: the config file must be mounted at /etc/ax/ax.toml")
            for section in ("etcd", "redis"):
                for key in ("ca_file", "cert_file", "key_file"):
                    path = toml_cfg.get(section, {}).get(key)
                    if path and os.path.dirname(path) not in mounts:
                        err(f"{where}: {section}.{key} {path} is not in a mounted volume")
            # The secrets tasks name: a read-only Secret at worker.secrets_dir on every pod
            # that runs the worker role.
            secrets_dir = toml_cfg.get("worker", {}).get("secrets_dir")
            roles = env.get("AX_ROLES", {}).get("value", "")
            if secrets_dir and "worker" in roles.split(","):
                mount = [m for m in c.get("volumeMounts", []) if m["mountPath"] == secrets_dir]
                volumes = {v["name"]: v for v in spec.get("volumes", [])}
                if len(mount) != 1 or mount[0].get("readOnly") is not True:
                    err(f"{where}: worker.secrets_dir {secrets_dir} must be mounted read-only")
                elif "secret" not in volumes.get(mount[0]["name"], {}):
                    err(f"{where}: worker.secrets_dir {secrets_dir} must be a Secret volume")
            if case in ("all-features", "split") and "worker" in roles.split(",") and not secrets_dir:
                err(f"{where}: the {case} case mounts no task secrets")

    # An HPA scales a rendered workload, which leaves its replica count to the HPA (a fixed
    # spec.replicas would be reset on every upgrade).
    for d in docs:
        if d["kind"] != "HorizontalPodAutoscaler":
            continue
        ref = d["spec"]["scaleTargetRef"]
        target = [w for w in docs if w["kind"] == ref["kind"] and w["metadata"]["name"] == ref["name"]]
        if len(target) != 1:
            err(f'HPA {d["metadata"]["name"]} scales {ref["kind"]} {ref["name"]}, which is not rendered')
        elif "replicas" in target[0]["spec"]:
            err(f'{ref["kind"]} {ref["name"]} sets replicas although an HPA scales it')
        if "worker" not in d["metadata"]["name"]:
            err("only the workers are autoscaled")

    # CRD kinds: the structure their schemas require.
    with open(rules_path, encoding="utf-8") as f:
        source = yaml.safe_load(f)
    for d in docs:
        if d["kind"] == "ServiceMonitor":
            if d.get("apiVersion") != "monitoring.coreos.com/v1":
                err("ServiceMonitor apiVersion must be monitoring.coreos.com/v1")
            spec = d.get("spec", {})
            if not spec.get("selector", {}).get("matchLabels"):
                err("ServiceMonitor needs spec.selector.matchLabels")
            eps = spec.get("endpoints") or []
            if not eps or any(e.get("port") != "http" or e.get("path") != "/metrics" for e in eps):
                err("ServiceMonitor endpoints must scrape port http, path /metrics")
            jobs = [r.get("replacement") for e in eps for r in e.get("relabelings", [])
                    if r.get("targetLabel") == "job"]
            if not jobs:
                err("ServiceMonitor must set the job label the alert rules select")
            svc = [s for s in docs if s["kind"] == "Service"
                   and all(s["metadata"].get("labels", {}).get(k) == v
                           for k, v in spec["selector"]["matchLabels"].items())]
            if len(svc) != 1:
                err(f"ServiceMonitor must select exactly one Service, selects {len(svc)}")
        if d["kind"] == "PrometheusRule":
            if d.get("apiVersion") != "monitoring.coreos.com/v1":
                err("PrometheusRule apiVersion must be monitoring.coreos.com/v1")
            job = next((r.get("replacement") for s in docs if s["kind"] == "ServiceMonitor"
                        for e in s["spec"]["endpoints"] for r in e.get("relabelings", [])
                        if r.get("targetLabel") == "job"), "ax")
            want = yaml.safe_load(yaml.safe_dump(source["groups"]).replace('job="ax"', f'job="{job}"'))
            if d.get("spec", {}).get("groups") != want:
                err("PrometheusRule groups differ from alert-rules/ax-rules.yaml")
            for g in d.get("spec", {}).get("groups", []):
                for r in g.get("rules", []):
                    if not isinstance(r.get("expr"), str) or not (r.get("alert") or r.get("record")):
                        err(f"PrometheusRule rule without alert/record name or expr in group {g.get('name')}")

    for e in errors:
        print("check-chart:", e, file=sys.stderr)
    print(f"check-chart: {case}: {len(docs)} manifests ({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))}); "
          f"{len(builtin)} to validate against Kubernetes schemas, "
          f"{len(docs) - len(builtin)} custom resources checked here")
    return 1 if errors else 0


# Values whose inner keys are Kubernetes structures documented as a whole.
STRUCTURES = ("resources", "livenessProbe", "readinessProbe", "podSecurityContext",
              "securityContext", "split.scheduler.resources", "split.worker.resources",
              "split.worker.autoscaling.behavior", "ingress.hosts")


def values_doc(values_path, readme_path):
    """Every value has a comment above it in values.yaml and a row in the chart README.

    A value is a leaf (scalar, list, empty map) or one of STRUCTURES; maps of values are
    documented through their values.
    """
    errors = []
    with open(values_path, encoding="utf-8") as f:
        text = f.read()
    values = yaml.safe_load(text)
    with open(readme_path, encoding="utf-8") as f:
        readme = f.read()
    stack, commented = [], False
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("#"):
            commented = not stripped.lstrip("# ").startswith("---")
            continue
        m = re.match(r"^(\s*)([A-Za-z][\w.-]*):", line)
        if not m:
            commented = False
            continue
        indent, key = len(m.group(1)), m.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        keys = [k for _, k in stack] + [key]
        stack.append((indent, key))
        path = ".".join(keys)
        node = values
        for k in keys:
            node = node.get(k) if isinstance(node, dict) else None
        is_map = isinstance(node, dict) and bool(node) and path not in STRUCTURES
        inside = any(path.startswith(s + ".") for s in STRUCTURES)
        if not inside and not is_map:
            if not commented:
                errors.append(f"values.yaml:{number}: {path} has no comment")
            if f"`{path}`" not in readme:
                errors.append(f"charts/ax/README.md has no row for {path}")
        commented = False
    errors += unknown_values_named(values, readme)
    for e in errors:
        print("check-chart:", e, file=sys.stderr)
    return 1 if errors else 0


def unknown_values_named(values, readme):
    """Chart values the chart README's rows or the user docs name that values.yaml does not
    have: a reader setting one would get no error from Helm, and no effect."""

    def exists(path):
        node = values
        for k in path.split("."):
            if not isinstance(node, dict) or not node:
                # Inside a free-form value (affinity, a peer list): the user's own keys.
                return True
            if k not in node:
                return False
            node = node[k]
        return True

    errors = []
    for m in re.finditer(r"^\| `([A-Za-z][\w.]*)` \|", readme, re.M):
        if not exists(m.group(1)):
            errors.append(f"charts/ax/README.md has a row for {m.group(1)}, which values.yaml does not have")
    docs_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs")
    for name in sorted(os.listdir(docs_dir)):
        if not name.endswith(".md"):
            continue
        with open(os.path.join(docs_dir, name), encoding="utf-8") as f:
            text = f.read()
        for m in re.finditer(r"`([a-z][A-Za-z0-9]*(?:\.[A-Za-z0-9]+)+)(?:=[^`]*)?`", text):
            path = m.group(1)
            top = path.split(".")[0]
            # Only the chart's own spelling (camelCase tops and nested keys); `config.rs` and
            # ax.toml keys (snake_case) are not chart values.
            if top not in values or path.endswith(".rs") or "_" in path:
                continue
            if top == "config" and not any(c.isupper() for c in path):
                continue
            if not exists(path):
                errors.append(f"docs/{name} names chart value {path}, which values.yaml does not have")
    return errors


if __name__ == "__main__":
    if sys.argv[1] == "values-doc":
        sys.exit(values_doc(sys.argv[2], sys.argv[3]))
    sys.exit(main())
