"""A loopback OpenAI-compatible server for the agent's tests: scripted answers, every
request recorded, faults on demand.

A script maps a substring of the user message (e.g. the unit's name in backticks) to a
list of steps taken in order, the last one repeated: ``{"content": "..."}`` answers;
``{"status": 429, "headers": {...}}`` fails; ``{"delay": 3.0, "content": ...}`` answers
late. Token counts are a quarter of the characters, as a rough tokenizer would give.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ScriptedLLM:
    def __init__(self, script: dict[str, list[dict]] | None = None):
        self.script = {k: list(v) for k, v in (script or {}).items()}
        self.requests: list[dict] = []
        self.lock = threading.Lock()
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

    def _step(self, user: str) -> dict:
        with self.lock:
            for needle, steps in self.script.items():
                if needle in user:
                    return steps.pop(0) if len(steps) > 1 else steps[0]
        return {"content": "I cannot help with that."}

    def _handler(self):
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                user = "\n".join(m.get("content", "") for m in body.get("messages", []) if m.get("role") == "user")
                with owner.lock:
                    owner.requests.append({"path": self.path, "auth": self.headers.get("authorization", ""),
                                           "body": body, "user": user, "time": time.time()})
                if self.path != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
                step = owner._step(user)
                if step.get("delay"):
                    time.sleep(step["delay"])
                if step.get("status"):
                    return self._send(step["status"], {"error": {"message": step.get("message", "scripted failure"),
                                                                 "type": "server_error"}}, step.get("headers", {}))
                content = step["content"]
                prompt_tokens = sum(len(m.get("content", "")) for m in body.get("messages", [])) // 4
                completion_tokens = len(content) // 4
                self._send(200, {
                    "id": f"chatcmpl-{len(owner.requests)}", "object": "chat.completion", "created": int(time.time()),
                    "model": body.get("model", "scripted"),
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                              "total_tokens": prompt_tokens + completion_tokens}})

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
