"""Read llama-server's ``--help`` into the flag list fleetgate keeps for its build (llama_server_flags.json).

``python -m tools.llama_help PATH/TO/llama-server > fleetgate/engines/llama_server_flags.json``
regenerates the list for a new build; the suite's tests compare the committed list with the real binary.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

__all__ = ["parse_help"]

# An option line: names (``-c,    --ctx-size``), one space and an optional value placeholder -- which may
# hold single spaces (``<tensor name pattern>=<buffer type>,...``, ``START END``) -- then the description
# after a run of spaces (or nothing, when the names fill the column).
_OPTION = re.compile(r"^(?P<names>-[^\s,]+(?:,\s+-[^\s,]+)*)(?: (?P<value>[^\s-]\S*(?: [^\s-]\S*)*))?(?:\s{2,}|\s*$)")
_ENV = re.compile(r"\(env: ([A-Z0-9_]+)\)")


def parse_help(text: str) -> list[dict[str, Any]]:
    options: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for line in text.splitlines():
        if line.startswith("-----"):
            current = None
            continue
        match = _OPTION.match(line) if line.startswith("-") else None
        if match:
            names = [n.strip() for n in match.group("names").split(",")]
            current = {"names": names, "takes_value": match.group("value") is not None, "env": None}
            if match.group("value"):
                current["value"] = match.group("value")
            options.append(current)
        env = _ENV.search(line)
        if env and current is not None:
            current["env"] = env.group(1)
    return options


def main(argv: list[str]) -> int:
    binary = argv[1] if len(argv) > 1 else "llama-server"
    text = subprocess.run([binary, "--help"], capture_output=True, text=True, check=False, timeout=60).stdout
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False, timeout=60)
    build = next((line.strip() for line in (version.stdout + version.stderr).splitlines() if "version" in line), "")
    json.dump({"generated_from": f"llama-server --help ({build})", "options": parse_help(text)}, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
