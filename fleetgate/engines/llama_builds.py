"""llama-server's options build by build (llama_server_builds.json), and what one build does with a flag name.

The data comes from the ``add_opt(common_arg(...))`` declarations of each sampled build's common/arg.cpp
(``python -m fleetgate.engines.extract_llama_args`` regenerates it). A build that was recorded is read
exactly. A build between two recorded ones is judged for a flag only where the two tables agree on it
(``Builds.undecided``): the same state, value type and choices on both sides; where they differ, what that
build does with the flag is not known, and the seam says "not judged" instead of guessing. Names the
extraction bracketed (``bracketed``) were bisected to adjacent published builds, so "added in N" and
"removed in N" are exact for them; for other names they are bounds.
"""

from __future__ import annotations

import bisect
import difflib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal

__all__ = ["Builds", "NameVerdict", "Resolved", "Variant", "image_build", "load_builds", "resolve_tag"]

State = Literal["live", "removed", "absent"]


@dataclass(frozen=True)
class Variant:
    names: tuple[str, ...]
    neg: tuple[str, ...]
    value: str
    """``none`` (a switch), ``bool`` (a switch with negative names), ``int``, ``string``, ``string2`` (two values)."""
    env: str | None
    enum: tuple[str, ...]
    removed: str | None
    """The build knows the name only to refuse it: ``arg_removed(MESSAGE)``."""
    seen: tuple[tuple[int, int], ...]

    @property
    def all_names(self) -> tuple[str, ...]:
        return (*self.names, *self.neg)

    @property
    def takes_value(self) -> bool:
        return self.value in ("int", "string", "string2")


@dataclass(frozen=True)
class Resolved:
    build: int
    sample: int
    """The sampled build whose table is used: ``build`` itself, or the latest sample before it."""
    next_sample: int | None

    @property
    def exact(self) -> bool:
        return self.build == self.sample

    def describe(self) -> str:
        if self.exact:
            return f"build {self.build}'s table"
        after = f" and {self.next_sample}" if self.next_sample is not None else ""
        return f"build {self.sample}'s table (build {self.build} lies between the sampled builds {self.sample}{after})"


@dataclass(frozen=True)
class NameVerdict:
    """What one build does with one flag name, and the history that explains it."""

    name: str
    state: State
    kind: Literal["ok", "removed", "newer", "never"]
    message: str
    instead: str | None = None
    """For a removed flag, what the build says to do instead (its own removal message, or the replacement on
    record); None when nothing is known."""


class Builds:
    def __init__(self, data: dict[str, Any]) -> None:
        self.published: tuple[int, ...] = tuple(data["published"])
        self.sampled: tuple[int, ...] = tuple(data["sampled"])
        self.bracketed: frozenset[str] = frozenset(data["bracketed"])
        self.replacements: dict[str, str] = dict(data.get("replacements", {}))
        self.variants = tuple(
            Variant(names=tuple(v["names"]), neg=tuple(v.get("neg", ())), value=v["value"], env=v.get("env"),
                    enum=tuple(v.get("enum", ())), removed=v.get("removed"),
                    seen=tuple((int(a), int(b)) for a, b in v["seen"]))
            for v in data["variants"])

    @property
    def first(self) -> int:
        return self.sampled[0]

    @property
    def last(self) -> int:
        return self.sampled[-1]

    def resolve(self, build: int) -> Resolved | None:
        """The sample that answers for ``build``; None outside the sampled span."""
        if not self.first <= build <= self.last:
            return None
        i = bisect.bisect_right(self.sampled, build) - 1
        sample = self.sampled[i]
        return Resolved(build, sample, None if sample == build else self.sampled[i + 1])

    @cache  # noqa: B019 -- one Builds per process (load_builds is cached); asked once per flag of every argv
    def at(self, sample: int) -> tuple[Variant, ...]:
        """The options of one sampled build."""
        return tuple(v for v in self.variants if any(a <= sample <= b for a, b in v.seen))

    def state(self, name: str, sample: int) -> State:
        for variant in self.at(sample):
            if name in variant.all_names:
                return "removed" if variant.removed is not None else "live"
        return "absent"

    @cache  # noqa: B019 -- one Builds per process (load_builds is cached)
    def history(self, name: str) -> tuple[State, ...]:
        """The name's state in every sampled build, in order."""
        states: list[State] = ["absent"] * len(self.sampled)
        index = {b: i for i, b in enumerate(self.sampled)}
        for variant in self.variants:
            if name in variant.all_names:
                for a, b in variant.seen:
                    for i in range(index[a], index[b] + 1):
                        states[i] = "removed" if variant.removed is not None else "live"
        return tuple(states)

    def _grammar(self, key: str, sample: int, *, env: bool) -> tuple[State, str, tuple[str, ...]]:
        """What one recorded build's table says of a flag name (or an environment variable): its state, value
        type and choices; the parts that decide how the build reads a use of it."""
        variant = self._by_key(sample, env).get(key)
        if variant is not None:
            return ("removed" if variant.removed is not None else "live"), variant.value, variant.enum
        return "absent", "", ()

    @cache  # noqa: B019 -- one Builds per process (load_builds is cached)
    def _by_key(self, sample: int, env: bool) -> dict[str, Variant]:
        """One recorded build's options by name (or environment variable), the first that names it: what
        ``_grammar`` looked up by a scan of every option, once per flag of every argv."""
        found: dict[str, Variant] = {}
        for variant in self.at(sample):
            for key in ((variant.env,) if variant.env else ()) if env else variant.all_names:
                found.setdefault(key, variant)
        return found

    def undecided(self, key: str, resolved: Resolved, *, env: bool = False) -> str | None:
        """Why the tables cannot say what ``resolved.build`` does with a flag name (or, with ``env``, an
        environment variable); None when they can. A recorded build is read exactly; a build between two recorded
        ones only where both neighbours' tables agree on the name, since the change may lie on either side of it."""
        if resolved.exact or resolved.next_sample is None:
            return None
        if env and key.startswith("LLAMA_ARG_NO_") and not any(v.env == key for v in self.variants):
            key = "LLAMA_ARG_" + key.removeprefix("LLAMA_ARG_NO_")  # a boolean's negative variable
        if self._grammar(key, resolved.sample, env=env) == self._grammar(key, resolved.next_sample, env=env):
            return None
        return (f"build {resolved.build} lies between recorded builds {resolved.sample} and {resolved.next_sample} "
                f"whose tables differ for {key}")

    def all_names(self) -> frozenset[str]:
        return frozenset(n for v in self.variants for n in v.all_names)

    def adjacent(self, before: int, after: int) -> bool:
        """Whether no published build lies between two builds: a change between them is exact."""
        i = self.published.index(after) if after in self.published else -1
        return i > 0 and self.published[i - 1] == before

    def _change(self, before: int, after: int, had: str, lacks: str) -> str:
        if self.adjacent(before, after):
            return f"in build {after} (build {before}, the published build before it, {had})"
        return f"between builds {before} ({had}) and {after} ({lacks}; the builds in between were not sampled)"

    def verdict(self, name: str, resolved: Resolved) -> NameVerdict:
        states = self.history(name)
        i = self.sampled.index(resolved.sample)
        state = states[i]
        if state == "live":
            return NameVerdict(name, state, "ok", f"{name} is accepted by {resolved.describe()}")
        live = [j for j, s in enumerate(states) if s == "live"]
        earlier = [j for j in live if j < i]
        later = [j for j in live if j > i]
        if state == "removed":
            variant = next(v for v in self.at(resolved.sample) if name in v.all_names)
            if earlier:
                k = earlier[-1]
                when = self._change(self.sampled[k], self.sampled[k + 1], "accepts it", "refuses it")
            else:
                when = f"before build {self.first}, the earliest build on record"
            return NameVerdict(name, state, "removed",
                               f"{name} was removed {when}: build {resolved.build} refuses it "
                               f"(\"the argument has been removed\"): {variant.removed}", instead=variant.removed)
        if earlier:
            k = earlier[-1]
            when = self._change(self.sampled[k], self.sampled[k + 1], "accepts it", "does not know it")
            instead = self.replacement(name, self.sampled[k + 1])
            return NameVerdict(name, state, "removed",
                               f"{name} was removed {when}; build {resolved.build} does not know it"
                               + (f": use {instead}" if instead else ""), instead=f"use {instead}" if instead else None)
        if later:
            k = later[0]
            when = self._change(self.sampled[k - 1], self.sampled[k], "does not know it", "has it")
            return NameVerdict(name, state, "newer",
                               f"{name} was added {when}: build {resolved.build} is older; the first build on record "
                               f"that has it is {self.sampled[k]}")
        live_now = sorted(n for v in self.at(resolved.sample) if v.removed is None for n in v.all_names)
        near = (difflib.get_close_matches(name, live_now, n=1, cutoff=0.6)
                or difflib.get_close_matches(name, sorted(self.all_names()), n=1, cutoff=0.6))
        return NameVerdict(name, state, "never",
                           f"no llama-server build from {self.first} to {self.last} has {name}"
                           + (f" (nearest spelling: {near[0]})" if near else ""))

    def replacement(self, name: str, sample: int) -> str | None:
        """What a build that dropped ``name`` takes instead: the extraction's recorded replacement, a
        surviving name of the same option, or the option that kept its environment variable."""
        if name in self.replacements:
            return self.replacements[name]
        previous = self.sampled[self.sampled.index(sample) - 1]
        old = next((v for v in self.at(previous) if name in v.all_names), None)
        if old is None:
            return None
        negative = name in old.neg
        for variant in self.at(sample):
            if variant.removed is not None:
                continue
            shared = set(variant.all_names) & set(old.all_names)
            if shared or (old.env is not None and variant.env == old.env):
                pool = variant.neg if negative and variant.neg else variant.names
                return max(pool, key=len)
        return None

    def takes_value(self, name: str, value: str, sample: int) -> bool:
        """Whether a recorded build's table lets ``name`` take ``value``: it has the name, and lists no choices or
        lists this one."""
        state, _, choices = self._grammar(name, sample, env=False)
        return state == "live" and (not choices or value in choices)

    def accepting(self, names: Iterable[str], values: Iterable[tuple[str, str]] = ()) -> list[tuple[int, int]]:
        """Runs of sampled builds in which every name is accepted (live), and every (name, value) is taken."""
        wanted = sorted(set(names))
        pairs = sorted(set(values))
        ok = [all(self.history(n)[i] == "live" for n in wanted)
              and all(self.takes_value(n, v, self.sampled[i]) for n, v in pairs) for i in range(len(self.sampled))]
        runs: list[tuple[int, int]] = []
        for i, good in enumerate(ok):
            if good:
                if runs and i > 0 and ok[i - 1]:
                    runs[-1] = (runs[-1][0], self.sampled[i])
                else:
                    runs.append((self.sampled[i], self.sampled[i]))
        return runs


@cache
def load_builds() -> Builds:
    text = resources.files("fleetgate.engines").joinpath("llama_server_builds.json").read_text(encoding="utf-8")
    return Builds(json.loads(text))


def image_build(image: str) -> int | None:
    """The build an image reference pins by its tag (``ghcr.io/ggml-org/llama.cpp:server-cuda-b6300`` -> 6300)."""
    name, _, tag = image.rpartition(":")
    return resolve_tag(tag) if name and "/" not in tag else None


def resolve_tag(tag: str) -> int | None:
    """The build an image tag pins: ``server-cuda-b6300`` / ``server-b6300`` / ``b6300`` -> 6300; None for a
    floating tag (``server-cuda``, ``latest``)."""
    match = re.search(r"(?:^|[-:_])b(\d{3,6})(?:$|[-.])", tag)
    return int(match.group(1)) if match else None
