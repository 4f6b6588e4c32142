"""Kubernetes objects the stacks declare on any cluster: Cluster API node groups and the autoscaler Deployment."""
