"""Benchmarks of the autoscaler: the seeded synthetic planner mix and its timing harness."""
