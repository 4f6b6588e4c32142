"""The `--label KEY=VALUE` flags of `fleet bootstrap-region` and `fleet bootstrap-project` (pure).

Every resource of a stack carries its spec's labels.  The policy pack (`fleet policy check`, and `policies/` under
`pulumi up`) refuses a billable resource without the labels `fleet.policy.rules.DEFAULT_SETTINGS.required_labels`
names (team, cost-center): a stack file written without them is written, with a warning that names the flags.
"""

from __future__ import annotations

from fleet.bootstrap.errors import BadArgument
from fleet.policy.rules import DEFAULT_SETTINGS
from fleet.spec.rules import GENERATED_LABELS, LABEL_KEY, LABEL_VALUE

STACK_LABEL = "gpu-fleet-stack"  # the label bootstrap-region gives every stack it writes (its name)


def parse_label(text: str) -> tuple[str, str]:
    """`KEY=VALUE` of `--label`."""
    key, sep, value = text.partition("=")
    if not sep:
        raise BadArgument("--label", f"{text!r}: give KEY=VALUE, e.g. team=ml-platform")
    return key, value


def check_labels(labels: tuple[tuple[str, str], ...]) -> None:
    """GCE's label syntax, each key once, none of the keys gpu-fleet sets itself."""
    keys = [key for key, _ in labels]
    for key, value in labels:
        if not LABEL_KEY.fullmatch(key):
            raise BadArgument("--label", f"key {key!r}: a lower-case letter first; a-z, 0-9, _ and -; <= 63 chars")
        if key in (*GENERATED_LABELS, STACK_LABEL):
            raise BadArgument("--label", f"key {key!r}: gpu-fleet sets it itself; choose another key")
        if not LABEL_VALUE.fullmatch(value):
            raise BadArgument("--label", f"{key}={value!r}: a value is a-z, 0-9, _ and -, <= 63 chars")
        if keys.count(key) > 1:
            raise BadArgument("--label", f"key {key!r} given {keys.count(key)} times")


def label_warnings(labels: dict[str, str]) -> list[str]:
    """The policy pack's required labels `labels` leaves out: `pulumi up` with the pack, and `fleet policy check`,
    refuse every billable resource without them."""
    missing = [key for key in DEFAULT_SETTINGS.required_labels if not labels.get(key)]
    if not missing:
        return []
    flags = " ".join(f"--label {key}=<value>" for key in missing)
    return [
        f"no {', '.join(missing)} label: the policy pack (`fleet policy check`, policies/) refuses billable resources "
        f"without it; pass {flags}, or add it under `labels` in the file"
    ]
