"""The directives of a model file, each mapped onto what a Python asset declares.

| directive | example | becomes |
| --- | --- | --- |
| `@kind` | `merge` | metadata `partlake/kind` |
| `@unique_key` | `order_id, line` | metadata `partlake/unique_key` |
| `@partitions` | `daily_region` | the `partitions_def` named so in `sql_assets(partitions=...)` |
| `@partition_by` | `region` (empty: none) | metadata `partlake/partition_by` |
| `@constraint` | `not_null(order_id)` | an entry of metadata `partlake/constraints` |
| `@audit` | `column_sum(revenue, 0.5)` | an entry of metadata `partlake/audits` |
| `@incremental` | `log`, `watermark(updated_at)` | metadata `partlake/incremental` |
| `@depends_on` | `daily_region_stats (months)` | the input's partition mapping |
| `@description` | text (may repeat: lines) | the asset's description, above its SQL |
| `@group` | `sql` | the asset's group |
| `@owners` | `team:analytics, ann@example.com` | the asset's owners |
| `@tags` | `domain=sales, pii` | the asset's tags |

Gate forms (`@constraint`, `@audit`) follow the entries of `dagster_partlake.gates.spec`:
`not_null(a, b)`, `unique(a)`, `accepted_values(region, 'eu', 'us')`, `expression(amount >= 0,
name=non_negative)`, `row_count(min=1, max=1000)` (or `row_count(>, 0)`), and the audits
`row_count_change(0.5)`, `no_partition_emptied()`, `column_sum(revenue, 0.5)`,
`column_mean(amount, max_change=0.2)`; each may add `severity=warn` and `name=...`.

Each directive is validated by the same code that validates a Python asset's metadata (`gates_of`,
`model_kind`, `incremental_of`), and an error names the file and line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from dagster_partlake.errors import PartlakeConfigError
from dagster_partlake.gates.spec import (
    AUDIT_TYPES,
    AUDITS_KEY,
    CONSTRAINT_TYPES,
    CONSTRAINTS_KEY,
    gates_of,
)
from dagster_partlake.incremental.spec import INCREMENTAL_KEY, incremental_of
from dagster_partlake.kinds.spec import (
    KIND_KEY,
    KINDS,
    PARTITION_BY_KEY,
    UNIQUE_KEY_KEY,
    model_kind,
)
from dagster_partlake.sql.parse import Directive, ModelFile

DIRECTIVES = (
    "kind",
    "unique_key",
    "partitions",
    "partition_by",
    "constraint",
    "audit",
    "incremental",
    "depends_on",
    "description",
    "group",
    "owners",
    "tags",
)
_REPEATABLE = ("constraint", "audit", "depends_on", "description")
# What changes the rows a model writes, or which of them are accepted: part of its code version.
DATA_DIRECTIVES = (
    "kind",
    "unique_key",
    "partitions",
    "partition_by",
    "constraint",
    "audit",
    "incremental",
    "depends_on",
)
_COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CALL = re.compile(r"^(?P<name>[A-Za-z_]\w*)\s*(?:\((?P<args>.*)\))?$", re.DOTALL)
_KEYWORD = re.compile(r"^(?P<key>[A-Za-z_]\w*)\s*=(?!=)\s*(?P<value>.*)$", re.DOTALL)
_DEPENDS = re.compile(r"^(?P<table>[A-Za-z_][\w.]*)\s*\(\s*(?P<mapping>[A-Za-z_]\w*)\s*\)$")
_COMPARISONS = (">=", "<=", ">", "<", "=")

# A directive argument: 'eu' -> str, 3 -> int, 0.5 -> float, true -> bool.
_Value: TypeAlias = str | int | float | bool


@dataclass(frozen=True)
class DependsOn:
    """`@depends_on: table (mapping)`."""

    table: str
    mapping: str
    line: int


@dataclass(frozen=True)
class ModelSpec:
    """What a model's directives declare."""

    metadata: dict[str, Any]  # partlake/* entries, as a Python asset declares them
    partitions: str | None = None
    depends_on: tuple[DependsOn, ...] = ()
    description: str | None = None
    group: str | None = None
    owners: tuple[str, ...] = ()
    tags: dict[str, str] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)  # directive -> its (first) line

    def line(self, name: str, default: int = 1) -> int:
        return self.lines.get(name, default)


def model_spec(model: ModelFile, partitions: Sequence[str] | None) -> ModelSpec:
    """The model's directives, validated.

    Args:
        model: the parsed file.
        partitions: the names `@partitions` may use (None: not checked, as `partlake sql lint`
            without a code location).

    Raises:
        SqlModelError: an unknown or repeated directive, a value that does not fit, or a kind
            that does not fit the model's partitions.
    """
    by_name: dict[str, list[Directive]] = {}
    for directive in model.directives:
        if directive.name not in DIRECTIVES:
            raise model.error(
                directive.line,
                f"unknown directive @{directive.name}; the directives are "
                f"{', '.join('@' + d for d in DIRECTIVES)}.",
            )
        seen = by_name.setdefault(directive.name, [])
        if seen and directive.name not in _REPEATABLE:
            raise model.error(
                directive.line,
                f"@{directive.name} is already set on line {seen[0].line}; keep one.",
            )
        seen.append(directive)
    one = {name: found[0] for name, found in by_name.items()}
    metadata = _kind_metadata(model, one)
    metadata.update(_gates(model, by_name, metadata.get(KIND_KEY)))
    if "incremental" in one:
        metadata[INCREMENTAL_KEY] = _incremental(model, one["incremental"])
    partitions_name = _partitions(model, one.get("partitions"), partitions)
    _check_kind(model, metadata, one, partitioned=partitions_name is not None)
    return ModelSpec(
        metadata=metadata,
        partitions=partitions_name,
        depends_on=tuple(_depends_on(model, d) for d in by_name.get("depends_on", [])),
        description="\n".join(d.value for d in by_name.get("description", [])) or None,
        group=_word(model, one["group"]) if "group" in one else None,
        owners=_owners(model, one["owners"]) if "owners" in one else (),
        tags=_tags(model, one["tags"]) if "tags" in one else {},
        lines={name: found[0].line for name, found in by_name.items()},
    )


def directives_fingerprint(model: ModelFile) -> str:
    """The directives that change what the model writes, in a canonical text."""
    chosen = sorted(
        (d.name, " ".join(d.value.split())) for d in model.directives if d.name in DATA_DIRECTIVES
    )
    return json.dumps(chosen)


def _kind_metadata(model: ModelFile, one: Mapping[str, Directive]) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    if "kind" in one:
        kind = one["kind"].value
        if kind not in KINDS:
            raise model.error(
                one["kind"].line,
                f"@kind {kind!r} is not a model kind; use one of {', '.join(KINDS)}.",
            )
        metadata[KIND_KEY] = kind
    if "unique_key" in one:
        metadata[UNIQUE_KEY_KEY] = _columns(model, one["unique_key"], allow_empty=False)
    if "partition_by" in one:
        metadata[PARTITION_BY_KEY] = _columns(model, one["partition_by"], allow_empty=True)
    return metadata


def _check_kind(
    model: ModelFile, metadata: dict[str, Any], one: Mapping[str, Directive], *, partitioned: bool
) -> None:
    try:
        kind = model_kind(metadata, partitioned=partitioned, asset_name=model.name)
        gates_of(metadata, asset_name=model.name, kind=kind.kind)
    except PartlakeConfigError as error:
        where = next(
            (one[n].line for n in ("kind", "partitions", "partition_by") if n in one),
            one["audit"].line if "audit" in one else 1,
        )
        raise model.error(where, _unpython(str(error), partitioned)) from error


def _unpython(message: str, partitioned: bool) -> str:
    """A kind error in the words of a model file rather than of a Python asset."""
    return (
        message.replace("drop the partitions_def", "remove @partitions")
        .replace("give the asset a partitions_def", "add @partitions")
        .replace(
            "metadata={'partlake/unique_key': ['id']}",
            "`-- @unique_key: id`",
        )
        .replace("sets 'partlake/partition_by'", "sets @partition_by")
        .replace("declares partlake/audits", "declares @audit")
        .replace("use partlake/constraints", "use @constraint")
    )


def _partitions(
    model: ModelFile, directive: Directive | None, names: Sequence[str] | None
) -> str | None:
    if directive is None:
        return None
    name = directive.value
    if names is not None and name not in names:
        known = ", ".join(sorted(names)) or "none (pass partitions={...} to sql_assets)"
        raise model.error(
            directive.line,
            f"@partitions {name!r} is not one of the partitions given to sql_assets: {known}.",
        )
    return _word(model, directive)


def _word(model: ModelFile, directive: Directive) -> str:
    if not _COLUMN.match(directive.value):
        raise model.error(
            directive.line,
            f"@{directive.name} {directive.value!r} must be one name (letters, digits, "
            "underscores).",
        )
    return directive.value


def _columns(model: ModelFile, directive: Directive, *, allow_empty: bool) -> list[str]:
    value = directive.value.strip()
    if value in ("", "()") and allow_empty:
        return []
    columns = [c.strip() for c in value.split(",")]
    bad = [c for c in columns if not _COLUMN.match(c)]
    if bad or not columns:
        raise model.error(
            directive.line,
            f"@{directive.name} {directive.value!r} must be column names separated by commas, "
            f"e.g. `-- @{directive.name}: order_id`"
            + (" (or nothing, for no column)." if allow_empty else "."),
        )
    return columns


def _gates(
    model: ModelFile, by_name: Mapping[str, list[Directive]], kind: str | None
) -> dict[str, list[dict[str, object]]]:
    result: dict[str, list[dict[str, object]]] = {}
    for name, key in (("constraint", CONSTRAINTS_KEY), ("audit", AUDITS_KEY)):
        entries = []
        for directive in by_name.get(name, []):
            entry = _gate_entry(model, directive)
            try:
                gates_of({key: [entry]}, asset_name=model.name)
            except PartlakeConfigError as error:
                raise model.error(directive.line, str(error)) from error
            entries.append(entry)
        if entries:
            result[key] = entries
    try:
        gates_of(result, asset_name=model.name)  # names unique across the model's gates
    except PartlakeConfigError as error:
        lines = [d.line for n in ("constraint", "audit") for d in by_name.get(n, [])]
        raise model.error(max(lines), str(error)) from error
    return result


def _gate_entry(model: ModelFile, directive: Directive) -> dict[str, object]:
    """`not_null(a, b)` -> {"not_null": ["a", "b"]} (the entries of `gates.spec`)."""
    family = directive.name
    types = CONSTRAINT_TYPES if family == "constraint" else AUDIT_TYPES
    call = _CALL.match(directive.value.strip())
    example = "not_null(order_id)" if family == "constraint" else "column_sum(revenue, 0.5)"
    if call is None:
        raise model.error(
            directive.line,
            f"@{family} {directive.value!r} is not a gate; write it as a call, e.g. "
            f"`-- @{family}: {example}`.",
        )
    gate = call["name"]
    if gate not in types:
        hint = ""
        if family == "audit" and gate in CONSTRAINT_TYPES:
            hint = (
                f" {gate} checks the written rows, so it is a constraint here: write "
                f"`-- @constraint: {directive.value}`."
            )
        raise model.error(
            directive.line,
            f"@{family} {gate!r} is not one of the {family}s {', '.join(types)}.{hint}",
        )
    args, options = _arguments(model, directive, call["args"] or "")
    body = _gate_body(model, directive, gate, args, options)
    entry: dict[str, object] = {gate: body}
    for option in ("severity", "name"):
        if option in options:
            entry[option] = options.pop(option)
    if options:
        raise model.error(
            directive.line,
            f"@{family} {gate} has unknown option(s) {', '.join(sorted(options))}; the options "
            "are severity=warn and name=...",
        )
    return entry


def _gate_body(
    model: ModelFile,
    directive: Directive,
    gate: str,
    args: list[_Value],
    options: dict[str, _Value],
) -> object:
    def fail(form: str) -> PartlakeConfigError:
        return model.error(
            directive.line,
            f"@{directive.name} {directive.value!r} does not fit; write `{form}`.",
        )

    if gate in ("not_null", "unique"):
        if not args:
            raise fail(f"{gate}(column, ...)")
        return [str(a) for a in args]
    if gate == "accepted_values":
        if len(args) < 2:
            raise fail("accepted_values(column, 'value', ...)")
        return {str(args[0]): args[1:]}
    if gate == "expression":
        if len(args) != 1:
            raise fail("expression(amount >= 0, name=non_negative)")
        return str(args[0])
    if gate == "row_count":
        return _row_count(args, options, fail)
    if gate == "no_partition_emptied":
        if args:
            raise fail("no_partition_emptied()")
        return True
    if gate == "row_count_change":
        change = options.pop("max_change", args[0] if len(args) == 1 else None)
        if change is None or len(args) > 1:
            raise fail("row_count_change(0.5)")
        return {"max_change": change}
    # column_sum, column_mean
    change = options.pop("max_change", args[1] if len(args) == 2 else None)
    if change is None or not args or len(args) > 2:
        raise fail(f"{gate}(column, 0.5)")
    return {"column": str(args[0]), "max_change": change}


def _row_count(
    args: list[_Value], options: dict[str, _Value], fail: Callable[[str], PartlakeConfigError]
) -> Mapping[str, _Value]:
    """`row_count(min=1, max=9)`, or OndatraSQL's comparison `row_count(>, 0)`."""
    if args and not options.keys() & {"min", "max"}:
        if len(args) != 2 or args[0] not in _COMPARISONS or not isinstance(args[1], int):
            raise fail("row_count(>, 0)` or `row_count(min=1, max=1000)")
        op, n = args[0], args[1]
        bounds = {
            ">": {"min": n + 1},
            ">=": {"min": n},
            "<": {"max": n - 1},
            "<=": {"max": n},
            "=": {"min": n, "max": n},
        }[op]
        return bounds
    if args:
        raise fail("row_count(min=1, max=1000)")
    return {k: options.pop(k) for k in ("min", "max") if k in options}


def _arguments(
    model: ModelFile, directive: Directive, text: str
) -> tuple[list[_Value], dict[str, _Value]]:
    """Top-level comma-separated arguments; `key=value` for the known option names."""
    options_known = ("severity", "name", "min", "max", "max_change")
    args: list[_Value] = []
    options: dict[str, _Value] = {}
    for part in _split(text, model, directive):
        keyword = _KEYWORD.match(part)
        if keyword is not None and keyword["key"] in options_known:
            options[keyword["key"]] = _literal(keyword["value"].strip())
        elif part:
            args.append(_literal(part))
    return args, options


def _split(text: str, model: ModelFile, directive: Directive) -> list[str]:
    parts, depth, quote, current = [], 0, "", ""
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"`":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        current += char
    if quote or depth:
        raise model.error(
            directive.line, f"@{directive.name} {directive.value!r} has an unclosed quote or ("
        )
    if current.strip():
        parts.append(current.strip())
    return parts


def _literal(text: str) -> _Value:
    """'eu' -> 'eu', 3 -> 3, 0.5 -> 0.5, true -> True; anything else stays text."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if re.fullmatch(r"-?\d+\.\d*|-?\.\d+", text):
        return float(text)
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


def _incremental(model: ModelFile, directive: Directive) -> str | dict[str, object]:
    """`log`, `log(allow_full_reread)` or `watermark(column)`."""
    value = directive.value.strip()
    parsed: str | dict[str, object]
    if value == "log":
        parsed = "log"
    elif value == "log(allow_full_reread)":
        parsed = {"mode": "log", "allow_full_reread": True}
    elif (found := re.fullmatch(r"watermark\(\s*([A-Za-z_]\w*)\s*\)", value)) is not None:
        parsed = {"column": found[1]}
    else:
        raise model.error(
            directive.line,
            f"@incremental {value!r} is not an incremental mode; use `log` (the files added "
            "since the last run), `log(allow_full_reread)` or `watermark(updated_at)`.",
        )
    try:
        incremental_of(None, {INCREMENTAL_KEY: parsed}, input_name="*", asset_name=model.name)
    except PartlakeConfigError as error:
        raise model.error(directive.line, str(error)) from error
    return parsed


def _depends_on(model: ModelFile, directive: Directive) -> DependsOn:
    found = _DEPENDS.match(directive.value.strip())
    if found is None:
        raise model.error(
            directive.line,
            f"@depends_on {directive.value!r} does not fit; write `-- @depends_on: "
            "daily_region_stats (months)`: a table the query reads and a mapping name.",
        )
    return DependsOn(found["table"], found["mapping"], directive.line)


def _owners(model: ModelFile, directive: Directive) -> tuple[str, ...]:
    owners = tuple(o.strip() for o in directive.value.split(",") if o.strip())
    for owner in owners:
        if not (re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", owner) or owner.startswith("team:")):
            raise model.error(
                directive.line,
                f"@owners {owner!r} is neither an email address nor a team name prefixed "
                "with 'team:' (Dagster's owners).",
            )
    if not owners:
        raise model.error(directive.line, "@owners is empty; name at least one owner.")
    return owners


def _tags(model: ModelFile, directive: Directive) -> dict[str, str]:
    tags = {}
    for part in directive.value.split(","):
        key, _, value = part.strip().partition("=")
        key, value = key.strip(), value.strip()
        if not re.fullmatch(r"[A-Za-z0-9_.\-/]{1,63}", key) or not re.fullmatch(
            r"[A-Za-z0-9_.\-]{0,63}", value
        ):
            raise model.error(
                directive.line,
                f"@tags {part.strip()!r} is not a Dagster tag; write `key=value` or `key` "
                "(letters, digits, '_', '-', '.'; at most 63 characters each).",
            )
        tags[key] = value
    return tags
