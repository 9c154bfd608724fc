"""Reading YAML the way the cluster's own decoder does (docs/admission.md#reading-a-file). Pure.

The offline commands (`modeldeployment validate|render -f`) and a world directory read files
through here, never through a bare `yaml.load_all`, because three things PyYAML accepts the API
server's path (kubectl's sigs.k8s.io/yaml, go-yaml, strict JSON decoding) does not:

- **alias expansion** (a "billion laughs" file: a few hundred bytes of nested `&a`/`*a`) is bounded
  before anything walks the tree, with go-yaml's own rule: more than 100 aliases expanded and an
  alias share above the ratio it allows for that size (99 % up to 400,000 nodes, falling to 10 % at
  4,000,000) is refused as "excessive aliasing"; a tree above `MAX_NODES` expanded nodes, and a
  recursive alias, are refused outright. The check counts the composed node graph with memoization,
  so it is linear in the file, however large the expansion would be;
- **duplicate mapping keys** are refused with the key and both line numbers (strict decoding:
  `json: duplicate field`), where PyYAML keeps the last one;
- values stay JSON: a timestamp stays the string it was written as, `!!binary` is its text.

A file above `MAX_FILE_BYTES` is not read at all, and a document whose text (aliases expanded) is
above 3 MiB is refused before it is built: the API server takes at most 3 MiB in one request.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from app.api.objects import KubeObject

# go-yaml (decode.go allowedAliasRatio): the aliasing the API server's YAML decoder tolerates.
ALIAS_MIN_COUNT = 100
ALIAS_RATIO_RANGE_LOW = 400_000
ALIAS_RATIO_RANGE_HIGH = 4_000_000
# Beyond any alias ratio: no ModelDeployment file has a million values.
MAX_NODES = 1_000_000
# The bytes of a file: far above one request, below what hurts the CLI (a file holds many objects).
MAX_FILE_BYTES = 32 * 1024 * 1024
# The text of one document, its aliases expanded: the API server takes at most 3 MiB in one request
# (its MaxRequestBodyBytes), so a larger object never reaches the schema check or a webhook.
MAX_EXPANDED_BYTES = 3 * 1024 * 1024
# Values written in one file (not expanded): far above any file of deployments and world objects.
MAX_WRITTEN_VALUES = 200_000

_BASE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ExcessiveAliasing(yaml.YAMLError):
    """A document whose aliases expand beyond what the API server's decoder accepts."""


class DuplicateKey(yaml.MarkedYAMLError):
    """A mapping that holds one key twice; `first_line` and `problem_mark` say where."""

    def __init__(self, key: str, first: yaml.Mark, second: yaml.Mark) -> None:
        super().__init__(problem=f"duplicate key {key!r} (lines {first.line + 1} and {second.line + 1})",
                         problem_mark=second)
        self.key = key
        self.first_line = first.line + 1
        self.second_line = second.line + 1


class FileTooLarge(yaml.YAMLError):
    """A file above MAX_FILE_BYTES."""


def _json_key(key: Any) -> Any:
    """A scalar key as the API server's YAML-to-JSON conversion spells it (`null`, `true`, `1`)."""
    if key is None:
        return "null"
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, (int, float)):
        return repr(key)
    return key


def allowed_alias_ratio(decoded: int) -> float:
    """go-yaml's allowedAliasRatio: the share of aliases tolerated in a document of `decoded` nodes."""
    if decoded <= ALIAS_RATIO_RANGE_LOW:
        return 0.99
    if decoded >= ALIAS_RATIO_RANGE_HIGH:
        return 0.10
    span = ALIAS_RATIO_RANGE_HIGH - ALIAS_RATIO_RANGE_LOW
    return 0.99 - 0.89 * (decoded - ALIAS_RATIO_RANGE_LOW) / span


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def expanded_size(root: yaml.Node) -> tuple[int, int]:
    """(nodes once every alias is expanded, distinct nodes) of a composed document, in linear time;
    ExcessiveAliasing for a recursive alias (no JSON value is infinite), and for one whose scalars
    expand beyond MAX_EXPANDED_BYTES (a long string aliased a few hundred times)."""
    size: dict[int, int] = {}
    text: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            total = 1
            chars = len(node.value) if isinstance(node, yaml.ScalarNode) else 0
            for child in _children(node):
                total = min(total + size[id(child)], MAX_NODES * 1000)  # "too many" already: keep integers small
                chars = min(chars + text[id(child)], MAX_EXPANDED_BYTES * 1000)
            size[key], text[key] = total, chars
            continue
        if key in size:
            continue
        if key in on_path:
            raise ExcessiveAliasing(f"a recursive alias (line {node.start_mark.line + 1}): an anchor used inside "
                                    "its own value never ends")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in size)
    if text[id(root)] > MAX_EXPANDED_BYTES:
        raise ExcessiveAliasing(f"a document holds more than {MAX_EXPANDED_BYTES // (1024 * 1024)} MiB of text (line "
                                f"{root.start_mark.line + 1}; aliases expanded): the API server takes at most 3 MiB "
                                "in one request, and etcd stores at most 1.5 MiB in one object")
    return size[id(root)], len(size)


def check_aliasing(root: yaml.Node) -> None:
    """go-yaml's bound on alias expansion, and MAX_NODES, or ExcessiveAliasing."""
    total, distinct = expanded_size(root)
    aliases = total - distinct
    if total > MAX_NODES:
        raise ExcessiveAliasing(f"its aliases expand to more than {MAX_NODES:,} values (from {distinct:,} written)")
    if aliases > ALIAS_MIN_COUNT and aliases / total > allowed_alias_ratio(total):
        raise ExcessiveAliasing(f"excessive aliasing: {aliases:,} of its {total:,} values are expanded aliases "
                                "(the API server's YAML decoder refuses such a document)")


class StrictLoader(_BASE):  # type: ignore[misc,valid-type]
    """SafeLoader, with duplicate keys refused and values kept as JSON has them."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Mark] = {}
        for key_node, _value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:
                continue  # an unhashable key: the constructor below says so
            if first is not None:
                raise DuplicateKey(str(key), first, key_node.start_mark)
            seen[key] = key_node.start_mark
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        if all(isinstance(key, str) for key in mapping):
            return mapping
        return {_json_key(key): value for key, value in mapping.items()}

    def construct_yaml_timestamp_text(self, node: yaml.ScalarNode) -> str:
        text: str = self.construct_scalar(node)
        return text

    def construct_yaml_binary_text(self, node: yaml.ScalarNode) -> str:
        raw = super().construct_yaml_binary(node)
        return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


StrictLoader.add_constructor("tag:yaml.org,2002:timestamp", StrictLoader.construct_yaml_timestamp_text)
StrictLoader.add_constructor("tag:yaml.org,2002:binary", StrictLoader.construct_yaml_binary_text)


@dataclass(frozen=True)
class Document:
    """One object of a file, with where it was read (for messages about a directory)."""

    obj: KubeObject
    file: str
    line: int


def documents_of_text(text: str, name: str) -> list[Document]:
    """The objects of one YAML text (Lists flattened), with where each was read."""
    stream = io.BytesIO(text.encode())
    stream.name = name  # the marks of YAML errors name the file
    return documents_of_stream(stream, name)


def count_written_values(stream: BinaryIO) -> None:
    """FileTooLarge when the stream writes more than MAX_WRITTEN_VALUES values (scalars, lists,
    mappings), read as parser events, before any node is built: the nodes of a large file would take
    far more memory than the file."""
    loader = StrictLoader(stream)
    count = 0
    try:
        while (event := loader.get_event()) is not None:
            if isinstance(event, (yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                count += 1
                if count > MAX_WRITTEN_VALUES:
                    raise FileTooLarge(f"it writes more than {MAX_WRITTEN_VALUES:,} values (a ModelDeployment has "
                                       "a few hundred)")
    finally:
        loader.dispose()


def documents_of_stream(stream: BinaryIO, name: str) -> list[Document]:
    """The objects of a YAML byte stream (read incrementally: no copy of a large file as text)."""
    count_written_values(stream)
    stream.seek(0)
    out: list[Document] = []
    loader = StrictLoader(stream)
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            check_aliasing(node)
            line = node.start_mark.line + 1
            doc = loader.construct_document(node)
            if not isinstance(doc, dict):
                continue
            kind = doc.get("kind")
            if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
                out.extend(Document(item, name, line) for item in doc["items"] if isinstance(item, dict))
            else:
                out.append(Document(doc, name, line))
    except RecursionError as exc:
        raise ExcessiveAliasing("nested too deeply to read") from exc
    finally:
        loader.dispose()
    return out


def _check_size(file: Path) -> None:
    """Refuse a file above MAX_FILE_BYTES before reading it."""
    if file.stat().st_size > MAX_FILE_BYTES:
        raise FileTooLarge(f"{file.stat().st_size:,} bytes, above the {MAX_FILE_BYTES // (1024 * 1024)} MiB a file may "
                           "hold here (the API server takes 3 MiB in one request)")


def documents_of_file(file: Path) -> list[Document]:
    _check_size(file)
    with file.open("rb") as handle:
        return documents_of_stream(handle, str(file))


def yaml_files(path: Path) -> list[Path]:
    """A file itself, or every .yaml/.yml file under a directory, sorted."""
    return sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file()) \
        if path.is_dir() else [path]


def load_documents(path: Path) -> list[Document]:
    """Every object in a YAML file or a directory of them, with its file and line."""
    return [doc for file in yaml_files(path) for doc in documents_of_file(file)]
