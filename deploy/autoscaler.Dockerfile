# The gpu-fleet autoscaler's image, for the Kubernetes stacks (components/kubernetes/autoscaler.py runs it as
# `fleet autoscaler run --config /etc/gpu-fleet/autoscaler.yaml --log-json`, as UID/GID 65532, on a read-only root
# filesystem).  Build it from a checkout at the commit you deploy, from the checkout's root:
#
#   docker build -f deploy/autoscaler.Dockerfile \
#       --build-arg BASE_IMAGE=python:3.12-slim-bookworm@sha256:<digest> \
#       -t <repository>/autoscaler:<commit> .
#
# then push it and set the stack's `image` to `<repository>/autoscaler@sha256:<digest of the push>`.
# BASE_IMAGE is a Python 3.11 or 3.12 image (the lock installs on both), given by digest: the build refuses a tag,
# which could move under a rebuild (`docker buildx imagetools inspect python:3.12-slim-bookworm` shows the digest).
#
# What goes in: this repository's Python packages and deploy/, and the daemon's venv built by deploy/install-venv.sh,
# the script the Slurm controller's first boot runs: the hash-pinned lock alone (deploy/controller-requirements.txt,
# `pip install --require-hashes --no-deps`), the checkout on the venv's path, byte-compiled here as root.
# tests/firstboot/test_autoscaler_image_build.py runs these instructions: docker build (BuildKit), docker push to a
# registry, then Podman pulls it by that digest and runs it as the Deployment does (its pod spec's user, read-only
# root, capabilities and volumes).
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
ARG BASE_IMAGE
RUN case "${BASE_IMAGE}" in \
      *@sha256:*) ;; \
      *) echo "BASE_IMAGE=${BASE_IMAGE}: give the base image by digest (<image>@sha256:<digest>), not by tag" >&2; \
         exit 1;; \
    esac
COPY pyproject.toml /opt/gpu-fleet/pyproject.toml
COPY deploy /opt/gpu-fleet/deploy
COPY autoscaler /opt/gpu-fleet/autoscaler
COPY fleet /opt/gpu-fleet/fleet
COPY components /opt/gpu-fleet/components
COPY stacks /opt/gpu-fleet/stacks
RUN PIP_NO_CACHE_DIR=1 sh /opt/gpu-fleet/deploy/install-venv.sh /opt/gpu-fleet
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
ENTRYPOINT ["/opt/gpu-fleet/.venv/bin/fleet"]
