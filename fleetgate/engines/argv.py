"""A small model of command-line parsing, precise enough to read an engine's argv the way it does."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["ArgvProblem", "FlagUse", "Option", "OptionTable", "ParsedArgv"]


@dataclass(frozen=True)
class Option:
    dest: str
    names: tuple[str, ...]
    neg_names: tuple[str, ...] = ()
    takes_value: bool = True
    env: str | None = None
    repeat: Literal["last", "append"] = "last"

    @property
    def flag(self) -> str:
        """The long name, for messages."""
        return max(self.names, key=len)


@dataclass(frozen=True)
class FlagUse:
    dest: str
    flag: str
    """As written (``-c``, ``--ctx-size``) or the environment variable's name."""
    value: str | None
    """None for a switch; ``"0"``/``"1"`` for a boolean switch."""
    index: int | None
    """Position of the flag in the engine's argv (argv[0] is the binary); None when set from the environment."""


@dataclass(frozen=True)
class ArgvProblem:
    flag: str
    index: int | None
    message: str


@dataclass
class ParsedArgv:
    uses: dict[str, list[FlagUse]] = field(default_factory=dict)
    problems: list[ArgvProblem] = field(default_factory=list)
    positionals: list[tuple[int, str]] = field(default_factory=list)

    def last(self, dest: str) -> FlagUse | None:
        found = self.uses.get(dest)
        return found[-1] if found else None

    def all(self, dest: str) -> list[FlagUse]:
        return list(self.uses.get(dest, ()))


class OptionTable:
    def __init__(self, options: Iterable[Option]) -> None:
        self.options = tuple(options)
        self.by_name: dict[str, tuple[Option, bool]] = {}
        self.by_dest: dict[str, Option] = {}
        for option in self.options:
            self.by_dest[option.dest] = option
            for name in option.names:
                self.by_name[name] = (option, True)
            for name in option.neg_names:
                self.by_name[name] = (option, False)

    def __contains__(self, name: str) -> bool:
        return name in self.by_name

    def parse(
        self,
        args: Sequence[str],
        env: Mapping[str, str] | None = None,
        *,
        normalise_underscores: bool = True,
        allow_equals: bool = False,
        unknown: Literal["problem", "keep"] = "problem",
        neg_env_prefix: tuple[str, str] | None = None,
        offset: int = 0,
    ) -> ParsedArgv:
        """Parse like the engine: environment first, then argv in order (a later use wins).

        Indices in the result are ``offset`` + the position in ``args``: pass the position of
        ``args[0]`` in the full argv so every index points into the argv the engine got.
        """
        parsed = ParsedArgv()
        if env:
            for option in self.options:
                if option.env is None:
                    continue
                if option.neg_names and neg_env_prefix is not None:
                    neg_env = option.env.replace(*neg_env_prefix)
                    if neg_env in env:
                        parsed.uses.setdefault(option.dest, []).append(FlagUse(option.dest, neg_env, "0", None))
                        continue
                if option.env in env:
                    parsed.uses.setdefault(option.dest, []).append(
                        FlagUse(option.dest, option.env, env[option.env], None))
        i = 0
        while i < len(args):
            raw = args[i]
            name, inline = raw, None
            if allow_equals and raw.startswith("--") and "=" in raw:
                name, inline = raw.split("=", 1)
            if normalise_underscores and name.startswith("--"):
                name = name.replace("_", "-")
            if not name.startswith("-") or name == "-":
                parsed.positionals.append((i + offset, raw))
                i += 1
                continue
            found = self.by_name.get(name)
            if found is None:
                if unknown == "problem":
                    parsed.problems.append(ArgvProblem(raw, i + offset, "invalid argument"))
                else:
                    parsed.problems.append(ArgvProblem(raw, i + offset, "not modelled"))
                    if inline is None and i + 1 < len(args) and not args[i + 1].startswith("--"):
                        i += 1
                i += 1
                continue
            option, positive = found
            if not option.takes_value:
                value = None if not option.neg_names else ("1" if positive else "0")
                uses = parsed.uses.setdefault(option.dest, [])
                if option.repeat == "last":
                    uses.clear()
                uses.append(FlagUse(option.dest, raw, value, i + offset))
                i += 1
                continue
            if inline is not None:
                value = inline
            elif i + 1 < len(args):
                value = args[i + 1]
                i += 1
            else:
                parsed.problems.append(ArgvProblem(raw, i + offset, "expected a value"))
                break
            uses = parsed.uses.setdefault(option.dest, [])
            if option.repeat == "last":
                uses.clear()
            uses.append(FlagUse(option.dest, raw, value, i - (0 if inline is not None else 1) + offset))
            i += 1
        return parsed
