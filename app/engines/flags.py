"""One parser's option table, read from the data files in app/engines/data/.

Why: "unique prefix" is decided by argparse against the *whole* option list, so prefix resolution
is only right when the list is complete. The tables are complete for the releases they come from:
each data file names its package, version and wheel, and `scripts/extract-engine-flags.sh`
re-derives all of them from those wheels (the real parser objects, built without torch; see
scripts/extract_engine_flags.py and docs/engines.md). Nothing in a data file is typed by hand.

A data file holds every option string of the parser (`_option_string_actions`, what argparse
matches against), the canonical name of each that is not canonical itself (the first `--` string
of its action: `-tp` → `--tensor-parallel-size`, SGLang `--tensor-parallel-size` → `--tp-size`),
and how the strings consume values: none, an optional one, several, and which no-value strings
store False (`--no-enforce-eager`, `--disable-expert-parallel`).

Limits: another engine version, or an engine plugin that adds options (vLLM general plugins such
as an out-of-tree platform, SGLang platform plugins), changes the list and so can change which
prefixes are unique. Admission warns when a deployment's `engine.version` is not the version its
engine's table comes from (app/admission/roles.py `engine_version_notices`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from types import MappingProxyType
from typing import Any, Mapping

DATA_PACKAGE = "app.engines"
DATA_DIR = "data"


def read_table(file_name: str) -> dict[str, Any]:
    """One data file of app/engines/data/, as written by the extractor."""
    text = (resources.files(DATA_PACKAGE) / DATA_DIR / file_name).read_text(encoding="utf-8")
    table: dict[str, Any] = json.loads(text)
    return table


@dataclass(frozen=True)
class EngineFlags:
    """One engine's parser, as data: the option strings and how each one consumes values."""

    engine: str
    package: str  # the PyPI distribution the table was read from
    version: str  # its release
    wheel: str  # the wheel file read
    parser: str  # which parser of the release, e.g. "vllm serve"
    options: frozenset[str]
    synonyms: Mapping[str, str]
    no_value: frozenset[str]
    optional_value: frozenset[str]
    many_values: frozenset[str]
    negative: frozenset[str]
    underscores_to_dashes: bool  # vLLM's FlexibleArgumentParser rewrites `_` to `-` in names
    dotted_members: bool  # vLLM's dotted JSON members (`--kv-transfer-config.kv_role`)

    @property
    def source(self) -> str:
        """Where the table comes from, for messages: e.g. "vllm 0.33.0 `vllm serve`"."""
        return f"{self.package} {self.version} `{self.parser}`"

    def canonical(self, option_string: str) -> str:
        """The canonical long option of an exact option string (itself when it is canonical)."""
        return self.synonyms.get(option_string, option_string)


def load_flags(file_name: str, *, engine: str, underscores_to_dashes: bool, dotted_members: bool) -> EngineFlags:
    """The option table of `engine` from its data file, with how its parser rewrites a line first."""
    table = read_table(file_name)
    return EngineFlags(
        engine=engine,
        package=table["package"],
        version=table["version"],
        wheel=table["wheel"],
        parser=table["parser"],
        options=frozenset(table["options"]),
        synonyms=MappingProxyType(dict(table["synonyms"])),
        no_value=frozenset(table["no_value"]),
        optional_value=frozenset(table["optional_value"]),
        many_values=frozenset(table["many_values"]),
        negative=frozenset(table["negative"]),
        underscores_to_dashes=underscores_to_dashes,
        dotted_members=dotted_members,
    )
