"""Cloud Storage bucket locations the repo knows by name, and the check of a bucket's `location` against them.

A bucket location is a region, a predefined dual-region or a multi-region (Cloud Storage "Bucket locations"; a
configurable dual-region is a multi-region location plus a placement, which the stacks do not set).  Regions are
the ones the machine catalog and the region table name (`fleet.bootstrap.regions.known_regions`); names are
case-insensitive, as Cloud Storage's are.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

#: multi-regions and the region prefixes they cover
BUCKET_MULTI_REGIONS = {"US": ("us-",), "EU": ("europe-",), "ASIA": ("asia-",)}
#: predefined dual-regions and their two regions
BUCKET_DUAL_REGIONS = {
    "NAM4": ("us-central1", "us-east1"),
    "EUR4": ("europe-north1", "europe-west4"),
    "EUR5": ("europe-west1", "europe-west2"),
    "EUR7": ("europe-west2", "europe-west3"),
    "EUR8": ("europe-west3", "europe-west6"),
    "ASIA1": ("asia-northeast1", "asia-northeast2"),
}


def bucket_location_problem(location: str, regions: Iterable[str]) -> str | None:
    """Why `location` is no Cloud Storage location we know (None: it is one): not one of `regions`, a predefined
    dual-region or a multi-region."""
    known = {r.upper() for r in regions} | set(BUCKET_MULTI_REGIONS) | set(BUCKET_DUAL_REGIONS)
    if location.upper() in known:
        return None
    close = difflib.get_close_matches(location.upper(), sorted(known), n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return (
        f"{location!r} is not a Cloud Storage location: a region (e.g. us-east4), a dual-region"
        f" ({', '.join(BUCKET_DUAL_REGIONS)}) or a multi-region ({', '.join(BUCKET_MULTI_REGIONS)}){hint}"
    )
