# SuperExec image for fairfl: runs the ServerApp (pointed at the SuperLink) or one
# SuperNode's ClientApps (pointed at that SuperNode's Runtime API), so fairfl and its
# dependencies (torch, ...) are installed here. For GPU clients use a base with CUDA
# and keep PyPI's torch (a CUDA build on Linux).
#
#   docker build -f deploy/docker/superexec.Dockerfile -t fairfl/superexec .
#
# Build arguments:
#   BASE_IMAGE        official flwr/superexec at the pinned flwr version by default;
#                     where no registry is reachable, a stand-in from
#                     deploy/docker/offline/build-offline-base.sh
#   PIP_INSTALL_ARGS  extra pip arguments, e.g. "--no-index --no-build-isolation" when
#                     BASE_IMAGE already holds every dependency (offline CI), or
#                     "--extra-index-url https://download.pytorch.org/whl/cpu"
ARG FLWR_VERSION=1.41.0
ARG BASE_IMAGE=flwr/superexec:${FLWR_VERSION}
FROM ${BASE_IMAGE}
ARG PIP_INSTALL_ARGS=""

# The image runs as the unprivileged user `app` (uid 49999), whatever the base image's
# default user: the flwr images and the offline stand-in have it (and it owns their
# venv: fairfl is installed as app too), another base gets it here.
USER 0
RUN id -u app >/dev/null 2>&1 \
    || useradd --no-create-home --home-dir /app --uid 49999 --user-group --shell /bin/sh app \
    && mkdir -p /tmp/fairfl-src && chown app:app /tmp/fairfl-src
USER 49999:49999
WORKDIR /tmp/fairfl-src
# 1) Dependencies, in a layer that only changes with pyproject.toml: the core ones and
#    the client and data extras (both apps train or evaluate models on local data). The
#    image's own flwr is kept; the simulation extra (Ray) is not needed outside simulation.
COPY --chown=app:app pyproject.toml README.md ./
RUN mkdir -p fairfl && echo '__version__ = "0"' > fairfl/__init__.py \
 && python -m pip install --no-cache-dir --disable-pip-version-check ${PIP_INSTALL_ARGS} \
      ".[client,data]" \
 && rm -rf fairfl build
# 2) fairfl itself.
COPY --chown=app:app fairfl ./fairfl
RUN python -m pip install --no-cache-dir --disable-pip-version-check --no-deps --force-reinstall \
      ${PIP_INSTALL_ARGS} . \
 && cd / && rm -rf /tmp/fairfl-src \
 && python -c "import fairfl.server.app, fairfl.client.app; print('fairfl apps import')"

WORKDIR /app
# Results (ServerApp out-dir) and data sets (ClientApp data-root) go to volumes here.
RUN mkdir -p /app/outputs /app/data
ENV FLWR_TELEMETRY_ENABLED=0 \
    FLWR_DISABLE_UPDATE_CHECK=1 \
    FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
ENTRYPOINT ["flower-superexec"]
