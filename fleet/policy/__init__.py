"""Guardrails for every stack: the rules (pure, `rules`) and the offline checker over synthesized stacks (`check`).

The Pulumi CrossGuard pack in `policies/` runs the same rules inside `pulumi preview --policy-pack policies`.
"""
