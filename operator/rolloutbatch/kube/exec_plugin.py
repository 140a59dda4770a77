"""A kubeconfig user's exec credential plugin (``users[].user.exec``), run as kubectl runs it.

pykube's adapter runs only ``client.authentication.k8s.io/v1alpha1`` and ``v1beta1`` plugins and
refuses ``v1``, the version kubectl takes since 1.22 (KEP-541, external client-go credential
providers, GA) and which current cloud tools write into kubeconfigs. ``kube.client``'s adapter
calls :func:`credential` instead, for every version; the clients on the event loop take no plugin
(``kube.async_session.supported``, ``sdk.aio.AsyncApi``), so this is the one implementation.

The rules are client-go's (``plugin/pkg/client/auth/exec/exec.go``):

- the plugin's environment is ours, plus the kubeconfig's ``env`` entries, plus
  ``KUBERNETES_EXEC_INFO``: an ExecCredential of the configured ``apiVersion`` whose ``spec``
  says whether the plugin may talk to the user (``interactive``) and, with
  ``provideClusterInfo``, describes the cluster (``spec.cluster``);
- ``interactiveMode``: ``Never``, ``IfAvailable`` or ``Always``; v1 requires it, v1beta1 takes
  ``IfAvailable`` when unset. The plugin is interactive when standard input is a terminal and the
  mode is not ``Never``; ``Always`` without a terminal is refused. Only an interactive plugin gets
  our standard input; its standard error is always the user's (a login prompt, a hint);
- it prints an ExecCredential of the same ``apiVersion`` whose ``status`` holds a ``token`` or
  ``clientCertificateData`` and ``clientKeyData``; a plugin that is not found says its
  ``installHint``.

The credential is asked for at each request, as pykube asked for it (no cache until
``expirationTimestamp``).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import pykube.exceptions

GROUP = "client.authentication.k8s.io"
VERSIONS = tuple(f"{GROUP}/{version}" for version in ("v1alpha1", "v1beta1", "v1"))
MODES = ("Never", "IfAvailable", "Always")
# The cluster extension a plugin with provideClusterInfo receives as spec.cluster.config.
_EXTENSION = f"{GROUP}/exec"


class PluginError(pykube.exceptions.PyKubeError):
    """The plugin cannot give a credential; ``kube.client.Api.request`` makes it a ConfigError."""


@dataclass(frozen=True)
class Credential:
    token: str | None = None
    client_certificate: str | None = None   # PEM
    client_key: str | None = None


def credential(exec_conf: dict, cluster: dict | None = None, *, stdin_is_terminal: bool | None = None) -> Credential:
    """Run the plugin ``exec_conf`` (a kubeconfig user's ``exec``) for ``cluster`` (the
    kubeconfig's cluster, as pykube reads it) and return what it printed."""
    command = exec_conf.get("command")
    version = exec_conf.get("apiVersion")
    if not command:
        raise PluginError("the exec plugin has no command")
    if version not in VERSIONS:
        raise PluginError(f"the exec plugin {command}: apiVersion {version!r} is not one of {', '.join(VERSIONS)}")
    interactive = _interactive(exec_conf, command, version,
                               sys.stdin.isatty() if stdin_is_terminal is None else stdin_is_terminal)
    spec: dict[str, Any] = {"interactive": interactive}
    if exec_conf.get("provideClusterInfo") and cluster is not None:
        spec["cluster"] = _cluster_info(cluster)
    env = dict(os.environ)
    for entry in exec_conf.get("env") or ():
        env[entry["name"]] = entry["value"]
    env["KUBERNETES_EXEC_INFO"] = json.dumps({"apiVersion": version, "kind": "ExecCredential", "spec": spec})
    try:
        output = subprocess.run([command, *(exec_conf.get("args") or ())], env=env, check=True,
                                stdout=subprocess.PIPE, stdin=None if interactive else subprocess.DEVNULL).stdout
    except FileNotFoundError:
        hint = exec_conf.get("installHint")
        raise PluginError(f"the exec plugin {command} was not found" + (f": {hint.strip()}" if hint else "")) from None
    except subprocess.CalledProcessError as exc:
        raise PluginError(f"the exec plugin {command} exited with status {exc.returncode}") from None
    except OSError as exc:
        raise PluginError(f"the exec plugin {command} cannot run: {exc.strerror or exc}") from None
    return _parse(output, command, version)


def _interactive(exec_conf: dict, command: str, version: str, terminal: bool) -> bool:
    mode = exec_conf.get("interactiveMode")
    if not mode:
        if version.endswith("/v1"):
            raise PluginError(f"the exec plugin {command}: interactiveMode must be set (one of "
                              f"{', '.join(MODES)}) for {version}")
        mode = "IfAvailable"
    if mode not in MODES:
        raise PluginError(f"the exec plugin {command}: interactiveMode {mode!r} is not one of {', '.join(MODES)}")
    if mode == "Always" and not terminal:
        raise PluginError(f"the exec plugin {command} needs a terminal (interactiveMode Always): "
                          "standard input is not one")
    return terminal and mode != "Never"


def _cluster_info(cluster: dict) -> dict:
    """The cluster as the ExecCredential's spec.cluster gives it (client-go's ``Cluster``)."""
    info: dict[str, Any] = {"server": cluster.get("server", "")}
    for key in ("tls-server-name", "insecure-skip-tls-verify", "proxy-url", "disable-compression"):
        if cluster.get(key):
            info[key] = cluster[key]
    ca = cluster.get("certificate-authority")   # pykube's BytesOrFile, of the file or the -data field
    if ca is not None:
        info["certificate-authority-data"] = base64.b64encode(ca.bytes()).decode()
    for extension in cluster.get("extensions") or ():
        if extension.get("name") == _EXTENSION:
            info["config"] = extension.get("extension")
    return info


def _parse(output: bytes, command: str, version: str) -> Credential:
    def refuse(why: str) -> PluginError:
        return PluginError(f"the exec plugin {command} printed no ExecCredential with a status: {why}")

    try:
        printed = json.loads(output)
    except ValueError as exc:
        raise refuse(str(exc)) from None
    if not isinstance(printed, dict) or not isinstance(printed.get("status"), dict):
        raise refuse("no status")
    if printed.get("apiVersion") not in (None, version):
        raise refuse(f"apiVersion {printed['apiVersion']!r}, where the kubeconfig asks for {version}")
    status = printed["status"]
    if status.get("token"):
        return Credential(token=status["token"])
    if status.get("clientCertificateData") and status.get("clientKeyData"):
        return Credential(client_certificate=status["clientCertificateData"], client_key=status["clientKeyData"])
    raise refuse("neither a token nor clientCertificateData and clientKeyData")
