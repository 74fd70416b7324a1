#!/usr/bin/env bash
# `make demo-s3`: the demo of `make demo` with the example's lake on the local S3 server
# (s3proxy, scripts/s3_server.py, on 127.0.0.1:$S3_DEMO_PORT), then the lake as the server lists
# it. The server's objects stay under $PARTLAKE_HOME/s3-demo/data; the server is stopped at the
# end, whatever happens. The Dagster instance is $PARTLAKE_HOME/dagster-s3 (the local demo's
# stays as it is).
set -euo pipefail
py=.venv/bin/python
state="${PARTLAKE_HOME:?}/s3-demo"
port="${S3_DEMO_PORT:-9090}"
mkdir -p "$state"
"$py" scripts/s3_server.py --state "$state" start --port "$port" --bucket lake
trap '"$py" scripts/s3_server.py --state "$state" stop' EXIT
eval "$("$py" scripts/s3_server.py --state "$state" env)"
export PARTLAKE_LAKE_ROOT="s3://lake/demo"
export DAGSTER_HOME="$PARTLAKE_HOME/dagster-s3"
echo "== The lake: $PARTLAKE_LAKE_ROOT on $AWS_ENDPOINT_URL (objects on disk under $state/data)"
make --no-print-directory demo
echo
echo "== The lake on the S3 server, as its ListObjectsV2 shows it"
"$py" -m definitions.listing
