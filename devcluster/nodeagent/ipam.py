"""Fake pod IPs: 10.244.<node index>.2-254 (then 10.245.<node>.x, ...), recycled when pods end."""
from __future__ import annotations

import re
import zlib


def node_index(node_name: str) -> int:
    m = re.search(r"(\d+)$", node_name)
    return int(m.group(1)) % 256 if m else zlib.crc32(node_name.encode()) % 256


class PodIPs:
    def __init__(self, node_name: str):
        self.index = node_index(node_name)
        self._free: list[str] = []
        self._next = 0
        self._used: set[str] = set()

    def allocate(self) -> str:
        if self._free:
            ip = self._free.pop()
        else:
            block, host = divmod(self._next, 253)
            self._next += 1
            ip = f"10.{(244 + block) % 256}.{self.index}.{host + 2}"
        self._used.add(ip)
        return ip

    def release(self, ip: str | None) -> None:
        if ip and ip in self._used:
            self._used.discard(ip)
            self._free.append(ip)
