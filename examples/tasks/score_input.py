"""An episode with a per-episode input: reads $EPISODE_INPUT (a JSON file) and scores it.

Each input is {"a": int, "b": int, "expected": int}; the "agent" adds a and b, and the reward
is 1.0 when the sum matches the expected value. The input's own fields are echoed in the reward
event so the results show which input each episode saw.
"""
import json
import os
import time


def emit(event, **fields):
    record = {"event": event, "at": time.time(), "episode_id": os.environ["EPISODE_ID"], **fields}
    print(json.dumps(record), flush=True)


def main():
    with open(os.environ["EPISODE_INPUT"]) as handle:
        task = json.load(handle)
    emit("ready")
    answer = task["a"] + task["b"]
    emit("reward", reward=1.0 if answer == task["expected"] else 0.0, answer=answer,
         input_index=int(os.environ["EPISODE_INDEX"]))


if __name__ == "__main__":
    main()
