"""``--cache-reuse`` is kept by the engine it is passed to (issue 32).

llama-server turns cache reuse off at load, with a warning in its log and nothing else, where the context cannot
shift its cells (tools/server/server-context.cpp, ``load_model``):

- with a multimodal projector (``--mmproj``): "cache_reuse is not supported by multimodal, it will be disabled";
- where ``llama_memory_can_shift`` is false: "cache_reuse is not supported by this context, it will be disabled".
  A sliding-window model's cache is two caches (src/llama-kv-cache-iswa.cpp), and it shifts only when both hold
  the same number of cells (``get_can_shift``: ``kv_base->get_size() == kv_swa->get_size()``): the windowed one
  holds ``PAD256(min(kv_size, n_swa x (unified ? n_seq : 1) + n_ubatch))`` cells unless ``--swa-full`` makes it
  ``kv_size``. A model with several positions per embedding (M-RoPE, IM-RoPE: Qwen2-VL, Qwen3-VL, Qwen3.5) cannot shift either
  (src/llama-kv-cache.cpp, ``n_pos_per_embd() > 1``), nor step35.

The projector needs no profile; the sliding window does (its ``[attention] sliding_window`` and ``[layers]
pattern``): without one the check is not judged, with the service's one profile line.
"""

from __future__ import annotations

from fleetgate.checks import NotJudged, service_seam
from fleetgate.checks._common import profile_missing
from fleetgate.engines.llamacpp import context_shape, pad, stoi
from fleetgate.render.rendered import RenderedService

__all__: list[str] = []


# The architectures whose cache never shifts: src/llama-model.cpp, llama_model_rope_type, gives these M-RoPE or
# IM-RoPE (llama_hparams::n_pos_per_embd is then 4), and src/llama-kv-cache.cpp, get_can_shift, refuses step35
# (per-layer rope dimensions). GGUF architecture names (src/llama-arch.cpp).
_NO_SHIFT = ("qwen2vl", "paddleocr", "qwen3vl", "qwen3vlmoe", "qwen35", "qwen35moe", "clef", "qwen4exp", "qwen3tts",
             "step35")


def _reuse(config: RenderedService) -> int:
    assert config.llama is not None
    use = config.llama.use("cache_reuse")
    if use is None or use.value is None:
        return 0
    try:
        return stoi(use.value)
    except ValueError:
        return 0  # engine-accepts-argv names the value the engine refuses


def _no_reuse(config: RenderedService) -> str | None:
    if _reuse(config) <= 0:
        return f"{config.name} passes no --cache-reuse (0, the default, reuses nothing)"
    return None


@service_seam(
    cites=(),
    summary="--cache-reuse is kept: llama-server drops it beside a projector, or on a sliding-window model without "
            "--swa-full",
    requires=_no_reuse,
    engines=("llama.cpp",),
    codes={
        "multimodal": "`--cache-reuse` beside `--mmproj`: llama-server disables cache reuse for multimodal models",
        "sliding-window": (
            "`--cache-reuse` on a model with sliding-window layers whose windowed cache is smaller than the full one "
            "(no `--swa-full`): the context cannot shift, and llama-server disables cache reuse"
        ),
        "no-shift": ("`--cache-reuse` on an architecture whose cache never shifts (M-RoPE: qwen2vl, qwen3vl, qwen35, ...; "
                     "step35): llama-server disables cache reuse"),
    },
)
def cache_reuse_kept(config: RenderedService) -> None:
    llama = config.llama
    assert llama is not None
    use = llama.use("cache_reuse")
    where = config.where_flag(use)
    reuse = f"--cache-reuse {_reuse(config)}"
    if llama.mmproj:
        raise cache_reuse_kept.fail(
            config, "multimodal",
            where=where,
            observed=(f"{reuse} beside --mmproj {llama.mmproj}: llama-server logs 'cache_reuse is not supported by "
                      "multimodal, it will be disabled' and reuses nothing"),
            expected="--cache-reuse only on a text-only server (no --mmproj)",
            fix="drop --cache-reuse (prompt caching still reuses the common prefix), or serve images from another "
                "service",
        )
    profile = config.profile
    if profile is None:
        raise NotJudged(profile_missing(config))
    if profile.architecture in _NO_SHIFT:
        raise cache_reuse_kept.fail(
            config, "no-shift",
            where=where,
            observed=(f"{reuse} on {profile.name} (architecture {profile.architecture}, whose cache never shifts: "
                      "several rope positions per token, or per-layer rope): llama-server logs 'cache_reuse is not "
                      "supported by this context, it will be disabled'"),
            expected="--cache-reuse only where the context can shift its cells",
            fix="drop --cache-reuse: it is off on this model whatever its value",
        )
    layers = profile.n_layer
    if profile.sliding_window <= 0 or not any(profile.is_swa(il) for il in range(layers)):
        return
    if llama.swa_full:
        return
    shape = context_shape(llama, profile.n_ctx_train)
    if shape is None:
        raise NotJudged(f"{config.name} passes no --ctx-size and {profile.path.name} gives no n_ctx_train: the size "
                        "of its cache is unknown; declare n_ctx_train in the profile or pass --ctx-size")
    size_base = shape.n_ctx
    size_swa = pad(min(size_base, profile.sliding_window * (shape.n_seq_max if shape.unified else 1)
                       + llama.ubatch_size), 256)
    if size_swa == size_base:
        return  # the window covers the whole context: both caches hold the same cells, and the context shifts
    raise cache_reuse_kept.fail(
        config, "sliding-window",
        where=where,
        observed=(f"{reuse} on {profile.name}, whose sliding-window layers keep a {size_swa}-cell cache beside the "
                  f"{size_base}-cell full one (window {profile.sliding_window}): the context cannot shift, so "
                  "llama-server logs 'cache_reuse is not supported by this context, it will be disabled'"),
        expected="--swa-full beside --cache-reuse (the windowed cache as large as the full one), or no --cache-reuse",
        fix=(f"pass --swa-full (its KV cost: the windowed layers at {size_base} cells instead of {size_swa}), or drop "
             "--cache-reuse and rely on the prompt cache's common prefix"),
    )
