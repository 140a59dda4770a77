"""The CRD's openAPIV3Schema as a JSON Schema (draft 2020-12) that ``jsonschema`` validates.

A CRD schema is OpenAPI v3 plus Kubernetes extensions, which a JSON-schema validator would skip
as unknown keywords (and so accept anything they forbid). Each one is translated explicitly, and
an unknown keyword or extension raises, so a new one cannot be silently ignored:

- ``nullable: true``: null is allowed besides the type.
- ``x-kubernetes-int-or-string``: an integer or a string (``pattern`` binds strings only, as in
  Kubernetes).
- ``x-kubernetes-preserve-unknown-fields``: undeclared fields are kept.
- otherwise an object takes no undeclared field (``additionalProperties: false``), the root's
  ``metadata`` excepted (ObjectMeta, validated by the API server itself): the API server refuses
  such a field under strict field validation and prunes it silently otherwise, so a status field
  the operator writes but the schema lacks would vanish.
- ``x-kubernetes-list-type: set``: items unique; ``map``: items unique by their
  ``x-kubernetes-list-map-keys`` (a custom keyword, checked here).
- ``format``: int32/int64 bound integers; date-time must be RFC 3339 (the API server checks it);
  float/double say nothing more than ``type: number``.
- ``type: integer`` takes ints only, not 3.0 (stricter than JSON Schema).
- ``x-kubernetes-validations`` (CEL rules) are NOT evaluated: they are dropped here, and
  :func:`cel_rules` lists them for tests that check them by other means.
"""
from __future__ import annotations

import copy
import pathlib
import re
from collections.abc import Iterator
from typing import Any

import jsonschema
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
CRD_PATH = ROOT / "crds" / "rl.agentruntime.io_rolloutbatches.yaml"

# Keywords that mean the same in OpenAPI v3 (as Kubernetes reads it) and JSON Schema 2020-12.
_SAME = {"type", "enum", "minimum", "maximum", "minLength", "maxLength", "pattern", "minItems", "maxItems",
         "minProperties", "maxProperties", "required", "uniqueItems", "multipleOf", "description", "default",
         "title", "example"}
# Read together with x-kubernetes-list-type.
_IGNORED = {"x-kubernetes-list-map-keys"}
# RFC 3339 date-time, as Go's time.Parse(time.RFC3339) reads it.
_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
_INT_RANGE = {"int32": (-2**31, 2**31 - 1), "int64": (-2**63, 2**63 - 1)}
LIST_MAP_KEYS = "x-list-map-keys"           # our own keyword for x-kubernetes-list-type: map


def load_crd(path: pathlib.Path = CRD_PATH) -> dict:
    return yaml.safe_load(path.read_text())


def openapi_schema(crd: dict | None = None, version: str | None = None) -> dict:
    """The openAPIV3Schema of ``version`` (default: the storage version)."""
    crd = crd or load_crd()
    versions = crd["spec"]["versions"]
    (chosen,) = [v for v in versions if (v["name"] == version if version else v.get("storage"))]
    return chosen["schema"]["openAPIV3Schema"]


def to_json_schema(node: dict, path: str = "") -> dict:
    """One OpenAPI v3 schema node (and everything under it) as JSON Schema 2020-12."""
    unknown = set(node) - _SAME - _IGNORED - {
        "properties", "items", "additionalProperties", "nullable", "format", "x-kubernetes-int-or-string",
        "x-kubernetes-preserve-unknown-fields", "x-kubernetes-validations", "x-kubernetes-list-type",
        "x-kubernetes-embedded-resource"}
    if unknown:
        raise ValueError(f"{path or '<root>'}: no translation for {sorted(unknown)}")
    if node.get("x-kubernetes-embedded-resource"):
        raise ValueError(f"{path}: x-kubernetes-embedded-resource is not translated")
    out: dict[str, Any] = {k: v for k, v in node.items() if k in _SAME}
    if node.get("x-kubernetes-int-or-string"):
        if "type" in out:
            raise ValueError(f"{path}: int-or-string with a type")
        out["type"] = ["integer", "string"]
    preserve = bool(node.get("x-kubernetes-preserve-unknown-fields"))
    if "properties" in node:
        out["properties"] = {name: to_json_schema(sub, f"{path}.{name}") for name, sub in node["properties"].items()}
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = to_json_schema(node["additionalProperties"], f"{path}{{}}")
    elif node.get("additionalProperties") is not None:
        out["additionalProperties"] = node["additionalProperties"]
    elif path == ".metadata":
        pass   # the object's ObjectMeta: the API server validates it, not the CRD's schema
    elif node.get("type") == "object" and not preserve:
        out["additionalProperties"] = False   # pruned or refused by the API server
    if "items" in node:
        out["items"] = to_json_schema(node["items"], f"{path}[]")
    list_type = node.get("x-kubernetes-list-type")
    if list_type == "set":
        out["uniqueItems"] = True
    elif list_type == "map":
        out[LIST_MAP_KEYS] = list(node["x-kubernetes-list-map-keys"])
    elif list_type not in (None, "atomic"):
        raise ValueError(f"{path}: x-kubernetes-list-type {list_type!r}")
    fmt = node.get("format")
    if fmt is not None:
        if fmt not in ("int32", "int64", "date-time", "double", "float"):
            raise ValueError(f"{path}: format {fmt!r} is not translated")
        if fmt in _INT_RANGE:
            out["minimum"] = max(out.get("minimum", _INT_RANGE[fmt][0]), _INT_RANGE[fmt][0])
            out["maximum"] = min(out.get("maximum", _INT_RANGE[fmt][1]), _INT_RANGE[fmt][1])
        elif fmt == "date-time":
            out["format"] = fmt
    if node.get("nullable"):
        kind = out.get("type")
        if kind is not None:
            out["type"] = [*(kind if isinstance(kind, list) else [kind]), "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    return out


def _list_map_keys(validator, keys, instance, schema):
    if not validator.is_type(instance, "array"):
        return
    seen = set()
    for i, item in enumerate(instance):
        if not isinstance(item, dict):
            continue
        key = tuple(repr(item.get(k)) for k in keys)
        if key in seen:
            yield jsonschema.ValidationError(f"item {i}: a second item with {keys} = {[item.get(k) for k in keys]}")
        seen.add(key)


_FORMATS = jsonschema.FormatChecker(formats=())


@_FORMATS.checks("date-time")
def _is_date_time(value: object) -> bool:
    return not isinstance(value, str) or bool(_DATE_TIME.match(value))


# JSON Schema counts 3.0 as an integer; a count the operator writes as a float is a bug worth seeing.
_TYPES = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
    "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool))
Validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, {LIST_MAP_KEYS: _list_map_keys},
                                         type_checker=_TYPES)


_BUILT: dict[int, tuple[dict, Any]] = {}


def validator(node: dict) -> jsonschema.protocols.Validator:
    """A validator of values against one OpenAPI schema node (e.g. the status); built once per node."""
    built = _BUILT.get(id(node))
    if built is None or built[0] is not node:
        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **to_json_schema(node)}
        Validator.check_schema(schema)
        built = _BUILT[id(node)] = (node, Validator(schema, format_checker=_FORMATS))
    return built[1]


def errors(value: object, node: dict) -> list[str]:
    """What the schema refuses in ``value``, one line per problem (empty: valid)."""
    found = sorted(validator(node).iter_errors(value), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in found]


def cel_rules(node: dict, path: str = "") -> Iterator[tuple[str, dict]]:
    """(path, rule) of every x-kubernetes-validations rule: what this module does not evaluate."""
    for rule in node.get("x-kubernetes-validations") or ():
        yield path, rule
    for name, sub in (node.get("properties") or {}).items():
        yield from cel_rules(sub, f"{path}.{name}")
    for key, suffix in (("items", "[]"), ("additionalProperties", "{}")):
        if isinstance(node.get(key), dict):
            yield from cel_rules(node[key], f"{path}{suffix}")


def defaults(node: dict, path: str = "") -> Iterator[tuple[str, Any]]:
    """(path, value) of every ``default:`` in the schema, e.g. ('spec.image', 'python:3.12-alpine')."""
    if "default" in node:
        yield path, node["default"]
    for name, sub in (node.get("properties") or {}).items():
        yield from defaults(sub, f"{path}.{name}" if path else name)
    for key, suffix in (("items", "[]"), ("additionalProperties", "{}")):
        if isinstance(node.get(key), dict):
            yield from defaults(node[key], f"{path}{suffix}")


def apply_defaults(value: Any, node: dict) -> Any:
    """``value`` as the API server stores it: every absent field with a ``default:`` gets it (a
    copy), in objects that are present, recursively (a defaulted ``{}`` gets its fields' defaults
    in turn), as structural-schema defaulting does. The input is not changed."""
    if isinstance(value, dict):
        out = dict(value)
        for name, sub in (node.get("properties") or {}).items():
            if name not in out and "default" in sub:
                out[name] = copy.deepcopy(sub["default"])
            if name in out:
                out[name] = apply_defaults(out[name], sub)
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            for name in set(out) - set(node.get("properties") or {}):
                out[name] = apply_defaults(out[name], extra)
        return out
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        return [apply_defaults(item, node["items"]) for item in value]
    return value
