"""service.provisioning with env Secret keys: every named Secret is read (by name, in the batch's
namespace) and checked before anything is created; only the referenced keys are copied, before
the Job; a refusal shows no key's value."""
import asyncio

import pytest

from rolloutbatch.core import naming
from rolloutbatch.core.admission import Stalled
from rolloutbatch.core.naming import EPISODE_ENV_OPT_IN, LABEL_EPISODE_ENV
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.kube.errors import Forbidden
from rolloutbatch.kube.storage import Storage
from rolloutbatch.service import provisioning
from tests.support.memory_api import MemoryApi
from tests.unit.core.factories import MINIMAL, REF

VALUE = "c2stdmVyeS1zZWNyZXQ="   # base64, as the API serves Secret data


def cluster(*secrets: dict, forbidden: bool = False) -> MemoryApi:
    """The batch's namespace and its ``secrets``; ``forbidden``: the operator may not read Secrets."""
    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": REF.namespace}})
    for s in secrets:
        api.put(s)
    if forbidden:
        api.fail("GET", "Secret", Forbidden('secrets "llm" is forbidden', status=403), times=100)
    api.calls.clear()
    return api


def secret_reads(api: MemoryApi) -> list[str]:
    return [path for method, path in api.calls if method == "GET" and "/secrets" in path]


def created(api: MemoryApi) -> list[str]:
    """The kinds created, in order (their collection's plural)."""
    return [path.rsplit("/", 1)[1] for method, path in api.calls if method == "POST"]


def secret(data, labels=None):
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "llm", "namespace": REF.namespace, "labels": {LABEL_EPISODE_ENV: EPISODE_ENV_OPT_IN} if labels is None else labels},
            "type": "Opaque", "data": data}


SPEC = parse_spec({**MINIMAL, "env": [{"name": "OPENAI_API_KEY",
                                       "valueFrom": {"secretKeyRef": {"name": "llm", "key": "api-key"}}}]})


def create(api, spec=SPEC):
    storage = Storage(api)
    return asyncio.run(provisioning.create(storage, lambda obj: storage.create_or_adopt(obj, REF.uid), REF, spec,
                                           {}, None))


def test_the_referenced_key_is_copied_before_the_job_and_nothing_else():
    api = cluster(secret({"api-key": VALUE, "admin-key": "cm9vdA=="}))
    create(api)
    assert secret_reads(api) == [f"/api/v1/namespaces/{REF.namespace}/secrets/llm"]
    kinds = created(api)
    assert kinds.index("secrets") < kinds.index("jobs")
    (copy,) = [s for s in api.list_objects("Secret") if s["metadata"]["name"] != "llm"]
    assert copy["data"] == {"ref-0": VALUE} and copy["metadata"]["name"] == naming.env_secret_name(REF)


@pytest.mark.parametrize("arrange, reason, shown", [
    (lambda: cluster(), "SecretNotFound", "does not exist in the batch's namespace or is not labelled"),
    (lambda: cluster(secret({"api-key": VALUE}, labels={})), "SecretNotFound", LABEL_EPISODE_ENV),
    (lambda: cluster(secret({"other": VALUE})), "SecretNotFound", "has no key 'api-key'"),
    (lambda: cluster(forbidden=True), "ProvisioningRefused", "rolloutbatch-operator-secrets"),
], ids=["absent", "not-opted-in", "no-such-key", "forbidden"])
def test_a_secret_that_cannot_be_used_stalls_before_anything_is_created(arrange, reason, shown):
    api = arrange()
    before = api.list_objects("Secret")
    with pytest.raises(Stalled) as err:
        create(api)
    assert err.value.reason == reason and shown in err.value.message
    assert VALUE not in err.value.message and created(api) == []
    assert [ns["metadata"]["name"] for ns in api.list_objects("Namespace")] == [REF.namespace]
    assert api.list_objects("Secret") == before


def test_no_secret_key_no_read():
    api = cluster()
    create(api, parse_spec(MINIMAL))
    assert secret_reads(api) == [] and "secrets" not in created(api)
