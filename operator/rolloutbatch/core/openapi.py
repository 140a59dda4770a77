"""Small constructors of OpenAPI v3 schema nodes, as a CustomResourceDefinition states them.

The RolloutBatch CRD (``core.crd``) is written with these instead of nested dict literals, so a
field reads as one call: its type, its description, then its constraints by keyword::

    integer("Episodes running at once.", minimum=1, maximum=MAX_EPISODES)
    obj("Re-runs the operator allows.", {"infrastructure": integer(...)}, default={})

Each returns a plain dict, exactly the node the API server reads (``build_crd`` nests them
unchanged), so nothing here hides a rule: what the call says is what the YAML says. Keyword
names are Python's spelling of the OpenAPI ones (``max_length`` -> ``maxLength``); a keyword left
at None is left out. Kubernetes' extensions get names of their own: ``values`` for
``additionalProperties`` (a map), ``preserve_unknown`` for
``x-kubernetes-preserve-unknown-fields``, ``rules`` for ``x-kubernetes-validations`` (CEL).

Pure and dependency-free: the SDK imports core (Python 3.10, no pydantic).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

Schema = dict[str, Any]

# Kubernetes' resource.Quantity syntax (a string form; plain integers are taken too).
QUANTITY_PATTERN = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
                    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")


def rule(cel: str, message: str) -> dict[str, str]:
    """One ``x-kubernetes-validations`` entry: a CEL expression and what the API server says when
    it is false."""
    return {"rule": cel, "message": message}


def _node(kind: str | None, description: str | None, **keys: Any) -> Schema:
    """A node of ``kind`` with the given OpenAPI keys, None values left out (the keys' order is
    the YAML's: type and description first, the children last)."""
    node: Schema = {} if kind is None else {"type": kind}
    if description is not None:
        node["description"] = description
    for key, value in keys.items():
        if value is None or value is False or (isinstance(value, (list, tuple)) and not value):
            continue
        node[key] = list(value) if isinstance(value, tuple) else value
    return node


def string(description: str | None = None, *, enum: Sequence[str] | None = None, default: str | None = None,
           min_length: int | None = None, max_length: int | None = None, pattern: str | None = None,
           format: str | None = None, rules: Sequence[dict] = ()) -> Schema:
    """A string; ``enum`` from a tuple of core.vocabulary (its first word is the default)."""
    return _node("string", description, format=format, enum=enum, default=default, minLength=min_length,
                 maxLength=max_length, pattern=pattern, **{"x-kubernetes-validations": rules})


def integer(description: str | None = None, *, minimum: int | None = None, maximum: int | None = None,
            default: int | None = None, format: str | None = None, nullable: bool = False) -> Schema:
    return _node("integer", description, format=format, default=default, minimum=minimum, maximum=maximum,
                 nullable=nullable)


def number(description: str | None = None, *, nullable: bool = False) -> Schema:
    return _node("number", description, nullable=nullable)


def boolean(description: str | None = None, *, default: bool | None = None) -> Schema:
    node = _node("boolean", description)
    if default is not None:   # False is a default worth stating (_node drops False)
        node["default"] = default
    return node


def obj(description: str | None = None, properties: Mapping[str, Schema] | None = None, *,
        required: Sequence[str] = (), default: Mapping | None = None, values: Schema | None = None,
        min_properties: int | None = None, max_properties: int | None = None, preserve_unknown: bool = False,
        rules: Sequence[dict] = ()) -> Schema:
    """An object with declared ``properties``, or a map whose values are all ``values``
    (``additionalProperties``). ``default={}`` makes the API server apply the defaults of its
    fields when the whole object is absent."""
    node = _node("object", description, minProperties=min_properties, maxProperties=max_properties,
                 required=required, **{"x-kubernetes-preserve-unknown-fields": preserve_unknown,
                                        "x-kubernetes-validations": rules, "additionalProperties": values})
    if default is not None:   # {} is a default worth stating (_node drops empty values)
        node["default"] = copy.deepcopy(dict(default))
    if properties:
        node["properties"] = dict(properties)
    return node


def array(description: str | None = None, items: Schema | None = None, *, min_items: int | None = None,
          max_items: int | None = None, list_type: str | None = None, map_keys: Sequence[str] = (),
          rules: Sequence[dict] = ()) -> Schema:
    """A list of ``items``; ``list_type`` "set" (items unique) or "map" (unique by ``map_keys``)."""
    return _node("array", description, minItems=min_items, maxItems=max_items,
                 **{"x-kubernetes-list-type": list_type, "x-kubernetes-list-map-keys": map_keys,
                    "x-kubernetes-validations": rules, "items": items})


def quantity(description: str | None = None, *, default: str | None = None) -> Schema:
    """A resource quantity (``500m``, ``1Gi``, or a plain integer), as Kubernetes reads one."""
    return _node(None, description, **{"x-kubernetes-int-or-string": True}, default=default,
                 pattern=QUANTITY_PATTERN)


def date_time(description: str | None = None) -> Schema:
    """An RFC 3339 timestamp (the API server checks the format)."""
    return string(description, format="date-time")
