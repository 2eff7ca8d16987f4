"""The LLM transport against the loopback server (``llm_server.py``), through the real
``openai`` client over HTTP: streamed answers, reading that stops once the code block is
complete (and the server seeing the hang-up), the two timeouts, what is retried and what
is not, the tokens of every request, and a concurrency that backs off to what the server
serves.

No assertion reads a clock: delays only make an order certain, and bounds only keep a
broken client from hanging the suite.
"""

from __future__ import annotations

from functools import partial
from math import ceil
from pathlib import Path

import anyio
import pytest

import agent_answers as A
from llm_server import ENDLESS_BOUND, ScriptedLLM
from tern.agent.answer import Answer, cut_reason, extract, stop_reading
from tern.agent.config import LLMConfig
from tern.agent.llm import Completion, LLMFailure, OpenAIChat
from tern.agent.pacing import Pacing, Signals, probe_slots
from tern.agent.streaming import OVERRUN
from tern.agent.tokens import Usage, answer_allowance, prompt_tokens
from tern.agent.units import Unit
from tern.verify.cache import Cache

MESSAGES = [{"role": "system", "content": "translate"}, {"role": "user", "content": "translate `positive_values`"}]
STOP = partial(stop_reading, package="beyond_dynamic_shapes")
PROSE = "Note that this keeps the order of all its entries.  "  # 52 characters: 13 chunks of 4
THINKING = "Let me think this over. "  # 24 characters: 6 chunks


def ask(llm: ScriptedLLM, tmp_path: Path, *, stop_when=None, wanted=None, pacing=None, cache=False, **settings):
    """One ``complete`` of MESSAGES: ``wanted`` is the answer's size the caller asks for,
    ``settings`` the configuration's."""
    config = LLMConfig(model="scripted", base_url=llm.base_url, api_key="k", **settings)
    chat = OpenAIChat(config, Cache(tmp_path / ".tern") if cache else None, pacing)

    async def go():
        try:
            with anyio.fail_after(60):  # a hang is a failure, not a stuck suite
                result = await chat.complete(MESSAGES, max_tokens=wanted, stop_when=stop_when)
                # every stream must end while the client still lives: closing the client would hang up anyway
                await anyio.to_thread.run_sync(llm.wait_for_streams, len(llm.streams), 15.0)
                return result
        finally:
            await chat.close()
    return anyio.run(go)


def test_answers_are_streamed_and_the_server_s_usage_is_taken(tmp_path):
    step = {"content": A.POSITIVE_VALUES, "usage": {"prompt_tokens": 1000, "completion_tokens": 77}}
    with ScriptedLLM({"`positive_values`": [step]}) as llm:
        result = ask(llm, tmp_path, wanted=300)
    assert isinstance(result, Completion) and result.text == A.POSITIVE_VALUES and result.stop == "end"
    assert result.usage == Usage(1000, 77, counted=False)
    body = llm.requests[0]["body"]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True} and body["max_tokens"] == 300
    assert llm.streams[0]["hung_up"] is False and llm.streams[0]["chunks"] == ceil(len(A.POSITIVE_VALUES) / 4)


def test_max_tokens_is_sized_from_the_unit_and_capped_by_the_configuration(tmp_path):
    assert answer_allowance("x" * 350) == 256 + 2 * 100  # 3.5 characters a token
    with ScriptedLLM({"`positive_values`": [{"content": A.POSITIVE_VALUES}]}) as llm:
        ask(llm, tmp_path, wanted=10_000, max_tokens=4096)
        ask(llm, tmp_path, wanted=None, max_tokens=1024)
    assert [r["body"]["max_tokens"] for r in llm.requests] == [4096, 1024]


def test_reading_stops_once_the_code_block_is_complete_and_the_server_sees_the_hang_up(tmp_path):
    step = {"content": A.POSITIVE_VALUES, "endless": PROSE, "chunk_delay": 0.002}
    with ScriptedLLM({"`positive_values`": [step]}) as llm:
        result = ask(llm, tmp_path, stop_when=STOP)
        (stream,) = llm.streams
    fence_end = A.POSITIVE_VALUES.rindex("```") + 3
    chunks = ceil(fence_end / 4)  # the chunk that closed the block was the last one read
    assert isinstance(result, Completion) and result.stop == "block"
    assert result.text == A.POSITIVE_VALUES[: chunks * 4]
    assert isinstance(extract(result.text, Unit("ops.py", "positive_values", "function"), "pkg"), Answer)
    assert result.usage == Usage(prompt_tokens(MESSAGES), chunks, counted=True)  # no usage comes from a cut stream
    assert stream["hung_up"] is True and chunks <= stream["chunks"] < ENDLESS_BOUND


def test_an_answer_past_its_allowance_is_cut_when_the_server_ignores_max_tokens(tmp_path):
    step = {"content": THINKING, "endless": PROSE, "ignore_max_tokens": True, "chunk_delay": 0.002}
    with ScriptedLLM({"`positive_values`": [step]}) as llm:
        result = ask(llm, tmp_path, stop_when=STOP, wanted=40)
        (stream,) = llm.streams
    read = int(OVERRUN * 40) + 1
    assert isinstance(result, Completion) and result.stop == "size" and len(result.text) == 4 * read
    assert result.usage == Usage(prompt_tokens(MESSAGES), read, counted=True)
    assert stream["hung_up"] is True and stream["max_tokens"] == 40


def test_a_server_that_honours_max_tokens_ends_the_answer_and_reports_usage(tmp_path):
    step = {"content": THINKING, "endless": PROSE}
    with ScriptedLLM({"`positive_values`": [step]}) as llm:
        result = ask(llm, tmp_path, stop_when=STOP, wanted=40)
    assert isinstance(result, Completion) and result.stop == "end" and len(result.text) == 4 * 40
    assert result.usage == Usage(len(MESSAGES[0]["content"] + MESSAGES[1]["content"]) // 4, 40, counted=False)


def test_no_first_token_in_time_is_a_timeout_that_costs_the_prompt_and_is_not_retried(tmp_path):
    step = {"content": A.POSITIVE_VALUES, "first_delay": 2}  # headers at once, the first token late: a busy model
    with ScriptedLLM({"`positive_values`": [step]}) as llm:
        result = ask(llm, tmp_path, first_token_timeout=0.3, max_retries=3)
        (stream,) = llm.streams
    assert isinstance(result, LLMFailure) and result.cause == "timeout" and "no first token within 0.3 s" in result.message
    assert result.usage == Usage(prompt_tokens(MESSAGES), 0, counted=True)
    assert len(llm.requests) == 1 and stream["hung_up"] is True  # noticed at its first write after the delay


def test_a_queue_before_the_headers_is_a_timeout_too(tmp_path):
    with ScriptedLLM({"`positive_values`": [{"delay": 5, "content": A.POSITIVE_VALUES}]}) as llm:
        result = ask(llm, tmp_path, first_token_timeout=0.3, max_retries=2)
    assert isinstance(result, LLMFailure) and result.cause == "timeout" and len(llm.requests) == 1


def test_a_stalled_answer_counts_what_came_and_is_never_asked_again(tmp_path):
    step = {"content": A.POSITIVE_VALUES, "stall_after": 6, "stall": 2}
    with ScriptedLLM({"`positive_values`": [step]}) as llm:
        result = ask(llm, tmp_path, stop_when=STOP, idle_timeout=0.3, first_token_timeout=30, max_retries=3)
        (stream,) = llm.streams
    assert isinstance(result, LLMFailure) and result.cause == "stalled" and "no token for 0.3 s after 6 chunk(s)" in result.message
    assert result.usage == Usage(prompt_tokens(MESSAGES), 6, counted=True)
    assert len(llm.requests) == 1 and stream["hung_up"] is True


def test_a_connection_lost_mid_answer_is_not_retried_but_one_lost_before_it_is(tmp_path):
    with ScriptedLLM({"`positive_values`": [{"content": A.POSITIVE_VALUES, "drop_after": 5}]}) as llm:
        dropped = ask(llm, tmp_path, max_retries=3)
    assert isinstance(dropped, LLMFailure) and dropped.cause == "dropped" and len(llm.requests) == 1
    assert dropped.usage == Usage(prompt_tokens(MESSAGES), 5, counted=True)
    steps = [{"content": A.POSITIVE_VALUES, "drop_after": 0}, {"content": A.POSITIVE_VALUES}]
    with ScriptedLLM({"`positive_values`": steps}) as llm:
        retried = ask(llm, tmp_path, max_retries=1)
    assert isinstance(retried, Completion) and retried.text == A.POSITIVE_VALUES and len(llm.requests) == 2
    assert retried.usage == Usage(prompt_tokens(MESSAGES), 0, counted=True) + Usage(
        len(MESSAGES[0]["content"] + MESSAGES[1]["content"]) // 4, ceil(len(A.POSITIVE_VALUES) / 4))


def test_an_answer_the_server_cuts_short_is_lost_not_retried_and_halves_the_limit(tmp_path):
    pacing = Pacing(4)
    with ScriptedLLM({"`positive_values`": [{"content": A.POSITIVE_VALUES, "cut_after": 3}]}) as llm:
        result = ask(llm, tmp_path, stop_when=STOP, pacing=pacing, max_retries=3)
    assert isinstance(result, LLMFailure) and result.cause == "interrupted" and len(llm.requests) == 1
    assert "after 3 chunk(s) without a finish reason" in result.message
    assert result.usage == Usage(prompt_tokens(MESSAGES), 3, counted=True)
    assert pacing.changes == ["4 -> 2: the server cut an answer short for another request"]


def test_a_block_that_imports_tensorflow_is_closed_at_that_line(tmp_path):
    """A small model's usual answer: the import alone dooms it, so nothing after it is paid for."""
    step = {"content": "```python\nimport tensorflow as tf\nfrom jax import numpy\n", "endless": PROSE, "chunk_delay": 0.002}
    with ScriptedLLM({"`positive_values`": [step]}) as llm:
        result = ask(llm, tmp_path, stop_when=STOP)
        (stream,) = llm.streams
    assert isinstance(result, Completion) and result.stop == "doomed" and result.text == step["content"][:4 * 9]
    assert result.usage == Usage(prompt_tokens(MESSAGES), 9, counted=True)  # the chunk holding the line's end was the last read
    assert cut_reason(result.text, result.stop, "beyond_dynamic_shapes").startswith("the code imports tensorflow")
    assert stream["hung_up"] is True and stream["chunks"] < ENDLESS_BOUND


LOOP = "def token_selector(x):\n    return max(x[0] + x[1] for x in args)\n# TODO: no rule yet\n"


@pytest.mark.parametrize("text, stop", [
    ("Here:\n```python\ndef f():\n    pass\n```", "block"),
    ("```python\nimport tensorflow as tf\n", "doomed"),
    ("```python\n\n# the imports\nimport jax\nfrom keras import ops\n", "doomed"),
    ("```python\nimport jax.numpy as jnp\nimport os\n", "doomed"),  # outside the allowlist: extract rejects it too
    ("```python\nimport tensorflow as tf", ""),  # the line may go on (tensorflow_probability...)
    ("```python\nfrom beyond_dynamic_shapes.ops import helper\nimport jax\n", ""),  # the package itself is allowed
    ("```python\nimport jax\ndef f(x):\n    import tensorflow\n", ""),  # only the leading imports are judged early
    ("```text\nimport tensorflow\n```\nNow:\n```python\nimport jax\n", ""),  # a text block is not the answer
    ("I would import tensorflow as tf\nimport tensorflow\n", ""),  # no block yet
    ("```python\n" + LOOP * 3, "looping"),
    ("```python\n" + LOOP * 2, ""),  # twice can be a pattern; three times is a loop
    ("```python\n" + "x += 1\n" * 12, ""),  # short repeated lines are code, not a loop
])
def test_reading_stops_at_a_complete_block_a_doomed_one_or_a_loop(text, stop):
    assert stop_reading(text, "beyond_dynamic_shapes") == stop


def test_cut_answers_are_cached_as_cut(tmp_path):
    step = {"content": A.POSITIVE_VALUES, "endless": PROSE, "chunk_delay": 0.002}
    with ScriptedLLM({"`positive_values`": [step]}) as llm:
        first = ask(llm, tmp_path, stop_when=STOP, cache=True)
        second = ask(llm, tmp_path, stop_when=STOP, cache=True)
    assert isinstance(second, Completion) and second.cached and second.tokens == 0
    assert second.text == first.text and second.stop == "block" and len(llm.requests) == 1


# -- concurrency ---------------------------------------------------------------------------------

def test_pacing_halves_on_refusals_timeouts_and_first_tokens_that_waited_in_a_queue():
    pacing = Pacing(8)
    pacing.observe(Signals(first_token=1.0, prompt_tokens=1000))  # the fastest: 1 ms a prompt token
    pacing.observe(Signals(first_token=7.5, prompt_tokens=2000))  # 2 s expected, 3 x 2 + 5 = 11 s allowed
    assert pacing.limit == 8
    pacing.observe(Signals(first_token=40.0, prompt_tokens=1000))  # 1 s expected: it waited behind others
    assert pacing.limit == 4
    pacing.observe(Signals(prompt_tokens=1000, overload="the server refused a request (503)"))
    assert pacing.limit == 2
    pacing.observe(Signals(prompt_tokens=1000, overload="no first token within the limit"))
    pacing.observe(Signals(prompt_tokens=1000, overload="the server refused a request (503)"))
    assert pacing.limit == 1
    assert [c.split(":")[0] for c in pacing.changes] == ["8 -> 4", "4 -> 2", "2 -> 1"]
    assert "first token after 40.0 s where 1.0 s was expected" in pacing.changes[0]
    assert pacing.summary() == {"configured": 8, "final": 1, "changes": pacing.changes}


def run_concurrently(llm: ScriptedLLM, pacing: Pacing, count: int, **settings) -> list:
    config = LLMConfig(model="scripted", base_url=llm.base_url, api_key="k", **settings)
    chat = OpenAIChat(config, None, pacing)
    results: list = [None] * count

    async def one(i: int) -> None:
        results[i] = await chat.complete([{"role": "user", "content": f"translate `positive_values` ({i})"}])

    async def go():
        with anyio.fail_after(120):
            async with anyio.create_task_group() as group:
                for i in range(count):
                    group.start_soon(one, i)
        await chat.close()
    anyio.run(go)
    return results


def test_the_limit_starts_at_the_slots_a_local_server_reports(tmp_path):
    step = {"content": A.POSITIVE_VALUES, "chunk_delay": 0.005}
    with ScriptedLLM({"`positive_values`": [step]}, slots=1) as llm:
        pacing = Pacing(4)
        results = run_concurrently(llm, pacing, 4)  # the client asks /props itself, once, before the first request
    assert pacing.limit == 1 and pacing.changes == ["4 -> 1: the server has 1 slot(s)"]
    assert all(isinstance(r, Completion) for r in results) and llm.most_in_flight == 1
    assert llm.probes == ["/props"]


def test_no_slot_count_without_a_llama_cpp_server_on_loopback():
    with ScriptedLLM() as llm:  # no /props: 404
        assert anyio.run(probe_slots, llm.base_url) is None
    assert anyio.run(probe_slots, "https://api.example.com/v1") is None  # never asked: not this machine
    assert anyio.run(probe_slots, None) is None


def test_503s_halve_the_limit_and_every_answer_still_arrives(tmp_path):
    step = {"content": A.POSITIVE_VALUES, "chunk_delay": 0.02}  # about a second an answer: the others arrive meanwhile
    with ScriptedLLM({"`positive_values`": [step]}, slots=1, busy_status=503, report_slots=False) as llm:
        pacing = Pacing(4)
        results = run_concurrently(llm, pacing, 4, max_retries=6)
    assert all(isinstance(r, Completion) and r.text == A.POSITIVE_VALUES for r in results)
    assert llm.refused >= 2 and pacing.limit == 1
    assert all(change.endswith("the server refused a request (503)") for change in pacing.changes)
    assert len(llm.requests) == 4 + llm.refused


def test_the_first_token_is_timed_from_the_request_and_only_content_counts(tmp_path):
    """The role chunk comes at once; the first token 0.3 s later: that is the wait pacing
    judges (a lower bound the server guarantees, no upper one)."""
    with ScriptedLLM({"`positive_values`": [{"content": A.POSITIVE_VALUES, "first_delay": 0.3}]}) as llm:
        result = ask(llm, tmp_path, idle_timeout=0.1)  # the idle limit starts at the first token, not before
    assert isinstance(result, Completion) and result.first_token >= 0.3
