"""A models folder read as a whole: every `.sql` file parsed, its directives validated, its
table references resolved to models or other assets, and the models in dependency order.

Everything that can be wrong with a folder is found here, before any asset is built, and raised
as one `SqlModelError` naming the file and line: a bad directive or value, SQL that does not
parse, two files giving the same asset key, a table that is no asset, a cycle. `partlake sql
lint` calls `lint_folder`, which collects every such error instead of stopping at the first.
Pure: no Dagster definitions are built, no Spark.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dagster_partlake.errors import PartlakeConfigError, SqlModelError
from dagster_partlake.sql.directives import ModelSpec, directives_fingerprint, model_spec
from dagster_partlake.sql.parse import DIALECT, ModelFile, TableRef, model_key, read_model

# Mapping names every model may use in `@depends_on` besides those given in `mappings=`.
BUILTIN_MAPPINGS = ("all", "identity")


@dataclass(frozen=True)
class SqlModel:
    """One validated model: its file, its directives, and its upstream tables resolved."""

    file: ModelFile
    spec: ModelSpec
    upstream: tuple[tuple[TableRef, tuple[str, ...]], ...]  # (reference, the asset key it names)
    code_version: str

    @property
    def key(self) -> tuple[str, ...]:
        return self.file.key

    @property
    def name(self) -> str:
        return self.file.name

    def mapping_for(self, ref: TableRef) -> str | None:
        """The mapping name `@depends_on` gives the reference (None: the default)."""
        for depends in self.spec.depends_on:
            if depends.table.lower() == ref.name.lower():
                return depends.mapping
        return None


def model_files(path: str | Path) -> list[tuple[Path, Path, str]]:
    """Every `.sql` file under `path`, sorted: (file, path below `path`, path as shown).

    Raises:
        PartlakeConfigError: `path` is not a folder.
    """
    root = Path(path)
    if not root.is_dir():
        raise PartlakeConfigError(
            f"models folder {path} does not exist or is not a folder; pass the folder that holds "
            "the .sql model files."
        )
    found = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() == ".sql")
    return [(p, p.relative_to(root), _shown(p)) for p in found]


def _shown(file: Path) -> str:
    """A file as messages name it: relative to the working directory when below it."""
    relative = os.path.relpath(file.resolve())
    return relative if not relative.startswith("..") else str(file.resolve())


def load_models(
    path: str | Path,
    *,
    partitions: Collection[str] | None,
    mappings: Collection[str] | None,
    upstream: Collection[tuple[str, ...]] | None,
) -> list[SqlModel]:
    """The models of a folder, validated, upstream models first.

    Args:
        path: the models folder.
        partitions: names `@partitions` may use (None: not checked).
        mappings: names `@depends_on` may use besides `all` and `identity` (None: not checked).
        upstream: keys of the other assets models may read (None: references to tables that
            are no model are not checked).

    Raises:
        SqlModelError: the first problem found, naming the file and line.
    """
    files = []
    for file, relative, shown in model_files(path):
        files.append(read_model(file, model_key(relative, shown), shown))
    _check_duplicates(files, upstream or ())
    models = [
        _model(file, files, partitions=partitions, mappings=mappings, upstream=upstream)
        for file in files
    ]
    return _ordered(models)


def lint_folder(
    path: str | Path,
    *,
    partitions: Collection[str] | None = None,
    mappings: Collection[str] | None = None,
    upstream: Collection[tuple[str, ...]] | None = None,
) -> tuple[int, list[SqlModelError]]:
    """Every problem of a folder, file by file (a file's first problem), then those between files.

    Returns:
        (the number of files checked, the errors found).
    """
    errors: list[SqlModelError] = []
    files = []
    entries = model_files(path)
    keys: list[tuple[str, ...]] = []  # every file's key, parsed or not: references to it resolve
    for path_of, relative, shown in entries:
        try:
            key = model_key(relative, shown)
            keys.append(key)
            parsed = read_model(path_of, key, shown)
            model_spec(parsed, list(partitions) if partitions is not None else None)
            files.append(parsed)
        except SqlModelError as error:
            errors.append(error)
    duplicates = _duplicates(files, upstream or ())
    errors.extend(error for _file, error in duplicates)
    # A duplicate is left out, so the models that remain can still be checked, cycles included.
    files = [f for f in files if all(f is not d for d, _ in duplicates)]
    models = []
    broken = [k for k in keys if k not in {f.key for f in files}]
    known = None if upstream is None else [*upstream, *broken]
    for file in files:
        try:
            models.append(
                _model(file, files, partitions=partitions, mappings=mappings, upstream=known)
            )
        except SqlModelError as error:
            errors.append(error)
    # References to files with a problem lead nowhere here, so a cycle among the others shows.
    try:
        _ordered(models)
    except SqlModelError as error:
        errors.append(error)
    return len(entries), errors


def _model(
    file: ModelFile,
    files: Sequence[ModelFile],
    *,
    partitions: Collection[str] | None,
    mappings: Collection[str] | None,
    upstream: Collection[tuple[str, ...]] | None,
) -> SqlModel:
    spec = model_spec(file, list(partitions) if partitions is not None else None)
    known = {_lower(f.key): f.key for f in files}
    external = {_lower(k): k for k in upstream or ()}
    resolved = []
    for ref in file.refs:
        target = known.get(_lower(ref.key)) or external.get(_lower(ref.key))
        if target is None:
            if upstream is None:
                target = ref.key  # not checked: `partlake sql lint` without a code location
            else:
                raise file.error(ref.line, _unknown_table(ref, files, upstream))
        if target == file.key:
            raise file.error(
                ref.line,
                f"model {file.reference} reads itself; a model cannot read its own table "
                "(write that as a Python asset with a self-dependency).",
            )
        resolved.append((ref, target))
    names = {_lower(ref.key) for ref in file.refs}
    for depends in spec.depends_on:
        if tuple(depends.table.lower().split(".")) not in names:
            raise file.error(
                depends.line,
                f"@depends_on names {depends.table}, which the query does not read; it reads "
                f"{', '.join(r.name for r in file.refs) or 'no table'}.",
            )
        allowed = (*BUILTIN_MAPPINGS, *(mappings or ()))
        if mappings is not None and depends.mapping not in allowed:
            raise file.error(
                depends.line,
                f"@depends_on mapping {depends.mapping!r} is not one of {', '.join(allowed)}; "
                "pass it to sql_assets(mappings={...}).",
            )
    return SqlModel(file, spec, tuple(resolved), _code_version(file))


def _unknown_table(
    ref: TableRef, files: Sequence[ModelFile], upstream: Collection[tuple[str, ...]]
) -> str:
    models = ", ".join(f.reference for f in files)
    others = ", ".join(sorted(".".join(k) for k in upstream)) or "none"
    return (
        f"table {ref.name} is no asset: it is neither a model of this folder ({models}) nor "
        f"one of the other assets given to sql_assets(upstream=...) ({others}). Add the model "
        f"file {'/'.join(ref.key)}.sql, pass the asset in upstream=, or fix the name."
    )


def _check_duplicates(files: Sequence[ModelFile], upstream: Collection[tuple[str, ...]]) -> None:
    for _file, error in _duplicates(files, upstream)[:1]:
        raise error


def _duplicates(
    files: Sequence[ModelFile], upstream: Collection[tuple[str, ...]]
) -> list[tuple[ModelFile, SqlModelError]]:
    """Each file whose asset key an earlier file or another asset already has, with its error.
    Spark names are case-insensitive: two keys equal but for case are the same table."""
    found = []
    seen: dict[tuple[str, ...], ModelFile] = {}
    external = {_lower(k): k for k in upstream}
    for file in files:
        lowered = _lower(file.key)
        if lowered in seen:
            found.append(
                (
                    file,
                    file.error(
                        1,
                        f"gives asset key {file.name}, as {seen[lowered].path} does (names are "
                        "case-insensitive in SQL); rename one of the files.",
                    ),
                )
            )
        elif lowered in external:
            found.append(
                (
                    file,
                    file.error(
                        1,
                        f"gives asset key {file.name}, which another asset passed to sql_assets "
                        f"(upstream=...) already has ({'/'.join(external[lowered])}); rename the "
                        "file or the other asset.",
                    ),
                )
            )
        else:
            seen[lowered] = file
    return found


def _ordered(models: Sequence[SqlModel]) -> list[SqlModel]:
    """Upstream models first; a cycle is an error at the reference that closes it."""
    by_key = {m.key: m for m in models}
    done: dict[tuple[str, ...], bool] = {}  # False: on the current path
    order: list[SqlModel] = []

    def visit(model: SqlModel, path: list[SqlModel]) -> None:
        state = done.get(model.key)
        if state:
            return
        if state is False:
            start = next(i for i, m in enumerate(path) if m.key == model.key)
            cycle = [*path[start:], model]
            last = path[-1]
            ref = next(r for r, target in last.upstream if target == model.key)
            raise last.file.error(
                ref.line,
                "the models form a cycle: "
                + " -> ".join(m.file.reference for m in cycle)
                + f"; a model cannot read, directly or not, its own output. Remove the "
                f"reference to {ref.name} or split the model.",
            )
        done[model.key] = False
        for _ref, target in model.upstream:
            if target in by_key:
                visit(by_key[target], [*path, model])
        done[model.key] = True
        order.append(model)

    for model in models:
        visit(model, [])
    return order


def _code_version(file: ModelFile) -> str:
    """A hash of the query as sqlglot prints it (no comments, normalized whitespace) and of
    the directives that change what is written: a whitespace or comment edit keeps it."""
    normalized = file.tree.sql(dialect=DIALECT, comments=False)
    text = normalized + "\n" + directives_fingerprint(file)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _lower(key: Sequence[str]) -> tuple[str, ...]:
    return tuple(part.lower() for part in key)


def models_by_key(models: Sequence[SqlModel]) -> Mapping[tuple[str, ...], SqlModel]:
    return {m.key: m for m in models}
