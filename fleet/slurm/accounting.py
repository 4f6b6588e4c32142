"""Job accounting of a Slurm cluster: the slurm.conf keys and the controller's `slurmdbd.conf`.

`clusters[].slurm.accounting: slurmdbd` (the default) is what Google's reference runs: slurm-gcp's controller
starts a MariaDB on itself (when no Cloud SQL is given), then slurmdbd, adds the cluster with `sacctmgr`, and
only then starts slurmctld (slurm-gcp scripts/setup.py `setup_controller`, `configure_mysql`); its slurm.conf
names the controller as `AccountingStorageHost` (the Cluster Toolkit's long-prolog-slurm.conf.tpl).  gpu-fleet
does the same with two differences, both for security (components/gcp/startup.py writes the MariaDB side):

- no database password exists: MariaDB listens on no TCP port (`skip-networking`) and its account ``slurm``
  is ``IDENTIFIED VIA unix_socket``, so only the OS user slurm, as which slurmdbd runs, can use it (slurm-gcp's
  ``'slurm'@'localhost'`` has no password on a MariaDB bound to 127.0.0.1: any local user could use it);
- the database lives on the controller's state disk, so a replaced controller keeps its job history.

`AccountingStorageTRES=gres/gpu` makes `sacct`/`sreport` count GPUs (billing and usage per GPU, not only per CPU).
`none` keeps no database: job records go to a completion log (`jobcomp/filetxt`), and `sacct` does not work.
"""

from __future__ import annotations

from collections.abc import Mapping

from fleet.spec.model import ClusterSpec

SLURMDBD_PORT = 6819
#: the database slurmdbd keeps (StorageLoc), and the MariaDB account that owns it (== the OS user of SlurmUser)
ACCOUNTING_DB = "slurm_acct_db"
ACCOUNTING_DB_USER = "slurm"
JOBCOMP_LOG = "/var/log/slurm/jobcomp.log"
SLURMDBD_LOG = "/var/log/slurm/slurmdbd.log"
#: where slurmdbd writes its pid (the controller's drop-in gives the unit this RuntimeDirectory on every release)
SLURMDBD_PID = "/run/slurmdbd/slurmdbd.pid"


def keeps_accounting(cluster: ClusterSpec) -> bool:
    """The cluster runs slurmdbd on its controller (`slurm.accounting: slurmdbd`)."""
    return cluster.slurm is not None and cluster.slurm.accounting == "slurmdbd"


def accounting_settings(cluster: ClusterSpec, controller_name: str) -> dict[str, str]:
    """slurm.conf's accounting keys: slurmdbd on the controller `controller_name` (every VM resolves it: the
    startup scripts put it in /etc/hosts), or a job completion log."""
    if not keeps_accounting(cluster):
        # no slurmdbd: an AccountingStorageTRES would be fatal; job records go to a completion log
        return {"AccountingStorageType": "accounting_storage/none", "JobCompType": "jobcomp/filetxt",
                "JobCompLoc": JOBCOMP_LOG}  # fmt: skip
    return {
        "AccountingStorageType": "accounting_storage/slurmdbd",
        "AccountingStorageHost": controller_name,
        "AccountingStoragePort": str(SLURMDBD_PORT),
        "AccountingStorageTRES": "gres/gpu",
    }


def render_slurmdbd_conf(cluster: ClusterSpec, controller_name: str, auth_alt: Mapping[str, str] | None = None) -> str:
    """The controller's /etc/slurm/slurmdbd.conf ("" without accounting).  It holds no secret (the database
    account needs none: module docstring; the JWT key is a path); the script still installs it 0600 for SlurmUser,
    as slurmdbd wants.  `auth_alt`: slurm.conf's `AuthAltTypes`/`AuthAltParameters`, which slurmdbd must share:
    slurmrestd 23.11 opens a slurmdbd connection with the client's JWT, and a slurmdbd without auth/jwt refuses it
    ("authentication plugin auth/jwt(102) not found"; slurmrestd's ping then fails: seen in tests/firstboot).
    slurm-gcp's slurmdbd.conf.tpl carries the same two keys."""
    if not keeps_accounting(cluster):
        return ""
    keys = {
        "AuthType": "auth/munge",
        **dict(auth_alt or {}),
        "DbdHost": controller_name,
        "DbdPort": str(SLURMDBD_PORT),
        "SlurmUser": "slurm",
        "LogFile": SLURMDBD_LOG,
        "PidFile": SLURMDBD_PID,
        "StorageType": "accounting_storage/mysql",
        "StorageHost": "localhost",  # the unix socket: this MariaDB has no TCP listener
        "StorageLoc": ACCOUNTING_DB,
        "StorageUser": ACCOUNTING_DB_USER,
    }
    head = f"# slurmdbd.conf of cluster {cluster.name}: rendered by gpu-fleet (fleet/slurm/accounting.py)\n"
    return head + "".join(f"{k}={v}\n" for k, v in keys.items())
