"""Google Cloud components: network fabric, GPU node pools, Slurm cluster, shared storage."""
