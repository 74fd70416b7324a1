#!/usr/bin/env bash
# What the end-to-end tests need beyond the virtualenv: Debian's chromium (the Dagster UI is tested
# in a real browser through Playwright), postgresql (a Dagster instance on PostgreSQL) and maven
# (it fetches Spark's JARs in `make install`, and the S3 server here); then the S3 server itself,
# s3proxy, from Maven Central into .partlake/jars/tools (scripts/s3_server.py). Installs only
# what is missing; needs root or sudo for apt-get.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
if [ "${#missing[@]}" -eq 0 ]; then
  echo "chromium, postgresql and maven: ok"
else
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
fi
echo "S3 server (s3proxy): $(python3 scripts/s3_server.py install)"
