"""The planner policy as it appears in files (`policy:` of the daemon config and of a spec's autoscaler).

The schema is derived from `autoscaler.model.Policy`'s own fields, so a field added there is checked here
with no second list to keep in step: strict numbers (no "600" or true for a number, no NaN), sets and
mappings given as lists / mappings of names, nothing nested where a name belongs.  `PolicyMapping` is the
field type: it checks the mapping and keeps it as given (the Policy is built from it later).
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict, create_model

from fleet.input.types import STRICT

QueueName = Annotated[str, Strict(), Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9._/-]+$")]
_FIELD_LIMIT = 1e12  # no policy number is meaningfully larger (seconds, $/h, node counts)


def _file_type(tp: Any) -> Any:
    """The type a Policy field takes in a file: frozenset[str] -> list of names, Mapping -> dict, numbers bounded."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        return typing.Union[tuple(_file_type(a) for a in args)]  # noqa: UP007 - built at run time
    if origin in (frozenset, set, list, tuple) and args and args[0] is str:
        return list[QueueName]
    if origin in (Mapping, dict) or (origin is not None and issubclass(origin, Mapping)):
        return dict[QueueName, _file_type(args[1])]
    if tp is int:
        return Annotated[int, Field(ge=-_FIELD_LIMIT, le=_FIELD_LIMIT)]
    if tp is float:
        return Annotated[float, Field(ge=-_FIELD_LIMIT, le=_FIELD_LIMIT)]
    return tp


@functools.cache
def policy_model() -> type[BaseModel]:
    from autoscaler.model.policy import Policy  # pure dataclass; no daemon or cloud imports

    hints = typing.get_type_hints(Policy)
    fields: dict[str, Any] = {f.name: (_file_type(hints[f.name]), None) for f in dataclasses.fields(Policy)}
    return create_model("PolicyFields", __config__=ConfigDict(**STRICT, extra="forbid", frozen=True), **fields)


def _check(value: dict[str, Any]) -> dict[str, Any]:
    policy_model().model_validate(value)  # errors keep their location under the policy field
    return value


PolicyMapping = Annotated[dict[str, Any], AfterValidator(_check)]
