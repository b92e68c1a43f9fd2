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

# The image runs as the unprivileged user `app` (uid 49999), whatever the base image's
# default user: the flwr images and the offline stand-in have it, another base gets it.
# SQLite state (`--database /app/state/state.db`) and the client registration the
# one-shot writes (/app/registration): named volumes are mounted there and take these
# directories' owner (`app`).
USER 0
RUN id -u app >/dev/null 2>&1 \
    || useradd --no-create-home --home-dir /app --uid 49999 --user-group --shell /bin/sh app \
    && mkdir -p /app/state /app/registration && chown app:app /app/state /app/registration
COPY deploy/docker/register-supernodes.sh /app/register-supernodes.sh
USER 49999:49999
RUN flower-superlink --version && flwr --version

ENV FLWR_TELEMETRY_ENABLED=0 \
    FLWR_DISABLE_UPDATE_CHECK=1 \
    FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
EXPOSE 8000
ENTRYPOINT ["flower-superlink"]
