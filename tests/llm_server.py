"""A loopback OpenAI-compatible server for the agent's tests: scripted answers, every
request recorded, faults on demand.

A script maps a substring of the user message (e.g. the unit's name in backticks) to a
list of steps taken in order, the last one repeated:

- ``{"content": "..."}`` answers; a streamed answer (``stream=True``) comes as SSE chunks
  of ``chunk`` characters (default 4, about a token each), ``chunk_delay`` seconds apart,
  after ``first_delay`` seconds; ``"endless": "..."`` then repeats that text until the
  client hangs up (or a bound, so a broken client cannot hang a test);
  ``"stall_after": n, "stall": s`` waits ``s`` seconds after ``n`` chunks;
  ``"drop_after": n`` closes the connection after ``n`` chunks; ``"cut_after": n`` ends
  the stream after ``n`` chunks with no finish reason and no usage (as llama-cpp-python's
  server does to a stream when another request waits); the answer ends at the
  request's ``max_tokens`` chunks (``finish_reason`` "length") unless
  ``"ignore_max_tokens": True``; ``"usage": {...}`` overrides the usage reported at the
  end (``None``: no usage sent).
- ``{"status": 429, "headers": {...}}`` fails; ``{"delay": 3.0, ...}`` waits before the
  response headers (a queue in front of the model).

Token counts are a quarter of the characters, as a rough tokenizer would give (a prompt's,
a whole answer's); a streamed answer's are its chunks, one token each.
``slots=n`` makes the server answer ``n`` requests at a time (the others wait, or get 503
with ``busy_status=503``) and report ``total_slots`` on ``/props`` as llama.cpp does
(unless ``report_slots=False``, as a proxy in front of it would not).
What the server saw is recorded: ``requests`` (POSTs), ``probes`` (GETs), ``streams`` (chunks sent, whether the
client hung up before the end) and the most requests it had in flight at once.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: chunks an endless answer sends at most: a client that never hangs up ends the test, not the machine
ENDLESS_BOUND = 20_000


class ScriptedLLM:
    def __init__(self, script: dict[str, list[dict]] | None = None, *, slots: int | None = None,
                 busy_status: int | None = None, report_slots: bool = True):
        self.script = {k: list(v) for k, v in (script or {}).items()}
        self.slots = slots
        self.report_slots = report_slots
        self.busy_status = busy_status
        self.requests: list[dict] = []  # POSTs: what asked the model
        self.probes: list[str] = []  # paths of GETs (a client asking /props)
        self.streams: list[dict] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.refused = 0
        self.lock = threading.Lock()
        self.gate = threading.Semaphore(slots) if slots else None
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> "ScriptedLLM":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def prompts(self, needle: str) -> list[str]:
        """User messages of the requests whose prompt mentions ``needle``, in order."""
        return [r["user"] for r in self.requests if needle in r["user"]]

    def wait_for_streams(self, count: int, bound: float = 30.0) -> list[dict]:
        """The finished streams once ``count`` have ended (the server notices a hang-up at
        its next write, a moment after the client closed)."""
        deadline = time.monotonic() + bound
        while time.monotonic() < deadline:
            with self.lock:
                done = [s for s in self.streams if s["ended"]]
            if len(done) >= count:
                return done
            time.sleep(0.01)
        raise AssertionError(f"only {len(done)} of {count} streams ended within {bound} s")

    def _step(self, user: str) -> dict:
        with self.lock:
            for needle, steps in self.script.items():
                if needle in user:
                    return steps.pop(0) if len(steps) > 1 else steps[0]
        return {"content": "I cannot help with that."}

    def _handler(self):
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # chunked streams and keep-alive, as real servers do

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                with owner.lock:
                    owner.probes.append(self.path)
                if self.path == "/props" and owner.slots and owner.report_slots:
                    return self._send(200, {"total_slots": owner.slots, "default_generation_settings": {"n_ctx": 8192}})
                self._send(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                user = "\n".join(m.get("content", "") for m in body.get("messages", []) if m.get("role") == "user")
                with owner.lock:
                    owner.requests.append({"path": self.path, "auth": self.headers.get("authorization", ""),
                                           "body": body, "user": user, "time": time.time()})
                if self.path != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
                step = owner._step(user)
                if owner.gate is None:
                    return self._serve(body, step)
                if owner.busy_status and not owner.gate.acquire(blocking=False):
                    with owner.lock:
                        owner.refused += 1
                    return self._send(owner.busy_status, {"error": {"message": "all slots are busy", "type": "server_error"}})
                if not owner.busy_status:
                    owner.gate.acquire()
                try:
                    self._serve(body, step)
                finally:
                    owner.gate.release()

            def _serve(self, body: dict, step: dict) -> None:
                with owner.lock:
                    owner.in_flight += 1
                    owner.most_in_flight = max(owner.most_in_flight, owner.in_flight)
                try:
                    if step.get("delay"):
                        time.sleep(step["delay"])
                    if step.get("status"):
                        return self._send(step["status"], {"error": {"message": step.get("message", "scripted failure"),
                                                                     "type": "server_error"}}, step.get("headers", {}))
                    if body.get("stream"):
                        return self._stream(body, step)
                    content = step["content"]
                    prompt_tokens = _prompt_tokens(body)
                    completion_tokens = len(content) // 4
                    self._send(200, {
                        "id": f"chatcmpl-{len(owner.requests)}", "object": "chat.completion", "created": int(time.time()),
                        "model": body.get("model", "scripted"),
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                  "total_tokens": prompt_tokens + completion_tokens}})
                finally:
                    with owner.lock:
                        owner.in_flight -= 1

            def _stream(self, body: dict, step: dict) -> None:
                record = {"chunks": 0, "hung_up": False, "ended": False, "max_tokens": body.get("max_tokens")}
                with owner.lock:
                    owner.streams.append(record)
                size = step.get("chunk", 4)
                content = step.get("content", "")
                pieces = [content[i:i + size] for i in range(0, len(content), size)]
                try:
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("transfer-encoding", "chunked")
                    self.end_headers()
                    self._event({"role": "assistant", "content": ""}, None, body)  # as llama.cpp and OpenAI start
                    if step.get("first_delay"):
                        time.sleep(step["first_delay"])
                    finish = "stop"
                    for n, piece in enumerate(_pieces(pieces, step.get("endless", ""), size)):
                        if n == body.get("max_tokens") and not step.get("ignore_max_tokens"):
                            finish = "length"
                            break
                        if n == step.get("cut_after"):
                            self._write(b"data: [DONE]\n\n")
                            self._write(b"")
                            return
                        if n == step.get("drop_after"):
                            self.close_connection = True
                            self.connection.shutdown(socket.SHUT_RDWR)  # mid-answer, without the closing chunk
                            return
                        if n and n == step.get("stall_after"):
                            time.sleep(step.get("stall", 0))
                        self._event({"content": piece}, None, body)
                        record["chunks"] += 1
                        if step.get("chunk_delay"):
                            time.sleep(step["chunk_delay"])
                    self._event({}, finish, body)
                    usage = step.get("usage", {"prompt_tokens": _prompt_tokens(body), "completion_tokens": record["chunks"]})
                    if usage is not None and (body.get("stream_options") or {}).get("include_usage"):
                        usage = {**usage, "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]}
                        self._data({"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": int(time.time()),
                                    "model": body.get("model", "scripted"), "choices": [], "usage": usage})
                    self._write(b"data: [DONE]\n\n")
                    self._write(b"")  # the last chunk of the chunked body
                except (BrokenPipeError, ConnectionResetError, OSError):
                    record["hung_up"] = True
                finally:
                    record["ended"] = True

            def _event(self, delta: dict, finish: str | None, body: dict) -> None:
                self._data({"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": int(time.time()),
                            "model": body.get("model", "scripted"),
                            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

            def _data(self, payload: dict) -> None:
                self._write(b"data: " + json.dumps(payload).encode() + b"\n\n")

            def _write(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _send(self, status: int, payload: dict, headers: dict | None = None) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

        return Handler


def _prompt_tokens(body: dict) -> int:
    return sum(len(m.get("content", "")) for m in body.get("messages", [])) // 4


def _pieces(pieces: list[str], endless: str, size: int):
    yield from pieces
    if endless:
        more = [endless[i:i + size] for i in range(0, len(endless), size)]
        for n in range(ENDLESS_BOUND):
            yield more[n % len(more)]
