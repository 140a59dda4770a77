"""What every request to the API server takes from the kubeconfig, whichever client sends it:
the blocking one (``kube.client.Api``, requests) and those on the event loop (``kube.async_session``
for the operator, ``sdk.aio.AsyncApi``). One definition, so the clients cannot drift apart.

- :func:`auth_headers`: the bearer token of the user's ``token`` or ``tokenFile``, the file read
  at every request: projected tokens rotate (the kubelet rewrites a service account's token about
  hourly, and the operator runs for days). The in-cluster account is such a file
  (``kube.client.load_config``). Other credentials (a client certificate, an exec plugin, an auth
  provider) are the client's own: they are no header known before the request.
- :func:`proxy`: the proxy of the requests, as kubectl picks it: the cluster's ``proxy-url``, else
  the environment's (:func:`environ_proxy`: ``HTTPS_PROXY``/``HTTP_PROXY`` for the server's
  scheme, never for a loopback server nor one ``NO_PROXY`` names, by Go's rules), read once, when
  the client is made (client-go reads the environment once).
"""

from __future__ import annotations

import ipaddress
import os
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

import idna
import pykube

from rolloutbatch.kube.errors import ConfigError


def token(config: pykube.KubeConfig) -> str | None:
    """The user's bearer token: ``token``, else the contents of ``tokenFile`` (stripped), read now.
    A token file that cannot be read is ConfigError."""
    user = config.user or {}
    if user.get("token"):
        return user["token"]
    if user.get("tokenFile"):
        try:
            with open(user["tokenFile"]) as handle:
                return handle.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ConfigError(f"cannot read the kubeconfig's token file {user['tokenFile']}: {reason}") from None
    return None


def auth_headers(config: pykube.KubeConfig) -> dict[str, Any]:
    """The request's Authorization header, when the kubeconfig has a token (:func:`token`)."""
    bearer = token(config)
    return {"Authorization": f"Bearer {bearer}"} if bearer else {}


def proxy(config: pykube.KubeConfig) -> str | None:
    """The proxy URL for the cluster's server, None to connect directly: the cluster's
    ``proxy-url`` for every request (client-go: no NO_PROXY, no loopback exception), else
    :func:`environ_proxy`. An http or https proxy: another (socks5, which kubectl also takes) is
    ConfigError, aiohttp cannot carry it."""
    server = config.cluster["server"]
    url = config.cluster.get("proxy-url") or environ_proxy(server)
    if not url:
        return None
    url = _with_scheme(url)
    try:
        scheme = urllib.parse.urlsplit(url).scheme
    except ValueError as exc:
        raise ConfigError(f"the proxy {url} for {server}: {exc}") from None
    if scheme not in ("http", "https"):
        raise ConfigError(f"the proxy {url} for {server}: only http and https proxies are supported")
    return url


# --- The environment's proxy, as kubectl picks it --------------------------------------------------
# kubectl's client-go takes Go's net/http ProxyFromEnvironment, whose rules are
# golang.org/x/net/http/httpproxy (proxy.go: FromEnvironment, proxyForURL, useProxy, config.init),
# wrapped by k8s.io/apimachinery's util/net NewProxierWithNoProxyCIDR. Re-stated here from those
# rules, not translated; requests' get_environ_proxies differs on every point below:
# - only HTTPS_PROXY (else https_proxy) for an https server, HTTP_PROXY (else http_proxy) for an
#   http one (an https server never falls back to HTTP_PROXY); never ALL_PROXY. An empty
#   variable counts as unset.
# - a server whose host is exactly "localhost" (not lower-cased first) or a loopback IP
#   (127.0.0.0/8, ::1, ::ffff:127.x) is never proxied, whatever NO_PROXY says.
# - NO_PROXY (else no_proxy): comma-separated entries, trimmed and lower-cased. "*" matches
#   everything. An IP/CIDR entry matches an IP server in it; "ip" or "ip:port" / "[ipv6]:port"
#   matches that IP (on that port only, with one). Any other entry is a domain, optionally with
#   ":port": "example.com" matches it and its subdomains, ".example.com" and "*.example.com" only
#   subdomains; never "badexample.com". A domain entry is also compared, as text, with an IP
#   server's address. The server's port is its URL's, else 443/80 by scheme.
# - client-go's wrapper also takes NO_PROXY's CIDR entries untrimmed and "sloppily" (IPv4 octets
#   with leading zeros read as decimal), against the server's host read the same way.
# Not carried: Go's refusal of HTTP_PROXY when REQUEST_METHOD is set (a CGI process); a proxy
# value that is no URL, which Go drops (then connects directly), is ConfigError here.

_DEFAULT_PORTS = {"http": "80", "https": "443"}


def environ_proxy(server: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The environment's proxy for ``server`` as kubectl picks it (the rules above), None for
    none. ``environ`` defaults to ``os.environ``; read now (clients call this once, when made, as
    client-go reads the environment once)."""
    env = os.environ if environ is None else environ
    scheme, host, port = _server_address(server)
    names = {"https": ("HTTPS_PROXY", "https_proxy"), "http": ("HTTP_PROXY", "http_proxy")}.get(scheme)
    url = _first_set(env, names) if names else ""
    if not url:
        return None
    no_proxy = _first_set(env, ("NO_PROXY", "no_proxy"))
    if _cidr_bypass(host, no_proxy) or not use_proxy(host, port, no_proxy):
        return None
    return url


def use_proxy(host: str, port: str, no_proxy: str) -> bool:
    """Whether Go's ProxyFromEnvironment proxies a request to ``host`` (a URL's hostname, IPv6
    without brackets) on ``port`` under this NO_PROXY value: False for a loopback server or one
    an entry names."""
    if host == "localhost":
        return False
    ip = _ip(host)
    if ip is not None and ip.is_loopback:
        return False
    host = host.strip().lower()
    for rule in _no_proxy_rules(no_proxy):
        kind = rule[0]
        if kind == "all":
            return False
        if kind == "cidr" and ip is not None and ip in rule[1]:
            return False
        if kind == "ip" and ip is not None and ip == rule[1] and rule[2] in ("", port):
            return False
        if kind == "domain":
            _, suffix, rule_port, whole = rule
            if (host.endswith(suffix) or (whole and host == suffix[1:])) and rule_port in ("", port):
                return False
    return True


def _first_set(env: Mapping[str, str], names: tuple[str, ...]) -> str:
    return next((env[name] for name in names if env.get(name)), "")


def _with_scheme(url: str) -> str:
    """A proxy value as Go reads it: kept when its scheme is http, https or socks5, else taken
    as "host[:port]" of an http proxy ("proxy.corp:3128" is http://proxy.corp:3128)."""
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://|", url).group(1) or ""
    return url if scheme.lower() in ("http", "https", "socks5") else "http://" + url


def _server_address(server: str) -> tuple[str, str, str]:
    """(scheme, host, port) of the server's URL as Go's url.URL gives them: the host neither
    lower-cased nor bracketed, in IDNA ASCII form, the port the scheme's default when none."""
    scheme, _, rest = server.partition("://")   # by hand: urlsplit raises on a stray "[" or "]"
    scheme = scheme.lower()
    hostport = re.split(r"[/?#]", rest, maxsplit=1)[0].rpartition("@")[2]
    host, port = hostport, ""
    colon = hostport.rfind(":")
    if colon >= 0 and (hostport[colon + 1:].isdigit() or colon == len(hostport) - 1):
        host, port = hostport[:colon], hostport[colon + 1:]
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return scheme, _idna(host), port or _DEFAULT_PORTS.get(scheme, "")


_Rule = tuple


def _no_proxy_rules(value: str) -> list[_Rule]:
    """NO_PROXY's entries as Go's httpproxy parses them; malformed ones are skipped."""
    rules: list[_Rule] = []
    for entry in value.split(","):
        entry = entry.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return [("all",)]
        network = _cidr(entry)
        if network is not None:
            rules.append(("cidr", network))
            continue
        split = _split_host_port(entry)
        host, port = split if split else (entry, "")
        if split and not host:
            continue
        ip = _ip(host)
        if ip is not None:
            rules.append(("ip", ip, port))
            continue
        if not host:
            continue
        if host.startswith("*."):
            host = host[1:]
        whole = not host.startswith(".")
        rules.append(("domain", _idna("." + host if whole else host), port, whole))
    return rules


def _cidr_bypass(host: str, no_proxy: str) -> bool:
    """client-go's NewProxierWithNoProxyCIDR: an IP server in a CIDR entry of NO_PROXY, both
    read sloppily (leading zeros), goes direct. Entries are not trimmed there."""
    ip = _ip(_unpad_ipv4(host))
    if ip is None:
        return False
    for entry in no_proxy.split(","):
        address, slash, bits = entry.partition("/")
        network = _cidr(_unpad_ipv4(address) + slash + bits) if slash else None
        if network is not None and ip in network:
            return True
    return False


def _unpad_ipv4(text: str) -> str:
    octets = text.split(".")
    if len(octets) == 4 and all(o.isascii() and o.isdigit() for o in octets):
        return ".".join(str(int(o)) for o in octets)
    return text


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """An IP as Go's net.ParseIP reads it (no IPv6 zone), an IPv4-mapped IPv6 as its IPv4
    (Go's IP.Equal and IsLoopback treat them as one)."""
    if "%" in text or not text.isascii():
        return None
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _cidr(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """"address/bits" as Go's net.ParseCIDR reads it (host bits allowed, no netmask form); an
    IPv4-mapped prefix of at least 96 bits as its IPv4 network, as Go's IPNet.Contains takes it."""
    address, slash, bits = text.partition("/")
    ip = _ip(address) if slash and bits.isascii() and bits.isdigit() else None
    if ip is None:
        return None
    if ":" in address and isinstance(ip, ipaddress.IPv4Address):   # ::ffff:a.b.c.d/n
        if int(bits) < 96 or int(bits) > 128:
            return None
        bits = str(int(bits) - 96)
    if int(bits) > ip.max_prefixlen:
        return None
    return ipaddress.ip_network(f"{ip}/{int(bits)}", strict=False)


def _split_host_port(text: str) -> tuple[str, str] | None:
    """Go's net.SplitHostPort: "host:port" or "[host]:port" (brackets removed), None when the
    text is not of that form (no port, too many colons, a stray bracket)."""
    colon = text.rfind(":")
    if colon < 0:
        return None
    start, after = 0, 0
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or end + 1 != colon:
            return None
        host, start, after = text[1:end], 1, end + 1
    else:
        host = text[:colon]
        if ":" in host:
            return None
    if "[" in text[start:] or "]" in text[after:]:
        return None
    return host, text[colon + 1:]


def _idna(host: str) -> str:
    """A host in IDNA ASCII form, as Go's idna.Lookup.ToASCII gives it; unchanged when ASCII
    already or when it cannot be converted."""
    if host.isascii():
        return host
    try:
        mapped = idna.uts46_remap(host, std3_rules=True, transitional=False)
        return ".".join(label if label.isascii() else idna.alabel(label).decode()
                        for label in mapped.split("."))
    except (idna.IDNAError, UnicodeError, ValueError):
        return host
