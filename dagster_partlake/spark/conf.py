"""partlake's Spark settings, in one place: the local session (`SparkResource`), the Spark Connect
server (`partlake spark start`) and the test suite's session all start from these."""

from __future__ import annotations

DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    # A local driver listens on loopback only, whatever the host name resolves to.
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.sql.shuffle.partitions": "8",
    "spark.driver.memory": "2g",
    # delta-rs cannot read INT96 timestamps outside the nanosecond range; micros work everywhere.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
    "spark.sql.session.timeZone": "UTC",
    # partlake hands Spark the exact files the Delta log lists. Past 32 paths Spark lists them in
    # a Spark job of one task per path: 720 files took 4-10 s that way, 1 s on the driver.
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "1000000",
    # Delta's Spark side (when its JARs are there) rebuilds a table's snapshot in this many tasks
    # (Delta's default 50): on one machine a first DELETE spent most of its time in 50 tiny tasks.
    "spark.databricks.delta.snapshotPartitions": "8",
}
