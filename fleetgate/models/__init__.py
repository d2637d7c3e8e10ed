"""What fleetgate knows of a model without loading it: GGUF headers read locally (``gguf``) or by HTTP range
(``gguf_remote`` over ``rangeread``), the profiles built from them (``profile``) and a checkpoint's config.json
(``config``)."""

__all__: list[str] = []
