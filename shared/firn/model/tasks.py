"""What a compaction task is, as data that crosses process boundaries.

A ``TaskSpec`` is everything an executor needs to run one task without asking the
catalog: the input files (with the seq the merge rule needs), the target node and key
range, S, the output size and prefix. It is stored with the task row (JSONB) and
carried into Spark tasks, and a ``TaskResult`` comes back the same way.

They are plain frozen dataclasses with a JSON form (``to_dict``/``from_dict``), not
pydantic models: this module runs in Spark's Python workers, which get Firn's code
as a zip (``firn.engine.shipping``) and have only pyspark, pyarrow and numpy
installed, so nothing here may import a compiled package they lack.
Key bounds are keys in their catalog JSON form (``firn.model.values``); the lower bound
is inclusive, the upper exclusive, ``None`` unbounded.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from firn.model.files import CODECS, DEFAULT_CODEC, DeletionVector, FileEntry
from firn.model.tree import Node


class Kind(StrEnum):
    """What a compaction does, the one list of them: the partition trigger's answer,
    a plan's and a task's kind, and the key of the policy registry
    (``firn.engine.policies``). A ``StrEnum``, so a kind compares equal to its name
    and travels in JSON and SQL as that name."""

    MAJOR = "major"
    """Fold change runs and the base they meet into new base files."""
    MINOR = "minor"
    """Merge change runs among themselves; the base is untouched."""
    FULL = "full"
    """Rewrite the base whole (re-bucketing to ``base.buckets``)."""
    BIN_PACK = "bin-pack"
    """A table without a primary key: pack small files into larger ones."""


KINDS: tuple[str, ...] = tuple(Kind)

_T = TypeVar("_T")


def _fields_of(cls: type[Any], data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` as the keyword arguments of ``cls``: an unknown or missing field is a
    ``ValueError`` naming it (the JSON form is Firn's own, so this means a bug or a
    spec written by an incompatible version)."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{cls.__name__} must be a JSON object, got {type(data).__name__}")
    known, required = _field_names(cls)
    unknown = sorted(data.keys() - known)
    if unknown:
        raise ValueError(f"{cls.__name__} has no field(s) {unknown}")
    missing = sorted(required - data.keys())
    if missing:
        raise ValueError(f"{cls.__name__} is missing field(s) {missing}")
    return dict(data)


_FIELD_NAMES: dict[type[Any], tuple[tuple[str, ...], frozenset[str]]] = {}
"""``_field_names``'s memory: a plain dict, since mypy takes ``functools.cache``'s
wrapper to want ``Hashable`` arguments, which ``type[Any]`` is not to it."""


def _field_names(cls: type[Any]) -> tuple[tuple[str, ...], frozenset[str]]:
    """The names of ``cls``'s fields in order, and of those without a default: read once per
    class (a task spec's files are parsed by the dozen; asking ``dataclasses`` for
    the fields each time was a tenth of a small task's bookkeeping)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        fields = dataclasses.fields(cls)
        required = (
            f.name
            for f in fields
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )
        names = _FIELD_NAMES[cls] = (tuple(f.name for f in fields), frozenset(required))
    return names


def _key(value: Any) -> list[Any] | None:
    return None if value is None else list(value)


def _to_dict(obj: Any) -> dict[str, Any]:
    """What ``dataclasses.asdict`` gives, without its deep copy of every value: a
    spec of 11 input files and a table definition took 0.58 ms to JSON that way
    (``TaskSpec.to_dict`` converted its input files twice), 0.17 ms now."""
    return {name: _plain(getattr(obj, name)) for name in _field_names(type(obj))[0]}


def _plain(value: Any) -> Any:
    """``value`` as ``asdict`` leaves it: dataclasses as dicts, containers copied."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _to_dict(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return copy.deepcopy(value)


@dataclass(frozen=True)
class InputFile:
    """One file a task reads."""

    file_id: int
    path: str
    """Relative to the table's location."""
    file_type: str
    """I, D or B."""
    node_m: int
    node_i: int
    seq: int
    size_bytes: int
    record_count: int
    min_key: list[Any] | None = None
    max_key: list[Any] | None = None
    deletion_vector: DeletionVector | None = None
    """Base files: the rows to skip (``firn.io.deletion_vectors``)."""
    schema_id: int = 0
    """The schema version the file was written under."""

    @property
    def node(self) -> Node:
        return Node(self.node_m, self.node_i)

    @classmethod
    def of(cls, entry: FileEntry) -> InputFile:
        return cls(
            file_id=entry.file_id,
            path=entry.path,
            file_type=entry.file_type,
            node_m=entry.node.m,
            node_i=entry.node.i,
            seq=entry.seq,
            size_bytes=entry.size_bytes,
            record_count=entry.record_count,
            min_key=entry.min_key,
            max_key=entry.max_key,
            deletion_vector=entry.deletion_vector,
            schema_id=entry.schema_id,
        )

    def to_dict(self) -> dict[str, Any]:
        out = _to_dict(self)
        if out["deletion_vector"] is None:
            del out["deletion_vector"]  # most files have none: specs stay as they were
        if out["schema_id"] == 0:
            del out["schema_id"]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InputFile:
        values = _fields_of(cls, data)
        for bound in ("min_key", "max_key"):
            values[bound] = _key(values.get(bound))
        values["deletion_vector"] = DeletionVector.of(values.get("deletion_vector"))
        return cls(**values)


@dataclass(frozen=True)
class OutputFile:
    """One file a task wrote, with the stats the catalog registers."""

    path: str
    """Relative to the table's location."""
    file_type: str
    node_m: int
    node_i: int
    seq: int
    """The greatest change seq folded into the file."""
    size_bytes: int
    record_count: int
    min_key: list[Any] | None
    max_key: list[Any] | None
    deletion_vector: DeletionVector | None = None
    """The rows of the file a read skips (base files only)."""
    replaces: int | None = None
    """A base file the task read and kept instead of rewriting it: its ``file_id``.
    The file is not new (``path`` is the input's); the output says which vector it
    carries from this plan on, a new one written by the task or the one it had."""

    @property
    def carried(self) -> bool:
        """Whether this names an input base file kept, not a file the task wrote."""
        return self.replaces is not None

    def written_paths(self) -> list[str]:
        """The files this output stands for that its attempt may have written: the
        data file, or for a carried base file its vector (never the base file)."""
        if not self.carried:
            return [self.path]
        return [] if self.deletion_vector is None else [self.deletion_vector.path]

    def to_dict(self) -> dict[str, Any]:
        out = _to_dict(self)
        for optional in ("deletion_vector", "replaces"):
            if out[optional] is None:
                del out[optional]  # most outputs have neither: results stay as they were
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OutputFile:
        values = _fields_of(cls, data)
        for bound in ("min_key", "max_key"):
            values[bound] = _key(values[bound])
        values["deletion_vector"] = DeletionVector.of(values.get("deletion_vector"))
        return cls(**values)


@dataclass(frozen=True)
class TaskSpec:
    """One task of a plan: merge these inputs for this node and key range."""

    plan_id: int
    task_id: int
    table_id: int
    location: str
    """The table's storage root."""
    partition_key: str
    kind: Kind
    node_m: int
    """The target node, at the base write level."""
    node_i: int
    lower: list[Any] | None
    """Inclusive lower key bound, or none."""
    upper: list[Any] | None
    """Exclusive upper key bound, or none."""
    base_files: tuple[InputFile, ...]
    change_files: tuple[InputFile, ...]
    from_merged_seq: int
    """Change rows at or below this are merged."""
    to_seq: int
    """S: change rows above this are not this plan's."""
    target_file_size: int
    output_prefix: str
    """Unique per task; the attempt is appended."""
    cut_before: tuple[list[Any], ...] = ()
    """Keys no output file may span (untouched files start there)."""
    move: bool = False
    """A trivial move: each change file, whose key range overlaps no other input of
    its fold and no base file of its node, becomes a base file as it is (same path),
    once the kernel has checked that its keys are unique and in order; otherwise the
    files are merged into new base files like any fold."""
    vector_ratio: float = 0.0
    """Base files of the task's node that the changes touch may be kept, the rows
    they replace hidden by a deletion vector, while the vector hides less than this
    share of the file's rows (``firn.engine.vectors``); 0: every touched file is
    rewritten."""
    small_file_bytes: int = 0
    """A touched base file smaller than this is rewritten, never given a vector: the
    table's ``deletion-vectors.min-file-bytes`` (the name is the JSON field's, kept so
    that specs of plans open across an upgrade still load)."""
    rewrite: tuple[int, ...] = ()
    """Base files (ids) the task rewrites whatever its changes touch: small files the
    planner coalesces (``firn.model.tiering.coalesce_windows``), which a deletion
    vector would leave as small as they are."""
    compression: str = DEFAULT_CODEC
    """The Parquet codec of the task's output files: the table's ``file.compression``
    (specs planned before it existed write LZ4 as well)."""
    vertical_group: int = 0
    """A major task of a wide table merges vertically (``firn.engine.vertical``): its
    keys first, then this many value columns at a time; 0: row by row."""
    table: Mapping[str, Any] | None = None
    """The table's definition at the plan's schema version, in its JSON form
    (``TableSchema.to_dict``), with the earlier versions its inputs were written
    under: what the task writes with and reads its inputs by (executors have no
    catalog). None in specs planned before schema versions existed: the definition
    the executor is handed then, every input of version 0."""

    @property
    def schema_id(self) -> int:
        """The schema version the task's new files are written under."""
        return 0 if self.table is None else int(self.table["schema_id"])

    @property
    def node(self) -> Node:
        return Node(self.node_m, self.node_i)

    @property
    def input_bytes(self) -> int:
        return sum(f.size_bytes for f in (*self.base_files, *self.change_files))

    def moved_outputs(self) -> tuple[OutputFile, ...]:
        """The outputs a result of this task may name outside its attempt directory:
        its change files as base files, when it is a move."""
        return tuple(moved_output(f, self) for f in self.change_files) if self.move else ()

    def output_dir(self, attempt: int) -> str:
        """Where one attempt writes: never shared with another attempt or task."""
        return attempt_dir(self.output_prefix, attempt)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in _field_names(TaskSpec)[0]:
            value = getattr(self, name)
            if name in ("base_files", "change_files"):
                out[name] = [file.to_dict() for file in value]
            elif name != "table":
                out[name] = _plain(value)
            elif value is not None:
                out[name] = dict(value)
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TaskSpec:
        values = _fields_of(cls, data)
        if values["kind"] not in KINDS:
            raise ValueError(f"TaskSpec kind must be one of {KINDS}, got {values['kind']!r}")
        values["kind"] = Kind(values["kind"])
        values["lower"] = _key(values["lower"])
        values["upper"] = _key(values["upper"])
        for name in ("base_files", "change_files"):
            values[name] = tuple(InputFile.from_dict(f) for f in values[name])
        values["cut_before"] = tuple(list(k) for k in values.get("cut_before", ()))
        values["rewrite"] = tuple(int(i) for i in values.get("rewrite", ()))
        if values.get("compression", DEFAULT_CODEC) not in CODECS:
            raise ValueError(f"TaskSpec compression must be one of {CODECS}")
        return cls(**values)

    @classmethod
    def from_json(cls, text: str | bytes) -> TaskSpec:
        return cls.from_dict(json.loads(text))


def moved_output(f: InputFile, spec: TaskSpec) -> OutputFile:
    """What a move task reports for one of its change files: the same file, now a
    base file of the task's plan. The committer registers a move only when the result
    says exactly this (a forged result cannot claim another file)."""
    return OutputFile(
        path=f.path,
        file_type="B",
        node_m=f.node_m,
        node_i=f.node_i,
        seq=spec.to_seq,
        size_bytes=f.size_bytes,
        record_count=f.record_count,
        min_key=f.min_key,
        max_key=f.max_key,
    )


def attempt_dir(output_prefix: str, attempt: int) -> str:
    """The directory attempt ``attempt`` of the task with ``output_prefix`` writes in."""
    return f"{output_prefix}-a{attempt}"


@dataclass(frozen=True)
class TaskResult:
    """What one attempt of a task produced."""

    task_id: int
    attempt: int
    outputs: tuple[OutputFile, ...] = ()
    error: str | None = None
    retryable: bool = True
    """Whether another attempt may succeed; False for an input file that is damaged
    or does not match the catalog (the plan then fails at once)."""
    rows_read: int = 0
    rows_written: int = 0
    seconds: float = 0.0
    spilled_runs: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        return _to_dict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TaskResult:
        values = _fields_of(cls, data)
        values["outputs"] = tuple(OutputFile.from_dict(o) for o in values.get("outputs", ()))
        return cls(**values)

    @classmethod
    def from_json(cls, text: str | bytes) -> TaskResult:
        return cls.from_dict(json.loads(text))


def may_carry_vector(
    vector_ratio: float, file_level: int, task_level: int, size_bytes: int, min_file_bytes: int
) -> bool:
    """Whether a fold task may keep one of its base files with a deletion vector at all:
    vectors on, the file at the task's node level (a shallower one is re-bucketed) and
    at least ``min_file_bytes`` (``deletion-vectors.min-file-bytes``). The executor
    (``firn.engine.vectors``) and the planner's cost estimate (``firn.model.tiering``)
    both ask this."""
    return vector_ratio > 0 and file_level == task_level and size_bytes >= min_file_bytes


def carries(output: OutputFile, f: InputFile, own_dir: str) -> bool:
    """Whether ``output`` is a faithful account of keeping base file ``f``: the same
    file, and either its current vector or a vector inside the attempt's own
    directory that hides more rows (``own_dir`` ends with ``/``): what a fold that
    kept ``f`` reports (``firn.engine.vectors``)."""
    if not (
        output.replaces == f.file_id
        and f.file_type == "B"
        and (output.path, output.file_type, output.node_m, output.node_i, output.seq)
        == (f.path, f.file_type, f.node_m, f.node_i, f.seq)
        and (output.size_bytes, output.record_count) == (f.size_bytes, f.record_count)
        and (output.min_key, output.max_key) == (f.min_key, f.max_key)
    ):
        return False
    vector = output.deletion_vector
    if vector == f.deletion_vector:
        return True
    previous = 0 if f.deletion_vector is None else f.deletion_vector.rows
    return (
        vector is not None
        and vector.path.startswith(own_dir)
        and posixpath.normpath(vector.path) == vector.path
        and previous < vector.rows <= f.record_count
    )
