# Stand-in for the official flwr/superlink, flwr/supernode and flwr/superexec images
# where no image registry can be reached (CI here). Same conventions as the official
# flwr/base images: Python in a venv at /python/venv on PATH, user `app` (uid 49999),
# WORKDIR and HOME /app. flwr and all of fairfl's dependencies come from the wheelhouse
# (the build context) and nothing else: pip runs with --no-index.
#
# Built by build-offline-base.sh; the context is the wheelhouse directory, which
# holds requirements.txt next to the wheels.
ARG DEBIAN_IMAGE=fairfl-offline/debian:bookworm-minbase

FROM ${DEBIAN_IMAGE} AS build
COPY . /wheels
RUN python3 -m venv /python/venv \
 && /python/venv/bin/pip install --no-cache-dir --no-index --find-links /wheels \
      --disable-pip-version-check -r /wheels/requirements.txt

# Second stage so that the wheelhouse does not end up in a layer of the image.
FROM ${DEBIAN_IMAGE}
RUN useradd --no-create-home --home-dir /app --uid 49999 --user-group --shell /bin/sh app \
 && mkdir -p /app \
 && chown app:app /app
COPY --from=build --chown=app:app /python/venv /python/venv
ENV PATH=/python/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONIOENCODING=UTF-8 \
    LANG=C.UTF-8 \
    LC_ALL=C.UTF-8 \
    HOME=/app
WORKDIR /app
USER app
