"""llama-cpp-python's OpenAI-compatible server, which also says how many tokens it
processed and generated, at ``GET /tern/counts``.

That server has no ``/metrics``, and its log prints timings only for answers read to the
end (a stream the client closes early prints nothing), so ``llm_local.py`` could not
compare the tokens Tern counted with what the model really did. Every completion goes
through ``Llama.generate``; this wraps it to count each request's prompt tokens and each
token the model generated, those of answers a client cut short included.

Usage: python eval/llama_counting_server.py --model FILE.gguf --port N [any option of
``python -m llama_cpp.server``]
"""

from __future__ import annotations

import threading

import llama_cpp
import llama_cpp.server.__main__ as server_main

COUNTS = {"requests": 0, "prompt_tokens": 0, "generated_tokens": 0}
_lock = threading.Lock()
_generate = llama_cpp.Llama.generate
_create_app = server_main.create_app


def _counting_generate(self, tokens, *args, **kwargs):
    with _lock:
        COUNTS["requests"] += 1
        COUNTS["prompt_tokens"] += len(tokens)
    for token in _generate(self, tokens, *args, **kwargs):
        with _lock:
            COUNTS["generated_tokens"] += 1
        yield token


def _create_counting_app(**settings):
    app = _create_app(**settings)

    def counts() -> dict:
        with _lock:
            return dict(COUNTS)
    app.add_api_route("/tern/counts", counts, methods=["GET"])
    return app


llama_cpp.Llama.generate = _counting_generate
server_main.create_app = _create_counting_app

if __name__ == "__main__":
    server_main.main()
