"""A llama-server asked for embeddings serves them (issue 32).

llama-server answers ``/v1/embeddings`` only when it was started with ``--embeddings`` (or ``--reranking``, which
sets it): otherwise every request is a 501, "This server does not support embeddings. Start it with `--embeddings`"
(tools/server/server-context.cpp, the embeddings handler). ``--pooling`` alone does not turn it on: it only says how
to pool once embeddings are on. A router's preset section is the same argv (``pooling = mean`` without
``embeddings = true``). Measured on the suite's llama-server (build 11434, SmolLM2): docs/seams.md.
"""

from __future__ import annotations

from fleetgate.checks import service_seam
from fleetgate.checks._common import llama_of
from fleetgate.render.rendered import RenderedService

__all__: list[str] = []


_PATHS = ("/v1/embeddings", "/embeddings", "/embedding")


def _asked(config: RenderedService) -> str | None:
    endpoints = [e for e in config.service.contract.endpoints if e in _PATHS]
    if llama_of(config).use("pooling") is None and not endpoints:
        return (f"{config.name} asks for no embeddings (no --pooling, no /v1/embeddings among its contract's "
                "endpoints)")
    return None


def _on(config: RenderedService, dest: str) -> bool:
    assert config.llama is not None
    use = config.llama.use(dest)
    return use is not None and use.value not in ("0", "false", "off")


@service_seam(
    cites=(),
    summary="a llama-server asked for embeddings (--pooling, or /v1/embeddings in its contract) is started with "
            "--embeddings",
    requires=_asked,
    engines=("llama.cpp",),
    codes={
        "pooling-only": ("`--pooling` (a preset's `pooling =`) without `--embeddings`: the server answers every "
                         "embeddings request with 501"),
        "contract-endpoint": ("the contract lists `/v1/embeddings` and the server is not started with `--embeddings`: "
                              "every request is a 501"),
    },
)
def embeddings_served(config: RenderedService) -> None:
    llama = config.llama
    assert llama is not None
    if _on(config, "embeddings") or _on(config, "reranking"):
        return
    pooling = llama.use("pooling")
    refusal = "llama-server answers 501 'This server does not support embeddings. Start it with `--embeddings`'"
    fix = ("add --embeddings (LLAMA_ARG_EMBEDDINGS=1; `embeddings = true` in a preset section); a model that "
           "serves chat too keeps it: --embeddings adds the endpoint")
    if pooling is not None:
        raise embeddings_served.fail(
            config, "pooling-only",
            where=config.where_flag(pooling),
            observed=f"{pooling.flag} {pooling.value} without --embeddings: {refusal} to every embeddings request",
            expected="--embeddings beside --pooling (pooling says how, --embeddings turns the endpoint on)",
            fix=fix,
        )
    raise embeddings_served.fail(
        config, "contract-endpoint",
        where=config.fleet.where("services", config.name, "contract"),
        observed=f"the contract lists /v1/embeddings; the server is started without --embeddings: {refusal}",
        expected="--embeddings on a server whose clients call /v1/embeddings",
        fix=fix,
    )
