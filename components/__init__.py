"""Reusable Pulumi ComponentResources for GPU clusters; provider code under components/<provider>/.

Components never import the autoscaler; they take typed `XxxArgs` dataclasses, not the raw spec.
"""
