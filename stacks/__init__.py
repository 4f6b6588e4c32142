"""The Pulumi program of gpu-fleet: one stack config (`Pulumi.<stack>.yaml`) -> GPU clusters on GCP."""
