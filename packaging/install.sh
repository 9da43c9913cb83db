#!/usr/bin/env bash
# Installs gpuq as a systemd service on this host: the binary, the unit, the `gpuq` system user (in
# the `docker` group), /etc/gpuq/gpuq.env (kept if it exists), Docker's live-restore and the job
# network's firewall (gpuq-firewall.service). Run as root from a checkout or an
# unpacked release, after scripts/release.sh built target/release/gpuq:
#   sudo packaging/install.sh [path/to/gpuq]
# Then edit /etc/gpuq/gpuq.env and `systemctl enable --now gpuq`. Running it again upgrades the
# binary and the unit and restarts a running service (jobs keep running; see docs/install.md "Upgrade").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../target/release/gpuq}

die() { echo "install.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (it creates a system user and writes /etc and /usr/local)"
[ -x "$bin" ] || die "no gpuq binary at $bin: build it with scripts/release.sh or pass its path"
command -v systemctl >/dev/null || die "systemctl not found: this installs a systemd service"
getent group docker >/dev/null || die "no \`docker\` group: install Docker first (docs/install.md)"

if ! id -u gpuq >/dev/null 2>&1; then
  useradd --system --home-dir /var/lib/gpuq --no-create-home --shell /usr/sbin/nologin \
    --user-group gpuq
  echo "created system user gpuq"
fi
usermod -aG docker gpuq

install -m 0755 "$bin" /usr/local/bin/gpuq.new
mv -f /usr/local/bin/gpuq.new /usr/local/bin/gpuq
install -m 0644 "$here/systemd/gpuq.service" /etc/systemd/system/gpuq.service
install -m 0644 "$here/systemd/gpuq-firewall.service" /etc/systemd/system/gpuq-firewall.service
install -d -m 0755 /usr/local/share/doc/gpuq
[ -f "$here/../README.md" ] && install -m 0644 "$here/../README.md" /usr/local/share/doc/gpuq/README.md
if [ -d "$here/../docs" ]; then
  install -d -m 0755 /usr/local/share/doc/gpuq/docs /usr/local/share/doc/gpuq/docs/img
  install -m 0644 "$here"/../docs/*.md /usr/local/share/doc/gpuq/docs/
  install -m 0644 "$here"/../docs/img/* /usr/local/share/doc/gpuq/docs/img/
fi
install -d -m 0750 -o root -g gpuq /etc/gpuq
if [ ! -f /etc/gpuq/gpuq.env ]; then
  install -m 0640 -o root -g gpuq "$here/gpuq.env" /etc/gpuq/gpuq.env
  echo "wrote /etc/gpuq/gpuq.env: review it before starting"
fi
# SELinux (Rocky/RHEL): give the binary the label of installed programs.
command -v restorecon >/dev/null && restorecon -F /usr/local/bin/gpuq || true

# Docker's live-restore: without it every restart of dockerd (a package upgrade) kills every running
# job. Merged into /etc/docker/daemon.json (other keys kept), then applied with a reload, which
# restarts nothing. `gpuq doctor` checks it (its `live-restore` line).
daemon_json=/etc/docker/daemon.json
if [ -f "$daemon_json" ] && grep -Eq '"live-restore"[[:space:]]*:[[:space:]]*true' "$daemon_json"; then
  echo "$daemon_json: live-restore already on"
elif [ ! -s "$daemon_json" ]; then
  install -d -m 0755 /etc/docker
  printf '{\n  "live-restore": true\n}\n' >"$daemon_json"
  systemctl reload docker 2>/dev/null || echo "reload Docker (systemctl reload docker) to turn live-restore on"
  echo "wrote $daemon_json: live-restore on"
elif command -v python3 >/dev/null; then
  cp -p "$daemon_json" "$daemon_json.gpuq-backup"
  python3 - "$daemon_json" <<'PY'
import json, sys
path = sys.argv[1]
with open(path) as f:
    config = json.load(f)
config["live-restore"] = True
with open(path + ".new", "w") as f:
    json.dump(config, f, indent=2)
    f.write("\n")
PY
  mv -f "$daemon_json.new" "$daemon_json"
  systemctl reload docker 2>/dev/null || echo "reload Docker (systemctl reload docker) to turn live-restore on"
  echo "$daemon_json: live-restore on (the old file is $daemon_json.gpuq-backup)"
else
  echo "install.sh: set \"live-restore\": true in $daemon_json by hand, then systemctl reload docker" >&2
fi

systemctl daemon-reload
# The job network's firewall (root): jobs reach neither this host nor the private ranges.
systemctl enable gpuq-firewall >/dev/null 2>&1 || true
if systemctl restart gpuq-firewall; then
  echo "gpuq-firewall: $(/usr/local/bin/gpuq firewall check 2>&1 || true)"
else
  echo "gpuq-firewall did not apply: see journalctl -u gpuq-firewall" >&2
fi
if systemctl is-active --quiet gpuq; then
  systemctl restart gpuq
  echo "restarted gpuq with the new binary"
else
  echo "installed; start with: systemctl enable --now gpuq"
fi
/usr/local/bin/gpuq --version 2>/dev/null || true
