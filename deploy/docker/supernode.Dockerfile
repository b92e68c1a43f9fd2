# SuperNode image for fairfl. With `--isolation process` the ClientApps run in the
# SuperExec image next to it, so the SuperNode itself needs only flwr.
#
#   docker build -f deploy/docker/supernode.Dockerfile -t fairfl/supernode .
#
# BASE_IMAGE defaults to the official image at the flwr version fairfl pins; where no
# registry is reachable, build a stand-in with deploy/docker/offline/build-offline-base.sh.
ARG FLWR_VERSION=1.41.0
ARG BASE_IMAGE=flwr/supernode:${FLWR_VERSION}
FROM ${BASE_IMAGE}

# The image runs as the unprivileged user `app` (uid 49999), whatever the base image's
# default user: the flwr images and the offline stand-in have it, another base gets it.
USER 0
RUN id -u app >/dev/null 2>&1 \
    || useradd --no-create-home --home-dir /app --uid 49999 --user-group --shell /bin/sh app
USER 49999:49999
RUN flower-supernode --version

ENV FLWR_TELEMETRY_ENABLED=0 \
    FLWR_DISABLE_UPDATE_CHECK=1
EXPOSE 9094
ENTRYPOINT ["flower-supernode"]
