"""Secrets handed to an episode's environment: ``env[].valueFrom.secretKeyRef`` (pure).

An agent that calls a hosted model needs its API key, and a key does not belong in the spec:
everyone who may read the RolloutBatch would read it. So an env entry may name a key of a Secret
instead, and the rule is the one of ``spec.inputsFrom`` (docs/design.md §8.1):

- The Secret lives in the **batch's own namespace** and carries ``rl.agentruntime.io/episode-env=true``
  (``core.naming.LABEL_EPISODE_ENV``), set by whoever may write it. The submitter may hold rights
  on RolloutBatches only: without the label, a batch could hand any Secret of its namespace to
  model-written code and carry it out through a reward or a log line. A missing Secret and an
  unlabelled one get the same answer (``SecretNotFound``), which shows neither its keys nor
  whether it exists; a labelled one lacking the key names the key (the batch could read it anyway).
- The operator reads each named Secret once, before anything is created, and copies **only the
  referenced keys** into one Secret of its own beside the Job (``rb-<uid10>-env``, immutable; in
  the Dedicated sandbox, or owned by the batch in a Shared namespace): the episodes read what the
  batch started with, a change of the original mid-batch changes nothing, and the sandbox never
  holds the Secret's other keys. The copy goes with the sandbox (the namespace, or the deletion
  plan in a Shared namespace, and the garbage collector with the batch).
- The pods reference the copy's keys (``key_names``: ``ref-<n>``, so two Secrets' keys of the same
  name never collide) only in the container whose env names them: a key of ``spec.env`` reaches
  the agent, one of ``spec.verifier.env`` the verifier, never the other.
- The values are never written anywhere else by the operator: not in logs, status, Events or
  results. What the agent itself prints (its log tail is kept in its row) is the agent's.
"""

from __future__ import annotations

from collections.abc import Mapping

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.k8s_rules import MAX_SECRET_BYTES
from rolloutbatch.core.model import BatchSpec, Stalled
from rolloutbatch.core.naming import EPISODE_ENV_OPT_IN, LABEL_EPISODE_ENV
from rolloutbatch.core.env_expansion import expanded_sizes
from rolloutbatch.core.spec_env import env_string_problem

SecretKey = tuple[str, str]   # (Secret name, key)


def _refs_of(env: tuple[dict, ...]) -> list[SecretKey]:
    return [(e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
            for e in env if "valueFrom" in e]


def secret_keys(spec: BatchSpec) -> tuple[SecretKey, ...]:
    """Every (Secret, key) the agent's and the verifier's env reference, once each, in order."""
    refs = _refs_of(spec.env) + (_refs_of(spec.verifier.env) if spec.verifier is not None else [])
    return tuple(dict.fromkeys(refs))


def secret_names(spec: BatchSpec) -> tuple[str, ...]:
    return tuple(dict.fromkeys(name for name, _ in secret_keys(spec)))


def key_names(spec: BatchSpec) -> dict[SecretKey, str]:
    """(Secret, key) -> the key of the operator's copy that holds it."""
    return {ref: f"ref-{n}" for n, ref in enumerate(secret_keys(spec))}


def opted_in(secret: Mapping) -> bool:
    labels = (secret.get("metadata") or {}).get("labels") or {}
    return isinstance(labels, Mapping) and labels.get(LABEL_EPISODE_ENV) == EPISODE_ENV_OPT_IN


def not_opted_in_message(name: str) -> str:
    """The one answer for a missing and for a not-opted-in Secret."""
    return (f"Secret {name} of an env secretKeyRef does not exist in the batch's namespace or is not labelled "
            f"{LABEL_EPISODE_ENV}={EPISODE_ENV_OPT_IN}: only Secrets opted in with that label (by someone who may "
            "write them) are handed to episodes")[:400]


def forbidden_message(namespace: str) -> str:
    return (f"the operator may not read Secrets in namespace {namespace}: an env secretKeyRef needs the "
            "ClusterRole rolloutbatch-operator-secrets bound to the operator (manifests/rbac/secrets_role.yaml)")


def _decoded_size(value: str) -> int:
    """Bytes of a Secret's data value, from its base64 (padded, as the API serves it)."""
    return len(value) // 4 * 3 - (len(value) - len(value.rstrip("=")))


def copied_data(secrets: Mapping[str, Mapping | None], spec: BatchSpec) -> dict[str, str]:
    """The data of the operator's copy: each referenced key of each opted-in Secret, under its
    ``key_names`` name (base64, as the API serves it). Raises Stalled before anything is created:
    SecretNotFound (every Secret is checked for the label before any of its keys is looked at);
    InvalidSpec for a value no process can be given as its variable (core.spec_env.env_string_problem);
    ProvisioningRefused for a copy larger than the API server takes in one Secret (each original
    fits, several together need not), which it would refuse once the sandbox namespace exists."""
    names = secret_names(spec)
    for name in names:
        secret = secrets.get(name)
        if secret is None or not opted_in(secret):
            raise Stalled(v.STALL_SECRET_MISSING, not_opted_in_message(name))
    data: dict[str, str] = {}
    for (name, key), copy_key in key_names(spec).items():
        value = (secrets[name].get("data") or {}).get(key)
        if not isinstance(value, str):
            raise Stalled(v.STALL_SECRET_MISSING, f"Secret {name} has no key {key!r} (referenced by an env "
                                                  "secretKeyRef)"[:400])
        data[copy_key] = value
    total = sum(map(_decoded_size, data.values()))
    if total > MAX_SECRET_BYTES:
        raise Stalled(v.STALL_REFUSED, f"the Secret keys the env references take {total} bytes together, and the "
                                       f"operator copies them into one Secret, which the API server takes up to "
                                       f"{MAX_SECRET_BYTES} bytes (1 MiB): reference fewer or smaller keys")
    copies = key_names(spec)

    def value_or_size(entry: Mapping) -> str | int:
        if "valueFrom" not in entry:
            return entry["value"]
        ref = entry["valueFrom"]["secretKeyRef"]
        return _decoded_size(data[copies[(ref["name"], ref["key"])]])

    for field, env in (("spec.env", spec.env), ("spec.verifier.env", spec.verifier.env if spec.verifier else ())):
        # each as the kubelet gives it: a Secret's value, and the values that refer to it expanded
        for entry, (name, size) in zip(env, expanded_sizes((e["name"], value_or_size(e)) for e in env)):
            problem = env_string_problem(name, size)
            if problem:
                source = (f"Secret {entry['valueFrom']['secretKeyRef']['name']} key "
                          f"{entry['valueFrom']['secretKeyRef']['key']!r}: " if "valueFrom" in entry else "")
                raise Stalled(v.STALL_INVALID_SPEC, f"{field}[{name}]: {source}{problem}"[:400])
    return data
