"""The YAML files of the offline commands (`modeldeployment render` and `validate`).

Every way a file cannot be read (missing, unreadable, a directory that cannot be listed, not
UTF-8, not YAML) is one line naming the file and the flag that named it, where (line and column
for YAML), what is wrong and the fix: an `InputError`, which the commands print and exit 2 on,
never a traceback.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TextIO

import yaml

from app import yamlread
from app.api.objects import KubeObject
from app.yamlread import Document

# `-f -`: the file is standard input (read once: both commands read a file's objects once).
STDIN = Path("-")

YAML_REMEDY = "fix the YAML there (indent with spaces, never tabs; quote a value that holds ': ' or starts with '*', '&', '!', '%' or '@')"
# The parser's problems, in the words of their usual cause.
TAB = "a tab character: YAML indents with spaces only"
COLON = ("a ':' where no key can start: a value holding ': ' must be quoted, or the line is indented deeper than "
         "its siblings")
YAML_CAUSES = {  # PyYAML's and libyaml's spellings
    "found character '\\t' that cannot start any token": TAB,
    "found a tab character that violates indentation": TAB,
    "found a tab character where an indentation space is expected": TAB,
    "mapping values are not allowed here": COLON,
    "mapping values are not allowed in this context": COLON,
    "could not find expected ':'": "a key without ':' after it",
}


class InputError(Exception):
    """A file of the command line cannot be read; the message says which, why and the fix."""


def _where(mark: yaml.Mark | None, path: Path) -> str:
    if mark is None:
        return str(path)
    return f"{mark.name}:{mark.line + 1}:{mark.column + 1}"


def _problem(exc: BaseException, path: Path, flag: str) -> str:
    """One line for a file that could not be read."""
    if isinstance(exc, yamlread.DuplicateKey):
        return (f"{flag} {_where(exc.problem_mark, path)}: the key {exc.key!r} is given twice in one mapping, on "
                f"lines {exc.first_line} and {exc.second_line}; the API server's strict decoding refuses a duplicate "
                "field (YAML would silently keep the last) — keep one of them")
    if isinstance(exc, yamlread.FileTooLarge):
        return (f"{flag} {path}: cannot be read: {exc}; no object that large is stored (etcd keeps at most 1.5 MiB "
                "in one object) — move large values into a ConfigMap or Secret mounted as a volume, or split the file")
    if isinstance(exc, yamlread.ExcessiveAliasing):
        return (f"{flag} {path}: cannot be read: {exc} — write the values out (anchors and aliases only for small "
                "repeated blocks), move large values into a ConfigMap or Secret, or split the file")
    if isinstance(exc, yaml.MarkedYAMLError):
        text = str(exc.problem or exc.context or "not YAML")
        cause = YAML_CAUSES.get(text, text)
        context = f" ({exc.context}, from line {exc.context_mark.line + 1})" if exc.context and exc.context_mark \
            and exc.problem else ""
        return f"{flag} {_where(exc.problem_mark, path)}: not valid YAML: {cause}{context} — {YAML_REMEDY}"
    if isinstance(exc, yaml.YAMLError):
        return f"{flag} {path}: not valid YAML: {exc} — {YAML_REMEDY}"
    if isinstance(exc, UnicodeDecodeError):
        return f"{flag} {path}: not UTF-8 text ({exc.reason} at byte {exc.start}) — save the file as UTF-8 YAML"
    if isinstance(exc, FileNotFoundError):
        what = "a directory (or file) of YAML: InstanceTypes, pools, bindings" if flag == "--world" else "a YAML file"
        return f"{flag} {exc.filename or path}: no such file or directory — pass the path of {what} (relative paths " \
               f"are read from {Path.cwd()})"
    if isinstance(exc, PermissionError):
        return f"{flag} {exc.filename or path}: permission denied — make it readable by this user, or copy it somewhere " \
               "that is"
    if isinstance(exc, OSError):
        return f"{flag} {exc.filename or path}: cannot be read: {exc.strerror or exc} — pass a readable YAML file " \
               "or directory"
    return f"{flag} {path}: cannot be read: {type(exc).__name__}: {exc}"


def _raise(exc: OSError) -> None:
    raise exc


def _check_tree(path: Path) -> None:
    """Every directory under `path` can be listed (a listing that fails would silently leave its
    objects out of the world)."""
    for _root, _dirs, _names in os.walk(path, onerror=_raise):
        pass


def _stdin_text(stream: TextIO, path: Path, flag: str) -> str:
    if stream.isatty():
        raise InputError(f"{flag} -: standard input is a terminal — pipe a file in (`cat md.yaml | modeldeployment "
                         f"validate -f -`), or pass the file's path")
    text = stream.read(yamlread.MAX_FILE_BYTES + 1)
    if len(text) > yamlread.MAX_FILE_BYTES:
        raise InputError(_problem(yamlread.FileTooLarge(f"more than {yamlread.MAX_FILE_BYTES // (1024 * 1024)} MiB on "
                                                        "standard input"), path, flag))
    return text


def read_documents(path: Path, flag: str, stdin: TextIO | None = None) -> list[Document]:
    """The objects of a YAML file, a directory, or standard input (`-`), each with where it was
    read (app/yamlread.py), or InputError."""
    try:
        if path == STDIN:
            return yamlread.documents_of_text(_stdin_text(stdin or sys.stdin, path, flag), "<stdin>")
        if path.is_dir():
            _check_tree(path)
        return yamlread.load_documents(path)
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise InputError(_problem(exc, path, flag)) from exc


def read_objects(path: Path, flag: str) -> list[KubeObject]:
    """The objects of a YAML file or directory (or `-`, standard input), or InputError."""
    return [doc.obj for doc in read_documents(path, flag)]
