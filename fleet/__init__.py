"""gpu-fleet shared core: the machine catalog, the fleet spec and the `fleet` command.

Nothing in this package imports Pulumi, a cloud client or the autoscaler daemon, so the
planner, the components and the CLI can all depend on it.
"""
