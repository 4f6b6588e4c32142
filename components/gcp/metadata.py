"""Every GCE metadata key the Slurm VMs read: the one place that says what the stack declares and the scripts expect.

A fake metadata server (the first-boot test) serves exactly these keys, taken from the resources the
stack declares (`fleet synth --json`: `metadata` of each controller/login Instance and each GPU
InstanceTemplate).  Keys under `instance/attributes/` are set by the stack; the others are the GCE
metadata server's own.

| key (instance/attributes/...) | controller | login | GPU nodes | what it holds |
|---|---|---|---|---|
| `startup-script`              | x | x | x | the role's script (components/gcp/startup.py) |
| `enable-oslogin`, `block-project-ssh-keys` | x | x | x | `TRUE` (OS Login only) |
| `slurm-conf`, `gres-conf`, `cgroup-conf`, `topology-conf` | x | x | x | the files of /etc/slurm |
| `job-submit-lua`              | x |   |   | /etc/slurm/job_submit.lua (when generated: fleet/slurm/job_submit.py) |
| `slurmdbd-conf`               | x |   |   | /etc/slurm/slurmdbd.conf, 0600 (fleet/slurm/accounting.py) |
| `gpu-fleet-inventory`         | x |   |   | the cluster's autoscaler inventory (JSON) |
| `gpu-fleet-autoscaler-config` | x |   |   | /etc/gpu-fleet/autoscaler.yaml |
| `physical_host`               |   |   | (GCE) | `/cluster/block/host` of A3/A4 VMs, set by GCE |

Read from the metadata server itself (not set by the stack): `project/project-id`,
`instance/service-accounts/default/token` (root only: see the guard below), `instance/machine-type`.

Secrets never travel as metadata: the munge key (every role) and the slurmrestd JWT key (controller
only) are read by root from Secret Manager (`secrets/<name>/versions/latest:access`) with the VM's
service-account token.

Two environment variables let a test run the scripts against fakes (GCE's script runner sets neither):
`GPU_FLEET_METADATA` (default `http://metadata.google.internal`) and `GPU_FLEET_SECRETMANAGER`
(default `https://secretmanager.googleapis.com`).
"""

from __future__ import annotations

STARTUP_SCRIPT = "startup-script"
OS_LOGIN = {"enable-oslogin": "TRUE", "block-project-ssh-keys": "TRUE"}
SLURM_CONF = "slurm-conf"
GRES_CONF = "gres-conf"
CGROUP_CONF = "cgroup-conf"
TOPOLOGY_CONF = "topology-conf"
JOB_SUBMIT_LUA = "job-submit-lua"  # controller, when the cluster has one: slurmctld refuses to start without it
SLURMDBD_CONF = "slurmdbd-conf"  # controller, with accounting: installed 0600 for SlurmUser, not with SLURM_FILES
AUTOSCALER_CONFIG = "gpu-fleet-autoscaler-config"  # controller: the daemon's YAML config
INVENTORY = "gpu-fleet-inventory"  # controller: this cluster's autoscaler_inventory entries
PHYSICAL_HOST = "physical_host"  # set by GCE on A3/A4 VMs (VM topology), read by the compute script

# /etc/slurm file <- metadata key, for every Slurm VM
SLURM_FILES = {
    "slurm.conf": SLURM_CONF,
    "gres.conf": GRES_CONF,
    "cgroup.conf": CGROUP_CONF,
    "topology.conf": TOPOLOGY_CONF,
    "job_submit.lua": JOB_SUBMIT_LUA,
}
CONTROLLER_ONLY = (INVENTORY, AUTOSCALER_CONFIG, SLURMDBD_CONF)

METADATA_ENV = "GPU_FLEET_METADATA"
METADATA_DEFAULT = "http://metadata.google.internal"
SECRETMANAGER_ENV = "GPU_FLEET_SECRETMANAGER"
SECRETMANAGER_DEFAULT = "https://secretmanager.googleapis.com"
METADATA_IP = "169.254.169.254"  # metadata.google.internal (also the VM's DNS resolver, UDP/TCP 53)
METADATA_IPV6 = "fd20:ce::254"


def slurm_metadata(slurm_conf: object, gres_conf: object, cgroup_conf: object, topology_conf: object) -> dict:
    """The Slurm file keys every Slurm VM carries (values may be Pulumi Outputs)."""
    values = {SLURM_CONF: slurm_conf, GRES_CONF: gres_conf, CGROUP_CONF: cgroup_conf, TOPOLOGY_CONF: topology_conf}
    return {k: v for k, v in values.items() if v}
