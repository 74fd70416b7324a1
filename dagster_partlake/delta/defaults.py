"""Defaults of the storage adapter's knobs, in a module that imports nothing.

The Dagster side shows them as the defaults of its settings (`DeltaPartitionIOManager`,
`MaintenanceConfig`, `partlake maintain`); defining them here lets it do so without loading
delta-rs and the writer, which a process that only loads the code location (a no-op
`partlake run`) never needs.
"""

DEFAULT_MAX_ATTEMPTS = 30  # commit attempts when concurrent writers conflict
DEFAULT_TARGET_FILE_BYTES = 128 * 1024 * 1024  # compaction's target file size
DEFAULT_RETENTION_HOURS = 168  # vacuum: keep unreferenced files younger than this
DEFAULT_KEEP_LOG_HOURS = 30 * 24.0  # delta.logRetentionDuration's default
