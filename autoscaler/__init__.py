"""The Karpenter-like autoscaler: pure planner, provider protocol, simulated cloud and the daemon."""
