"""Options declared once and derived for every way in.

A search's options are the fields of a dataclass (search.SearchOptions, memory.MemorySearch),
each made with :func:`option`: its default, one line of help, its choices and the flags it was
known by before. From there :func:`click_options` makes the command's options and
:func:`tool_signature` the parameters of an MCP tool (the SDK reads a tool's JSON schema from
its signature), so a new option appears in Python, on the command line and to agents at once,
with the same name, default and help: the field ``half_life_days`` is the keyword argument
``half_life_days``, the flag ``--half-life-days`` and the MCP parameter ``half_life_days``.
"""

import inspect
import typing
from dataclasses import MISSING, field, fields
from typing import Annotated, Literal

import click


def option(default, help: str, *, aliases=(), short: str | None = None, choices=None):
    """A dataclass field with what the command line and MCP show of it. Its flag is its name
    (``--half-life-days`` for half_life_days); ``aliases`` are the flags it had before, which
    the command line still takes and its help lists after it; ``short`` adds a one-letter
    flag; ``choices`` are the values it takes."""
    return field(
        default=default,
        metadata={"help": help, "aliases": tuple(aliases), "short": short, "choices": choices},
    )


def flag(name: str) -> str:
    """The command line's flag of the field ``name``: ``--half-life-days``."""
    return "--" + name.replace("_", "-")


def _declared(cls, exclude, only=None):
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        chosen = f.name not in exclude and (only is None or f.name in only)
        if chosen and f.default is not MISSING and "help" in f.metadata:
            yield f, hints[f.name]


def _base(hint):
    """The type a command-line value is parsed as: int, float or bool, else text (what takes
    a number or text, as ``now`` does, is parsed by the dataclass's check)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    if len(args) > 1:
        return click.STRING
    return {int: click.INT, float: click.FLOAT, bool: bool}.get(args[0], click.STRING)


def click_options(cls, exclude=(), only=None):
    """A decorator that adds a click option for each field of ``cls`` (but ``exclude``; or
    ``only`` those): a boolean that defaults to True is ``--name/--no-name``, one that defaults
    to False a flag."""

    def decorate(command):
        for f, hint in reversed(list(_declared(cls, exclude, only))):
            meta = f.metadata
            own = flag(f.name)
            short = [meta["short"]] if meta["short"] else []
            names = [own, *meta["aliases"], *short, f.name]
            kind = _base(hint)
            if kind is bool:
                if f.default:
                    names[0] = f"{own}/--no-{own[2:]}"
                command = click.option(*names, is_flag=True, default=f.default, help=meta["help"])(
                    command
                )
                continue
            if meta["choices"]:
                kind = click.Choice(meta["choices"])
            command = click.option(
                *names,
                type=kind,
                default=f.default,
                show_default=f.default is not None,
                help=meta["help"],
            )(command)
        return command

    return decorate


def tool_signature(function, cls, exclude=()) -> inspect.Signature:
    """``function``'s signature with its ``**options`` replaced by a keyword parameter for each
    field of ``cls`` (but ``exclude``), typed, with its default and its help as the
    description: what an MCP tool that passes its options on to ``cls`` shows its clients."""
    from pydantic import Field  # with the mcp extra, as MCP tools are

    own = inspect.signature(function)
    params = [p for p in own.parameters.values() if p.kind is not p.VAR_KEYWORD]
    for f, declared in _declared(cls, exclude):
        meta = f.metadata
        hint = declared
        if meta["choices"]:
            hint = Literal[tuple(meta["choices"])]
            hint = hint | None if f.default is None else hint
        # A type made at run time, for pydantic (the SDK's schema), which no checker can follow.
        described = Annotated[hint, Field(description=meta["help"])]  # type: ignore[valid-type]
        params.append(
            inspect.Parameter(
                f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=described
            )
        )
    return own.replace(parameters=params)
