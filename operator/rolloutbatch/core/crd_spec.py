"""RolloutBatch.spec as the CRD states it: every field's type, description, default, bounds,
patterns and CEL rules, written once (``core.crd`` builds the whole CRD from this and from
``core.crd_status``).

What each field means is said here, in its description (``kubectl explain rolloutbatch.spec``
prints it). The numbers come from ``core.defaults`` and the words from ``core.vocabulary``, which
``core.spec.parse_spec`` reads too: the operator's own reading of a spec applies the same defaults
and bounds to an object the API server never defaulted (one stored before a CRD upgrade), and
adds the checks a schema cannot make. ``SPEC_FIELDS`` (the fields parse_spec accepts) is this
schema's list of properties, ``SPEC_OBJECT_FIELDS`` those of each of the spec's objects.

The schema carries every rule a person can break at ``kubectl apply``, so a bad spec is refused
there with a readable message instead of failing later inside the operator. Field order is the
YAML's, and the order of the immutability rule's clauses.
"""

from __future__ import annotations

from rolloutbatch.core import crd_sandbox
from rolloutbatch.core import defaults as d
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.crd_sandbox import listing
from rolloutbatch.core.naming import (EPISODE_ENV_OPT_IN, INPUTS_MOUNT_PATH, INPUTS_OPT_IN, LABEL_EPISODE_ENV,
                                      LABEL_INPUTS)
from rolloutbatch.core.openapi import Schema, array, boolean, integer, obj, quantity, rule, string

# The one field of the spec a user may change after creation, and only to true: stopping is
# one-way (docs/design.md §5.14).
STOP_FIELD = "stop"
MOUNT_PATH_PATTERN = "^/[^:]*$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
ENV_NAME_PATTERN = "^[-._a-zA-Z][-._a-zA-Z0-9]*$"
SECRET_KEY_PATTERN = r"^(\.[-_a-zA-Z0-9][-._a-zA-Z0-9]*|[-_a-zA-Z0-9][-._a-zA-Z0-9]*)$"
_SECRET_REF = (
    f"Instead of value: a key of a Secret of the batch's own namespace, which must be labelled "
    f"{LABEL_EPISODE_ENV}={EPISODE_ENV_OPT_IN} by whoever may write it (otherwise the batch stalls with "
    f"{v.STALL_SECRET_MISSING} before anything is created). The operator copies only the referenced keys into "
    "a Secret of its own beside the Job, deleted with the sandbox; the value reaches only the container whose "
    "env names it. secretKeyRef is the only kind (no fieldRef, resourceFieldRef, configMapKeyRef, nor "
    "optional).")
_CONFIG_KIB = d.MAX_CONFIG_BYTES // 1024


def _env(description: str, name_description: str, rules: list[dict]) -> Schema:
    """spec.env and spec.verifier.env: name/value pairs or a Secret key (valueFrom.secretKeyRef only)."""
    entry = obj(properties={
        "name": string(name_description, min_length=1, max_length=d.MAX_ENV_NAME_LENGTH, pattern=ENV_NAME_PATTERN),
        "value": string("Its value (default the empty string).", max_length=d.MAX_ENV_VALUE_LENGTH),
        "valueFrom": obj(_SECRET_REF, {
            "secretKeyRef": obj("The Secret (in the batch's namespace) and its key.", {
                "name": string("Secret name (a lowercase DNS subdomain).", min_length=1, max_length=253,
                               pattern=DNS_SUBDOMAIN_PATTERN),
                "key": string("The key (letters, digits, '-', '_', '.'; not '.' or '..' nor starting with '..').",
                              min_length=1, max_length=253, pattern=SECRET_KEY_PATTERN),
            }, required=["name", "key"]),
        }, required=["secretKeyRef"]),
    }, required=["name"], rules=[rule("!(has(self.value) && has(self.valueFrom))",
                                      "an env entry sets value or valueFrom, not both")])
    return array(description, entry, max_items=d.MAX_ENV_ITEMS, rules=rules)


def _resources(description: str, requests: str, limits: str, default: dict | None = None) -> Schema:
    return obj(description, {
        "requests": obj(requests, values=quantity()),
        "limits": obj(limits, values=quantity()),
    }, default=default)


def _strings(description: str, max_items: int) -> Schema:
    return array(description, string(max_length=d.MAX_ARG_LENGTH), max_items=max_items)


def _image(description: str, default: str | None = None) -> Schema:
    return string(description, min_length=1, max_length=d.MAX_IMAGE_LENGTH, default=default)


def _mount_path(description: str, default: str | None = None) -> Schema:
    return string(description, default=default, pattern=MOUNT_PATH_PATTERN, max_length=d.MAX_PATH_LENGTH)


_RESERVED = d.RESERVED_ENV


def _reserved_env_rules(field: str) -> list[dict]:
    """The CEL rule refusing the reserved env names, as parse_spec refuses them in each env list."""
    return [rule(f"self.all(e, !(e.name in [{', '.join(repr(n) for n in _RESERVED)}]))",
                 f"{field} must not set {listing(_RESERVED, 'or')}: the operator sets them")]


_EP_MAX = d.MAX_EPISODE_TIMEOUT_SECONDS


def _verifier() -> Schema:
    return obj(
        ("A separate grading phase in every episode pod. The agent (command, task.files) runs first, as an "
         "init container, stopped at episodeTimeoutSeconds; every process it left is killed; then the verifier "
         "runs, whatever the agent's exit code, with the shared workspace and its own files, which the agent "
         "never sees. The agent's ready event marks readiness; only the verifier's reward event counts (a reward "
         f"from the agent is ignored and flagged {v.FLAG_AGENT_REWARD_IGNORED}). A crashed agent is a graded "
         "attempt; so is a verifier that fails once started, since it had the agent's work in front of it "
         f"(reason {v.EP_VERIFIER_FAILED}, outcome {v.OUTCOME_FAILED}, reward 0); a verifier never started is "
         f"lost ({v.EP_VERIFIER_NOT_STARTED}). Both images need /bin/sh. With spec.poolRef the pool's pods run "
         "both phases (its spec.verifier: the verifier's image and resources are the pool's), the verifier "
         "handed this phase once the agent's container ended. Default: none (one container whose own events "
         "count)."), {
            "image": _image("Image of the verifier container. Default spec.image."),
            "command": _strings("Verifier entrypoint. Default "
                                f"[python, -B, <verifier.mountPath>/{d.VERIFIER_SCRIPT}].", d.MAX_COMMAND_ITEMS),
            "args": _strings("Arguments to the verifier's command. Default none.", d.MAX_ARGS_ITEMS),
            "env": _env(
                ("Environment of the verifier only (name/value pairs or Secret keys, as spec.env; a Secret key of "
                 "spec.env never reaches the verifier, one named here only the verifier); it also gets "
                 f"{listing(_RESERVED, 'and')}."),
                "Variable name.", rules=_reserved_env_rules("spec.verifier.env")),
            "files": obj(
                ("File name -> content of the verifier's own files (its tests, reference solution), in a second "
                 f"ConfigMap mounted read-only into the verifier container only, at most {_CONFIG_KIB} KiB. "
                 "Default none."),
                values=string(), max_properties=d.MAX_FILES),
            "mountPath": _mount_path(
                "Where the verifier's files appear in the verifier container, not overlapping the task, "
                f"workspace or inputs. Default {d.VERIFIER_MOUNT_PATH}."),
            "resources": _resources("Compute resources of the verifier container. Default spec.resources; {} is none.",
                                    "Resource name -> quantity reserved for the verifier.",
                                    "Resource name -> quantity the verifier may use at most."),
            "timeoutSeconds": integer(
                (f"Seconds the verifier may run after the agent, 1..{_EP_MAX}, counted from the verifier's "
                 f"start (its launcher stops it, exit code {v.VERIFIER_TIMEOUT_EXIT}); the pod's deadline, "
                 "episodeTimeoutSeconds + timeoutSeconds (+5), is the outer bound, and the two together must not "
                 f"exceed activeDeadlineSeconds. Past it the episode is {v.EP_VERIFIER_FAILED}. Default "
                 f"{d.VERIFIER_TIMEOUT_SECONDS}."),
                minimum=1, maximum=_EP_MAX),
        })


def _properties() -> dict[str, Schema]:
    """The spec's fields, in the order of the immutability rule's clauses."""
    max_episodes, k_max = d.MAX_EPISODES, d.MAX_SAMPLES_PER_INPUT
    requests, limits = d.RESOURCES["requests"], d.RESOURCES["limits"]
    return {
        "episodes": integer(
            (f"Number of episodes, 1..{max_episodes} (required). Each is one pod of an Indexed Job with its own "
             "completion index 0..episodes-1 ($EPISODE_INDEX)."),
            minimum=1, maximum=max_episodes),
        "parallelism": integer("Episodes running at once, 1..episodes. Default: episodes (all at once).",
                               minimum=1, maximum=max_episodes),
        "runtimeClassName": string(
            ("RuntimeClass of the sandbox pods (e.g. cube). Default: none (the cluster's default runtime). It "
             f"must exist, else the batch stalls with reason {v.STALL_RUNTIME_CLASS} before anything is "
             "created."),
            max_length=253, pattern="^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"),
        "queueName": string(
            ("Kueue LocalQueue of the batch's namespace the batch waits in (phase Queued) until Kueue admits it. "
             "Default: the namespace's LocalQueue named default when there is one, else none (the batch starts at "
             f"once). A name with no such LocalQueue stalls the batch with reason {v.STALL_QUEUE_NOT_FOUND} before "
             "anything is created."),
            max_length=63, pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),
        "image": _image(
            (f"Container image of every episode (at most {d.MAX_IMAGE_LENGTH} characters), unless inputImages "
             f"names another for its input. Default {d.IMAGE}."),
            default=d.IMAGE),
        "command": _strings(
            (f"Episode entrypoint (at most {d.MAX_COMMAND_ITEMS} strings). Default: "
             f"[python, -B, <task.mountPath>/{d.EPISODE_SCRIPT}]."),
            d.MAX_COMMAND_ITEMS),
        "args": _strings(f"Arguments to command (at most {d.MAX_ARGS_ITEMS} strings). Default none.",
                         d.MAX_ARGS_ITEMS),
        "env": _env(
            ("Environment of the episode container (the agent's, with a verifier): at most "
             f"{d.MAX_ENV_ITEMS} entries, each a plain name/value pair or a Secret key (valueFrom.secretKeyRef, "
             f"the only valueFrom kind). {listing(_RESERVED, 'and')} are reserved: the operator sets them."),
            "Variable name (letters, digits, '-', '_', '.'; not starting with a digit).",
            rules=_reserved_env_rules("spec.env")),
        "task": obj("The episode program, shipped in a ConfigMap and mounted read-only (required).", {
            "mountPath": _mount_path(
                ("Where the task files appear: an absolute path without ':', not overlapping workspace.mountPath "
                 f"or {INPUTS_MOUNT_PATH}. Default {d.TASK_MOUNT_PATH}."),
                default=d.TASK_MOUNT_PATH),
            # Key syntax (a ConfigMap key) is checked by parse_spec: a CEL rule over map keys has
            # no length bound, so its estimated cost exceeds the budget.
            "files": obj(
                (f"File name -> content (text), 1..{d.MAX_FILES} files. Names are ConfigMap keys: letters, "
                 "digits, '-', '_', '.', not '.' or '..'. Task files and inputs together take at most "
                 f"{_CONFIG_KIB} KiB."),
                values=string(), min_properties=1, max_properties=d.MAX_FILES),
        }, required=["files"]),
        "inputs": array(
            ("Optional per-group JSON objects: none, or exactly episodes / samplesPerInput (one per group; with "
             f"the default samplesPerInput {d.SAMPLES_PER_INPUT}, one per episode). Episode i reads input i / "
             f"samplesPerInput from the file named by $EPISODE_INPUT (under {INPUTS_MOUNT_PATH}). Objects (not "
             "bare values) so that the schema can count them in a CEL rule. Task files and inline inputs "
             f"together take at most {_CONFIG_KIB} KiB; past that use inputsFrom."),
            obj(preserve_unknown=True), max_items=max_episodes),
        "samplesPerInput": integer(
            (f"Samples per input (GRPO's group size k), 1..{k_max}, dividing episodes. Default "
             f"{d.SAMPLES_PER_INPUT}. With k > 1 the image needs a POSIX shell at /bin/sh (a launcher computes "
             "the group and sample), and command/args/env cannot reference $(EPISODE_GROUP), $(EPISODE_SAMPLE) "
             "or $(EPISODE_INPUT): read them from the environment. Episode i works on input i / k "
             "($EPISODE_GROUP) as sample i % k ($EPISODE_SAMPLE); the k episodes of one input form a group, and "
             "the results carry per-group statistics over the valid rewards (succeeded episodes with their "
             "reward, failed ones with 0.0; lost ones are left out)."),
            minimum=1, maximum=k_max, default=d.SAMPLES_PER_INPUT),
        "inputsFrom": obj(
            ("Inputs by reference, for inputs too big for this object: ConfigMaps of the batch's namespace "
             "holding between them the keys input-0.json .. input-<count-1>.json (each a JSON object, each "
             f"ConfigMap at most 1 MiB). Each must carry the label {LABEL_INPUTS}={INPUTS_OPT_IN}, set by "
             "whoever may write it: the operator reads no other ConfigMap for a batch (one without it stalls "
             f"the batch with {v.STALL_INPUTS_MISSING}, and nothing of it is shown). The operator checks and "
             "copies them into the sandbox before anything starts (a missing, unlabelled or malformed one "
             "stalls the batch); exclusive with inputs. The SDK creates them by itself for large input lists, "
             "labelled, and makes them owned by the batch, so they are deleted with it."),
            {
                "configMaps": array(
                    f"Names of the ConfigMaps (1..{d.MAX_INPUT_CONFIGMAPS}, in the batch's namespace, each "
                    "named once).",
                    string(min_length=1, max_length=253), min_items=1, max_items=d.MAX_INPUT_CONFIGMAPS,
                    list_type="set"),
                "count": integer(
                    "Number of inputs across the ConfigMaps (required): episodes = count x samplesPerInput.",
                    minimum=1, maximum=max_episodes),
            }, required=["configMaps", "count"]),
        "workspace": obj("The episode's writable scratch directory (an emptyDir).", {
            "mountPath": _mount_path(
                f"Where it is mounted (absolute, without ':'). Default {d.WORKSPACE_MOUNT_PATH}.",
                default=d.WORKSPACE_MOUNT_PATH),
            "sizeLimit": quantity(f"Its size limit, a quantity (e.g. 512Mi). Default {d.WORKSPACE_SIZE_LIMIT}.",
                                  default=d.WORKSPACE_SIZE_LIMIT),
        }, default={}),
        "resources": _resources(
            ("Compute resources of each episode container (requests and limits only). Default requests cpu "
             f"{requests['cpu']}, memory {requests['memory']}; limits cpu {limits['cpu']}, memory "
             f"{limits['memory']}; {{}} is none (no requests, no limits). A Dedicated sandbox's ResourceQuota is "
             "sized from these and parallelism."),
            "Resource name -> quantity the scheduler reserves per episode.",
            "Resource name -> quantity an episode may use at most.", default=d.RESOURCES),
        "episodeTimeoutSeconds": integer(
            (f"Seconds one episode pod may run, 1..{_EP_MAX}, at most activeDeadlineSeconds. Default "
             f"{d.EPISODE_TIMEOUT_SECONDS}. An episode past it fails with reason {v.EP_TIMEOUT}."),
            minimum=1, maximum=_EP_MAX, default=d.EPISODE_TIMEOUT_SECONDS),
        "activeDeadlineSeconds": integer(
            ("Seconds the whole batch may run (the Job's activeDeadlineSeconds), "
             f"1..{d.MAX_ACTIVE_DEADLINE_SECONDS}. Default {d.ACTIVE_DEADLINE_SECONDS}. Episodes not finished "
             "by then fail."),
            minimum=1, maximum=d.MAX_ACTIVE_DEADLINE_SECONDS, default=d.ACTIVE_DEADLINE_SECONDS),
        "minSuccessfulEpisodes": integer(
            "Episodes that must succeed for the batch to succeed, 0..episodes. Default: episodes (all or nothing).",
            minimum=0, maximum=max_episodes),
        "retries": crd_sandbox.retries(),
        "isolation": crd_sandbox.isolation(),
        "cleanup": crd_sandbox.cleanup(),
        "podTemplate": crd_sandbox.pod_template(),
        "verifier": _verifier(),
        "inputImages": array(
            ("Optional: the image of each input's episodes, one entry per input (group) in the order of inputs "
             '(or of input-<g>.json in inputsFrom); "" keeps image. Episode i runs inputImages[i / '
             "samplesPerInput], and so does its verifier unless verifier.image is set. Still one Job: each pod "
             "is created with a scheduling gate, and the operator sets its image and lifts the gate before it "
             f"is scheduled. At most {d.MAX_INPUT_IMAGES_BYTES // 1024} KiB in all (the list stays in this "
             "object)."),
            string(max_length=d.MAX_IMAGE_LENGTH), max_items=max_episodes),
        "poolRef": obj(
            ("A RolloutPool of the batch's namespace whose warm pods run the episodes (docs/design.md §5.17): "
             "each episode is handed to a ready pod of the pool (a hit), or to a cold pod of the pool's template "
             "when none is ready (a miss). The sandbox is then the pool's: its image, runtimeClassName, "
             "resources, task, workspace, network and podTemplate. Exclusive with task, runtimeClassName, "
             "podTemplate, inputImages, queueName, isolation.egress, verifier.image, verifier.resources and Secret "
             "env values; a verifier needs a pool with spec.verifier. "
             f"A missing pool stalls the batch with reason {v.STALL_POOL_NOT_FOUND} (with whenEmpty "
             f"{v.POOL_WAIT} it is waited for), an image other than the pool's with {v.STALL_POOL_CONFLICT}, "
             "before anything is claimed."),
            {"name": string("The RolloutPool's name.", min_length=1, max_length=253),
             "whenEmpty": string(
                 (f"When the pool has fewer warm pods than the batch's first wave (min(parallelism, episodes)): "
                  f"{v.POOL_COLD} (default) starts the missing ones cold at once; {v.POOL_WAIT} waits, in phase "
                  f"{v.PROVISIONING} with reason {v.REASON_WAITING_FOR_POOL} and the count in its message, until "
                  "the pool has them all, then claims them (a pool not created yet is waited for too; one whose "
                  f"maxSize is below the first wave stalls the batch with {v.STALL_POOL_CONFLICT}). An episode past "
                  "the first wave claims a warm pod as the Job starts it; with none ready, "
                  f"{v.POOL_COLD} starts it cold and {v.POOL_WAIT} keeps it waiting for the pool's refill (phase "
                  f"{v.RUNNING}, reason {v.REASON_WAITING_FOR_POOL}) while the pool can give it one: a pool "
                  "deleted, stalled, resized to 0 or changed since the batch started lets it start cold."),
                 enum=list(v.POOL_WHEN_EMPTY), default=v.POOL_COLD)},
            required=["name"]),
        STOP_FIELD: boolean(
            ("Set to true to stop a running batch early (kubectl patch --type=merge -p "
             f"""'{{"spec":{{"{STOP_FIELD}":true}}}}', rolloutbatch stop NAME): no new episode starts, running """
             f"ones get their grace period (SIGTERM, then 5 s) and the batch ends in phase {v.STOPPED} "
             f"(Finished=True, Stalled=True, reason {v.REASON_STOPPED}) with every finished row kept; episodes "
             f"cut off are outcome {v.OUTCOME_STOPPED}, reason {v.EP_BATCH_STOPPED}. The only field that may "
             "change after creation, and only to true: a stop is one-way. Default: absent (false).")),
    }


def _unchanged(field: str) -> str:
    # As it was, a field absent before staying absent: a transition rule per field runs only
    # where both values exist, so it would not see a field added where there was none.
    return f"(has(self.{field}) ? has(oldSelf.{field}) && self.{field} == oldSelf.{field} : !has(oldSelf.{field}))"


def _per_group(count: str) -> str:
    return f"{count} * (has(self.samplesPerInput) ? self.samplesPerInput : 1) == self.episodes"


def _rules(fields: list[str]) -> list[dict]:
    """The spec's own rules: the update rules (immutability, the one-way stop), then the relations
    between fields that one field's schema cannot state."""
    stop = STOP_FIELD
    return [
        rule(" && ".join(_unchanged(f) for f in fields if f != stop),
             f"spec is immutable (only spec.{stop} may change, to true)"),
        rule(f"!has(oldSelf.{stop}) || !oldSelf.{stop} || (has(self.{stop}) && self.{stop})",
             f"spec.{stop} cannot be undone: a stopped batch stays stopped (create a new batch to run again)"),
        rule("has(self.task) || has(self.poolRef)",
             "spec.task is required, unless spec.poolRef names a pool (whose task the episodes run)"),
        rule("!has(self.task) || !has(self.poolRef)",
             "spec.task and spec.poolRef are exclusive: a batch on a pool runs the pool's task (leave spec.task out)"),
        # podTemplate has a default ({}), so only parse_spec can refuse a set one (PoolConflict stall)
        rule("!has(self.poolRef) || (!has(self.runtimeClassName) && !has(self.inputImages) "
             "&& !has(self.queueName) "
             "&& (!has(self.verifier) || (!has(self.verifier.image) && !has(self.verifier.resources))))",
             "with spec.poolRef the sandbox is the pool's: runtimeClassName, inputImages, queueName, "
             "verifier.image and verifier.resources are refused"),
        rule("!has(self.parallelism) || self.parallelism <= self.episodes",
             "spec.parallelism must be less than or equal to spec.episodes"),
        rule("!has(self.minSuccessfulEpisodes) || self.minSuccessfulEpisodes <= self.episodes",
             "spec.minSuccessfulEpisodes must be less than or equal to spec.episodes"),
        rule(f"!has(self.inputs) || size(self.inputs) == 0 || {_per_group('size(self.inputs)')}",
             "spec.inputs must be empty or have exactly spec.episodes / spec.samplesPerInput entries (one per "
             "group)"),
        rule(f"!has(self.inputImages) || size(self.inputImages) == 0 || {_per_group('size(self.inputImages)')}",
             "spec.inputImages must be empty or have exactly spec.episodes / spec.samplesPerInput entries (one "
             "per input)"),
        rule("!has(self.samplesPerInput) || self.episodes % self.samplesPerInput == 0",
             "spec.samplesPerInput must divide spec.episodes: every group has the same number of samples"),
        rule("!has(self.inputsFrom) || !has(self.inputs) || size(self.inputs) == 0",
             "give inputs inline (spec.inputs) or by reference (spec.inputsFrom), not both"),
        rule(f"!has(self.inputsFrom) || {_per_group('self.inputsFrom.count')}",
             "spec.inputsFrom.count x spec.samplesPerInput must equal spec.episodes"),
        rule("!has(self.episodeTimeoutSeconds) || !has(self.activeDeadlineSeconds) || "
             "self.episodeTimeoutSeconds <= self.activeDeadlineSeconds",
             "spec.episodeTimeoutSeconds must not exceed spec.activeDeadlineSeconds"),
    ]


def spec_schema() -> Schema:
    """The openAPIV3Schema node of RolloutBatch.spec."""
    properties = _properties()
    return obj(
        ("One experiment: what each episode runs, how many, how isolated and how the batch is judged. The spec "
         f"is immutable after creation but for {STOP_FIELD}, which may only be set to true; to rerun, create a "
         "new object (a new name, or metadata.generateName). Unknown fields are refused by clients that ask for "
         "strict field validation (kubectl, the rolloutbatch CLI and SDK)."),
        properties, required=["episodes"], rules=_rules(list(properties)))


# The top-level fields of RolloutBatch.spec, and those of each of its objects: parse_spec refuses
# any other, as the API's strict field validation does (and a stored object holds no other: the
# structural schema prunes them).
SPEC_FIELDS = frozenset(_properties())
SPEC_OBJECT_FIELDS = {name: frozenset(node["properties"]) for name, node in _properties().items()
                      if node.get("type") == "object" and node.get("properties")}
