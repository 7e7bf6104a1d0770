"""Reading the two user documents (config file and snapshot): YAML or JSON text into plain
data, with every failure turned into the caller's error type and one line naming the file."""

from __future__ import annotations

from typing import Any

from gfd.errors import UsageError

# json and yaml are imported by the first document that needs them: a run that reads no
# document (discovery through NVML, no config file) never pays for PyYAML (~20 ms).


def describe(value: Any) -> str:
    """A value as an error message shows it (``null`` for None, like the document)."""
    return "null" if value is None else repr(value)


def read_text(path: str, flag: str, error: type[UsageError]) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as exc:
        raise error(f"{flag}: cannot read {path!r}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise error(f"{flag}: {path!r} is not UTF-8 text") from None


def parse_yaml(text: str, source: str, error: type[UsageError]) -> Any:
    """YAML or JSON text into plain data; a syntax error names line and column.

    JSON is read by the JSON parser: YAML's reading of JSON escapes differs (a surrogate
    pair becomes two lone surrogates) and it rejects control characters JSON allows."""
    if text.lstrip().startswith(("{", "[")):
        import json

        try:
            return json.loads(text)
        except ValueError:
            pass  # flow-style YAML, or broken: the YAML parser says which
    import yaml

    # libyaml's parser when PyYAML was built with it: ~7x faster on a DGX snapshot
    loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(f"{source}: not valid YAML{where}: {problem}") from None


def as_list(value: Any, where: str, error: type[UsageError]) -> list[Any]:
    """A sequence field: null means empty, anything but a list is an error."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise error(f"{where}: expected a list, got {describe(value)}")
    return value
