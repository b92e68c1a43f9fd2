# Fleet proxy image for fairfl: nginx forwarding only the SuperLink's Fleet API
# (deploy/scripts/start-proxy.sh with deploy/proxy/nginx.conf.template), as user 49999.
#
#   docker build -f deploy/docker/proxy.Dockerfile -t fairfl/proxy .
#
# BASE_IMAGE is any Debian-based image: nginx-light is installed with apt unless the
# image already has nginx (the offline stand-in, deploy/docker/offline/build-offline-base.sh,
# has it, since no package repository is reachable from a build there).
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}

USER 0
RUN if ! command -v nginx >/dev/null 2>&1; then \
      apt-get update \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nginx-light \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
    && (id -u app >/dev/null 2>&1 \
        || useradd --no-create-home --home-dir /app --uid 49999 --user-group --shell /bin/sh app) \
    && mkdir -p /app/deploy/scripts /app/deploy/proxy \
    && nginx -v
COPY deploy/scripts/env.sh deploy/scripts/start-proxy.sh /app/deploy/scripts/
COPY deploy/proxy/nginx.conf.template /app/deploy/proxy/
USER 49999:49999
WORKDIR /app
ENV FLWR_HOME=/tmp/flwr
EXPOSE 9092
ENTRYPOINT ["bash", "/app/deploy/scripts/start-proxy.sh"]
