from rolloutbatch.core.spec import parse_spec
from rolloutbatch.core.model import SpecError
base = {"episodes": 2, "task": {"files": {"episode.py": "x"}}}
for raw in [{**base, "stop": None}, {**base, "resources": {"limits": None}}, {**base, "resources": {"requests": None}}]:
    try: parse_spec(raw); r="ok"
    except SpecError as e: r=f"SpecError {e}"[:140]
    except Exception as e: r=f"CRASH {type(e).__name__} {e}"[:150]
    print(raw, r)
