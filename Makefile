# Three commands for a fresh clone: `make demo`, `make test` and `make docs` (see README).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export PARTLAKE_HOME ?= $(CURDIR)/.partlake
export DAGSTER_HOME ?= $(PARTLAKE_HOME)/dagster

DEMO_DATES := 2024-01-01 2024-01-02 2024-01-03
DEMO_ROWS ?= 1000

# bench-catalog: what tables by name cost (benchmarks/catalog.py).
.PHONY: bench-catalog install jars s3-server kafka-server demo test test-faults soak test-fast lint check-java test-deps dev clean bench-backfill bench-plan bench-merge bench-maintain bench-incremental bench-exactness bench-stream bench-refresh bench-spark-start bench-noop bench-log-reads bench-partition-write screenshots demo-s3

# Reinstalls when pyproject.toml changes; the stamp keeps repeated `make` calls instant.
$(VENV)/.installed: pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

install: $(VENV)/.installed jars s3-server kafka-server

# Spark's JARs for s3a:// and Delta (hadoop-aws, the AWS SDK bundle, delta-spark, delta-storage),
# Kafka sources (spark-sql-kafka-0-10 and its clients) and PostgreSQL sources (the JDBC driver),
# from Maven Central with `mvn dependency:copy` into .partlake/jars; the list is
# dagster_partlake/spark/jars.py. Skips what is there, so a second run takes well under a second.
jars: $(VENV)/.installed
	@$(BIN)/python -m dagster_partlake.spark.jars fetch

# The S3 server of `make demo-s3` and the S3 tests: s3proxy's JAR from Maven Central into
# .partlake/jars/tools (skipped when it is there), so nothing needs the network at run time.
s3-server: $(VENV)/.installed
	@$(BIN)/python scripts/s3_server.py install > /dev/null

# The Kafka broker of the Kafka source's tests and demo: Kafka 4.4 (KRaft) and its runtime
# dependencies from Maven Central into .partlake/jars/tools/kafka-4.4.0 (skipped when there).
kafka-server: $(VENV)/.installed
	@$(BIN)/python scripts/kafka_server.py install > /dev/null

check-java:
	@scripts/check_java.sh

# Debian's chromium, postgresql and maven, and the S3 server (s3proxy, from Maven Central) for the
# end-to-end tests (CI runs this too).
test-deps:
	@scripts/install_test_deps.sh

# The example registers its tables in partlake's own metastore (docs: Tables by name).
demo: export PARTLAKE_CATALOG ?= own
demo: check-java install
	@mkdir -p $(DAGSTER_HOME) && (test -f $(DAGSTER_HOME)/dagster.yaml || cp scripts/dagster.yaml $(DAGSTER_HOME)/dagster.yaml)
	@echo "== 1/4 demo source data: raw_events for $(DEMO_DATES) x eu, us, apac"
	$(BIN)/python -m definitions.ingest $(addprefix --date ,$(DEMO_DATES)) --region eu --region us --region apac --rows $(DEMO_ROWS)
	@echo "== 2/4 clean_events and daily_region_stats for those days (one run, one Spark job per asset)"
	$(BIN)/dagster asset materialize -m definitions --select clean_events,daily_region_stats \
		--partition-range '$(firstword $(DEMO_DATES))|eu...$(lastword $(DEMO_DATES))|apac'
	@echo "== 3/4 monthly_region_stats for 2024-01 (reads the month's daily partitions)"
	$(BIN)/dagster asset materialize -m definitions --select monthly_region_stats --partition-range '2024-01|eu...2024-01|apac'
	@echo "== 4/4 the SQL models of definitions/sql/ (group sql), run by partlake like any asset"
	$(BIN)/partlake sql lint definitions/sql -m definitions
	$(BIN)/partlake run -m definitions --select staging/events,marts/user_activity,marts/monthly_region_summary
	$(BIN)/partlake sql render -m definitions marts/monthly_region_summary --partition '2024-01|eu'
	@$(BIN)/python -m definitions.summary
	@echo
	@echo "== Refresh: an upstream system rewrites raw_events 2024-01-02|eu (python -m definitions.ingest)"
	$(BIN)/python -m definitions.ingest --date 2024-01-02 --region eu --rows $(DEMO_ROWS) --seed 1
	@echo "== partlake plan: what is out of date now, and why"
	$(BIN)/partlake plan -m definitions
	@echo "== partlake run: recompute exactly those partitions (runs are recorded in the Dagster instance)"
	$(BIN)/partlake run -m definitions
	@echo "== partlake run again: nothing changed, nothing runs"
	$(BIN)/partlake run -m definitions
	@echo
	@echo "== Model kinds (group models of the example): daily user exports -> merge, scd2, append, tracked"
	$(BIN)/python -m definitions.exports $(addprefix --date ,$(DEMO_DATES))
	$(BIN)/partlake run -m definitions
	@echo "== The 2024-01-02 export arrives again, unchanged: plan_counts comes out the same, plan_mix does not run"
	$(BIN)/python -m definitions.exports --date 2024-01-02
	$(BIN)/partlake run -m definitions
	@echo
	@echo "== Tables by name: every table is in partlake's own metastore; an analyst's query through the SQL endpoint"
	$(BIN)/partlake catalog list -m definitions
	$(BIN)/partlake sql-server start -m definitions
	$(BIN)/partlake sql-server query -m definitions "SELECT date, region, events FROM lake.daily_region_stats WHERE date = '2024-01-02' ORDER BY region" \
		; status=$$?; $(BIN)/partlake sql-server stop; exit $$status

# The same demo with the lake on the local S3 server (s3proxy from `make test-deps`), then the lake
# through the server's listing (scripts/demo_s3.sh; S3_DEMO_PORT, default 9090).
demo-s3: check-java install
	@scripts/demo_s3.sh

# The example's PostgreSQL and Kafka sources (definitions/sources.py) on servers of their own on
# 127.0.0.1 (PG_DEMO_PORT, default 5433; KAFKA_DEMO_PORT, default 9092): data written, read,
# changed in each source and exactly what that made stale refreshed (scripts/demo_sources.sh).
.PHONY: demo-sources
demo-sources: check-java install
	@mkdir -p $(DAGSTER_HOME) && (test -f $(DAGSTER_HOME)/dagster.yaml || cp scripts/dagster.yaml $(DAGSTER_HOME)/dagster.yaml)
	@scripts/demo_sources.sh

dev: install
	@mkdir -p $(DAGSTER_HOME) && (test -f $(DAGSTER_HOME)/dagster.yaml || cp scripts/dagster.yaml $(DAGSTER_HOME)/dagster.yaml)
	$(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

test: install lint
	$(BIN)/python -m pytest

# Style, the import contract (layers in pyproject.toml; a violation names the contract and the
# import) and the type checker (mypy, basic level).
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

# Only the tests that need neither Spark nor a Dagster subprocess.
# The fault drills (tests/test_faults.py): killed run workers, a lost Spark Connect server, a
# PostgreSQL restart, a re-created table, two partlake runs on one plan, the S3 server stopped
# during a run (tests/test_s3_lake.py), a Kafka stream run killed at its batch's commit twice and
# the broker stopped under a stream (tests/test_source_faults.py), a partition retention killed
# between its archive commit and its removal twice (tests/surface/test_retention.py). About half an hour,
# so not part of `make test`; run them nightly or before a release.
test-faults: check-java install test-deps
	$(BIN)/python -m pytest -m faults tests/test_faults.py tests/test_s3_lake.py tests/test_source_faults.py tests/surface/test_retention.py

# Long end-to-end variants of paths `make test` covers once (marker `extended`, about 40
# minutes): a merge model's later days refreshed in one range run under the daemon (CI checks the
# same runs through `partlake plan` / `partlake run`); a failing partition's back-off under the
# daemon and its view in the browser (CI checks the back-off in the test's process,
# tests/test_invalidation.py); Declarative Automation's partlake_stale() under the daemon (CI
# evaluates it with Dagster's automation API, tests/surface/test_orchestration.py); streams and
# incremental inputs with their tables on the S3 server (CI runs them on local disk); the whole
# example on a standalone cluster and on a Spark Connect server (CI runs partlake run on a Spark
# Connect server from a user's code location, tests/surface/test_spark_connect.py, and a
# standalone cluster's Delta reads and appends on S3, tests/test_spark_jars.py); the example's
# model kinds, gates, SQL models and feeds end to end (CI runs each from a user's code location,
# tests/surface/); delta-spark's feature matrix beyond deletion vectors and V2 checkpoints; the
# class-data-sharing archive mapped by a new session.
.PHONY: test-extended
test-extended: check-java install test-deps
	$(BIN)/python -m pytest -m extended

# delta-spark's feature matrix alone (tests/delta/test_delta_spark_tables.py; its deletion vectors
# and V2 checkpoints are in make test, the rest in make test-extended).
.PHONY: test-delta-matrix
test-delta-matrix: check-java install
	$(BIN)/python -m pytest -m 'not faults' tests/delta/test_delta_spark_tables.py

# The soak (benchmarks/soak.py): the example under dagster dev with the sensor on while source
# partitions are rewritten at random for MINUTES; JSON in benchmarks/out/soak.json.
MINUTES ?= 20
soak: check-java install
	$(BIN)/python -m benchmarks.soak --minutes $(MINUTES)

# The docs' shell sessions (README.md, docs/) replayed in temporary lakes, and the docs rewritten
# with what the code prints now (scripts/docs_sessions.py; 14 to 22 minutes on 2 busy cores, and
# about 1.5 more for the local servers, started on 127.0.0.1 ports 9000, 9092 and 5433). CI
# replays only the cheap ones and checks the rest by structure (tests/test_docs_sessions.py).
.PHONY: docs-sessions
docs-sessions: check-java install
	$(BIN)/python scripts/docs_sessions.py

test-fast: install
	$(BIN)/python -m pytest -m "not spark and not dagster_cli and not cluster and not faults and not s3"

# Benchmarks (not part of `make test`): JSON and PNG under benchmarks/out/.
# The full backfill 3 times, interleaved floor / local / shared, then the other scenarios
# (BENCH_ARGS='--only-backfill' for the interleaved part alone).
bench-backfill: check-java install
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python -m benchmarks.backfill $(BENCH_ARGS)

bench-plan: install
	$(BIN)/python benchmarks/plan_scale.py $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.plan_requests

bench-merge: check-java install
	$(BIN)/python -m benchmarks.merge_scale $(BENCH_ARGS)

# A 20M-row event table gaining 1%: log-based incremental append vs re-reading the table.
bench-incremental: check-java install
	$(BIN)/python -m benchmarks.incremental_scale $(BENCH_ARGS)

# A landing folder of 10M JSON events gaining 1%: available_now streaming runs (throughput, latency
# from file arrival to commit) vs re-reading the folder.
bench-stream: check-java install
	$(BIN)/python -m benchmarks.stream_scale $(BENCH_ARGS)

# One rewritten source partition -> its closure fresh again, under the daemon with the sensor,
# next to `partlake run` of a closure of the same shape in the same dagster dev: local Spark on
# SQLite (the warm Spark, in a folder of the benchmark's own), and a shared Spark Connect server
# on PostgreSQL; median of 3, by phase. BEFORE=DIR (a checkout of earlier code): its
# benchmarks/refresh.py is replaced by this one first, then 3 rounds of 2 repeats alternate the
# two checkouts; JSON in benchmarks/out/refresh_interleaved.json.
bench-refresh: check-java install
ifdef BEFORE
	@cmp -s benchmarks/refresh.py $(BEFORE)/benchmarks/refresh.py || { \
		echo "benchmarks/refresh.py -> $(BEFORE)/benchmarks/refresh.py (one harness for both sides)"; \
		cp benchmarks/refresh.py $(BEFORE)/benchmarks/refresh.py; }
	$(BIN)/python -m benchmarks.interleave --before $(BEFORE) $(BENCH_ARGS)
else
	$(BIN)/python -m benchmarks.refresh $(BENCH_ARGS)
endif

# One `dagster asset materialize` of one partition, process start to commit, by phase: 5 rounds
# with the warm Spark up and, locally, 3 more each after `partlake spark stop --warm` (BEFORE=DIR:
# side by side with a checkout of earlier code); JSON in benchmarks/out/materialize.json.
.PHONY: bench-materialize
bench-materialize: check-java install
	$(BIN)/python -m benchmarks.materialize $(if $(BEFORE),--before $(BEFORE)) $(BENCH_ARGS)

# PostgreSQL and Kafka sources next to hand-written Spark jobs, interleaved: 30 days of a 10M-row
# table into its partitions, Kafka to Delta in messages per second, and a no-change plan's
# statements (servers on 127.0.0.1, started and stopped here); JSON in benchmarks/out/sources.json.
.PHONY: bench-sources
bench-sources: check-java install
	$(BIN)/python -m benchmarks.sources $(BENCH_ARGS)

# Local Spark start-up and first job with and without the class-data-sharing archive.
bench-spark-start: check-java install
	$(BIN)/python -m benchmarks.spark_start $(BENCH_ARGS)

# The no-op `partlake run` next to `python -c "import dagster"`, in paired runs, on the demo's
# lake: made first when there is none, with the example's feeds (a source without its table or
# folder is said on every plan, so no plan is kept to answer a no-op from), then brought fresh,
# its warm Spark (a folder of its own) stopped before the measurement. BENCH_ARGS='--full' also
# times the full path; BEFORE=DIR also times the no-op of DIR's package.
BENCH_WARM := $(PARTLAKE_HOME)/bench-warm
bench-noop: install
	@test -d $(PARTLAKE_HOME)/warehouse/raw_events || PARTLAKE_SPARK_WARM_DIR=$(BENCH_WARM) $(MAKE) demo
	@test -d $(PARTLAKE_HOME)/warehouse/user_changes || $(BIN)/python -m definitions.feeds changes --batch 1
	@test -d $(PARTLAKE_HOME)/warehouse/payment_files || $(BIN)/python -m definitions.feeds payments --file 1
	PARTLAKE_SPARK_WARM_DIR=$(BENCH_WARM) $(BIN)/partlake run -m definitions
	@PARTLAKE_SPARK_WARM_DIR=$(BENCH_WARM) $(BIN)/partlake spark stop --warm
	$(BIN)/python -m benchmarks.noop_run $(if $(BEFORE),--baseline $(BEFORE)) $(BENCH_ARGS)

# What one write reads of its table's log, per model kind (BENCH_ARGS='--checkout PATH' to add an
# older checkout measured the same way).
bench-log-reads: check-java install
	$(BIN)/python -m benchmarks.log_reads $(BENCH_ARGS)

# The delta-spark writer vs partlake's writer on the 30-day backfill (docs/guides/delta-spark.md).
.PHONY: bench-native-writer
bench-native-writer: check-java install
	$(BIN)/python -m benchmarks.native_writer $(BENCH_ARGS)

# One small asset partition (200 and 20,000 rows) on one warm local Spark session: partlake's
# load_input + handle_output, gates off and on, next to the hand-written delta-spark
# `replaceWhere` write, interleaved, by phase; JSON in benchmarks/out/partition_write.json.
bench-partition-write: check-java install
	$(BIN)/python -m benchmarks.partition_write $(BENCH_ARGS)

# Incremental planning vs the full plan and the oracle, on both planner paths, over 100,000
# random worlds of every model kind, with self-dependencies and up to 3 dimensions (no Spark;
# about 40 CPU minutes: BENCH_ARGS='--jobs 2' splits it over two processes on a quiet machine).
bench-exactness: install
	$(BIN)/python -m benchmarks.exactness $(BENCH_ARGS)

# Cold state sync of a 10,000-commit log before and after `checkpoint_table` (no Spark).
bench-maintain: install
	$(BIN)/python -m benchmarks.state_sync_commits $(BENCH_ARGS)

# The README's screenshots of the Dagster UI (docs/ui-*.png: the asset graph, partitions, ticks,
# run tags, a refresh's runs, an asset's table name, a stale partition, a failed upstream), taken
# by the browser tests.
screenshots: check-java install
	PARTLAKE_SCREENSHOTS=$(CURDIR)/docs $(BIN)/python -m pytest -q -m "not faults" tests/test_daemon.py \
		-k "(TestSqliteInstance and (closure or browser or failing_partition)) or (TestPostgresInstance and stale_partition)"

# docs/reference/metadata.md written from the metadata keys' registry
# (dagster_partlake.spec.settings.SETTINGS; tests/test_metadata_page.py fails when they differ).
.PHONY: docs-metadata
docs-metadata: install
	$(BIN)/python scripts/metadata_page.py

# The documentation site (docs/, mkdocs.yml) into $(PARTLAKE_HOME)/site; --strict fails on any
# warning: a broken link or anchor, a docstring griffe cannot parse.
.PHONY: docs
docs: install
	$(BIN)/python -m mkdocs build --strict -d $(PARTLAKE_HOME)/site

# Keeps .partlake/jars: fetched, not generated, like .venv (make install would fetch them again).
clean:
	@if [ -d .partlake ]; then find .partlake -mindepth 1 -maxdepth 1 ! -name jars -exec rm -rf {} +; fi

# What tables by name cost: registering on a first and on later commits, and the no-change plan
# and no-op run with and without a catalog (the metastore stopped): benchmarks/out/catalog.json.
bench-catalog: check-java install
	$(BIN)/python -m benchmarks.catalog
