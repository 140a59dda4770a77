"""Container environment and command (pure): envFrom, env with valueFrom, $(VAR) expansion."""
from __future__ import annotations

import base64
import re

from rolloutbatch.core.k8s_rules import parse_quantity

from .quantity import ceil_div


class ConfigError(Exception):
    """The container cannot be configured yet (CreateContainerConfigError); retried."""


def expand(text: str, env: dict) -> str:
    """Kubernetes $(VAR) expansion: defined vars are replaced, $$ escapes, others stay."""
    out, i, n = [], 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "$" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                close = text.find(")", i + 2)
                if close != -1:
                    name = text[i + 2:close]
                    if name in env:
                        out.append(env[name])
                    else:
                        out.append(text[i:close + 1])
                    i = close + 1
                    continue
        out.append(ch)
        i += 1
    return "".join(out)


_KEYED = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def field_value(pod: dict, path: str, pod_ip: str | None, host_ip: str) -> str:
    meta, spec = pod.get("metadata", {}), pod.get("spec", {})
    m = _KEYED.match(path)
    if m:
        return (meta.get(m.group(1)) or {}).get(m.group(2), "")
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
        "status.podIP": pod_ip or "",
        "status.podIPs": pod_ip or "",
    }
    if path in simple:
        return simple[path]
    if path in ("metadata.labels", "metadata.annotations"):
        d = meta.get(path.split(".")[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(d.items()))
    raise ConfigError(f"unsupported fieldRef fieldPath {path!r}")


def resource_value(container: dict, resource: str, divisor: str | None, allocatable: dict) -> str:
    """resourceFieldRef: limits default to the node's allocatable (as the kubelet does)."""
    kind, _, name = resource.partition(".")
    res = (container.get("resources") or {})
    value = (res.get(kind) or {}).get(name)
    if value is None and kind == "requests":
        value = (res.get("limits") or {}).get(name)
    if value is None:
        value = allocatable.get(name, "0") if kind == "limits" else "0"
    div = parse_quantity(divisor or "1")
    if div == 0:
        div = parse_quantity("1")
    return str(ceil_div(parse_quantity(value), div))


def _decode(b64: str) -> str:
    return base64.b64decode(b64).decode("utf-8", "replace")


def object_data(obj: dict, kind: str) -> dict[str, str]:
    """ConfigMap data (+binaryData) or Secret data (+stringData) as str values."""
    if kind == "configmap":
        out = dict(obj.get("data") or {})
        for k, v in (obj.get("binaryData") or {}).items():
            out[k] = _decode(v)
        return out
    out = {k: _decode(v) for k, v in (obj.get("data") or {}).items()}
    out.update(obj.get("stringData") or {})
    return out


def referenced_objects(pod: dict) -> tuple[set[str], set[str]]:
    """(configmap names, secret names) the pod's env/envFrom/volumes reference."""
    cms, secs = set(), set()
    spec = pod.get("spec", {})
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        for ef in c.get("envFrom") or []:
            if "configMapRef" in ef:
                cms.add(ef["configMapRef"]["name"])
            if "secretRef" in ef:
                secs.add(ef["secretRef"]["name"])
        for e in c.get("env") or []:
            vf = e.get("valueFrom") or {}
            if "configMapKeyRef" in vf:
                cms.add(vf["configMapKeyRef"]["name"])
            if "secretKeyRef" in vf:
                secs.add(vf["secretKeyRef"]["name"])
    for v in spec.get("volumes") or []:
        if "configMap" in v:
            cms.add(v["configMap"]["name"])
        if "secret" in v:
            secs.add(v["secret"]["secretName"])
        for src in (v.get("projected") or {}).get("sources") or []:
            if "configMap" in src:
                cms.add(src["configMap"]["name"])
            if "secret" in src:
                secs.add(src["secret"]["name"])
    return cms, secs


def build_env(pod: dict, container: dict, *, base: dict, configmaps: dict, secrets: dict,
              pod_ip: str | None, host_ip: str, allocatable: dict) -> dict:
    """base: the image's environment (PATH, HOME, ...). configmaps/secrets: name -> object or None
    (missing). Raises ConfigError for a missing non-optional reference."""
    ns = pod["metadata"].get("namespace", "default")
    env = dict(base)

    def lookup(kind: str, name: str, key: str | None, optional: bool):
        objs = configmaps if kind == "configmap" else secrets
        obj = objs.get(name)
        label = "configmap" if kind == "configmap" else "secret"
        if obj is None:
            if optional:
                return None
            raise ConfigError(f'{label} "{name}" not found')
        data = object_data(obj, kind)
        if key is None:
            return data
        if key not in data:
            if optional:
                return None
            raise ConfigError(f"couldn't find key {key} in {label.capitalize() if kind == 'secret' else 'ConfigMap'} {ns}/{name}")
        return data[key]

    for ef in container.get("envFrom") or []:
        prefix = ef.get("prefix", "")
        if "configMapRef" in ef:
            ref = ef["configMapRef"]
            data = lookup("configmap", ref["name"], None, ref.get("optional", False))
        elif "secretRef" in ef:
            ref = ef["secretRef"]
            data = lookup("secret", ref["name"], None, ref.get("optional", False))
        else:
            continue
        for k, v in (data or {}).items():
            if "=" not in k and k:
                env[prefix + k] = v
    for e in container.get("env") or []:
        name = e["name"]
        if "valueFrom" not in e:
            env[name] = expand(e.get("value", ""), env)
            continue
        vf = e["valueFrom"]
        if "fieldRef" in vf:
            env[name] = field_value(pod, vf["fieldRef"]["fieldPath"], pod_ip, host_ip)
        elif "resourceFieldRef" in vf:
            r = vf["resourceFieldRef"]
            env[name] = resource_value(container, r["resource"], r.get("divisor"), allocatable)
        elif "configMapKeyRef" in vf:
            r = vf["configMapKeyRef"]
            v = lookup("configmap", r["name"], r["key"], r.get("optional", False))
            if v is not None:
                env[name] = v
        elif "secretKeyRef" in vf:
            r = vf["secretKeyRef"]
            v = lookup("secret", r["name"], r["key"], r.get("optional", False))
            if v is not None:
                env[name] = v
        else:
            raise ConfigError(f"unsupported valueFrom for {name}")
    return env


def build_command(container: dict, default_command: tuple[str, ...], env: dict,
                  entrypoint: tuple[str, ...] = ()) -> list[str]:
    """Entrypoint/cmd semantics: command replaces the image's entrypoint (and its cmd),
    args replace the cmd; $(VAR) references are expanded from the container env."""
    command = container.get("command")
    args = container.get("args")
    if command:
        argv = list(command) + list(args or [])
    else:
        argv = list(entrypoint) + list(args if args else default_command)
    return [expand(a, env) for a in argv]


def kubernetes_service_env(host: str, port: int) -> dict:
    """The variables a kubelet gives every container for the API's Service (default/kubernetes),
    whatever enableServiceLinks says: in-cluster clients find the API by them."""
    addr = f"tcp://{host}:{port}"
    return {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": str(port),
            "KUBERNETES_SERVICE_PORT_HTTPS": str(port), "KUBERNETES_PORT": addr,
            f"KUBERNETES_PORT_{port}_TCP": addr, f"KUBERNETES_PORT_{port}_TCP_PROTO": "tcp",
            f"KUBERNETES_PORT_{port}_TCP_PORT": str(port), f"KUBERNETES_PORT_{port}_TCP_ADDR": host}
