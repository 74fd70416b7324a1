#!/usr/bin/env bash
# `make demo-sources`: the example's sources outside the lake (definitions/sources.py). Starts a
# PostgreSQL server (scripts/pg_server.py, 127.0.0.1:$PG_DEMO_PORT) and a Kafka broker
# (scripts/kafka_server.py, 127.0.0.1:$KAFKA_DEMO_PORT) with their state under
# $PARTLAKE_HOME, writes three days of orders and two of page views, refreshes what reads them,
# then plays a change in each (the shop corrects one order; a new day's page views arrive) and
# refreshes exactly what that made stale. Both servers are stopped at the end, whatever happens.
set -euo pipefail
py=.venv/bin/python
home="${PARTLAKE_HOME:?}"
pg_port="${PG_DEMO_PORT:-5433}"
kafka_port="${KAFKA_DEMO_PORT:-9092}"
"$py" scripts/pg_server.py --state "$home/pg-demo" start --port "$pg_port"
trap '"$py" scripts/pg_server.py --state "$home/pg-demo" stop >/dev/null; "$py" scripts/kafka_server.py --state "$home/kafka-demo" stop >/dev/null' EXIT
mkdir -p "$home/kafka-demo"
"$py" scripts/kafka_server.py --state "$home/kafka-demo" start --port "$kafka_port"
export PARTLAKE_DEMO_POSTGRES="127.0.0.1:$pg_port/shop" PARTLAKE_DEMO_KAFKA="127.0.0.1:$kafka_port"
export PGUSER=partlake PGPASSWORD=partlake-demo
select=shop_orders,order_revenue,page_views,page_view_events,daily_page_views
echo "== 1/3 the shop's orders (PostgreSQL) and the web servers' page views (Kafka)"
"$py" -m definitions.source_data setup
echo "== 2/3 what reads them, refreshed: partlake run --select $select"
.venv/bin/partlake run -m definitions --select "$select"
echo "== 3/3 a change in each source, and exactly what it made stale refreshed"
"$py" -m definitions.source_data change-order
"$py" -m definitions.source_data views --date 2024-01-03 --count 150
.venv/bin/partlake plan -m definitions --select "$select"
.venv/bin/partlake run -m definitions --select "$select"
echo "== nothing changed: nothing runs"
.venv/bin/partlake run -m definitions --select "$select"
