"""The SQL a model's run executes: each upstream table replaced by a temporary view.

At run time every table a model reads is a Spark temporary view of exactly the upstream
partitions the partition mapping asks for (loaded by `DeltaPartitionIOManager.load_input`). The
view names must differ between runs that share one Spark session (`partlake run` runs several in
threads of one process) yet be known before a run, so that `partlake sql render` prints the exact
SQL that runs: a view is named after the table and a hash of the model and the run's partition
keys (`daily_region_stats__v3f9a1c2e`). Two runs of the same model and partitions never run at
once (the planner holds a partition while a run of it is in progress), and would register the
same data anyway.

The rewrite works on the sqlglot tree: every table reference (not a CTE name) becomes its view,
aliased by the name the query used, so `orders.amount` keeps resolving. Pure: no Spark.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from sqlglot import exp

from dagster_partlake.sql.parse import DIALECT, table_key, table_nodes
from dagster_partlake.sql.project import SqlModel


def view_names(model: SqlModel, partition_keys: Sequence[str]) -> dict[tuple[str, ...], str]:
    """Upstream asset key -> the temporary view holding what this run reads of it."""
    text = "\n".join([model.name, *sorted(partition_keys)])
    token = hashlib.sha1(text.encode()).hexdigest()[:8]
    return {target: f"{'__'.join(target)}__v{token}" for _ref, target in model.upstream}


def run_sql(model: SqlModel, views: Mapping[tuple[str, ...], str], *, pretty: bool = True) -> str:
    """The model's query with every upstream table replaced by its view (Spark SQL)."""
    tree = rewritten(model, views)
    return tree.sql(dialect=DIALECT, pretty=pretty, comments=False)


def rewritten(model: SqlModel, views: Mapping[tuple[str, ...], str]) -> exp.Query:
    """A copy of the model's tree reading `views` (asset key -> name) instead of tables."""
    targets = {tuple(p.lower() for p in ref.key): target for ref, target in model.upstream}
    tree = model.file.tree.copy()
    for table in table_nodes(tree):
        key = tuple(p.lower() for p in table_key(table))
        target = targets.get(key)
        if target is None:
            continue
        alias = table.alias or table.name
        replacement = exp.Table(this=exp.to_identifier(views[target]))
        replacement.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
        for field in ("joins", "laterals", "pivots", "hints"):
            if table.args.get(field):
                replacement.set(field, table.args[field])
        table.replace(replacement)
    # `staging.orders.amount`: the view is aliased `orders`, so drop the database part.
    for column in tree.find_all(exp.Column):
        if column.args.get("db") and (column.db.lower(), column.table.lower()) in {
            k[-2:] for k in targets if len(k) >= 2
        }:
            column.set("db", None)
            column.set("catalog", None)
    return tree
