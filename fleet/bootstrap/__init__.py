"""New-region bootstrap: from "N GPUs of type T in region R" to a validated stack file.

Pure decision logic, one concern per module: `machine` (machine type and node count),
`regions` (nearest regions offering a type), `addressing` (the address plan across stacks),
`request` (the parsed, checked arguments), `sizing` (storage and Slurm defaults), `quotas` (what
the stack needs, what falls short), `pricing` ($/h at min and max size), `plan` (all of it into
one `RegionPlan`), `iam` (the project-bootstrap APIs, the autoscaler's permissions, the nodes'
roles, as data).  I/O lives in
`stackfiles` (reading and writing stack files) and `gce` (a region's quota and a reservation
through google-cloud-compute); the CLI is `fleet bootstrap-region` / `fleet bootstrap-project`
(fleet/cli/bootstrap.py).
"""
