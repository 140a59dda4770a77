"""The model-in-the-loop agent phase: asks a policy model for the fix and applies its answer.

It prepares the workspace, reports `ready`, sends the failing module to the OpenAI-compatible
endpoint in $MODEL_URL (`/v1/chat/completions`) with its EPISODE_ID as the session id (the
`user` field and an X-Session-ID header, so a capture proxy can attribute the trajectory), and
writes the code block of the reply over the module. It reports no reward: the verifier grades
what it left (shipping_fix_verifier.py). The batch's egress opens only that endpoint and DNS.

A model that cannot be reached leaves the module unfixed and the agent exits non-zero: the
verifier grades what is there (0), as for any attempt. Nothing in the workspace can ask the
verifier not to grade: an agent that could would leave every bad attempt out of its group. An
outage is seen where it happened: the endpoint (or a capture proxy) knows which sessions it
never answered, and the trainer drops those rows (the row's `agent.exit_code` and
`agent.output_tail` say what the agent saw, but they are the agent's word).
"""
import json
import os
import pathlib
import re
import sys
import time
import urllib.error
import urllib.request

WORKSPACE = pathlib.Path(os.environ.get("WORKSPACE", "/workspace"))
SOURCE = "def shipping(total):\n    return 0 if total > 99 else 10\n"
PROMPT = ("shipping(99) must be free (0) but returns 10: the test test_threshold_is_free fails. "
          "Fix the module and answer with the whole corrected file in one python code block.\n"
          "```python\n{source}```\n")
CONNECT_TRIES = 3
FENCE = re.compile(r"```(?:python)?\n(.*?)```", re.S)


def ask(source: str, session: str) -> str:
    body = {"model": os.environ.get("MODEL_NAME", "policy"), "temperature": 1.0, "user": session,
            "messages": [{"role": "system", "content": "You are a careful Python programmer."},
                         {"role": "user", "content": PROMPT.format(source=source)}]}
    request = urllib.request.Request(os.environ["MODEL_URL"].rstrip("/") + "/v1/chat/completions",
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "X-Session-ID": session})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the endpoint, never a proxy
    for attempt in range(CONNECT_TRIES):
        try:
            with opener.open(request, timeout=60) as response:
                reply = json.load(response)
            break
        except urllib.error.HTTPError:
            raise   # the endpoint answered: not asked again
        except OSError:
            # not reached (a Service whose endpoints are still being programmed as the pod starts):
            # asked again, as OpenAI's clients do by default
            if attempt + 1 == CONNECT_TRIES:
                raise
            time.sleep(2 ** attempt)
    return reply["choices"][0]["message"]["content"]


def main():
    session = os.environ["EPISODE_ID"]
    WORKSPACE.mkdir(parents=True, exist_ok=True)
    (WORKSPACE / "shipping.py").write_text(SOURCE)
    ready = {"event": "ready", "at": time.time(), "episode_id": session}
    with open("/dev/termination-log", "w") as f:
        f.write(json.dumps(ready) + "\n")
    try:
        answer = FENCE.search(ask(SOURCE, session))
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:   # unreachable, or not an answer
        sys.exit(f"no answer from the model: {type(exc).__name__}: {exc}"[:500])
    if not answer:
        sys.exit("the model's answer has no code block")
    (WORKSPACE / "shipping.py").write_text(answer.group(1))
    print(f"applied the model's fix ({len(answer.group(1))} bytes)", flush=True)


if __name__ == "__main__":
    main()
