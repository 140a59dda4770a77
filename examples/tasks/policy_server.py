"""A scripted policy server: the stand-in for vLLM or SGLang in the model-in-the-loop example.

It serves the part of the OpenAI-compatible API an agent uses, `POST /v1/chat/completions`
(and `GET /v1/models`), and answers the shipping task's prompt with a fix: it takes the code
block of the last user message and edits its boundary. Which edit is decided per session, so
rewards vary within a batch as a sampled policy's would: a session whose SHA-256 starts with
a byte divisible by 4 gets a plausible wrong edit (`> 100`), every other one the right fix
(`>= 99`). Each request is logged as one JSON line with its session id (the request's `user`
field, else its X-Session-ID header) and the edit it got: what a capture proxy records to
attribute a trajectory (token ids and logprobs, in a real one) to its episode.
"""
import hashlib
import http.server
import json
import re
import sys
import time

PORT = 8000
MODEL = "scripted-policy"
MAX_BODY = 1 << 20
FENCE = re.compile(r"```(?:python)?\n(.*?)```", re.S)


def edit_for(session: str) -> str:
    return "wrong" if hashlib.sha256(session.encode()).digest()[0] % 4 == 0 else "right"


def _text(content: object) -> str:
    """A message's content: a string, or OpenAI's list of parts ({"type": "text", "text": ...})."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def complete(request: dict, session: str) -> dict:
    messages = request.get("messages")
    if not isinstance(messages, list):
        raise ValueError("messages must be a list")
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    found = FENCE.search(_text(users[-1].get("content"))) if users else None
    if not found:
        raise ValueError("the last user message has no code block to fix")
    edit = edit_for(session)
    fixed = found.group(1).replace("total > 99", "total >= 99" if edit == "right" else "total > 100")
    content = f"The boundary is off by one; here is the corrected module.\n```python\n{fixed}```\n"
    print(json.dumps({"session": session, "edit": edit, "at": time.time()}), flush=True)
    return {"id": "chatcmpl-" + hashlib.sha256(f"{session}{time.time()}".encode()).hexdigest()[:24],
            "object": "chat.completion", "created": int(time.time()), "model": MODEL,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}


class Handler(http.server.BaseHTTPRequestHandler):
    timeout = 10   # a client that sends less than it announced does not hold a thread forever

    def reply(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/v1/models":
            return self.reply(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        self.reply(404, {"error": {"message": "not found"}})

    def do_POST(self):
        if self.path != "/v1/chat/completions":
            return self.reply(404, {"error": {"message": "not found"}})
        try:
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 < length <= MAX_BODY:
                raise ValueError(f"body of {length} bytes (1..{MAX_BODY})")
            request = json.loads(self.rfile.read(length))
            if not isinstance(request, dict):
                raise ValueError("the body must be a JSON object")
            session = str(request.get("user") or self.headers.get("X-Session-ID") or "")
            if not session:
                raise ValueError("no session id (the `user` field or an X-Session-ID header)")
            self.reply(200, complete(request, session))
        except (ValueError, RecursionError) as exc:   # JSONDecodeError is a ValueError
            self.reply(400, {"error": {"message": str(exc)[:200], "type": "invalid_request_error"}})
        except Exception as exc:  # noqa: BLE001 - a stand-in server answers every request
            self.reply(500, {"error": {"message": f"{type(exc).__name__}", "type": "server_error"}})

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    print(f"serving {MODEL} on :{PORT}", file=sys.stderr, flush=True)
    http.server.ThreadingHTTPServer(("0.0.0.0", PORT), Handler).serve_forever()
