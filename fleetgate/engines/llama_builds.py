"""llama-server's options build by build (llama_server_builds.json), and what one build does with a flag name.

The data comes from the ``add_opt(common_arg(...))`` declarations of every published build's common/arg.cpp
(``python -m tools.extract_llama_args`` regenerates it): each option variant (names, value type,
value grammar, removal) with the intervals of builds that carry it. A published build is read exactly. A build
number that was never published (a local build, a fork's tag) lies between two published ones; it is judged for
a flag only where their tables agree on it (``Builds.undecided``): the same state, value type and grammar on
both sides. Where they differ, what that build does with the flag is not known, and the seam says "not judged"
instead of guessing.
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

from fleetgate.engines.llama_values import Variant, refusal, server_rule

__all__ = ["Builds", "NameVerdict", "Resolved", "Variant", "image_build", "load_builds", "resolve_tag"]

State = Literal["live", "removed", "absent"]


@dataclass(frozen=True)
class Resolved:
    build: int
    sample: int
    """The recorded build whose table answers: ``build`` itself, or the recorded build before it (used only where
    it agrees with ``next_sample``)."""
    next_sample: int | None

    @property
    def exact(self) -> bool:
        return self.build == self.sample

    def describe(self) -> str:
        if self.exact:
            return f"build {self.build}'s table"
        after = f" and {self.next_sample}" if self.next_sample is not None else ""
        return (f"the tables of builds {self.sample}{after}, where they agree (build {self.build} was never "
                "published)")


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
        self.recorded: tuple[int, ...] = tuple(data["recorded"])
        """The builds whose tables are recorded: every published one."""
        self.replacements: dict[str, str] = dict(data.get("replacements", {}))
        plain = {"names", "neg", "value", "env", "enum", "removed", "seen", "hint"}
        self.variants = tuple(
            Variant(names=tuple(v["names"]), neg=tuple(v.get("neg", ())), value=v["value"], env=v.get("env"),
                    enum=tuple(v.get("enum", ())), removed=v.get("removed"),
                    seen=tuple((int(a), int(b)) for a, b in v["seen"]),
                    grammar=tuple(sorted((k, _frozen(x)) for k, x in v.items() if k not in plain)))
            for v in data["variants"])

    @property
    def first(self) -> int:
        return self.recorded[0]

    @property
    def last(self) -> int:
        return self.recorded[-1]

    def resolve(self, build: int) -> Resolved | None:
        """The recorded build that answers for ``build``; None outside the recorded span."""
        if not self.first <= build <= self.last:
            return None
        i = bisect.bisect_right(self.recorded, build) - 1
        sample = self.recorded[i]
        return Resolved(build, sample, None if sample == build else self.recorded[i + 1])

    @cache  # noqa: B019 -- one Builds per process (load_builds is cached); asked once per flag of every argv
    def at(self, sample: int) -> tuple[Variant, ...]:
        """The options of one recorded build."""
        return tuple(v for v in self.variants if any(a <= sample <= b for a, b in v.seen))

    def state(self, name: str, sample: int) -> State:
        for variant in self.at(sample):
            if name in variant.all_names:
                return "removed" if variant.removed is not None else "live"
        return "absent"

    @cache  # noqa: B019 -- one Builds per process (load_builds is cached)
    def history(self, name: str) -> tuple[State, ...]:
        """The name's state in every recorded build, in order."""
        states: list[State] = ["absent"] * len(self.recorded)
        index = {b: i for i, b in enumerate(self.recorded)}
        for variant in self.variants:
            if name in variant.all_names:
                for a, b in variant.seen:
                    for i in range(index[a], index[b] + 1):
                        states[i] = "removed" if variant.removed is not None else "live"
        return tuple(states)

    def _grammar(self, key: str, sample: int, *, env: bool) -> tuple[State, str, tuple[str, ...], tuple[Any, ...]]:
        """What one recorded build's table says of a flag name (or an environment variable): its state, value
        type, choices and grammar; the parts that decide how the build reads a use of it."""
        variant = self._by_key(sample, env).get(key)
        if variant is not None:
            return ("removed" if variant.removed is not None else "live"), variant.value, variant.enum, \
                variant.grammar
        return "absent", "", (), ()

    def variant(self, name: str, sample: int) -> Variant | None:
        """The live variant of one recorded build that has ``name``."""
        return next((v for v in self.at(sample) if v.removed is None and name in v.all_names), None)

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
        return (f"build {resolved.build} was never published; it lies between the published builds {resolved.sample} "
                f"and {resolved.next_sample}, whose tables differ for {key}")

    def all_names(self) -> frozenset[str]:
        return frozenset(n for v in self.variants for n in v.all_names)

    def adjacent(self, before: int, after: int) -> bool:
        """Whether no published build lies between two builds: a change between them is exact."""
        i = self.published.index(after) if after in self.published else -1
        return i > 0 and self.published[i - 1] == before

    def _change(self, before: int, after: int, had: str, lacks: str) -> str:
        if self.adjacent(before, after):
            return f"in build {after} (build {before}, the published build before it, {had})"
        return f"between builds {before} ({had}) and {after} ({lacks}; the builds in between are not recorded)"

    def verdict(self, name: str, resolved: Resolved) -> NameVerdict:
        states = self.history(name)
        i = self.recorded.index(resolved.sample)
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
                when = self._change(self.recorded[k], self.recorded[k + 1], "accepts it", "refuses it")
            else:
                when = f"before build {self.first}, the earliest build on record"
            return NameVerdict(name, state, "removed",
                               f"{name} was removed {when}: build {resolved.build} refuses it "
                               f"(\"the argument has been removed\"): {variant.removed}", instead=variant.removed)
        if earlier:
            k = earlier[-1]
            when = self._change(self.recorded[k], self.recorded[k + 1], "accepts it", "does not know it")
            instead = self.replacement(name, self.recorded[k + 1])
            return NameVerdict(name, state, "removed",
                               f"{name} was removed {when}; build {resolved.build} does not know it"
                               + (f": use {instead}" if instead else ""), instead=f"use {instead}" if instead else None)
        if later:
            k = later[0]
            when = self._change(self.recorded[k - 1], self.recorded[k], "does not know it", "has it")
            return NameVerdict(name, state, "newer",
                               f"{name} was added {when}: build {resolved.build} is older; the first build on record "
                               f"that has it is {self.recorded[k]}")
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
        previous = self.recorded[self.recorded.index(sample) - 1]
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
        """Whether a recorded build's table lets ``name`` take ``value``: it has the name, and its handler's grammar
        takes the value (fleetgate.engines.llama_values)."""
        variant = self.variant(name, sample)
        return (variant is not None and refusal(variant, value, sample) is None
                and server_rule(frozenset(variant.all_names), value) is None)

    def accepting(self, names: Iterable[str], values: Iterable[tuple[str, str]] = ()) -> list[tuple[int, int]]:
        """Runs of recorded builds in which every name is accepted (live), and every (name, value) is taken."""
        wanted = sorted(set(names))
        pairs = sorted(set(values))
        ok = [all(self.history(n)[i] == "live" for n in wanted)
              and all(self.takes_value(n, v, self.recorded[i]) for n, v in pairs) for i in range(len(self.recorded))]
        runs: list[tuple[int, int]] = []
        for i, good in enumerate(ok):
            if good:
                if runs and i > 0 and ok[i - 1]:
                    runs[-1] = (runs[-1][0], self.recorded[i])
                else:
                    runs.append((self.recorded[i], self.recorded[i]))
        return runs


def _frozen(value: Any) -> Any:
    """A grammar value as a hashable one (lists become tuples), so variants compare and cache."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


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
