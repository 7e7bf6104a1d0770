"""Upstream's command-line grammar, rewritten into click's spelling before click parses.

Upstream gpu-feature-discovery reads its flags with urfave/cli v2 on Go's ``flag`` package:
one dash and two are the same (``-oneshot``, ``--oneshot``), a value is ``-flag=value`` or
the next word, a boolean flag takes a value only as ``-flag=value`` (in Go's words ``1 0 t f
T F true false TRUE FALSE True False``), and two names of one flag on one command line are
refused.  This module only respells words; click still parses, so help, errors and shell
completion stay click's.  One thing upstream does that gfd does not, on purpose: a word that
is not an option ends upstream's flags and everything after it is silently ignored
(``-oneshot false`` is a oneshot that drops every later flag); gfd refuses such a word.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gfd.echo import describe
from gfd.errors import UsageError
from gfd.values import parse_bool

# Go's flag package answers these itself (flag.go: ErrHelp), urfave/cli adds the version
_GO_BOOL_WORDS = {"1", "0", "t", "f", "T", "F", "true", "false", "TRUE", "FALSE", "True", "False"}
_ANSWERED = {"h": "--help", "help": "--help", "v": "--version", "version": "--version"}


def _names(params: Sequence[Any]) -> dict[str, tuple[Any, bool]]:
    """Every name of every option without its dashes -> (click option, is a negation)."""
    names: dict[str, tuple[Any, bool]] = {}
    for param in params:
        for opt in getattr(param, "opts", ()):
            names[opt.lstrip("-")] = (param, False)
        for opt in getattr(param, "secondary_opts", ()):
            names[opt.lstrip("-")] = (param, True)
    return names


def _long(param: Any) -> str:
    return str(max(param.opts, key=len))


def _truth(flag: str, value: str) -> bool:
    try:
        return parse_bool(value)
    except ValueError as exc:
        raise UsageError(f"{flag} {describe(value)}: {exc}") from None


def _bool_words(flag: str, value: str, negated: bool, param: Any) -> list[str]:
    if _truth(flag, value) != negated:
        return [_long(param)]
    return [param.secondary_opts[0]] if param.secondary_opts else []


def to_click(args: Sequence[str], params: Sequence[Any]) -> list[str]:
    """``args`` in click's spelling; raises UsageError where upstream refuses an argument."""
    names = _names(params)
    result: list[str] = []
    used: dict[str, str] = {}  # option -> the name it was first given by
    bare_bool: str | None = None  # the boolean flag just before, given without a value
    position = 0
    while position < len(args):
        arg = args[position]
        position += 1
        if arg in ("help", "h"):  # urfave/cli's help command, after any flags
            result.append("--help")
            break
        if arg == "--" or not arg.startswith("-") or arg == "-":
            if bare_bool is not None and arg in _GO_BOOL_WORDS:
                raise UsageError(
                    f"{bare_bool} {arg}: a boolean flag takes its value as {bare_bool}={arg}"
                )
            result.extend(args[position - 1 :])  # click reads (and refuses) the rest
            break
        bare_bool = None
        dashes = 2 if arg.startswith("--") else 1
        name, sep, value = arg[dashes:].partition("=")
        if not name or name[0] in "-=":
            raise UsageError(f"bad flag syntax: {arg}")
        if name in _ANSWERED and (not sep or name not in names):
            # urfave/cli's help and version flags are booleans: -h=1 asks, -h=false does not
            if not sep or _truth(arg.partition("=")[0], value):
                result.append(_ANSWERED[name])
            continue
        known = names.get(name)
        if known is None:
            if dashes == 1 and len(name) > 1:
                # Go: -ofile is the flag "ofile", never -o with the value "file"
                raise UsageError(f"no such option: {arg} (gfd --help lists the options)")
            result.append(arg)  # click names it, with its suggestion
            continue
        param, negated = known
        if not negated and used.setdefault(param.name, name) != name:
            first = used[param.name]
            raise UsageError(f"cannot use two forms of the same flag: -{first} and {arg}")
        if param.is_flag and sep:
            result.extend(_bool_words(arg.partition("=")[0], value, negated, param))
        elif param.is_flag:
            result.append(f"--{name}")
            bare_bool = arg
        elif sep:
            result.append(f"{_long(param)}={value}")
        elif position < len(args):
            result.append(f"{_long(param)}={args[position]}")
            position += 1
        else:
            result.append(_long(param))  # click: "requires an argument"
    return result
