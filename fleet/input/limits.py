"""Every bound the input gate enforces, in one place (documented in docs/spec.md, "Input limits").

Cloud limits are the cloud's own: GCE resource names are RFC 1035 labels of at most 63 characters; labels
have keys of 1-63 and values of 0-63 lower-case letters, digits, '_' or '-', at most 64 per resource; a
zonal managed instance group holds at most 2,000 instances; a Filestore share name is 1-16 characters on
the BASIC tiers (1-63 otherwise) of lower-case letters, digits and '_', starting with a letter.
"""

from __future__ import annotations

KIB = 1024
MIB = 1024 * KIB

# File sizes, checked with stat() before anything is read.
MAX_SPEC_BYTES = 1 * MIB  # a Pulumi.<stack>.yaml (the shipped ones are ~2 KiB)
MAX_CONFIG_BYTES = 1 * MIB  # the daemon's YAML config
MAX_INVENTORY_BYTES = 16 * MIB  # `fleet synth --json` output (whole resource list) or the bare inventory
MAX_TRACE_BYTES = 256 * MIB  # a job trace CSV (the largest ITP cluster trace is ~0.8 MiB)
MAX_RESUME_FILE_BYTES = 16 * MIB  # SLURM_RESUME_FILE
MAX_PRICE_FILE_BYTES = 1 * MIB  # `fleet advise --price-file` (a few negotiated rates)
MAX_STACK_OUTPUT_BYTES = 16 * MIB  # a stack's outputs as JSON (`fleet simulate --kueue-queues`)

# Structure of YAML / JSON documents.
MAX_NODES = 100_000  # scalars + collections after alias expansion (a 1 MiB spec has far fewer)
MAX_DEPTH = 64  # nesting of mappings / sequences
MAX_NUMBER_CHARS = 32  # digits (and sign, dot, exponent) of one number: no 5,000-digit integers
MAX_STRING_CHARS = 64 * KIB  # one scalar string

# Traces.
MAX_TRACE_FIELD_CHARS = 256  # one CSV field (job ids are UUIDs: 36)
MAX_TRACE_ROWS = 2_000_000
MAX_TRACE_SECONDS = 10 * 365 * 86400  # submission_time and duration: ten years
MAX_TRACE_GPUS_PER_JOB = 4096
MAX_GENERATED_JOBS = MAX_TRACE_ROWS  # `fleet trace generate --jobs`: no more than `fleet simulate` reads back

# Hostlists (what slurmctld hands the power-saving hooks).
MAX_HOSTLIST_CHARS = 256 * KIB
MAX_HOSTS = 65_536  # names one hostlist may expand to: the product of every bracket, summed over the list
MAX_HOSTNAME_CHARS = 63  # node names are GCE instance names
MAX_SLURM_JOB_ID = 4_294_967_295  # Slurm job ids are uint32_t (`fleet slurm job-end --job-id`)

# Cloud limits.
MAX_NAME_CHARS = 63  # GCE resource names (RFC 1035)
MAX_LABELS = 64  # labels per GCE resource
MAX_NODES_PER_POOL = 2_000  # a zonal MIG's size limit; a pool's nodes may all land in one zone
MAX_RESERVED_NODES = MAX_NODES_PER_POOL  # `simulate --reserved-nodes`, `advise --sizes`: a reservation is one zone
MAX_EXPANDED_CHARS = 8 * MIB  # characters of every scalar after alias expansion
