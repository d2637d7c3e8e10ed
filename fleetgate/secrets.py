"""Secrets never printed or kept: an API key, a token or a password in an argv, an environment, a header or any text
fleetgate shows or writes is replaced by ``***``, whether or not fleetgate was given it.

A fleet's files and processes carry secrets fleetgate never asked for: ``--api-key K`` on an engine's command line,
``HF_TOKEN=...`` in an env file, ``Authorization: Bearer ...`` in a captured request. Every text that leaves
fleetgate (a failure, a skip reason, a report, JUnit, a rendered argv) goes through ``scrub``; argv and environments
that are shown as structures go through ``scrub_argv`` and ``scrub_environment``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

__all__ = ["MASK", "SECRET_FLAGS", "is_secret_name", "scrub", "scrub_argv", "scrub_environment"]

MASK = "***"

SECRET_FLAGS = frozenset({"--api-key", "--hf-token", "-hft", "--ssl-keyfile-password", "--token", "--password"})
"""Engine flags whose value is a secret: llama-server's ``--api-key`` and ``-hft/--hf-token``, vLLM's ``--api-key``
(one or more keys), ``--hf-token`` (an optional value) and uvicorn's key-file password. ``--api-key-file`` and
``--ssl-key-file`` name a file, which is not the secret."""

_SECRET_NAME = re.compile(r"(?i)(?:^|_)(?:API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS|CREDENTIALS?|AUTH)$")
"""An environment variable that holds a secret by its name: ``HF_TOKEN``, ``LLAMA_API_KEY``, ``OPENAI_API_KEY``,
``DB_PASSWORD``; not ``LLAMA_ARG_API_KEY_FILE`` (a path) nor ``MAX_TOKENS`` (a number)."""

_FLAG_VALUE = re.compile(
    r"(?P<flag>(?<![\w-])(?:" + "|".join(re.escape(f) for f in sorted(SECRET_FLAGS, key=len, reverse=True)) +
    r"))(?![\w-])(?P<sep>=|[ \t]+)(?P<quote>['\"]?)(?P<value>(?!--)[^\s'\"]+)")
_ASSIGNMENT = re.compile(
    r"(?P<name>(?<![\w-])[A-Za-z_][A-Za-z0-9_]*)(?P<sep>['\"]?[ \t]*[=:][ \t]*)(?P<quote>['\"]?)(?P<value>(?!\$)[^\s'\",;]+)")
_AUTHORIZATION = re.compile(
    r"(?i)(?P<head>(?:proxy-)?authorization['\"]?[ \t]*[:=][ \t]*['\"]?(?:(?:bearer|basic|token|digest)[ \t]+)?)"
    r"(?P<value>(?!\$)(?!(?:bearer|basic|token|digest)\b)[^\s'\",;]+)")
_BEARER = re.compile(r"(?i)(?P<head>\bbearer[ \t]+)(?P<value>[A-Za-z0-9._~+/=-]{4,})")
_USERINFO = re.compile(r"(?P<head>\b[a-z][a-z0-9+.-]*://)(?P<value>[^/\s@:]*:[^/\s@]*)@")

_SHORTEST = 4
"""A secret shorter than this is not replaced where it merely occurs in a text: it would mask ordinary words."""


@lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    """Whether an environment variable of this name holds a secret."""
    # Every failure, skip reason and figure is scrubbed, each time against this process's whole environment: the
    # names repeat, so each is matched once (a seams run scrubbed some 500 texts per 50 services).
    return bool(_SECRET_NAME.search(name))


def _environment_secrets() -> set[str]:
    return {value for name, value in os.environ.items() if is_secret_name(name) and len(value) >= _SHORTEST}


def scrub(text: str, known: Iterable[str] = ()) -> str:
    """``text`` with every secret replaced by ``***``: the values of secret flags and of assignments to secret names
    (``NAME=value``, ``"NAME": "value"``), Authorization headers and bearer tokens, a URL's ``user:password@``, and
    every value in ``known`` or in this process's secret environment variables wherever it occurs."""
    if not text:
        return text
    values = {value for value in known if value and len(value) >= _SHORTEST} | _environment_secrets()
    for value in sorted(values, key=len, reverse=True):
        text = text.replace(value, MASK)
    text = _FLAG_VALUE.sub(lambda m: f"{m['flag']}{m['sep']}{m['quote']}{MASK}", text)
    text = _ASSIGNMENT.sub(_assignment, text)
    text = _AUTHORIZATION.sub(lambda m: f"{m['head']}{MASK}", text)
    text = _BEARER.sub(lambda m: f"{m['head']}{MASK}", text)
    return _USERINFO.sub(lambda m: f"{m['head']}{MASK}@", text)


def _assignment(m: re.Match[str]) -> str:
    """One ``NAME=value`` of a text, its value masked when NAME holds a secret; an assignment inside the value
    (systemd's ``Environment=HF_TOKEN=...``, ``--env HF_TOKEN=...``) masked when its own name does."""
    name, value = m["name"], m["value"]
    if is_secret_name(name) and value != MASK:
        return f"{name}{m['sep']}{m['quote']}{MASK}"
    inner, eq, rest = value.partition("=")
    if eq and rest and rest != MASK and _NAME.fullmatch(inner) and is_secret_name(inner):
        return f"{name}{m['sep']}{m['quote']}{inner}={MASK}"
    return m.group(0)


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def scrub_argv(argv: Sequence[str]) -> tuple[str, ...]:
    """An argv with the value of every secret flag (``--api-key K``, ``--api-key=K``, vLLM's several keys after one
    ``--api-key``) replaced by ``***``, and any other word scrubbed as text."""
    shown: list[str] = []
    taking = False
    for word in argv:
        flag, eq, _ = word.partition("=")
        if flag in SECRET_FLAGS and eq:
            shown.append(f"{flag}={MASK}")
            taking = False
        elif word in SECRET_FLAGS:
            shown.append(word)
            taking = True
        elif taking and not word.startswith("--"):  # a key may start with one dash; the next option has two
            shown.append(MASK)
        else:
            taking = False
            shown.append(scrub(word))
    return tuple(shown)


def scrub_environment(environment: Mapping[str, str]) -> dict[str, str]:
    """An environment with the value of every secret name replaced by ``***``, and the others scrubbed as text."""
    return {name: MASK if is_secret_name(name) and value else scrub(value) for name, value in environment.items()}
