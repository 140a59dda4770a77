"""service.provisioning with env Secret keys: every named Secret is read (by name, in the batch's
namespace) and checked before anything is created; only the referenced keys are copied, before
the Job; a refusal shows no key's value."""
import asyncio

import pytest

from rolloutbatch.core import naming
from rolloutbatch.core.admission import Stalled
from rolloutbatch.core.naming import EPISODE_ENV_OPT_IN, LABEL_EPISODE_ENV
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.kube import resources
from rolloutbatch.kube.errors import Forbidden
from rolloutbatch.service import provisioning
from tests.unit.core.factories import MINIMAL, REF

VALUE = "c2stdmVyeS1zZWNyZXQ="   # base64, as the API serves Secret data


class Cluster:
    def __init__(self, secrets=(), forbidden=False) -> None:
        self.secrets = {s["metadata"]["name"]: s for s in secrets}
        self.forbidden = forbidden
        self.reads, self.created = [], []

    async def call(self, fn, *args):
        assert fn is resources.get_or_none and args[0] == "Secret", fn.__name__
        self.reads.append(args)
        if self.forbidden:
            raise Forbidden('secrets "llm" is forbidden', status=403)
        return self.secrets.get(args[1])

    async def create_one(self, obj):
        self.created.append(obj)
        return obj


def secret(data, labels=None):
    return {"metadata": {"name": "llm", "labels": {LABEL_EPISODE_ENV: EPISODE_ENV_OPT_IN} if labels is None else labels},
            "type": "Opaque", "data": data}


SPEC = parse_spec({**MINIMAL, "env": [{"name": "OPENAI_API_KEY",
                                       "valueFrom": {"secretKeyRef": {"name": "llm", "key": "api-key"}}}]})


def create(cluster, spec=SPEC):
    return asyncio.run(provisioning.create(cluster.call, cluster.create_one, REF, spec, {}, None))


def test_the_referenced_key_is_copied_before_the_job_and_nothing_else():
    cluster = Cluster([secret({"api-key": VALUE, "admin-key": "cm9vdA=="})])
    create(cluster)
    assert cluster.reads == [("Secret", "llm", REF.namespace)]
    kinds = [o["kind"] for o in cluster.created]
    assert kinds.index("Secret") < kinds.index("Job")
    (copy,) = [o for o in cluster.created if o["kind"] == "Secret"]
    assert copy["data"] == {"ref-0": VALUE} and copy["metadata"]["name"] == naming.env_secret_name(REF)


@pytest.mark.parametrize("cluster, reason, shown", [
    (Cluster(), "SecretNotFound", "does not exist in the batch's namespace or is not labelled"),
    (Cluster([secret({"api-key": VALUE}, labels={})]), "SecretNotFound", LABEL_EPISODE_ENV),
    (Cluster([secret({"other": VALUE})]), "SecretNotFound", "has no key 'api-key'"),
    (Cluster(forbidden=True), "ProvisioningRefused", "rolloutbatch-operator-secrets"),
])
def test_a_secret_that_cannot_be_used_stalls_before_anything_is_created(cluster, reason, shown):
    with pytest.raises(Stalled) as err:
        create(cluster)
    assert err.value.reason == reason and shown in err.value.message
    assert VALUE not in err.value.message and cluster.created == []


def test_no_secret_key_no_read():
    cluster = Cluster()
    create(cluster, parse_spec(MINIMAL))
    assert cluster.reads == [] and "Secret" not in [o["kind"] for o in cluster.created]
