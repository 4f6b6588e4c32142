"""The gpu-fleet CrossGuard policy pack (`pulumi preview --policy-pack policies`); see policies/pack.py."""
