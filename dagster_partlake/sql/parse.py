"""One SQL model file read: its directives and its query, parsed by sqlglot (Spark dialect).

A model file is one query (`SELECT`, `WITH ... SELECT`, set operations) under a block of
leading comment lines; in that block, a line `-- @name: value` is a directive. The block ends at
the first line that is neither blank nor a `--` comment, so `-- @...` further down is an ordinary
comment. The file's path below the models folder is its asset key (`staging/orders.sql` ->
`staging/orders`); queries refer to it as `staging.orders`.

Table references are read from the query's scopes (FROM, JOIN, subqueries, CTE bodies): a name a
CTE defines is not a table. Pure: no Dagster, no Spark.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.optimizer.scope import build_scope

from dagster_partlake.errors import SqlModelError

DIALECT = "spark"
_DIRECTIVE = re.compile(r"^--\s*@(?P<name>[A-Za-z_]\w*)\s*(?P<colon>:?)\s*(?P<value>.*?)\s*$")
_KEY_PART = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Directive:
    """`-- @name: value` on `line` (1-based)."""

    name: str
    value: str
    line: int


@dataclass(frozen=True)
class TableRef:
    """A table the query reads: an asset key, first referenced on `line`."""

    key: tuple[str, ...]
    line: int

    @property
    def name(self) -> str:
        """As written in SQL: `staging.orders`."""
        return ".".join(self.key)

    @property
    def input_name(self) -> str:
        """The Dagster input name and the base of its view name: `staging__orders`."""
        return "__".join(self.key)


@dataclass(frozen=True)
class ModelFile:
    """A parsed model file."""

    path: str  # as messages show it
    key: tuple[str, ...]
    text: str
    directives: tuple[Directive, ...]
    tree: exp.Query
    refs: tuple[TableRef, ...]  # distinct tables, in order of first reference
    line: int  # the query's first line

    @property
    def name(self) -> str:
        """The asset key as a user string: `staging/orders`."""
        return "/".join(self.key)

    @property
    def reference(self) -> str:
        """How other models refer to it: `staging.orders`."""
        return ".".join(self.key)

    def error(self, line: int, message: str) -> SqlModelError:
        return SqlModelError(self.path, line, message)


def model_key(relative: Path, shown: str) -> tuple[str, ...]:
    """The asset key of a model file from its path below the models folder.

    Raises:
        SqlModelError: a folder or file name that SQL could not refer to.
    """
    parts = (*relative.parent.parts, relative.stem)
    for part in parts:
        if not _KEY_PART.match(part):
            raise SqlModelError(
                shown,
                1,
                f"the name {part!r} in the model's path cannot be referred to from SQL; rename "
                "it with letters, digits and underscores only (it becomes part of the asset key).",
            )
    return tuple(parts)


def read_model(path: Path, key: tuple[str, ...], shown: str) -> ModelFile:
    """Read and parse one model file.

    Raises:
        SqlModelError: a malformed directive line, SQL that does not parse, or not exactly one
            query.
    """
    text = path.read_text(encoding="utf-8")
    directives, first = _directives(text, shown)
    tree = _parse(text, shown, first)
    refs = _references(tree)
    return ModelFile(shown, key, text, tuple(directives), tree, refs, first)


def _directives(text: str, shown: str) -> tuple[list[Directive], int]:
    """The directives of the leading comment block and the line after the block."""
    found: list[Directive] = []
    lines = text.splitlines()
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        if not line.startswith("--"):
            return found, number
        match = _DIRECTIVE.match(line)
        if match is None:
            if re.match(r"^--\s*@", line):
                raise SqlModelError(
                    shown, number, f"{line!r} is not a directive; write `-- @name: value`."
                )
            continue
        if not match["colon"]:
            raise SqlModelError(
                shown,
                number,
                f"directive @{match['name']} lacks its colon; write `-- @{match['name']}: "
                f"{match['value'] or 'value'}`.",
            )
        found.append(Directive(match["name"], match["value"], number))
    return found, len(lines) + 1


def _parse(text: str, shown: str, first: int) -> exp.Query:
    try:
        statements = [s for s in sqlglot.parse(text, read=DIALECT) if s is not None]
    except ParseError as error:
        detail = error.errors[0] if error.errors else {}
        line = int(detail.get("line") or first)
        description = str(detail.get("description") or error).split(". Line")[0]
        raise SqlModelError(
            shown, line, f"the SQL does not parse (Spark dialect): {description}."
        ) from error
    except TokenError as error:
        raise SqlModelError(
            shown, first, f"the SQL does not parse (Spark dialect): {error}."
        ) from error
    if not statements:
        raise SqlModelError(shown, first, "the file has no query; write one SELECT.")
    if len(statements) > 1:
        raise SqlModelError(
            shown,
            _line_of(statements[1], first),
            f"the file holds {len(statements)} statements; a model is exactly one query.",
        )
    tree = statements[0]
    if not isinstance(tree, exp.Query):
        raise SqlModelError(
            shown,
            first,
            f"the statement is a {tree.key.upper()}, but a model is one query (SELECT or WITH "
            "... SELECT): partlake writes its result as the model's kind says.",
        )
    return tree


def _references(tree: exp.Query) -> tuple[TableRef, ...]:
    """The tables the query reads, CTE names excluded, each with its first line."""
    scope = build_scope(tree)
    if scope is None:
        return ()
    seen: dict[tuple[str, ...], int] = {}
    for each in scope.traverse():
        for source in each.sources.values():
            if isinstance(source, exp.Table) and source.name:
                key = table_key(source)
                line = _line_of(source, 0)
                if key not in seen or (line and line < seen[key]):
                    seen[key] = line
    return tuple(TableRef(key, line) for key, line in seen.items())


def table_key(table: exp.Table) -> tuple[str, ...]:
    """`catalog.db.name` -> (catalog, db, name), absent parts left out."""
    return tuple(part for part in (table.catalog, table.db, table.name) if part)


def table_nodes(tree: exp.Expr) -> list[exp.Table]:
    """The table (not CTE) references of a query, every occurrence."""
    scope = build_scope(tree)
    if scope is None:
        return []
    return [
        source
        for each in scope.traverse()
        for source in each.sources.values()
        if isinstance(source, exp.Table) and source.name
    ]


def _line_of(node: exp.Expr, default: int) -> int:
    for each in (node, *node.find_all(exp.Identifier)):
        line = (each.meta or {}).get("line") if hasattr(each, "meta") else None
        if line:
            return int(line)
    return default
