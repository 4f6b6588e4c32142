"""Kueue as code: the pinned install and every queueing object of a `scheduler: kueue` cluster."""
