"""llama-server's argv and LLAMA_ARG_* environment: anything reads as a config with problems, never an exception."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fleetgate.engines.llamacpp import INT_MAX, INT_MIN, accepted_flags, parse_llama_server, stoi

FLAGS = sorted(accepted_flags())
WORD = st.one_of(st.sampled_from(FLAGS), st.text(max_size=12),
                 st.sampled_from(["0", "-1", "abc", "", "99999999999", "1e39", "nan", "inf", "on", "auto", "f16", "35,30"]))
ENV_NAMES = st.sampled_from(["LLAMA_ARG_CTX_SIZE", "LLAMA_ARG_FLASH_ATTN", "LLAMA_ARG_JINJA", "LLAMA_ARG_NO_JINJA", "LLAMA_ARG_TOP_K",
                             "LLAMA_ARG_TENSOR_SPLIT", "LLAMA_ARG_SPEC_TYPE", "LLAMA_ARG_THREADS", "LLAMA_ARG_PORT"])


@given(st.lists(WORD, max_size=30), st.dictionaries(ENV_NAMES, st.text(max_size=12), max_size=4))
def test_any_argv_reads_as_a_config(args: list[str], env: dict[str, str]) -> None:
    config = parse_llama_server(["llama-server", *args], env)
    for problem in config.problems:
        assert isinstance(problem.message, str) and problem.message
        assert problem.index is None or 1 <= problem.index <= len(args)


@given(st.integers())
def test_stoi_reads_a_32_bit_int_and_refuses_the_rest(n: int) -> None:
    if INT_MIN <= n <= INT_MAX:
        assert stoi(f"  {n}tail") == n
    else:
        try:
            stoi(str(n))
        except ValueError:
            return
        raise AssertionError(f"{n} read although std::stoi throws out_of_range")
