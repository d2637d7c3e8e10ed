"""No secret is printed or kept: keys, tokens and Authorization headers fleetgate was never given are scrubbed from
every argv, environment and text it shows."""

from __future__ import annotations

import json
import shutil
import string
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from fleetgate.cli import main
from fleetgate.failure import Failure
from fleetgate.secrets import is_secret_name, scrub, scrub_argv, scrub_environment
from tests.secrets_used import SECRETS

ROOT = Path(__file__).resolve().parent.parent
KEY = SECRETS["SCRUB_KEY"]


@pytest.mark.parametrize(("text", "shown"), [
    (f"llama-server --port 8080 --api-key {KEY} -c 4096", "llama-server --port 8080 --api-key *** -c 4096"),
    (f"llama-server --api-key={KEY}", "llama-server --api-key=***"),
    (f"vllm serve m --api-key '{KEY}'", "vllm serve m --api-key '***'"),
    (f"llama-server -hft {KEY} -m x", "llama-server -hft *** -m x"),
    ("llama-server --api-key-file /etc/llama/key", "llama-server --api-key-file /etc/llama/key"),
    ("vllm serve m --hf-token --port 1", "vllm serve m --hf-token --port 1"),
    (f"HF_TOKEN={KEY}", "HF_TOKEN=***"),
    (f'LLAMA_API_KEY="{KEY}" MAX_TOKENS=512', 'LLAMA_API_KEY="***" MAX_TOKENS=512'),
    (f'{{"OPENAI_API_KEY": "{KEY}", "port": 8080}}', '{"OPENAI_API_KEY": "***", "port": 8080}'),
    ("LLAMA_ARG_API_KEY_FILE=/run/key", "LLAMA_ARG_API_KEY_FILE=/run/key"),
    ("LLAMA_API_KEY=$KEY", "LLAMA_API_KEY=$KEY"),
    (f"Authorization: Bearer {KEY}", "Authorization: Bearer ***"),
    (f"-H 'authorization: {KEY}'", "-H 'authorization: ***'"),
    ("-H 'Authorization: Bearer $FLEETGATE_API_KEY'", "-H 'Authorization: Bearer $FLEETGATE_API_KEY'"),
    (f"sent bearer {KEY} to the proxy", "sent bearer *** to the proxy"),
    (f"https://user:{KEY}@hub.example/m.gguf", "https://***@hub.example/m.gguf"),
    ("ssh://dank@host:22", "ssh://dank@host:22"),
    ("--ctx-size 4096 --parallel 4 --port 8080", "--ctx-size 4096 --parallel 4 --port 8080"),
])
def test_scrub(text: str, shown: str) -> None:
    assert scrub(text) == shown


def test_a_secret_of_the_environment_is_scrubbed_wherever_it_occurs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_SERVICE_TOKEN", KEY)
    assert scrub(f"the proxy answered 401 for {KEY}.") == "the proxy answered 401 for ***."
    assert scrub("abc", known=["abc"]) == "abc"  # too short to mask wherever it occurs


def test_scrub_argv() -> None:
    argv = ("vllm", "serve", "m", "--api-key", KEY, "other-key", "--port", "8000", f"--hf-token={KEY}", "-hft", "x1234")
    assert scrub_argv(argv) == ("vllm", "serve", "m", "--api-key", "***", "***", "--port", "8000", "--hf-token=***",
                                "-hft", "***")


def test_scrub_environment() -> None:
    assert scrub_environment({"HF_TOKEN": KEY, "LLAMA_ARG_CTX_SIZE": "4096", "EMPTY_KEY": "",
                              "OPTS": f"--api-key {KEY}"}) == {
        "HF_TOKEN": "***", "LLAMA_ARG_CTX_SIZE": "4096", "EMPTY_KEY": "", "OPTS": "--api-key ***"}


@pytest.mark.parametrize(("name", "secret"), [
    ("HF_TOKEN", True), ("LLAMA_API_KEY", True), ("OPENAI_APIKEY", True), ("DB_PASSWORD", True), ("KEY", True),
    ("AWS_SECRET", True), ("LLAMA_ARG_API_KEY_FILE", False), ("MAX_TOKENS", False), ("KEYBOARD", False),
    ("TOKENIZER", False), ("LLAMA_ARG_N_PREDICT", False),
])
def test_is_secret_name(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


def test_a_failure_keeps_no_secret() -> None:
    failure = Failure(service="s", check="c", code="c/x", observed=f"PID 1 runs llama-server --api-key {KEY}",
                      expected="llama-server", where=f"HF_TOKEN={KEY}", fix="restart it",
                      details=[f"Authorization: Bearer {KEY}"])
    assert KEY not in str(failure)
    assert KEY not in repr(failure.__reduce__())


_secret = st.text(alphabet=string.ascii_letters + string.digits + "-_.+/", min_size=8, max_size=40)
_templates = st.sampled_from([
    "--api-key {}", "--api-key={}", "-hft {}", "--hf-token '{}'", "HF_TOKEN={}", 'OPENAI_API_KEY="{}"',
    "Authorization: Bearer {}", '"authorization": "{}"', "https://u:{}@h/", "MY_PASSWORD: {}",
])


@given(secret=_secret, template=_templates, before=st.text(max_size=20).filter(lambda t: t.isprintable()),
       after=st.sampled_from(["", " ", "\n", " --port 1", "; next"]))
def test_no_template_of_a_secret_survives(secret: str, template: str, before: str, after: str) -> None:
    assume(secret not in before and not secret.startswith("--"))
    assume(not (template.startswith("https://") and "/" in secret))  # a URL's password has its slash escaped
    shown = scrub(f"{before} {template.format(secret)}{after}")
    assert secret not in shown


def test_fleetgate_render_shows_no_key_of_the_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = tmp_path / "fleet"
    shutil.copytree(ROOT / "fixtures" / "fleets" / "unit-exec", fleet)
    units = sorted(fleet.rglob("*.service"))
    assert units, "the fixture fleet has a unit"
    text = units[0].read_text(encoding="utf-8")
    assert "ExecStart=" in text
    start = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    units[0].write_text(text.replace(start, f"{start} --api-key {KEY}"), encoding="utf-8")
    service = _first_service(fleet / "fleet.toml")
    assert main(["render", service, "--fleet", str(fleet / "fleet.toml")]) == 0
    plain = capsys.readouterr().out
    assert "--api-key '***'" in plain and KEY not in plain
    assert main(["render", service, "--fleet", str(fleet / "fleet.toml"), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert KEY not in json.dumps(shown)
    assert shown["argv"][shown["argv"].index("--api-key") + 1] == "***"


def _first_service(manifest: Path) -> str:
    import tomllib

    return next(iter(tomllib.loads(manifest.read_text(encoding="utf-8"))["services"]))


@pytest.mark.parametrize(("text", "shown"), [
    # systemd's Environment= holds the assignment: the outer name is no secret, the inner one is (a unit's line, as
    # `systemctl cat` prints it and fleetgate init --from-host writes it)
    (f"Environment=HF_TOKEN={SECRETS['UNIT_TOKEN']}", "Environment=HF_TOKEN=***"),
    (f'Environment="LLAMA_API_KEY={SECRETS["SCRUB_NESTED_KEY"]}" "PORT=8080"', 'Environment="LLAMA_API_KEY=***" "PORT=8080"'),
    ("Environment=PORT=8080", "Environment=PORT=8080"),
])
def test_an_assignment_inside_an_assignment_is_masked_by_its_own_name(text: str, shown: str) -> None:
    assert scrub(text) == shown


def test_a_json_document_is_redacted_structurally(monkeypatch: pytest.MonkeyPatch) -> None:
    """Transcripts keep engines' JSON: a key named like a secret whose value is no string (llama.cpp's /slots
    ``"has_next_token": true``) stays JSON, a string under such a key is masked, and a key in any text is scrubbed."""
    from fleetgate.report import redact_json

    monkeypatch.setenv("FLEETGATE_API_KEY", KEY)
    document = {"next_token": [{"has_next_token": True, "n_remain": 3}], "hf_token": SECRETS["SCRUB_JSON_TOKEN"],
                "text": f"echoed Bearer {KEY}", "argv": ["llama-server", "--api-key", "zz-secret-99"]}
    shown = redact_json(document, ["FLEETGATE_API_KEY"])
    assert shown == {"next_token": [{"has_next_token": True, "n_remain": 3}], "hf_token": "***",
                     "text": "echoed Bearer $FLEETGATE_API_KEY", "argv": ["llama-server", "--api-key", "***"]}
    assert json.loads(json.dumps(shown)) == shown
