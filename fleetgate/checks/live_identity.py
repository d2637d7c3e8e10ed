"""Liveness and identity: the endpoint answers, and it serves what the files declare (C.1, C-CAP-1).

Health and the model list cannot see the payload (INC-53: /health 200, /v1/models echoed the alias,
e2e green -- and the process served another model). /props can: the loaded file, the slots, the
per-slot window and the sampler defaults, all compared with the rendered config.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from fleetgate.checks import NotJudged, live_check
from fleetgate.errors import InputError
from fleetgate.ledger.vllm import checkpoint_of, safetensors_bytes
from fleetgate.live.client import EndpointError
from fleetgate.live.endpoint import LiveEndpoint
from fleetgate.live.metrics import histogram_buckets, parse_metrics
from fleetgate.models.gguf import gguf_package, read_header

__all__: list[str] = []

HEALTH = "live-health"
ALIAS = "live-alias"
PAYLOAD = "live-payload"
SLOTS = "live-slots"
SAMPLER = "live-sampler-defaults"


@live_check(
    cites=("C-L-1", "INC-48"),
    summary="the endpoint answers its health probe with 200 within the bound",
    # The readiness probe (fleetgate.live.endpoint) raises these before any check runs; this check reports them.
    codes={
        "loading": "the health probe answered 503 (the model is still loading) within --wait-ready",
        "unhealthy": "the health probe answered an error status other than 503, 401 and 403",
        "unauthorized": "the endpoint refused the gate's credentials (401 or 403): no check can run",
        "not-engine-health": "a 200 health answer that is not the engine's own (a login page, a proxy's page)",
    },
)
def live_health(endpoint: LiveEndpoint) -> None:
    # The readiness probe (LiveEndpoint.prepare: health within --wait-ready, credentials accepted) ran
    # before any check; what it found is this check's verdict, said once.
    halt = endpoint.prepare()
    if halt is not None and halt.check == HEALTH:
        raise halt.failure
    base = endpoint.baseline
    if base is not None:
        endpoint.note(f"200 in {base.health_s * 1000:.0f} ms")
        endpoint.measure("health_ms", base.health_s * 1000)
    else:
        endpoint.note("200 (the one-token readiness request was refused: see the generating checks)")


@live_check(
    reads_only=True,
    cites=("C-L-2", "INC-53"),
    summary="/v1/models lists the alias the files declare (clients address the model by it)",
    codes={
        "not-listed": "/v1/models does not list the declared alias (INC-53)",
    },
)
def live_alias(endpoint: LiveEndpoint) -> None:
    alias = endpoint.contract.alias
    body = endpoint.get_json(ALIAS, "/v1/models", cites=("C-L-2",))
    served: list[str] = []
    data = body.get("data") if isinstance(body, dict) else None
    for entry in data if isinstance(data, list) else []:
        if isinstance(entry, dict):
            if isinstance(entry.get("id"), str):
                served.append(entry["id"])
            aliases = entry.get("aliases")
            if isinstance(aliases, list):
                served += [a for a in aliases if isinstance(a, str) and a not in served]
    if alias is None:
        endpoint.note(f"serves {', '.join(served) or 'nothing'} (no alias declared)")
        return
    if alias not in served:
        raise live_alias.fail(endpoint, "not-listed",
                               where=endpoint.where_flag("alias") if endpoint.config else endpoint.where_contract("alias"),
                               cites=("C-L-2", "INC-53"),
                               observed=f"/v1/models lists {', '.join(repr(s) for s in served) or 'no model'}",
                               expected=f"{alias!r}, the alias the rendered config passes",
                               fix="the running process was not started from these files (a drop-in, a manual start, a stale "
                               "unit): "
                               "restart the unit and check DropInPaths, then the process argv")
    endpoint.note(f"serves {alias!r}")


def _props(endpoint: LiveEndpoint, check_name: str) -> dict[str, Any]:
    body = endpoint.get_json(check_name, "/props", cites=("C-CAP-1",))
    return body if isinstance(body, dict) else {}


def _no_payload_report(check: str) -> Callable[[LiveEndpoint], str | None]:
    def reason(endpoint: LiveEndpoint) -> str | None:
        if endpoint.dialect.has_props or endpoint.engine == "vllm":
            return None
        return (f"{check} does not apply to {endpoint.name}: its engine ({endpoint.engine}) reports neither its "
                "loaded model nor its slots (no /props)")
    return reason


def _model_entry(endpoint: LiveEndpoint, check_name: str) -> dict[str, Any]:
    """The /v1/models entry of the served model (by the declared alias, else the only one)."""
    body = endpoint.get_json(check_name, "/v1/models", cites=("C-L-2",))
    data = body.get("data") if isinstance(body, dict) else None
    entries = [e for e in data if isinstance(e, dict)] if isinstance(data, list) else []
    alias = endpoint.contract.alias
    chosen = [e for e in entries if e.get("id") == alias] or (entries if len(entries) == 1 else [])
    return chosen[0] if chosen else {}  # no entry: nothing reported, which the comparison then shows


@lru_cache(maxsize=8)
def _declared_header(path: str) -> dict[str, Any] | str:
    """What the GGUF at the declared path says about itself, or why it cannot be read here."""
    try:
        header = read_header(Path(path))
    except InputError as exc:
        return str(exc)
    tokens = header.fields.get("tokenizer.ggml.tokens")
    n_vocab = tokens.get("array_length") if isinstance(tokens, dict) else len(tokens) if tokens else None
    file_type = header.fields.get("general.file_type")
    return {
        "n_params": sum(math.prod(t.shape) for t in header.tensors),
        "size": sum(t.nbytes for t in header.tensors),
        "n_vocab": n_vocab,
        "ftype": _ftype_name(file_type) if isinstance(file_type, int) else None,
    }


def _ftype_name(value: int) -> str | None:
    try:
        return _norm_ftype(gguf_package().file_type(value).name)
    except ValueError:
        return None


def _norm_ftype(name: str) -> str:
    """gguf's MOSTLY_Q4_K_M and llama.cpp's 'Q4_K - Medium' (src/llama-model-loader.cpp) as one spelling."""
    name = name.upper().removeprefix("(GUESSED) ").removeprefix("MOSTLY_").removeprefix("ALL_")
    for word, letter in (("SMALL", "S"), ("MEDIUM", "M"), ("LARGE", "L")):
        name = name.replace(f" - {word}", f"_{letter}")
    return name.replace(" ", "_")


_PLAIN_TOKEN = re.compile(r"[A-Za-z]{3,}")
_SAMPLE_TOKENS = 8


def _vocabulary_sample(directory: str) -> tuple[list[int], str] | str:
    """Up to eight ids of the tokenizer in ``directory`` (its tokenizer.json) whose tokens are plain letters, spread
    over the vocabulary, and the text they spell together; or why they cannot be read here. Plain letters decode to
    themselves in every decoder (byte-level, metaspace, wordpiece without its ``##``), so the ids of a tokenizer that
    is the model's spell exactly that text, and a tokenizer with other ids spells another."""
    if "://" in directory:
        return f"{directory} is not a local directory (the gate reads no tokenizer over the network)"
    path = Path(directory) / "tokenizer.json"
    try:
        model = json.loads(path.read_text(encoding="utf-8")).get("model") or {}
    except (OSError, ValueError) as exc:
        return f"{path}: {' '.join(str(exc).split())[:160]}"
    vocab = model.get("vocab")
    pairs: list[tuple[int, str]] = []
    if isinstance(vocab, dict):  # BPE, WordPiece: token -> id
        pairs = [(i, t) for t, i in vocab.items() if isinstance(i, int)]
    elif isinstance(vocab, list):  # Unigram: [token, score] in id order
        pairs = [(i, e[0]) for i, e in enumerate(vocab) if isinstance(e, list) and e and isinstance(e[0], str)]
    plain = sorted((i, t) for i, t in pairs if _PLAIN_TOKEN.fullmatch(t))
    if not plain:
        return f"{path} has no token of plain letters to compare"
    step = max(len(plain) // _SAMPLE_TOKENS, 1)
    chosen = plain[::step][:_SAMPLE_TOKENS]
    return [i for i, _ in chosen], "".join(t for _, t in chosen)


def _tokenizer_note(endpoint: LiveEndpoint) -> str:
    """Hold vLLM's tokenizer to the declared one: ids of the declared vocabulary sent to /detokenize must come back as
    the tokens they are. Fails ``other-tokenizer``; returns the note's words (what was compared, or why not)."""
    declared = endpoint.contract.tokenizer
    if declared is None:
        return "no tokenizer declared to compare"
    sample = _vocabulary_sample(declared)
    if isinstance(sample, str):
        return f"the tokenizer was not compared: {sample}"
    ids, text = sample
    try:
        reply = endpoint.client.post("/detokenize", {"model": endpoint.contract.alias or endpoint.name, "tokens": ids},
                                     timeout=min(endpoint.timeout, 15.0))
    except EndpointError as error:
        raise endpoint.unreachable(PAYLOAD, error) from None
    body = reply.json if isinstance(reply.json, dict) else {}
    if not reply.ok or not isinstance(body.get("prompt"), str):
        return f"the tokenizer was not compared: /detokenize answered {reply.brief()}"
    if body["prompt"] != text:
        raise live_payload.fail(endpoint, "other-tokenizer",
                                 where=endpoint.where_flag("tokenizer") if endpoint.config is not None and
                                 endpoint.config.vllm is not None and endpoint.config.vllm.tokenizer else reply.url,
                                 cites=("C-ID-2",),
                                 observed=f"/detokenize of ids {ids} (tokens of {declared}/tokenizer.json) gives "
                                 f"{body['prompt']!r}",
                                 expected=f"{text!r}: the tokens those ids are in the declared tokenizer",
                                 fix="vLLM runs with another tokenizer than the model's (--tokenizer, or a tokenizer.json "
                                 "replaced beside the weights): every prompt reaches the model as other tokens and every "
                                 "answer comes back as other words; start it with the model's own tokenizer")
    return f"its tokenizer spells {len(ids)} tokens of {Path(declared).name}/tokenizer.json back (/detokenize)"


@live_check(
    reads_only=True,
    cites=("C-ID-2", "C-L-8", "INC-53", "INC-49"),
    summary="the loaded model is the declared payload: its path (/props model_path, vLLM's /v1/models root) "
    "and, for a GGUF, what the engine reports about it (/v1/models meta: parameters, vocabulary, size, "
    "quantisation) against the declared file's header",
    requires=_no_payload_report(PAYLOAD),
    codes={
        "other-path": "the loaded model's path (/props model_path, vLLM's /v1/models root) is not the rendered `--model` (INC-53)",
        "header-unreadable": "the path matches, but the declared GGUF's header cannot be read where the gate runs (no profile of it)",
        "other-model": "what the engine reports of the loaded model (parameters, vocabulary, size, quantisation) is not the payload's",
        "other-tokenizer": "vLLM's /detokenize turns token ids of the declared tokenizer's vocabulary into other text: the "
        "engine reads and writes the model's tokens through another tokenizer",
    },
)
def live_payload(endpoint: LiveEndpoint) -> None:
    expected = endpoint.contract.model_path
    if endpoint.dialect.has_props:
        loaded = _props(endpoint, PAYLOAD).get("model_path")
        source = "/props model_path"
    else:
        loaded = _model_entry(endpoint, PAYLOAD).get("root")
        source = "/v1/models root"
    if expected is None:
        endpoint.note(f"loaded {loaded} (the rendered config names no model to compare)")
        return
    if loaded != expected:
        raise live_payload.fail(endpoint, "other-path",
                                 where=endpoint.where_flag("model"),
                                 cites=("C-ID-2", "INC-53"),
                                 observed=f"{source} = {loaded!r}",
                                 expected=f"{expected!r}, the model the serve script renders",
                                 fix="the process serves another payload than the files say: check DropInPaths, "
                                 "/proc/<MainPID>/cmdline, "
                                 "then restart the unit from the repository's env file")
    checkpoint = None if endpoint.dialect.has_props else _declared_checkpoint(endpoint)
    tokenizer = f"; {_tokenizer_note(endpoint)}" if endpoint.engine == "vllm" else ""
    if checkpoint is None and (not endpoint.dialect.has_props or not expected.endswith(".gguf")):
        endpoint.note(f"loaded {loaded} ({source}; no GGUF header or checkpoint profile to compare){tokenizer}")
        return
    # The declared payload's identity is what the files declare about it (the profile written from its GGUF
    # header), not whatever file sits at the path now: another model copied there under the declared name
    # matches its own header. Only without a profile of that file is the file at the path read.
    # vLLM reports nothing about the model but its path: there the checkpoint at that path (config.json, the
    # safetensors headers) is what is held to the service's checkpoint profile.
    served: dict[str, Any] | str
    declared: dict[str, Any] | str
    if checkpoint is not None:
        declared, origin = checkpoint
        served = _checkpoint_at(str(loaded))
        if isinstance(served, str):
            # as before checkpoint profiles were compared: the path is all a remote gate can hold vLLM to
            endpoint.note(f"loaded {loaded} ({source}); the checkpoint there is not readable where the gate runs, so "
                          f"only the path was compared (on the host it is held to {origin}): {served}{tokenizer}")
            return
    else:
        declared, origin = _declared_identity(endpoint, expected)
        served = {}
    if isinstance(declared, str):
        raise live_payload.fail(endpoint, "header-unreadable",
                                 where=endpoint.where_flag("model"),
                                 cites=("INC-53",),
                                 observed=f"the path matches, but the declared payload's header cannot be read here: {declared}",
                                 expected="the declared GGUF readable where the gate runs, to compare with what the engine loaded",
                                 fix="run the gate on the service's host (the path alone cannot tell two files apart: INC-53)")
    assert isinstance(declared, dict) and isinstance(served, dict)
    if checkpoint is None:
        meta = _model_entry(endpoint, PAYLOAD).get("meta")
        meta = meta if isinstance(meta, dict) else {}  # no meta: every value below reads None, and fails
        served = {
            "n_params": meta.get("n_params"),
            "size": meta.get("size"),
            "n_vocab": meta.get("n_vocab"),
            "ftype": _norm_ftype(meta["ftype"]) if isinstance(meta.get("ftype"), str) else None,
        }
    keys = tuple(declared) if checkpoint is not None else ("n_params", "n_vocab", "size", "ftype")
    wrong = [
        f"{key} {served.get(key)!r}, {origin} says {declared[key]!r}"
        for key in keys
        if declared.get(key) is not None and served.get(key) != declared[key]
    ]
    compared = (", ".join(k for k in keys if declared.get(k) is not None) if checkpoint is not None
                else "parameters, vocabulary, size and quantisation")
    if wrong:
        raise live_payload.fail(endpoint, "other-model",
                                 where=endpoint.where_flag("model"),
                                 cites=("C-ID-2", "INC-53"),
                                 observed=f"the engine loaded another model than the declared payload {Path(expected).name}: "
                                 + "; ".join(wrong),
                                 expected=f"the loaded model's {compared} equal {origin}'s",
                                 fix="the process loaded another file than the one the files declare (another model under the "
                                 "declared name, or the file changed after the process loaded it): fetch the declared payload, "
                                 "restart the unit, then check which payload was deployed")
    if checkpoint is not None:
        endpoint.note(f"loaded {Path(str(loaded)).name}: {declared.get('weight_bytes'):,} bytes of weights, "
                      f"{len(declared) - 1} config keys as {origin} says (the checkpoint at /v1/models root){tokenizer}")
        return
    what = ", ".join(
        text
        for text in (
            f"{declared['n_params']:,} parameters" if declared.get("n_params") is not None else "",
            str(declared["ftype"]) if declared.get("ftype") else "",
            f"vocabulary {declared['n_vocab']}" if declared.get("n_vocab") is not None else "",
        )
        if text
    )
    endpoint.note(f"loaded {Path(str(loaded)).name}: {what}, as {origin} says")


_CHECKPOINT_KEYS = ("architectures", "model_type", "dtype", "hidden_size", "intermediate_size", "num_hidden_layers",
                    "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings",
                    "tie_word_embeddings", "num_experts", "num_local_experts")
"""config.json keys that name a checkpoint's shape (``torch_dtype`` is read as ``dtype``, its newer name)."""


def _config_keys(config: Any) -> dict[str, Any]:
    config = dict(config) if isinstance(config, dict) else {}
    if "dtype" not in config and "torch_dtype" in config:
        config["dtype"] = config["torch_dtype"]
    return {key: config[key] for key in _CHECKPOINT_KEYS if key in config}


def _declared_checkpoint(endpoint: LiveEndpoint) -> tuple[dict[str, Any], str] | None:
    """What a vLLM service's checkpoint profile (``source = "checkpoint"``) declares its payload to be: the
    weights' bytes and the config.json keys that name its shape; None without such a profile."""
    config = endpoint.config
    profile = config.profile if config is not None else None
    if profile is None or profile.raw.get("model", {}).get("source") != "checkpoint":
        return None

    declared: dict[str, Any] = {"weight_bytes": checkpoint_of(profile).weight_bytes}
    declared.update(_config_keys(profile.raw.get("config")))
    return declared, f"its profile ({profile.path.name})"


def _checkpoint_at(path: str) -> dict[str, Any] | str:
    """The same facts of the checkpoint directory at ``path`` (its safetensors headers and config.json), or why
    they cannot be read here."""

    if "://" in path:
        return f"{path} is not a local directory (the gate reads no checkpoint over the network)"
    try:
        weight_bytes, _ = safetensors_bytes(path)
        config = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except InputError as exc:
        return str(exc)
    except (OSError, ValueError) as exc:
        return f"{path}/config.json: {exc}"
    return {"weight_bytes": weight_bytes, **_config_keys(config)}


def _declared_identity(endpoint: LiveEndpoint, path: str) -> tuple[dict[str, Any] | str, str]:
    """What the declared payload is (parameters, vocabulary, tensor bytes), and where that was read: the
    service's profile of the file (written from its GGUF header), else the header of the file at the path."""
    config = endpoint.config
    profile = config.profile if config is not None else None
    if (
        profile is not None
        and not profile.reconstructed
        and profile.weights
        and profile.file == Path(path).name
    ):
        tensors = [w for w in profile.weights if not w.duplicate]
        return (
            {
                "n_params": sum(math.prod(w.shape) for w in tensors),
                "size": sum(w.nbytes for w in tensors),
                "n_vocab": profile.n_vocab or None,
                "ftype": None,  # the profile keeps each tensor's type, not the file's type name
            },
            f"its profile ({profile.path.name})",
        )
    return _declared_header(path), "the file's header"


CONCURRENT_REQUESTS = 4
"""At most this many requests probe vLLM's --max-num-seqs at once."""
CONCURRENT_TOKENS = 48
"""Long enough that requests sent together are in flight together on a loaded client: at 12 tokens vLLM finished one
before the next arrived under CI load, and a healthy server read as one sequence at a time."""
STEP_TOKENS = "vllm:iteration_tokens_total"
"""vLLM's histogram of the tokens each engine step computed (vllm/v1/metrics/loggers.py): a step that decodes several
sequences together computes one token for each."""
QUEUE_TIME = "vllm:request_queue_time_seconds"
"""Each request's time in the engine's WAITING queue, from the engine's own clock (vllm/v1/metrics/stats.py:
``scheduled_ts - queued_ts``): it does not depend on when the gate's client read the answers."""
RUN_TIME = "vllm:request_inference_time_seconds"
"""Each request's time RUNNING (``last_token_ts - scheduled_ts``), on the same clock."""
SEQUENCE_ATTEMPTS = 2
"""How many times the sequences are asked for before the probe says vLLM's steps showed neither sharing nor waiting."""


@dataclass(frozen=True)
class _EngineSteps:
    single: float
    """Engine steps of at most 1 token so far."""
    small: float
    """Engine steps of at most 8 tokens so far."""
    queued: float
    """Seconds requests have waited in the engine's queue so far."""
    ran: float
    """Seconds requests have run so far."""


def _engine_steps(endpoint: LiveEndpoint) -> _EngineSteps | None:
    """vLLM's own step and queue accounting from /metrics; None where a histogram it needs is not served."""
    try:
        reply = endpoint.get("/metrics")
    except EndpointError as error:
        raise endpoint.unreachable(SLOTS, error) from None
    try:
        buckets = histogram_buckets(reply.text, STEP_TOKENS) if reply.ok else {}
        sums = parse_metrics(reply.text) if reply.ok else {}
    except ValueError:
        return None
    queued, ran = sums.get(f"{QUEUE_TIME}_sum"), sums.get(f"{RUN_TIME}_sum")
    if 1.0 not in buckets or 8.0 not in buckets or queued is None or ran is None:
        return None
    return _EngineSteps(buckets[1.0], buckets[8.0], queued, ran)


def _send_together(endpoint: LiveEndpoint, wanted: int) -> None:
    """One request of ``wanted`` sequences (``n``). vLLM's front end fans it out into ``wanted`` requests and hands them
    to its engine at one moment (vllm/v1/engine/parallel_sampling.py ``ParentRequest``), so they reach the scheduler
    together however loaded the gate's host or vLLM's API server is: sent as separate requests at one barrier, they
    reached it apart on a 2-core CI host running two boots (measured, 2026-12-07, four sends in a row). Greedy
    decoding admits only n = 1 (vllm/sampling_params.py ``_verify_greedy_sampling``): the sequences sample, seeded;
    their words do not count."""
    body = {"messages": [{"role": "user", "content": "One: count from one to five in words."}], "n": wanted,
            "max_tokens": CONCURRENT_TOKENS, "temperature": 1.0, "seed": 0, **endpoint.thinking(False),
            **endpoint.dialect.decode_rate_fields}
    endpoint.require_ok(SLOTS, endpoint.chat(SLOTS, body), expected="200 with a completion")


def _sequences(endpoint: LiveEndpoint) -> str:
    """vLLM reports max_num_seqs nowhere, and a stream's chunks say nothing reliable about when its tokens were made
    (under load vLLM coalesces a lagging stream's deltas into a chunk or two, and it sends no chunk for bytes that do
    not decode yet: measured, both). Its engine steps do: ask for as many sequences at once as the files declare (at most
    four, one request with ``n``), each running to max_tokens (ignore_eos), and read how many tokens each step computed
    (``vllm:iteration_tokens_total``). Sequences decoded together make steps of 2 to 8 tokens: passes.

    No such step is a failure only where the engine had the sequences together and ran them one after another: its
    own clock says they waited in its queue, in all, at least as long as one of them ran (one at a time, the second of
    four waits one sequence's run, the fourth three). Steps that show neither (no sequence shared a step, none waited)
    say nothing of the setting: asked again, then not judged, never a failure."""
    declared = endpoint.contract.n_slots
    if declared is None or declared < 2:
        return ""
    wanted = min(declared, CONCURRENT_REQUESTS)
    for _ in range(SEQUENCE_ATTEMPTS):
        before = _engine_steps(endpoint)
        if before is None:
            raise NotJudged(f"{endpoint.name}'s --max-num-seqs: vLLM reports it nowhere, and its /metrics lacks the "
                            f"{STEP_TOKENS}, {QUEUE_TIME} or {RUN_TIME} histogram that count the sequences it decodes "
                            "together")
        _send_together(endpoint, wanted)
        after = _engine_steps(endpoint)
        if after is None:
            raise NotJudged(f"{endpoint.name}'s --max-num-seqs: vLLM's step histograms went away during the probe")
        single = after.single - before.single
        shared = (after.small - before.small) - single
        if shared >= 1:
            return (f"; {wanted} sequences at once decoded together: {shared:.0f} engine steps of 2-8 tokens "
                    f"(--max-num-seqs {declared})")
        waited, one_run = after.queued - before.queued, (after.ran - before.ran) / wanted
        if waited >= one_run:
            raise live_slots.fail(endpoint, "fewer-sequences",
                                   where=endpoint.where_flag("max_num_seqs"),
                                   cites=("C-ID-6", "C-CAP-13"),
                                   observed=f"{wanted} sequences asked for at once (n, {CONCURRENT_TOKENS} tokens each) were "
                                   f"decoded one at a time: {single:.0f} engine steps of one token, none of 2 to 8 "
                                   f"({STEP_TOKENS}), while they waited {waited:.2f} s in vLLM's queue where one runs "
                                   f"{one_run:.2f} s ({QUEUE_TIME})",
                                   expected=f"steps that decode several of them together (--max-num-seqs {declared})",
                                   fix="the process runs one sequence at a time where its files declare more "
                                   "(--max-num-seqs): clients queue behind each other; restart it from the serve script")
    raise NotJudged(f"{endpoint.name}'s --max-num-seqs: {SEQUENCE_ATTEMPTS} times the {wanted} sequences the gate asked "
                    "for at once reached vLLM's engine one after another (none waited in its queue, none was decoded "
                    "beside another): read vLLM's log for how it scheduled them, and run the gate again")


@live_check(
    cites=("C-ID-6", "C-CAP-13", "B-CTX-1", "INC-83"),
    summary="/props total_slots and per-slot n_ctx equal the rendered --parallel and --ctx-size / --parallel "
    "(vLLM: /v1/models max_model_len equals --max-model-len, and as many requests at once as --max-num-seqs declares, up "
    "to four, are decoded together)",
    requires=_no_payload_report(SLOTS),
    codes={
        "other-shape": "/props total_slots or per-slot n_ctx (vLLM: max_model_len) is not the rendered shape",
        "fewer-sequences": "vLLM decoded the gate's concurrent requests one at a time where --max-num-seqs declares more "
        "(it reports max_num_seqs nowhere: no engine step of vllm:iteration_tokens_total decoded two together)",
    },
)
def live_slots(endpoint: LiveEndpoint) -> None:
    contract = endpoint.contract
    vllm = not endpoint.dialect.has_props
    if not vllm:
        props = _props(endpoint, SLOTS)
        slots = props.get("total_slots")
        settings = props.get("default_generation_settings")
        n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
    else:
        slots = None  # vLLM does not report max_num_seqs: the concurrent streams below show it
        n_ctx = _model_entry(endpoint, SLOTS).get("max_model_len")
    problems = []
    if contract.n_slots is not None and slots is not None and slots != contract.n_slots:
        problems.append(f"{slots} slots, not {contract.n_slots}")
    if contract.slot_ctx is not None and n_ctx != contract.slot_ctx:
        problems.append(f"{n_ctx} tokens per slot, not {contract.slot_ctx}" if not vllm else
                        f"max_model_len {n_ctx}, not {contract.slot_ctx}")
    if problems:
        raise live_slots.fail(endpoint, "other-shape",
                               where=endpoint.where_flag("max_model_len" if vllm else "ctx_size"),
                               cites=("C-ID-6", "C-CAP-13"),
                               observed=f"{'/v1/models' if vllm else '/props'}: {'; '.join(problems)}",
                               expected=(
                                   f"max_model_len {contract.slot_ctx} (--max-model-len as rendered; clients are told "
                                   f"{contract.context_window})" if vllm else
                                   f"{contract.n_slots} slots of {contract.slot_ctx} tokens (--ctx-size / --parallel as "
                                   f"rendered; clients are told {contract.context_window})"
                                   ),
                               fix="the process runs another context shape than its files: a prompt the clients think "
                               "fits is refused with a hard 400; restart it from the serve script, or fix the files and "
                               "tell clients")
    together = _sequences(endpoint) if vllm and endpoint.engine == "vllm" else ""
    endpoint.note((f"{slots} slots x {n_ctx} tokens" if slots is not None else f"window {n_ctx} tokens") + together)


def _no_sampler(endpoint: LiveEndpoint) -> str | None:
    if not endpoint.dialect.has_props and endpoint.engine != "vllm":
        return f"{SAMPLER} does not apply to {endpoint.name}: its engine ({endpoint.engine}) serves no /props to read defaults from"
    if not endpoint.contract.sampler:
        flags = ("--override-generation-config temperature, top_k, top_p, min_p" if endpoint.engine == "vllm"
                 else "--temp, --top-k, --top-p, --min-p")
        return f"{SAMPLER} does not apply to {endpoint.name}: its rendered command line passes no sampler default ({flags})"
    return None


SAMPLER_SEED = 20261207
SAMPLER_TOKENS = 12


def _seeded(endpoint: LiveEndpoint, fields: dict[str, Any]) -> str:
    """The text of one seeded request with ``fields`` (no sampler field: the server's defaults apply)."""
    body = {"messages": [{"role": "user", "content": "Name a colour, a number and an animal."}],
            "max_tokens": SAMPLER_TOKENS, "seed": SAMPLER_SEED, **endpoint.thinking(False),
            **endpoint.dialect.decode_rate_fields, **fields}
    reply = endpoint.chat(SAMPLER, body)
    endpoint.require_ok(SAMPLER, reply, expected="200 with a completion")
    message = reply.json["choices"][0].get("message") if isinstance(reply.json, dict) and reply.json.get("choices") else {}
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else ""


def _sampled_behaviour(endpoint: LiveEndpoint) -> None:
    """vLLM reports its default sampling parameters nowhere (no /props; its log says them at start). What it does
    shows them: one seeded request without sampler fields, and the same with the declared defaults set, sample
    alike exactly when the server's defaults are the declared ones (vLLM fills each missing field from them:
    vllm/entrypoints/openai/chat_completion/protocol.py, to_sampling_params). A third, greedy (or hot, when greedy is
    declared), shows that this prompt's answer depends on the sampler at all: where it does not, not judged."""
    declared = dict(endpoint.contract.sampler)
    contrast = {"temperature": 0.0} if declared.get("temperature", 1.0) > 0.5 else {"temperature": 1.5}
    server = _seeded(endpoint, {})
    told = _seeded(endpoint, declared)
    other = _seeded(endpoint, contrast)
    said = ", ".join(f"{k} {v:g}" for k, v in declared.items())
    if server != told:
        raise live_sampler_defaults.fail(endpoint, "other-behaviour",
                                 where=endpoint.where_flag("override_generation_config"),
                                 cites=("C-CAP-1", "B-UN-8"),
                                 observed=f"seed {SAMPLER_SEED} without sampler fields sampled {shorten_text(server)!r}; with "
                                 f"{said} it sampled {shorten_text(told)!r}",
                                 expected=f"the same text: a request without sampler fields gets {said} "
                                 "(--override-generation-config as rendered)",
                                 fix="clients that send no sampler settings get other defaults than the files declare: "
                                 "restart vLLM from the serve script (its log's 'Default sampling parameters' line says "
                                 "what it runs)")
    if told == other:
        raise NotJudged(f"{endpoint.name}'s sampler defaults: seed {SAMPLER_SEED} sampled the same text with {said} as "
                        f"with temperature {contrast['temperature']:g}, so this model's answer does not show its "
                        "sampler; vLLM reports its defaults nowhere but its log")
    endpoint.note(f"{said}: a seeded request without them sampled what it sampled with them (and otherwise at "
                  f"temperature {contrast['temperature']:g})")


def shorten_text(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


@live_check(
    cites=("C-CAP-1", "B-UN-8"),
    summary="the sampler defaults a client gets (temperature, top_k, top_p, min_p) are the rendered ones (vLLM, which "
    "reports them nowhere: a seeded request without them samples what the same request with them does)",
    requires=_no_sampler,
    codes={
        "other-defaults": "a /props sampler default (temperature, top_k, top_p, min_p) is not the rendered one (B-UN-8)",
        "other-behaviour": "vLLM sampled otherwise for a seeded request without sampler fields than for the same request "
        "with the declared defaults: it runs other defaults (--override-generation-config)",
    },
)
def live_sampler_defaults(endpoint: LiveEndpoint) -> None:
    if not endpoint.dialect.has_props:
        _sampled_behaviour(endpoint)
        return
    props = _props(endpoint, SAMPLER)
    settings = props.get("default_generation_settings")
    params = settings.get("params") if isinstance(settings, dict) else None
    params = params if isinstance(params, dict) else {}
    wrong: list[str] = []
    first_dest = ""
    for key, want in endpoint.contract.sampler.items():
        have = params.get(key)
        # /props reports float32 values (0.2 reads back as 0.20000000298...).
        if not isinstance(have, int | float) or not math.isclose(
            float(have), want, rel_tol=1e-5, abs_tol=1e-6
        ):
            wrong.append(
                f"{key} = {have:.6g}, not {want:g}"
                if isinstance(have, int | float)
                else f"{key} = {have!r}, not {want:g}"
            )
            first_dest = first_dest or ("temp" if key == "temperature" else key)
    if wrong:
        raise live_sampler_defaults.fail(endpoint, "other-defaults",
                                 where=endpoint.where_flag(first_dest),
                                 cites=("C-CAP-1", "B-UN-8"),
                                 observed="/props default_generation_settings: " + "; ".join(wrong),
                                 expected=", ".join(f"{k} {v:g}" for k, v in endpoint.contract.sampler.items()) + " (as rendered)",
                                 fix="clients that send no sampler settings get the process's defaults: restart from the env file")
    endpoint.note(", ".join(f"{k} {v:g}" for k, v in endpoint.contract.sampler.items()))
