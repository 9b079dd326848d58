"""Patch types the API server accepts: JSON patch, merge patch, strategic merge patch (built-ins), apply."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

import jsonpatch
import yaml

from localkube.errors import ApiError

STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"
SMP_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "conditions": "type",
    "containerStatuses": "name",
    "ownerReferences": "uid",
}
# What kube-apiserver answers a JSON patch that does not apply (a failed `test`, a missing path): a 422 with
# this generic message and no details, whatever the cause.
PATCH_NOT_APPLICABLE_MSG = "the server rejected our request due to an error in our request"
UNSUPPORTED_PATCH_MSG = (
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
)


def merge_patch(
    target: Any,
    patch: Any,
    *,
    strategic: bool = False,
    key: str = "",
    keys: Mapping[str, str] = SMP_MERGE_KEYS,
) -> Any:
    """RFC 7386 merge patch; `strategic` merges the lists of objects named in `keys` (field -> merge key,
    the built-ins' by default) by their merge key."""
    if strategic and isinstance(patch, list) and isinstance(target, list) and key in keys:
        return _merge_list(target, patch, keys[key], keys)
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = merge_patch(result.get(name), value, strategic=strategic, key=name, keys=keys)
    return result


def _merge_list(target: list, patch: list, merge_key: str, keys: Mapping[str, str]) -> list:
    merged = copy.deepcopy(target)
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            merged.append(copy.deepcopy(item))
            continue
        index = next(
            (
                i
                for i, old in enumerate(merged)
                if isinstance(old, dict) and old.get(merge_key) == item[merge_key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                merged.pop(index)
        elif index is None:
            merged.append(merge_patch(None, item, strategic=True, keys=keys))
        else:
            merged[index] = merge_patch(merged[index], item, strategic=True, keys=keys)
    return merged


def apply_patch(current: dict, patch: Any, media: str) -> dict:
    """The object `patch` (parsed, of media type `media`) makes of `current`; ApiError 400/415/422."""
    if media == "application/json-patch+json":
        if not isinstance(patch, list):
            raise ApiError.bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
        try:
            result = jsonpatch.apply_patch(current, patch)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            raise ApiError(422, "Invalid", PATCH_NOT_APPLICABLE_MSG, {}) from exc
        if not isinstance(result, dict):
            raise ApiError(422, "Invalid", "the patch replaced the whole object with a non-object")
        return result
    if not isinstance(patch, dict):  # what the real server answers a JSON array sent as a merge patch
        raise ApiError.bad_request("Invalid JSON Patch")
    if media in ("application/merge-patch+json", "application/apply-patch+yaml"):
        return merge_patch(current, patch)
    if media == "application/strategic-merge-patch+json":
        return merge_patch(current, patch, strategic=True)
    raise ApiError(415, "UnsupportedMediaType", UNSUPPORTED_PATCH_MSG)


def parse_patch_body(body: Any, media: str) -> Any:
    if not isinstance(body, bytes | str):
        return body
    if media == "application/apply-patch+yaml":
        try:
            return yaml.safe_load(body)
        except yaml.YAMLError as exc:
            raise ApiError.bad_request(f"error decoding patch: {exc}") from exc
    try:
        return json.loads(body)
    except ValueError as exc:  # kube-apiserver's words for any body that is not JSON
        raise ApiError.bad_request("invalid JSON patch") from exc
