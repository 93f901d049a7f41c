#!/bin/bash
# Helpers for installing pinned upstream releases, checked against their published SHA-256
# sums before use. Sourced by install-exporter.sh and install-monitoring.sh.

case "$(uname -m)" in
  x86_64) arch=amd64 ;;
  aarch64) arch=arm64 ;;
  *) echo "unsupported architecture $(uname -m)" >&2; exit 1 ;;
esac
export arch

# fetch URL SUMS_URL DEST: download URL and check it against the sums file.
fetch() {
  local url="$1" sums_url="$2" dest="$3" name
  name="$(basename "$url")"
  curl -fsSL --retry 5 -o "$dest/$name" "$url"
  curl -fsSL --retry 5 -o "$dest/sums.txt" "$sums_url"
  (cd "$dest" && grep " $name\$" sums.txt | sha256sum -c -)
}

# install_release URL SUMS_URL MEMBER BIN: download a release tarball, check it against the
# published sums, and install MEMBER (its path inside the tarball) as BIN. Once only.
install_release() {
  local url="$1" sums="$2" member="$3" bin="$4" tmp
  [ -x "$bin" ] && return 0
  tmp="$(mktemp -d)"
  fetch "$url" "$sums" "$tmp"
  tar -xzf "$tmp/$(basename "$url")" -C "$tmp"
  install -m 0755 "$tmp/$member" "$bin"
  rm -rf "$tmp"
}


# service NAME USER STATE_DIR EXEC...: a restart-always systemd service, hardened; USER empty
# for a throwaway dynamic user, STATE_DIR empty for none (else /var/lib/STATE_DIR, its own).
service() {
  local name="$1" user="$2" state="$3" who
  shift 3
  who="DynamicUser=yes"
  [ -z "$user" ] || who="User=$user"
  cat >"/etc/systemd/system/$name.service" <<UNIT
[Unit]
Description=fmctl $name
After=network-online.target
Wants=network-online.target

[Service]
ExecStart=$*
Restart=always
RestartSec=5
$who
${state:+StateDirectory=$state}
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes

[Install]
WantedBy=multi-user.target
UNIT
  systemctl daemon-reload
  systemctl enable --now "$name.service"
}
