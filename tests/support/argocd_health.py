"""Run an Argo CD resource health script (``health.lua``) with the real Lua 5.1 interpreter.

Argo CD (gopher-lua, Lua 5.1 semantics) decodes the live object into a Lua table, sets it as the
global ``obj``, runs the script and reads ``status``/``message`` from the table it returns. This
harness does the same with ``lua5.1``: the object is written as a Lua table literal (JSON null
becomes nil, i.e. the key is absent, as in Argo CD), the script is loaded with ``loadfile`` and
its result printed length-prefixed, so any message survives the round trip.
"""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path
from typing import Any

LUA = "lua5.1"

_RUNNER = r"""
obj = %s
local chunk, err = loadfile(%s)
if chunk == nil then
  io.stderr:write("load error: " .. tostring(err))
  os.exit(3)
end
local hs = chunk()
if type(hs) ~= "table" then
  io.stderr:write("health script returned " .. type(hs))
  os.exit(4)
end
local function emit(v)
  if v == nil then io.write("-1:") return end
  v = tostring(v)
  io.write(#v, ":", v)
end
emit(hs.status)
emit(hs.message)
"""


def lua_available() -> bool:
    return shutil.which(LUA) is not None


def lua_string(s: str) -> str:
    """A Lua 5.1 string literal for any text: printable ASCII kept, every other byte \\ddd."""
    out = ['"']
    for b in s.encode("utf-8"):
        c = chr(b)
        if c in '"\\':
            out.append("\\" + c)
        elif 0x20 <= b < 0x7F:
            out.append(c)
        else:
            out.append("\\%d" % b)
    out.append('"')
    return "".join(out)


def lua_literal(value: Any) -> str:
    """Encode a JSON-like value as a Lua 5.1 table constructor / literal."""
    if value is None:
        return "nil"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("JSON has no NaN/Infinity")
        return repr(value)
    if isinstance(value, str):
        return lua_string(value)
    if isinstance(value, (list, tuple)):
        # Positional constructor: 1-based like the decoded JSON arrays Argo CD hands to Lua.
        # A nil element would leave a hole; JSON arrays of objects never contain null in practice.
        return "{" + ", ".join(lua_literal(v) for v in value) + "}"
    if isinstance(value, dict):
        items = [f"[{lua_string(str(k))}] = {lua_literal(v)}" for k, v in value.items()
                 if v is not None]
        return "{" + ", ".join(items) + "}"
    raise TypeError(f"cannot encode {type(value).__name__} for Lua")


def _read_field(out: str, pos: int) -> tuple[str | None, int]:
    colon = out.index(":", pos)
    n = int(out[pos:colon])
    if n < 0:
        return None, colon + 1
    # Lengths are in bytes; the output is decoded as latin-1 so bytes == characters here.
    start = colon + 1
    return out[start:start + n], start + n


def run_health(script: Path, obj: dict[str, Any], timeout: float = 10) -> dict[str, str | None]:
    """Run ``script`` on ``obj``; returns {"status": ..., "message": ...}."""
    program = _RUNNER % (lua_literal(obj), lua_string(str(Path(script).resolve())))
    proc = subprocess.run([LUA, "-"], input=program.encode(), capture_output=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"lua failed ({proc.returncode}): {proc.stderr.decode(errors='replace')}")
    out = proc.stdout.decode("latin-1")
    status, pos = _read_field(out, 0)
    message, pos = _read_field(out, pos)
    assert pos == len(out), out
    dec = lambda s: None if s is None else s.encode("latin-1").decode("utf-8")  # noqa: E731
    return {"status": dec(status), "message": dec(message)}
