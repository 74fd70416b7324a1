"""Column-level lineage of a model, from the same sqlglot tree that gives its dependencies.

For each output column: the upstream (asset key, column) pairs it is computed from, found by
sqlglot's `lineage` through CTEs and subqueries. The columns of upstream tables come from their
own models (in dependency order), from a Python asset's `dagster/column_schema`, or, at run
time, from the views' DataFrames; without them a `*` cannot be expanded and an unqualified column
in a join cannot be attributed, and those columns are left out. Pure: no Dagster, no Spark.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.lineage import lineage
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import build_scope

from dagster_partlake.sql.parse import DIALECT
from dagster_partlake.sql.project import SqlModel
from dagster_partlake.sql.views import rewritten

Key = tuple[str, ...]
# Output column -> the upstream (asset key, column) pairs it depends on, in a stable order.
ColumnLineage = dict[str, list[tuple[Key, str]]]


def column_lineage(
    model: SqlModel, columns: Mapping[Key, Sequence[str]]
) -> tuple[ColumnLineage, list[str] | None]:
    """The model's column lineage and its output columns (None: not known, e.g. `SELECT *` of
    a table whose columns are unknown).

    Args:
        model: the model.
        columns: known columns of upstream assets.
    """
    # One flat name per upstream table, so that one schema level fits keys of any length.
    flat = {target: f"t{i}" for i, (_ref, target) in enumerate(model.upstream)}
    back = {name: target for target, name in flat.items()}
    schema: dict[str, object] = {
        flat[target]: dict.fromkeys(columns[target], "string")
        for target in flat
        if target in columns
    }
    tree = None
    # Qualifying every column needs the sources' columns; where they are unknown (a subquery
    # beside unknown tables), qualify the tables only: qualified columns still trace.
    for columns_too in (True, False):
        try:
            tree = qualify(
                rewritten(model, flat),
                schema=schema,
                dialect=DIALECT,
                validate_qualify_columns=False,
                quote_identifiers=False,
                qualify_columns=columns_too,
            )
            break
        except SqlglotError:
            continue
    if tree is None:
        return {}, None
    scope = build_scope(tree)
    outputs = list(tree.named_selects)
    if scope is None or "*" in outputs or not all(outputs):
        return {}, None
    result: ColumnLineage = {}
    for column in outputs:
        try:
            node = lineage(column, tree, schema=schema, dialect=DIALECT, scope=scope, copy=False)
        except SqlglotError:
            continue
        deps: list[tuple[Key, str]] = []
        for leaf in node.walk():
            if leaf.downstream or not isinstance(leaf.source, exp.Table):
                continue
            target = back.get(leaf.source.name)
            name = (
                leaf.expression.name
                if isinstance(leaf.expression, exp.Column)
                else leaf.name.split(".")[-1]
            )
            if target is not None and name and (target, name) not in deps:
                deps.append((target, name))
        result[column] = deps
    return result, outputs
