"""Pulumi entry point (`main: stacks/` in Pulumi.yaml): run the gpu-fleet stack program."""

from stacks.program import main

main()
