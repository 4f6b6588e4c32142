"""Constrained types for values that reach the cloud, slurm.conf or a shell script, and strict numbers.

Models that use these set `model_config = ConfigDict(strict=True, allow_inf_nan=False)` (see `STRICT`):
no string or boolean is coerced to a number, no float to an int, no NaN or infinity.  Fields whose type
needs a conversion from YAML text (enums, CIDRs, paths) use the lax wrappers here, which accept a string
(or an instance) and nothing else.

Each string type refuses with a reason that says what the value must look like; the character sets are the
ones the consumer accepts (GCE's RFC 1035 names, GCE label syntax, slurm.conf words, git refs ...), so a
newline, a shell metacharacter or a leading '-' never gets through.
"""

from __future__ import annotations

import re
from ipaddress import IPv4Network
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, Strict

from fleet.input import limits

STRICT = ConfigDict(strict=True, allow_inf_nan=False)


def _checker(pattern: str, what: str, max_len: int) -> Any:
    rx = re.compile(pattern)

    def check(value: str) -> str:
        if len(value) > max_len:
            raise ValueError(f"{what}: at most {max_len} characters, got {len(value):,}")
        if not rx.fullmatch(value):
            raise ValueError(f"{what}, got {value!r}")
        return value

    return AfterValidator(check)


def text(pattern: str, what: str, max_len: int = limits.MAX_NAME_CHARS) -> Any:
    """A strict string fully matching `pattern` (at most `max_len` characters); `what` describes it."""
    return Annotated[str, Strict(), _checker(pattern, what, max_len)]


_NAME = r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?"
_PROJECT = r"([a-z][-a-z0-9.]*:)?[a-z][-a-z0-9]{4,28}[a-z0-9]"

GceName = text(_NAME, "must be a GCE resource name (RFC 1035: a-z, 0-9, '-'; starts with a letter; <= 63 chars)")
Zone = text(r"[a-z]+-[a-z]+[0-9]+-[a-z]", "must be a GCE zone such as us-central1-a", 32)
Region = text(r"[a-z]+-[a-z]+[0-9]+", "must be a GCE region such as us-central1", 32)
# GCE types are `a-z 0-9 -`; Cluster API providers also use '.', '_' and capitals (p5.48xlarge, Standard_ND96asr_v4).
# The catalog rule checks GCE types by name; this keeps white space and shell characters out of every kind.
MachineType = text(
    r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?",
    "must be a machine type such as a3-megagpu-8g (letters, digits, '.', '_', '-')",
)
Image = text(
    rf"(https://www\.googleapis\.com/compute/(v1|beta)/)?(projects/{_PROJECT}/global/images/)?(family/)?{_NAME}",
    "must be a GCE image or image family: [projects/PROJECT/global/images/][family/]NAME",
    512,
)
Reservation = text(
    rf"(projects/{_PROJECT}/reservations/)?{_NAME}(/reservationBlocks/{_NAME})?",
    "must be a GCE reservation name (or projects/PROJECT/reservations/NAME for a shared one)",
    256,
)
LabelKey = text(r"[a-z][a-z0-9_-]{0,62}", "must be a GCE label key (1-63 of a-z, 0-9, '_', '-'; starts with a letter)")
LabelValue = text(r"[a-z0-9_-]{0,63}", "must be a GCE label value (0-63 of a-z, 0-9, '_', '-')")
Labels = Annotated[dict[LabelKey, LabelValue], Field(max_length=limits.MAX_LABELS)]
GcsLocation = text(r"[A-Za-z][A-Za-z0-9-]{0,30}[A-Za-z0-9]", "must be a GCS location such as US or us-central1", 32)
ShareName = text(
    r"[a-z][a-z0-9_]{0,62}", "must be a Filestore share name (a-z, 0-9, '_'; starts with a letter; <= 63 chars)"
)


def _no_dot_segments(value: str) -> str:
    if any(seg in (".", "..") for seg in value.split("/")):
        raise ValueError(f"must not contain '.' or '..' segments, got {value!r}")
    return value


MountPoint = Annotated[
    str,
    Strict(),
    _checker(r"(/[A-Za-z0-9._-]+)+", "must be an absolute path of letters, digits, '.', '_', '-' (no spaces)", 255),
    AfterValidator(_no_dot_segments),
]
# slurm.conf: `Key=Value` lines; a newline, '#', a quote or white space in a value changes the file's meaning.
SlurmKey = text(r"[A-Za-z][A-Za-z0-9]{0,63}", "must be a slurm.conf key (letters and digits)")
SlurmValue = text(
    r"[A-Za-z0-9_.,:/=+@%*()-]+",
    "must be a slurm.conf value: letters, digits and _ . , : / = + @ % * ( ) - (no white space, '#', quotes, '$')",
    1024,
)
SlurmTime = text(
    r"INFINITE|UNLIMITED|\d{1,7}|\d{1,7}:\d{1,2}(:\d{1,2})?|\d{1,5}-\d{1,2}(:\d{1,2}(:\d{1,2})?)?",
    "must be a Slurm time: INFINITE, MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS",
    32,
)
# git: a URL the controller clones (never an option: no leading '-'), a ref that `git check-ref-format` takes.
GitUrl = text(
    r"(https|ssh|git|file)://[A-Za-z0-9._~:/@%+=-]+|git@[A-Za-z0-9.-]+:[A-Za-z0-9._~/%+-]+",
    "must be a git URL (https://, ssh://, git://, file:// or git@HOST:PATH) without spaces or shell characters",
    2048,
)


def _git_ref(value: str) -> str:
    bad = (
        value.startswith(("-", "/", "."))
        or value.endswith(("/", ".", ".lock"))
        or ".." in value
        or "//" in value
        or "/." in value
    )
    if bad:
        raise ValueError(f"not a git branch, tag or commit (git check-ref-format refuses it), got {value!r}")
    return value


GitRef = Annotated[
    str,
    Strict(),
    _checker(r"[A-Za-z0-9._/-]+", "must be a git branch, tag or commit (A-Z, a-z, 0-9, '.', '_', '/', '-')", 255),
    AfterValidator(_git_ref),
]


def _str_or(kind: type) -> Any:
    def check(value: Any) -> Any:
        if isinstance(value, (kind, str)):
            return value
        raise ValueError(f"must be a string, got {type(value).__name__}")

    return BeforeValidator(check)


Cidr = Annotated[IPv4Network, Strict(False), _str_or(IPv4Network)]
FilePath = Annotated[Path, Strict(False), _str_or(Path)]


def lax_enum(enum: type) -> Any:
    """An enum field that takes its value's string (YAML has no enums)."""
    return Annotated[enum, Strict(False), _str_or(enum)]


NodeCount = Annotated[int, Field(ge=0, le=limits.MAX_NODES_PER_POOL)]
