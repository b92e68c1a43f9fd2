# SuperLink image for fairfl. The SuperLink needs no fairfl code: with
# `--isolation process` the ServerApp runs in the SuperExec image. This image adds the
# state directory and the one-shot registration script used by docker-compose.yml.
#
#   docker build -f deploy/docker/superlink.Dockerfile -t fairfl/superlink .
#
# BASE_IMAGE defaults to the official image at the flwr version fairfl pins; where no
# registry is reachable, build a stand-in with deploy/docker/offline/build-offline-base.sh.
ARG FLWR_VERSION=1.41.0
ARG BASE_IMAGE=flwr/superlink:${FLWR_VERSION}
FROM ${BASE_IMAGE}

# SQLite state (`--database /app/state/state.db`); a named volume is mounted here and
# takes this directory's owner (the image's `app` user).
RUN mkdir -p /app/state
COPY deploy/docker/register-supernodes.sh /app/register-supernodes.sh
RUN flower-superlink --version && flwr --version

ENV FLWR_TELEMETRY_ENABLED=0 \
    FLWR_DISABLE_UPDATE_CHECK=1 \
    FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
EXPOSE 8000
ENTRYPOINT ["flower-superlink"]
