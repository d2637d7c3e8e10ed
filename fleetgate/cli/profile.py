"""``fleetgate profile``: a model profile (TOML) from a GGUF header (local, or by HTTP range), from a model card's
config.json, or a vLLM checkpoint's weight bytes from its safetensors headers.

    fleetgate profile MODEL.gguf [-o PROFILE.toml]       a profile from the GGUF header
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fleetgate.cli import SUBCOMMANDS, parse_size, write_stdout
from fleetgate.errors import InputError
from fleetgate.ledger.vllm import safetensors_bytes
from fleetgate.models.config import config_profile, load_model_config
from fleetgate.models.gguf import profile_toml
from fleetgate.models.gguf_remote import source_profile
from fleetgate.models.rangeread import redact

__all__ = ["register"]


def register(subparsers: Any) -> None:
    profile = subparsers.add_parser(
        "profile", help=SUBCOMMANDS["profile"][1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Only the header is read: from a local file, or by HTTP range requests from a URL (no download).",
        epilog="  fleetgate profile MODEL.gguf -o profiles/MODEL.toml\n"
               "  fleetgate profile hf://OWNER/REPO/MODEL-Q4_K_M.gguf -o profiles/MODEL.toml\n"
               "  fleetgate profile https://host/path/MODEL-00001-of-00003.gguf     (every part's header)\n"
               "  fleetgate profile --from-config config.json --size 23.1GB --name MODEL-Q4_K_M\n"
               "hf:// resolves against HF_ENDPOINT (default https://huggingface.co); HF_TOKEN is sent to its origin only\n"
               "(scheme, host and port), never to a redirect elsewhere (the Hub's CDN included), and never shown.")
    profile.add_argument("gguf", nargs="?", metavar="SOURCE",
                         help="the model: a GGUF path, an https:// URL or hf://OWNER/REPO/FILE.gguf; only its header is read")
    profile.add_argument("-o", "--output", metavar="FILE", help="write here instead of standard output")
    profile.add_argument("--from-config", metavar="CONFIG.json",
                         help="what a model card states (Hugging Face config.json) instead of a GGUF header")
    profile.add_argument("--size", metavar="SIZE",
                         help="with --from-config: the GGUF's size as the Hub states it (bytes, 23.1GB, 21.5GiB)")
    profile.add_argument("--name", metavar="NAME", help="with --from-config: the profile's model name")
    profile.add_argument("--safetensors", metavar="DIR|URL",
                         help="a vLLM checkpoint (a directory, a file, hf://OWNER/REPO or its URL): print the weight_bytes "
                              "of a checkpoint profile from its safetensors headers (read by range when remote)")
    profile.set_defaults(func=_profile)


_DECIMAL = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}


def _fileparse_size(text: str) -> int:
    """A size as the Hub prints it (GB = 10**9 B) or as fleetgate does (GiB, G = 2**30)."""
    unit = text.strip()[-2:].upper()
    if unit in _DECIMAL:
        try:
            value = float(text.strip()[:-2])
        except ValueError:
            value = -1.0
        if value > 0:
            return int(value * _DECIMAL[unit])
    return parse_size(text, "--size")


def _profile(args: argparse.Namespace) -> int:
    if args.safetensors:
        total, files = safetensors_bytes(args.safetensors)
        return write_stdout(f"# the safetensors headers of {len(files)} file(s) of {args.safetensors}\n"
                      f"weight_bytes = {total}\n")
    if args.from_config:
        if args.gguf:
            raise InputError(Path(args.gguf), None, "a GGUF and --from-config; expected one of them")
        if not args.size:
            raise InputError(Path(args.from_config), None, "--from-config needs --size: the GGUF's size as the Hub "
                                                           "states it (the weights the ledger places)")
        config = load_model_config(Path(args.from_config))
        name = args.name or Path(args.from_config).resolve().parent.name
        data = config_profile(config, file_bytes=_fileparse_size(args.size), name=name)
        comment = (f"written by `fleetgate profile --from-config {Path(args.from_config).name} --size {args.size}`: "
                   "the shape is the model card's;\nthe weights are the stated size spread over the blocks by "
                   "parameter count (source = \"config\")")
    elif args.gguf:
        data, reads = source_profile(args.gguf)
        shown = redact(args.gguf) if reads else Path(args.gguf).name
        comment = f"written by `fleetgate profile {shown}` from the GGUF header (tensor data is never read)"
        for read in reads:
            comment += (f"\n{read.source}: {read.transferred} of {read.file_bytes} bytes in {read.requests} "
                        f"request(s) over {read.connections} connection(s)"
                        + (" (the server ignored Range)" if read.ignored_range else ""))
    else:
        raise InputError(Path.cwd(), None, "fleetgate profile: expected SOURCE (a GGUF, a URL, hf://...) or "
                                           "--from-config config.json --size SIZE")
    text = profile_toml(data, comment=comment)
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise InputError(Path(args.output), None, f"cannot write the profile: {exc.strerror or exc}; "
                                                      "expected a writable file path") from None
        return 0
    return write_stdout(text)
