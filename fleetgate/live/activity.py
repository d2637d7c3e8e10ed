"""What the engine was doing while a request waited: the engine's own clock for a wait the gate sees on its own.

A first token that comes late on the gate's clock is late for one of two reasons: the engine had other work ahead
of it (other clients' requests in its slots or its queue: the endpoint is busy, which only a declared bound can
judge), or the engine sat idle while something between it and the client held the request or its answer (a proxy,
a tunnel). Sampling the engine's own count of requests in progress and waiting during the wait tells them apart,
whatever the load of the host that runs the gate: an interval counts only where two samples came close together,
so a gate host too loaded to sample is never read as an idle engine.

llama.cpp counts them in ``llamacpp:requests_processing`` and ``llamacpp:requests_deferred`` (tools/server/
server-task.cpp, to_metrics(); served with ``--metrics``), else its slots' ``is_processing`` (/slots, whose
deferred tasks it does not show); vLLM in ``vllm:num_requests_running`` and ``vllm:num_requests_waiting``
(vllm/v1/metrics/loggers.py).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["Activity", "WatchSource", "requests_in", "source_for", "wait_quiet", "watching"]

SAMPLE_EVERY_S = 0.5
"""How often the engine is asked: often enough to see an idle stretch of the overhead floor many times over."""
CLOSE_S = 1.5
"""Two samples further apart than this say nothing of the time between them: the gate's host was too loaded to
ask on time, and that stretch is neither idle nor busy."""
SAMPLE_TIMEOUT_S = 2.0

BUSY_SERIES: dict[str, tuple[str, ...]] = {
    "llama.cpp": ("llamacpp:requests_processing", "llamacpp:requests_deferred"),
    "vllm": ("vllm:num_requests_running", "vllm:num_requests_waiting"),
}


@dataclass(frozen=True)
class WatchSource:
    """Where the engine's count of requests in progress is read: ``kind`` is ``metrics`` or ``slots``."""

    kind: str
    path: str
    series: tuple[str, ...] = ()


@dataclass
class Activity:
    """The engine's requests in progress or waiting, sampled on the gate's clock (seconds since the watch began);
    ``None`` where a sample could not be read."""

    source: WatchSource | None
    samples: list[tuple[float, int | None]] = field(default_factory=list)
    unreadable: str = ""
    """Why no sample could be read, where none could."""

    def split(self, until: float) -> tuple[float, float, float]:
        """Seconds of [0, until] the engine was seen idle, seen busy, and not seen."""
        idle = busy = 0.0
        points = [(t, n) for t, n in self.samples if t <= until]
        for (t0, n0), (t1, n1) in itertools.pairwise(points):
            if t1 - t0 > CLOSE_S or n0 is None or n1 is None:
                continue
            if n0 == 0 and n1 == 0:
                idle += t1 - t0
            elif n0 > 0 and n1 > 0:
                busy += t1 - t0
        return idle, busy, max(until - idle - busy, 0.0)

    @property
    def seen(self) -> bool:
        return any(n is not None for _, n in self.samples)


def source_for(engine: str, has_slots: bool, get: Callable[[str, float], tuple[int, str, Any]]) -> WatchSource | None:
    """The engine's own count of requests in progress that this endpoint serves: its /metrics series, else
    llama-server's /slots; None where neither answers with it."""
    candidates = []
    series = BUSY_SERIES.get(engine)
    if series is not None:
        candidates.append(WatchSource("metrics", "/metrics", series))
    if has_slots:
        candidates.append(WatchSource("slots", "/slots"))
    for source in candidates:
        try:
            status, text, body = get(source.path, SAMPLE_TIMEOUT_S)
        except Exception:  # an endpoint that cannot answer it is one that cannot be watched through it
            continue
        if requests_in(source, status, text, body) is not None:
            return source
    return None


def requests_in(source: WatchSource, status: int, text: str, body: Any) -> int | None:
    """Requests in progress or waiting, from one answer of ``source``; None where it does not say."""
    if status != 200:
        return None
    if source.kind == "slots":
        if not isinstance(body, list):
            return None
        return sum(1 for slot in body if isinstance(slot, dict) and slot.get("is_processing") is True)
    found: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in source.series:
                    found[sample.name] = found.get(sample.name, 0.0) + float(sample.value)
    except ValueError:
        return None
    if not found:
        return None
    return round(sum(found.values()))


@contextlib.contextmanager
def watching(source: WatchSource | None, get: Callable[[str, float], tuple[int, str, Any]]) -> Iterator[Activity]:
    """Sample ``source`` through ``get(path, timeout) -> (status, text, json)`` every SAMPLE_EVERY_S in a thread
    until the block ends; the thread is joined before the block's result is used."""
    activity = Activity(source)
    if source is None:
        yield activity
        return
    stop = threading.Event()
    start = time.monotonic()

    def sample() -> None:
        while not stop.is_set():
            try:
                status, text, body = get(source.path, SAMPLE_TIMEOUT_S)
                count = requests_in(source, status, text, body)
                if count is None and not activity.unreadable:
                    activity.unreadable = f"{source.path} answered {status} without the requests in progress"
            except Exception as exc:  # a sample that fails is a stretch not seen, never the check's error
                count = None
                activity.unreadable = activity.unreadable or f"{source.path}: {type(exc).__name__}"
            activity.samples.append((time.monotonic() - start, count))
            stop.wait(SAMPLE_EVERY_S)

    thread = threading.Thread(target=sample, name="fleetgate-engine-activity", daemon=True)
    thread.start()
    try:
        yield activity
    finally:
        stop.set()
        thread.join(SAMPLE_TIMEOUT_S + SAMPLE_EVERY_S + 1.0)


def wait_quiet(source: WatchSource, get: Callable[[str, float], tuple[int, str, Any]], limit: float) -> float | None:
    """Seconds until ``source`` says the engine has no request in progress or waiting, asked every SAMPLE_EVERY_S;
    None where that did not happen within ``limit`` seconds (or could not be read)."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        try:
            status, text, body = get(source.path, SAMPLE_TIMEOUT_S)
            count = requests_in(source, status, text, body)
        except Exception:  # an answer that cannot be read is no quiet engine
            count = None
        if count == 0:
            return time.monotonic() - start
        time.sleep(SAMPLE_EVERY_S)
    return None
