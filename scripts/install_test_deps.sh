#!/usr/bin/env bash
# System packages the end-to-end tests need, from Debian: chromium (the Dagster UI is tested in a
# real browser through Playwright) and postgresql (a Dagster instance on PostgreSQL). Installs
# only what is missing; needs root or sudo for apt-get.
set -euo pipefail
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
if [ "${#missing[@]}" -eq 0 ]; then
  echo "chromium and postgresql: ok"
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "Error: ${missing[*]} missing and not root; install them with apt-get as root." >&2
    exit 1
  fi
  sudo="sudo"
fi
echo "Installing ${missing[*]} (Debian packages)..."
$sudo apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
echo "installed: ${missing[*]}"
