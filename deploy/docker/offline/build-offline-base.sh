#!/usr/bin/env bash
# Build stand-ins for the official flwr images on a machine that reaches no image
# registry: a Debian rootfs made by debootstrap and imported with `docker import`,
# plus flwr and every fairfl dependency installed from a wheelhouse built on this
# host (pip inside the image runs with --no-index: it trusts only the wheelhouse).
# The rootfs also has Debian's nginx-light, so the same image is the base of the Fleet
# proxy (deploy/docker/proxy.Dockerfile), whose build could not reach apt either.
#
# Usage:
#   deploy/docker/offline/build-offline-base.sh [--cache DIR] [--tag TAG] [--no-docker]
#
#   --cache DIR   where the rootfs tarball and the wheelhouse are kept between runs
#                 (default: <repo>/.docker-build, an ignored path)
#   --tag TAG     image to build (default: fairfl-offline/flwr-base:<flwr version>)
#   --no-docker   only prepare the cache (rootfs tarball + wheelhouse), build nothing
#
# Environment:
#   DOCKER_HOST        the engine to use (default: the docker CLI's default)
#   FLWR_VERSION       flwr version to put in the image (default: the one installed
#                      next to the python3 that runs this script, else 1.41.0)
#   DEBIAN_MIRROR      debootstrap mirror (default: the first Debian URI in apt sources)
#   DEBIAN_SUITE       (default: bookworm, whose python3 is 3.11 like the wheelhouse)
#   FAIRFL_TORCH_SPEC  torch requirement for the wheelhouse (default: the newest
#                      torch-*+cpu wheel in pip's find-links, else plain "torch")
#   PYTHON             interpreter whose pip builds the wheelhouse (default: python3)
#   FAIRFL_OFFLINE_SAVE  1 (default): keep `docker save` of the finished image in the
#                      cache, and `docker load` it next time instead of rebuilding
#
# Prints the image tag on the last line of stdout. Needs root for debootstrap.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
HERE="$REPO_ROOT/deploy/docker/offline"
CACHE="$REPO_ROOT/.docker-build"
TAG=""
DO_DOCKER=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cache) CACHE="$2"; shift 2 ;;
    --tag) TAG="$2"; shift 2 ;;
    --no-docker) DO_DOCKER=0; shift ;;
    -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

PYTHON="${PYTHON:-python3}"
if [[ -z "${FLWR_VERSION:-}" ]]; then
  FLWR_VERSION="$("$PYTHON" -c 'import importlib.metadata as m; print(m.version("flwr"))' 2>/dev/null || echo 1.41.0)"
fi
SUITE="${DEBIAN_SUITE:-bookworm}"
TAG="${TAG:-fairfl-offline/flwr-base:$FLWR_VERSION}"
mkdir -p "$CACHE"
log() { echo "[offline-base] $*" >&2; }

# --- 1. Debian rootfs tarball (cached) -------------------------------------------
# Packages on top of minbase; the tarball's name changes with them, so a cached rootfs
# made with another list is not reused.
PACKAGES="python3,python3-venv,nginx-light"
PKG_SUM="$(echo "$PACKAGES" | sha256sum | cut -c1-8)"
ROOTFS_TAR="$CACHE/debian-$SUITE-minbase-$PKG_SUM.tar"
if [[ ! -s "$ROOTFS_TAR" ]]; then
  if [[ -z "${DEBIAN_MIRROR:-}" ]]; then
    # Use the mirror this machine's apt already uses (deb822 .sources or one-line lists).
    DEBIAN_MIRROR="$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list \
      | sed -E 's/^URIs:[[:space:]]*//; s/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?//; s/[[:space:]].*$//' \
      | grep -E '/debian/?$' | head -n1 || true)"
    DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
  fi
  command -v debootstrap >/dev/null || { log "debootstrap is not installed (apt-get install debootstrap)"; exit 3; }
  ROOTFS="$(mktemp -d "$CACHE/rootfs.XXXXXX")"
  trap 'rm -rf "$ROOTFS"' EXIT
  log "debootstrap $SUITE from $DEBIAN_MIRROR (minbase + $PACKAGES)"
  # debootstrap starts no service while configuring packages (nginx stays stopped).
  debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOTFS" "$DEBIAN_MIRROR" \
    > "$CACHE/debootstrap.log" 2>&1 || { tail -n 30 "$CACHE/debootstrap.log" >&2; exit 1; }
  # Slim it: apt lists and caches are of no use in the image.
  rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*.bin "$ROOTFS"/var/cache/apt/archives/*.deb
  tar --numeric-owner -C "$ROOTFS" -cf "$ROOTFS_TAR.part" .
  mv "$ROOTFS_TAR.part" "$ROOTFS_TAR"
  rm -rf "$ROOTFS"; trap - EXIT
fi
log "rootfs: $ROOTFS_TAR ($(du -h "$ROOTFS_TAR" | cut -f1))"

# --- 2. Wheelhouse (cached; pip download skips files already there) --------------
WHEELS="$CACHE/wheels"
mkdir -p "$WHEELS"
REQS="$CACHE/offline-requirements.txt"
# fairfl's runtime dependencies from pyproject.toml (core, client and data extras, as
# superexec.Dockerfile installs), except that the image gets flwr at the pinned version
# (no simulation extra: Ray is not used in deployment), a CPU torch when one is at
# hand, and hatchling to build fairfl without an index.
"$PYTHON" - "$REPO_ROOT/pyproject.toml" "$FLWR_VERSION" "${FAIRFL_TORCH_SPEC:-}" > "$REQS" <<'PY'
import glob, os, re, subprocess, sys, tomllib
pyproject, flwr_version, torch_spec = sys.argv[1], sys.argv[2], sys.argv[3]
project = tomllib.load(open(pyproject, "rb"))["project"]
extras = project["optional-dependencies"]
deps = project["dependencies"] + extras["client"] + extras["data"]
if not torch_spec:
    # Newest torch-*+cpu wheel in pip's find-links directories (PyPI has no CPU build).
    links = os.environ.get("PIP_FIND_LINKS", "").split()
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                             capture_output=True, text=True).stdout
        links += re.findall(r"find-links='([^']*)'", out)
    except OSError:
        pass
    found = []
    for d in {l.removeprefix("file://") for l in links}:
        for f in glob.glob(os.path.join(d, "torch-*+cpu-*.whl")):
            found.append(os.path.basename(f).split("-")[1])
    def key(v):
        return tuple(int(x) for x in re.findall(r"\d+", v.split("+")[0]))
    torch_spec = f"torch=={max(found, key=key)}" if found else "torch"
torch_ver = re.search(r"==\s*(\d+)\.(\d+)\.(\d+)", torch_spec)
out = [f"flwr=={flwr_version}", torch_spec, "hatchling"]
for d in deps:
    name = re.split(r"[\[<>=!~ ;]", d, maxsplit=1)[0].lower()
    if name == "flwr" or name == "torch":
        continue
    if name == "torchvision" and torch_ver:
        # torchvision 0.(N+15).P is built for torch 2.N.P
        maj, mnr, pat = map(int, torch_ver.groups())
        d = f"torchvision==0.{mnr + 15}.{pat}"
    out.append(d)
print("\n".join(out))
PY
log "wheelhouse requirements: $(tr '\n' ' ' < "$REQS")"
# --only-binary: the images have no compiler; every dependency must come as a wheel.
# Skipped when the requirements are those of the last successful download.
REQS_SUM="$(sha256sum < "$REQS" | cut -c1-64)"
if [[ "$(cat "$WHEELS/.requirements.sha256" 2>/dev/null)" != "$REQS_SUM" ]]; then
  "$PYTHON" -m pip download --only-binary=:all: --progress-bar off -d "$WHEELS" -r "$REQS" \
    > "$CACHE/pip-download.log" 2>&1 || { tail -n 30 "$CACHE/pip-download.log" >&2; exit 1; }
  cp "$REQS" "$WHEELS/requirements.txt"
  echo "$REQS_SUM" > "$WHEELS/.requirements.sha256"
fi
log "wheelhouse: $WHEELS ($(du -sh "$WHEELS" | cut -f1), $(ls "$WHEELS"/*.whl | wc -l) wheels)"

[[ "$DO_DOCKER" == 1 ]] || exit 0

# --- 3. Images: imported Debian rootfs, then flwr + deps from the wheelhouse ------
# Same conventions as the official flwr/base images: Python in a venv at /python/venv
# on PATH, user `app` (uid 49999) owning it, WORKDIR and HOME /app.
if docker image inspect "$TAG" >/dev/null 2>&1; then
  log "image $TAG already present"; echo "$TAG"; exit 0
fi
# A saved copy of the finished image is reused when nothing it is made of changed.
KEY="$( { cat "$REQS"; ls "$WHEELS"; stat -c '%s %Y' "$ROOTFS_TAR"; cat "${BASH_SOURCE[0]}"; echo "$TAG"; } | sha256sum | cut -c1-16)"
IMAGE_TAR="$CACHE/flwr-base-$KEY.tar"
if [[ -s "$IMAGE_TAR" ]]; then
  log "docker load < $IMAGE_TAR"
  docker load -q -i "$IMAGE_TAR" >&2
  echo "$TAG"; exit 0
fi
DEBIAN_IMAGE="fairfl-offline/debian:$SUITE-minbase-$PKG_SUM"
if ! docker image inspect "$DEBIAN_IMAGE" >/dev/null 2>&1; then
  log "docker import -> $DEBIAN_IMAGE"
  docker import "$ROOTFS_TAR" "$DEBIAN_IMAGE" >&2
fi
# pip runs inside a container of the image, with no network and the wheelhouse
# mounted read-only: --no-index, so nothing but the wheelhouse can be installed. The
# container is then committed (no build context, no wheelhouse layer in the image).
BUILDER="fairfl-offline-build-$$"
trap 'docker rm -f "$BUILDER" >/dev/null 2>&1 || true' EXIT
log "pip install --no-index from the wheelhouse in $DEBIAN_IMAGE (a few minutes)"
docker run --name "$BUILDER" --network none -v "$WHEELS:/wheels:ro" "$DEBIAN_IMAGE" sh -ec '
  useradd --no-create-home --home-dir /app --uid 49999 --user-group --shell /bin/sh app
  mkdir -p /app
  python3 -m venv /python/venv
  /python/venv/bin/pip install -q --no-cache-dir --no-index --find-links /wheels \
    --disable-pip-version-check -r /wheels/requirements.txt
  chown -R app:app /app /python/venv' >&2
docker commit \
  --change 'ENV PATH=/python/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PYTHONIOENCODING=UTF-8 LANG=C.UTF-8 LC_ALL=C.UTF-8 HOME=/app' \
  --change 'WORKDIR /app' --change 'USER app' --change 'CMD ["/bin/sh"]' \
  "$BUILDER" "$TAG" >/dev/null
docker rm "$BUILDER" >/dev/null; trap - EXIT
if [[ "${FAIRFL_OFFLINE_SAVE:-1}" == 1 ]]; then
  rm -f "$CACHE"/flwr-base-*.tar
  log "docker save -> $IMAGE_TAR"
  docker save -o "$IMAGE_TAR.part" "$TAG" && mv "$IMAGE_TAR.part" "$IMAGE_TAR"
fi
echo "$TAG"
