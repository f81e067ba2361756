#!/usr/bin/env bash
# Checks alert-rules/: the rules parse (promtool check rules), every unit test passes
# (promtool test rules), the Alertmanager example parses (amtool check-config) and routes
# critical alerts to Feishu and the webhook, warnings to the webhook only.
# promtool and amtool come from Debian's prometheus and prometheus-alertmanager packages
# (scripts/setup.sh installs them). Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/../alert-rules"

for tool in promtool amtool; do
  command -v "$tool" >/dev/null 2>&1 || { echo "check-alert-rules: $tool is missing; run scripts/setup.sh" >&2; exit 1; }
done

echo "check-alert-rules: promtool check rules"
promtool check rules ax-rules.yaml

echo "check-alert-rules: promtool test rules"
promtool test rules tests/*.yaml

echo "check-alert-rules: amtool check-config"
amtool check-config alertmanager.example.yml

route() { # labels... expected-receivers
  local expected=${*: -1}
  local labels=("${@:1:$#-1}")
  # amtool exits non-zero when the resolved receivers differ from --verify.receivers.
  if ! amtool config routes test --config.file=alertmanager.example.yml \
      --verify.receivers="$expected" "${labels[@]}" 2>/dev/null; then
    echo "check-alert-rules: alert {${labels[*]}} is not routed to $expected" >&2
    exit 1
  fi
}
echo "check-alert-rules: amtool config routes test"
route severity=critical alertname=SchedulerNoLeader feishu,webhook
route severity=warning alertname=SchedulerDLQGrowing webhook

# Every rule carries the labels and annotations the runbook and routes rely on, and its
# runbook link names an anchor that docs/runbook.md has.
echo "check-alert-rules: rule metadata and runbook anchors"
python3 - <<'PY'
import re, sys, yaml
rules = [r for g in yaml.safe_load(open("ax-rules.yaml"))["groups"] for r in g["rules"]]
runbook = open("../docs/runbook.md", encoding="utf-8").read()
anchors = {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
           for h in re.findall(r"^#+ (.+)$", runbook, flags=re.M)}
base = "https://github.com/ax-scheduler/ax/blob/main/docs/runbook.md#"
errors = []
for r in rules:
    name = r["alert"]
    if r.get("labels", {}).get("severity") not in ("critical", "warning"):
        errors.append(f"{name}: severity must be critical or warning")
    ann = r.get("annotations", {})
    for key in ("summary", "description", "runbook_url"):
        if not ann.get(key):
            errors.append(f"{name}: annotation {key} is missing")
    url = ann.get("runbook_url", "")
    if not url.startswith(base) or url[len(base):] != name.lower():
        errors.append(f"{name}: runbook_url must be {base}{name.lower()}")
    elif name.lower() not in anchors:
        errors.append(f"{name}: docs/runbook.md has no heading '{name}'")
for e in errors:
    print("check-alert-rules:", e, file=sys.stderr)
sys.exit(1 if errors else 0)
PY
echo "check-alert-rules: ok"
