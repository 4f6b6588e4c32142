"""GKE: a private Standard cluster on the fleet's network, its system pool, GPU node pools the autoscaler owns."""
