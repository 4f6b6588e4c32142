"""Entry point the Pulumi CLI runs for `pulumi preview --policy-pack policies`: serve the gpu-fleet policies."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pulumi_policy import EnforcementLevel, PolicyPack

from policies.pack import PACK_NAME, build_policies

PolicyPack(name=PACK_NAME, enforcement_level=EnforcementLevel.MANDATORY, policies=build_policies())
