#!/usr/bin/env bash
# Checks the Helm chart charts/ax without a cluster:
#   - helm lint --strict, for the default values and every values file in charts/ax/ci/;
#   - helm template for each of them, and the rendered manifests validated offline against the
#     Kubernetes JSON schemas (kubernetes-validate --strict) for the oldest Kubernetes the chart
#     supports and the newest the validator knows;
#   - scripts/chart_checks.py on each render: the custom resources (ServiceMonitor,
#     PrometheusRule, which kubernetes-validate has no schema for), the PrometheusRule being
#     exactly alert-rules/ax-rules.yaml, ax.toml against the configuration contract, the pods'
#     security settings, probes, instance id and secret references, the Grafana dashboards
#     ConfigMap (valid JSON equal to charts/ax/dashboards/, the sidecar's label);
#   - values the chart must refuse (e.g. a termination grace period shorter than the workers'
#     shutdown grace);
#   - helm package: the packaged chart carries the rules file itself (not a dangling symlink);
#   - every PromQL query of the Grafana dashboards parses (promtool check rules; which metrics
#     they name is engine-bin/tests/dashboard.rs's part, against a running ax).
# helm and kubernetes-validate come from scripts/setup-helm.sh, promtool from scripts/setup.sh. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/tools-env.sh
. scripts/tools-env.sh

command -v helm >/dev/null 2>&1 || { echo "check-chart: helm is missing; run scripts/setup.sh" >&2; exit 1; }
command -v promtool >/dev/null 2>&1 || { echo "check-chart: promtool is missing; run scripts/setup.sh" >&2; exit 1; }
python3 -c 'import kubernetes_validate, yaml' 2>/dev/null \
  || { echo "check-chart: kubernetes-validate is missing; run scripts/setup.sh" >&2; exit 1; }

chart=charts/ax
rules=alert-rules/ax-rules.yaml
# The chart's Kubernetes floor (Chart.yaml kubeVersion) and the newest schemas bundled.
newest=$(python3 - <<'PY'
import os, re, kubernetes_validate
d = os.path.join(os.path.dirname(kubernetes_validate.__file__), "kubernetes-json-schema")
found = (re.match(r"v(\d+)\.(\d+)\.(\d+)-local", n) for n in os.listdir(d))
print(".".join(map(str, max(tuple(map(int, m.groups())) for m in found if m))))
PY
)
k8s_versions=("1.25.0" "$newest")

tmp=$(mktemp -d -t ax-chart.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# The PrometheusRule reads the rules through this symlink; a copy could drift from the tested
# rules.
link=$chart/files/ax-rules.yaml
if [ ! -L "$link" ] || [ "$(readlink "$link")" != "../../../$rules" ]; then
  echo "check-chart: $link must be a symlink to ../../../$rules" >&2
  exit 1
fi

# helm logs an INFO line each time it follows the symlink; keep the output readable.
quiet_helm() { helm "$@" 2> >(grep -v 'found symbolic link in path' >&2); }

echo "check-chart: every value documented in values.yaml and charts/ax/README.md"
python3 scripts/chart_checks.py values-doc "$chart/values.yaml" "$chart/README.md"

cases=(default)
for f in "$chart"/ci/*-values.yaml; do
  name=$(basename "$f" -values.yaml)
  cases+=("$name")
done

for case in "${cases[@]}"; do
  args=()
  [ "$case" = default ] || args=(-f "$chart/ci/$case-values.yaml")
  echo "check-chart: $case: helm lint --strict"
  quiet_helm lint --strict "${args[@]}" "$chart" >"$tmp/lint.txt" || { cat "$tmp/lint.txt"; exit 1; }
  echo "check-chart: $case: helm template"
  quiet_helm template ax "$chart" --namespace ax "${args[@]}" >"$tmp/$case.yaml"
  mkdir -p "$tmp/$case"
  # NOTES.txt is only rendered by install; a client-side dry run needs no cluster.
  quiet_helm install ax "$chart" --dry-run=client --namespace ax "${args[@]}" >"$tmp/$case.install.txt"
  grep -q '^NOTES:' "$tmp/$case.install.txt" || { echo "check-chart: $case: NOTES.txt did not render" >&2; exit 1; }
  python3 scripts/chart_checks.py "$case" "$tmp/$case.yaml" "$rules" "$tmp/$case"
  for v in "${k8s_versions[@]}"; do
    echo "check-chart: $case: kubernetes-validate --strict -k $v"
    python3 -m kubernetes_validate --strict --quiet -k "$v" "$tmp/$case/builtin.yaml"
  done
done

# The dashboards with the sidecar's label value and namespace set (all-features has the
# defaults).
echo "check-chart: dashboards-custom: helm template"
quiet_helm template ax "$chart" --namespace ax --set dashboards.enabled=true \
  --set dashboards.labelValue=ax --set dashboards.namespace=monitoring >"$tmp/dashboards-custom.yaml"
mkdir -p "$tmp/dashboards-custom"
python3 scripts/chart_checks.py dashboards-custom "$tmp/dashboards-custom.yaml" "$rules" "$tmp/dashboards-custom"
python3 -m kubernetes_validate --strict --quiet -k "$newest" "$tmp/dashboards-custom/builtin.yaml"

# The engine itself accepts each rendered configuration: `ax config print` loads ax.toml with
# the environment each container gets (placeholder files for the mounted Secrets) and validates
# it. scripts/test.sh builds target/debug/ax (cargo test builds the binary for the engine's
# integration tests) before it runs this script.
ax_bin=${AX_BIN:-target/debug/ax}
if [ -x "$ax_bin" ]; then
  for case in "${cases[@]}"; do
    echo "check-chart: $case: ax config print accepts the rendered configuration"
    python3 - "$tmp/$case.yaml" "$tmp/$case" "$ax_bin" <<'PY'
import os, subprocess, sys, tomllib, yaml
rendered, out_dir, ax = sys.argv[1:4]
docs = [d for d in yaml.safe_load_all(open(rendered)) if d]
(toml,) = [d["data"]["ax.toml"] for d in docs if d["kind"] == "ConfigMap" and "ax.toml" in d["data"]]
path = os.path.join(out_dir, "ax.toml")
open(path, "w").write(toml)
failed = False
for w in docs:
    if w["kind"] not in ("Deployment", "StatefulSet"):
        continue
    for c in w["spec"]["template"]["spec"]["containers"]:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        for e in c.get("env", []):
            src = e.get("valueFrom", {})
            if e["name"].endswith("_FILE") and e.get("value", "").startswith("/etc/ax-secrets/"):
                # A mounted Secret: a placeholder file in its place, long enough for every
                # secret's own rule (an API token needs 32 characters).
                name = e["name"].removesuffix("_FILE")
                placeholder = os.path.join(out_dir, name.lower() + ".secret")
                open(placeholder, "w").write(
                    "https://hooks.example.invalid/bot\n" if name.endswith("WEBHOOK")
                    else "placeholder-" + os.path.basename(e["value"]) + "-" + "0" * 32 + "\n")
                env[e["name"]] = placeholder
            elif "value" in e:
                env[e["name"]] = e["value"]
            elif "fieldRef" in src:
                env[e["name"]] = w["metadata"]["name"] + "-0"
            elif "secretKeyRef" in src:
                # Long enough for every secret's own rule (an API token needs 32 characters).
                env[e["name"]] = ("https://hooks.example.invalid/bot" if e["name"].endswith("WEBHOOK")
                                  else "placeholder-" + src["secretKeyRef"]["key"] + "-" + "0" * 32)
        r = subprocess.run([ax, "config", "print", "--config", path], env=env,
                           capture_output=True, text=True)
        if r.returncode != 0:
            failed = True
            print(f'check-chart: ax rejects the configuration of {w["kind"]} {w["metadata"]["name"]}:\n{r.stderr}',
                  file=sys.stderr)
            continue
        # The commands the engine loaded are the ones rendered (env values are masked).
        rendered_cmds = tomllib.loads(toml).get("worker", {}).get("commands", {})
        loaded_cmds = tomllib.loads(r.stdout).get("worker", {}).get("commands", {})
        def shape(cmds):
            return {n: {k: (sorted(v) if k == "env" else v) for k, v in c.items()} for n, c in cmds.items()}
        loaded = {n: {k: v for k, v in c.items() if k in rendered_cmds.get(n, {})}
                  for n, c in shape(loaded_cmds).items()}
        if loaded != shape(rendered_cmds):
            failed = True
            print(f'check-chart: ax loads other commands than the chart renders for {w["metadata"]["name"]}:\n'
                  f'rendered {shape(rendered_cmds)}\nloaded {loaded}', file=sys.stderr)
sys.exit(1 if failed else 0)
PY
  done
elif [ "${CI:-}" = true ]; then
  echo "check-chart: $ax_bin is missing; scripts/test.sh builds it before the checks" >&2
  exit 1
else
  echo "check-chart: skipping the engine's own check of the rendered configuration: $ax_bin is not built (cargo build -p ax --bin ax)"
fi

# Values the chart must refuse, with the reason it gives.
refuse() { # expected-message helm-args...
  local want=$1; shift
  if out=$(helm template ax "$chart" "$@" 2>&1); then
    echo "check-chart: helm template $* rendered, but must fail with: $want" >&2
    exit 1
  fi
  if ! grep -qF "$want" <<<"$out"; then
    echo "check-chart: helm template $* failed for another reason than '$want':" >&2
    echo "$out" >&2
    exit 1
  fi
}
echo "check-chart: values the chart refuses"
refuse "must exceed config.worker.shutdownGrace" --set terminationGracePeriodSeconds=30
refuse "must exceed config.worker.shutdownGrace" --set config.worker.shutdownGrace=2m
refuse "plus the longest command killGrace (20s)" --set config.worker.commands.backup.path=/bin/b --set config.worker.commands.backup.killGrace=20s
refuse "plus the longest command killGrace (5s)" --set config.worker.commands.backup.path=/bin/b --set terminationGracePeriodSeconds=35
refuse "is not a command name" --set config.worker.commands.bad/name.path=/bin/b
refuse "config.worker.commands.backup.path is required" --set config.worker.commands.backup.args={x}
refuse "is not a command setting" --set config.worker.commands.backup.path=/bin/b --set config.worker.commands.backup.shell=true
refuse "must be StatefulSet or Deployment" --set kind=DaemonSet
refuse "ingress.enabled needs an API token" --set ingress.enabled=true
refuse "podAntiAffinity must be soft, hard or empty" --set podAntiAffinity=sometimes
refuse "must be both set or both empty" --set secrets.etcdTls.existingSecret=x --set secrets.etcdTls.keyKey=
refuse "config.redis.url must be rediss://" --set secrets.redisTls.existingSecret=x
refuse "must be both set or both empty" --set config.redis.url=rediss://r:6380 --set secrets.redisTls.existingSecret=x --set secrets.redisTls.certKey=
refuse "dashboards.label must name" --set dashboards.enabled=true --set dashboards.label=
refuse "neither caKey nor certKey" --set config.redis.url=rediss://r:6380 --set secrets.redisTls.existingSecret=x --set secrets.redisTls.caKey= --set secrets.redisTls.certKey= --set secrets.redisTls.keyKey=

# The packaged chart must carry the rules themselves: helm package follows the symlink.
echo "check-chart: helm package"
quiet_helm package "$chart" --destination "$tmp/pkg" >/dev/null
pkg=$(ls "$tmp"/pkg/ax-*.tgz)
tar -xzf "$pkg" -C "$tmp/pkg"
if [ -L "$tmp/pkg/ax/files/ax-rules.yaml" ] || ! cmp -s "$tmp/pkg/ax/files/ax-rules.yaml" "$rules"; then
  echo "check-chart: the packaged chart's files/ax-rules.yaml is not a copy of $rules" >&2
  exit 1
fi
for f in ci/ values.yaml templates/NOTES.txt dashboards/ax.json; do
  case $f in
    ci/) [ ! -e "$tmp/pkg/ax/ci" ] || { echo "check-chart: the package should leave out ci/" >&2; exit 1; } ;;
    *) [ -e "$tmp/pkg/ax/$f" ] || { echo "check-chart: the package lacks $f" >&2; exit 1; } ;;
  esac
done
helm template ax "$pkg" --set prometheusRule.enabled=true --set dashboards.enabled=true >"$tmp/packaged.yaml"
mkdir -p "$tmp/packaged"
python3 scripts/chart_checks.py packaged "$tmp/packaged.yaml" "$rules" "$tmp/packaged"

# Grafana expands its interval variables before Prometheus sees a query; stand-ins of the same
# syntax let promtool parse each one as a recording rule.
echo "check-chart: the dashboards' PromQL parses"
python3 - "$chart/dashboards" "$tmp/dashboard-rules.yaml" <<'PY'
import glob, json, os, re, sys, yaml
rules = []
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    d = json.load(open(path))
    panels = [p for top in d["panels"] for p in [top] + top.get("panels", [])]
    for p in panels:
        for t in p.get("targets", []):
            expr = re.sub(r"\$__(rate_interval|interval|range)\b", "1m", t["expr"])
            rules.append({"record": f"dashboard:{len(rules)}", "expr": expr,
                          "labels": {"where": f'{os.path.basename(path)}: {p["title"]} {t["refId"]}'}})
yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}, open(sys.argv[2], "w"))
print(f"check-chart: {len(rules)} queries")
PY
promtool check rules "$tmp/dashboard-rules.yaml" >"$tmp/promtool.txt" || { cat "$tmp/promtool.txt"; exit 1; }

# The image the chart runs: the Dockerfile builds the `ax` binary of the engine crate, runs it
# as the user the chart's securityContext names, and exposes the chart's port. No image is
# built here (no container engine on the test machines).
echo "check-chart: Dockerfile agrees with the chart"
python3 - "$chart/values.yaml" <<'PY'
import re, sys, tomllib, yaml
values = yaml.safe_load(open(sys.argv[1]))
docker = open("Dockerfile").read()
engine = tomllib.load(open("engine-bin/Cargo.toml", "rb"))
errors = []
bins = [b["name"] for b in engine.get("bin", [])]
if f'-p {engine["package"]["name"]} --bin ax' not in docker or "ax" not in bins:
    errors.append("Dockerfile must build `-p <engine-bin package> --bin ax`")
user = values["podSecurityContext"]["runAsUser"]
if not re.search(rf"^USER {user}(:{user})?$", docker, re.M):
    errors.append(f"Dockerfile USER must be {user}, the chart's runAsUser")
if not re.search(rf"^EXPOSE {values['containerPort']}$", docker, re.M):
    errors.append(f"Dockerfile must EXPOSE {values['containerPort']}, the chart's containerPort")
if 'ENTRYPOINT ["ax"]' not in docker:
    errors.append('Dockerfile ENTRYPOINT must be ["ax"] (the chart passes `serve --config ...`)')
for e in errors:
    print("check-chart:", e, file=sys.stderr)
sys.exit(1 if errors else 0)
PY

echo "check-chart: ok (${#cases[@]} values cases, Kubernetes ${k8s_versions[*]})"
