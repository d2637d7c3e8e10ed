#!/usr/bin/env bash
# fleetgate's packages by job (issue 31, item 6): the moves of the flat namespace into render/, cli/, models/ and
# sandbox/, and of the maintainers' extractors out of the runtime package into tools/, then every import path, dotted
# name and file path of the repository rewritten to follow.
#
# Mechanical on purpose: a branch written against the old layout is merged first, then this script runs again over
# the merged tree and rewrites what the branch added too. Safe to run any number of times: a move whose source is
# gone is skipped, and every rewrite leaves an already rewritten name as it is.
#
#   tools/restructure.sh            # from anywhere inside the checkout
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"

# old path -> new path (git mv). cli.py and sandbox.py become their package's __init__: `fleetgate.cli` and
# `fleetgate.sandbox` keep their import paths, so no submodule of theirs may take a name their __init__ uses
# (sandbox imports functools' `cache`: the render cache is render_cache.py). render.py cannot: render/types.py is
# imported by the readers that the dispatcher imports, and a dispatcher in render/__init__.py would close that
# circle, so it is render/dispatch.py.
MOVES=(
    fleetgate/render.py:fleetgate/render/dispatch.py
    fleetgate/render_inputs.py:fleetgate/render/inputs.py
    fleetgate/render_sandbox.py:fleetgate/render/script.py
    fleetgate/render_types.py:fleetgate/render/types.py
    fleetgate/rendered.py:fleetgate/render/rendered.py
    fleetgate/cli.py:fleetgate/cli/__init__.py
    fleetgate/cli_checks.py:fleetgate/cli/checks.py
    fleetgate/cli_fit.py:fleetgate/cli/fit.py
    fleetgate/cli_incidents.py:fleetgate/cli/incidents.py
    fleetgate/cli_profile.py:fleetgate/cli/profile.py
    fleetgate/cli_reference.py:fleetgate/cli/reference.py
    fleetgate/gguf.py:fleetgate/models/gguf.py
    fleetgate/gguf_remote.py:fleetgate/models/gguf_remote.py
    fleetgate/rangeread.py:fleetgate/models/rangeread.py
    fleetgate/profile.py:fleetgate/models/profile.py
    fleetgate/model_config.py:fleetgate/models/config.py
    fleetgate/sandbox.py:fleetgate/sandbox/__init__.py
    fleetgate/_sandbox_parent.py:fleetgate/sandbox/_parent.py
    fleetgate/sandbox_cache.py:fleetgate/sandbox/render_cache.py
    fleetgate/_render_preamble.bash:fleetgate/sandbox/_render_preamble.bash
    fleetgate/engines/extract_llama_args.py:tools/extract_llama_args.py
    fleetgate/engines/extract_vllm_args.py:tools/extract_vllm_args.py
    fleetgate/engines/record_llama_refusals.py:tools/record_llama_refusals.py
    fleetgate/engines/llama_help.py:tools/llama_help.py
    fleetgate/engines/vllm_wheel.py:tools/vllm_wheel.py
)

for move in "${MOVES[@]}"; do
    old=${move%%:*} new=${move#*:}
    [ -e "$old" ] || continue
    if [ -e "$new" ]; then
        echo "restructure: both $old and $new exist; merge them by hand, then run this again" >&2
        exit 1
    fi
    mkdir -p "$(dirname "$new")"
    git mv "$old" "$new"
done

# A package's __init__ where the move left none (written once; an existing one is kept as it is).
init() {
    [ -e "$1" ] && return 0
    printf '%s\n' "$2" >"$1"
    git add "$1"
}
init fleetgate/render/__init__.py '"""A service'"'"'s start shape turned into its rendered config: the dispatcher (``dispatch``), the inputs the unit
gives a serve script (``inputs``), the script run in the sandbox with the engine stubbed (``script``), the types every
shape builds (``types``) and the rendered service with the run'"'"'s one renderer (``rendered``)."""'
init fleetgate/models/__init__.py '"""What fleetgate knows of a model without loading it: GGUF headers read locally (``gguf``) or by HTTP range
(``gguf_remote`` over ``rangeread``), the profiles built from them (``profile``) and a checkpoint'"'"'s config.json
(``config``)."""'
init fleetgate/cli/__main__.py '"""``python -m fleetgate.cli``: the ``fleetgate`` command."""

from fleetgate.cli import main

raise SystemExit(main())'
init tools/__init__.py '"""Maintainers'"'"' tools, run from a checkout and never shipped in the wheel: the extractors that regenerate
fleetgate/engines/*.json from the engines'"'"' published sources, and this repository'"'"'s restructuring script."""'

# Every text file of the repository that may name a module or a file of fleetgate (this script excepted).
mapfile -d '' FILES < <(git ls-files -z -- fleetgate tests benchmarks docs seams live tools fixtures conftest.py \
    pyproject.toml tox.ini README.md .ci | grep -zvE '^tools/restructure\.sh$|\.(gguf|png|jpg|whl|gz|bin|safetensors)$')

# What lives in render/ now: `fleetgate.render.X` for one of these is already the new name.
RENDER_SUBS=$(find fleetgate/render -mindepth 1 -maxdepth 1 \( -name '*.py' -o -type d \) ! -name '__*' -printf '%f\n' \
    | sed 's/\.py$//' | sort -u | paste -sd'|')

export RENDER_SUBS
perl -0pi -e '
    my $subs = $ENV{RENDER_SUBS};
    # paths that need more than a rename: a sibling looked up by name, the extractors writing beside the tables
    s{Path\(__file__\)\.with_name\("sandbox_cache\.py"\)}{Path(__file__).with_name("render_cache.py")}g;
    s{Path\(__file__\)\.with_name\("(llama_server_builds|vllm_releases)\.json"\)}{Path(__file__).parents[1] / "fleetgate/engines/$1.json"}g;
    # `from fleetgate import X` of a moved module keeps its local name
    s{^(\s*)from fleetgate import (gguf_remote|gguf|rangeread|profile)[ \t]*$}{$1from fleetgate.models import $2}mg;
    s{^(\s*)from fleetgate import model_config[ \t]*$}{$1from fleetgate.models import config as model_config}mg;
    s{^(\s*)from fleetgate import rendered[ \t]*$}{$1from fleetgate.render import rendered}mg;
    s{^(\s*)from fleetgate import render_(inputs|types)[ \t]*$}{$1from fleetgate.render import $2 as render_$2}mg;
    s{^(\s*)from fleetgate import render_sandbox[ \t]*$}{$1from fleetgate.render import script as render_sandbox}mg;
    s{^(\s*)from fleetgate import render[ \t]*$}{$1from fleetgate.render import dispatch as render}mg;
    s{^(\s*)from fleetgate import sandbox_cache[ \t]*$}{$1from fleetgate.sandbox import render_cache as sandbox_cache}mg;
    s{^(\s*)from fleetgate\.engines import (extract_llama_args|extract_vllm_args|record_llama_refusals|llama_help|vllm_wheel)[ \t]*$}{$1from tools import $2}mg;
    # dotted names: imports, strings, docstrings
    s{\bfleetgate\.render_inputs\b}{fleetgate.render.inputs}g;
    s{\bfleetgate\.render_sandbox\b}{fleetgate.render.script}g;
    s{\bfleetgate\.render_types\b}{fleetgate.render.types}g;
    s{\bfleetgate\.rendered\b}{fleetgate.render.rendered}g;
    s{\bfleetgate\.render(?![\w]|\.(?:$subs)\b)}{fleetgate.render.dispatch}g;
    s{\bfleetgate\.cli_(checks|fit|incidents|profile|reference)\b}{fleetgate.cli.$1}g;
    s{\bfleetgate\.(gguf_remote|gguf|rangeread|profile)\b}{fleetgate.models.$1}g;
    s{\bfleetgate\.model_config\b}{fleetgate.models.config}g;
    s{\bfleetgate\._sandbox_parent\b}{fleetgate.sandbox._parent}g;
    s{\bfleetgate\.sandbox_cache\b}{fleetgate.sandbox.render_cache}g;
    s{\bfleetgate\.engines\.(extract_llama_args|extract_vllm_args|record_llama_refusals|llama_help|vllm_wheel)\b}{tools.$1}g;
    # file paths, with or without the package directory in front
    s{(?<![\w/.-])(fleetgate/)?engines/(extract_llama_args|extract_vllm_args|record_llama_refusals|llama_help|vllm_wheel)\.py\b}{tools/$2.py}g;
    s{(?<![\w/.-])(fleetgate/)?render_inputs\.py\b}{$1render/inputs.py}g;
    s{(?<![\w/.-])(fleetgate/)?render_sandbox\.py\b}{$1render/script.py}g;
    s{(?<![\w/.-])(fleetgate/)?render_types\.py\b}{$1render/types.py}g;
    s{(?<![\w/.-])(fleetgate/)?rendered\.py\b}{$1render/rendered.py}g;
    s{(?<![\w/.-])(fleetgate/)?render\.py\b}{$1render/dispatch.py}g;
    s{(?<![\w/.-])(fleetgate/)?cli\.py\b}{$1cli/__init__.py}g;
    s{(?<![\w/.-])(fleetgate/)?cli_(checks|fit|incidents|profile|reference)\.py\b}{$1cli/$2.py}g;
    s{(?<![\w/.-])(fleetgate/)?(gguf_remote|gguf|rangeread|profile)\.py\b}{$1models/$2.py}g;
    s{(?<![\w/.-])(fleetgate/)?model_config\.py\b}{$1models/config.py}g;
    s{(?<![\w/.-])(fleetgate/)?sandbox\.py\b}{$1sandbox/__init__.py}g;
    s{(?<![\w/.-])(fleetgate/)?_sandbox_parent\.py\b}{$1sandbox/_parent.py}g;
    s{(?<![\w/.-])(fleetgate/)?sandbox_cache\.py\b}{$1sandbox/render_cache.py}g;
    s{(?<![\w/.-])(fleetgate/)?_render_preamble\.bash\b}{$1sandbox/_render_preamble.bash}g;
' "${FILES[@]}"

# The wheel ships the preamble from its new place; mypy --strict covers the tools as it covered them in engines/.
perl -0pi -e '
    s{"\*\.bash"}{"sandbox/*.bash"}g;
    s{^packages = \["fleetgate"\]$}{packages = ["fleetgate", "tools"]}mg;
' pyproject.toml

# The rewritten imports in isort's order again (ruff, as the lint env runs it; RUFF names another command).
if ${RUFF:-ruff} --version >/dev/null 2>&1; then
    ${RUFF:-ruff} check --quiet --select I001 --fix -- fleetgate tests benchmarks tools seams live conftest.py || true
else
    echo "restructure: no ruff here: run ruff check --select I001 --fix to sort the rewritten imports" >&2
fi

# A module left at an old place (added by a branch after this layout was drawn) is named, not guessed at.
leftover=$(git ls-files -- fleetgate | grep -E '^fleetgate/(render_[a-z_]*|cli_[a-z_]*|gguf[a-z_]*|sandbox[a-z_]*|_sandbox[a-z_]*|rangeread|profile|model_config|rendered|render|cli)\.py$|^fleetgate/engines/(extract|record)_[a-z_]*\.py$' || true)
if [ -n "$leftover" ]; then
    echo "restructure: modules at an old place, to move by hand (and add to MOVES):" >&2
    echo "$leftover" >&2
    exit 1
fi
echo "restructure: done"
