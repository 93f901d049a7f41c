#!/bin/bash
# Helpers for installing pinned upstream releases, checked against their published SHA-256
# sums before use. Sourced by install-exporter.sh and install-monitoring.sh.

case "$(uname -m)" in
  x86_64) arch=amd64 ;;
  aarch64) arch=arm64 ;;
  *) echo "unsupported architecture $(uname -m)" >&2; exit 1 ;;
esac
export arch

# Nodes without a way out (private subnets, no NAT) take the releases from a mirror that
# keeps upstream's paths: https://HOST/PATH is fetched as MIRROR/HOST/PATH. The mirror is
# $FMCTL_RELEASE_MIRROR or the first line of /etc/fmctl/release-mirror.
release_mirror="${FMCTL_RELEASE_MIRROR:-}"
if [ -z "$release_mirror" ] && [ -s /etc/fmctl/release-mirror ]; then
  release_mirror="$(head -n 1 /etc/fmctl/release-mirror)"
fi

# mirrored URL: where to download URL from.
mirrored() {
  if [ -n "$release_mirror" ]; then
    echo "${release_mirror%/}/${1#https://}"
  else
    echo "$1"
  fi
}

# fetch URL SUMS_URL DEST: download URL and check it against the sums file. A name missing
# from the sums file is an error, not a pass.
fetch() {
  local url="$1" sums_url="$2" dest="$3" name
  name="$(basename "$url")"
  curl -fsSL --retry 5 -o "$dest/$name" "$(mirrored "$url")" ||
    { echo "download failed: $url" >&2; return 1; }
  curl -fsSL --retry 5 -o "$dest/sums.txt" "$(mirrored "$sums_url")" ||
    { echo "download failed: $sums_url" >&2; return 1; }
  grep -q " \*\?$name\$" "$dest/sums.txt" ||
    { echo "$name is not in $(basename "$sums_url")" >&2; return 1; }
  (cd "$dest" && grep " \*\?$name\$" sums.txt | sha256sum -c --quiet -) ||
    { echo "checksum mismatch: $name" >&2; return 1; }
}

# install_release URL SUMS_URL MEMBER BIN: download a release tarball, check it against the
# published sums, and install MEMBER (its path inside the tarball) as BIN. Once only.
install_release() {
  local url="$1" sums="$2" member="$3" bin="$4" tmp
  [ -x "$bin" ] && return 0
  tmp="$(mktemp -d)"
  fetch "$url" "$sums" "$tmp" || { rm -rf "$tmp"; return 1; }
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
