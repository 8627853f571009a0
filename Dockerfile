# The reconciler's image: `kaiwu reconcile` as uid 10001, able to run with a read-only root.
#
# Build it with `make image` (tests/world/image.py): it builds a wheelhouse on the host from
# requirements.lock (every dependency pinned with its hash) and stages a build context holding
# only this Dockerfile, the sources, the lock file and the wheelhouse; nothing is fetched during
# the build. `docker build` works on that staged context too (docs/reconciler.md).
#
# BASE: any Debian-like image with python3 (>= 3.11) and the venv module. The default is the
# public python:3.11-slim; CI, which reaches no image registry, passes a base debootstrapped
# from Debian's own packages (BASE=localhost/kaiwu-base:bookworm).
ARG BASE=python:3.11-slim

# ---- build: the project's wheel, then a venv with exactly the locked dependencies -------------
FROM ${BASE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_INDEX=1 \
    PIP_FIND_LINKS=/wheels
COPY wheelhouse/ /wheels/
COPY requirements.lock /src/
COPY pyproject.toml README.md /src/
COPY renderer /src/renderer
COPY reconciler /src/reconciler
# python3 -m venv, not a fixed interpreter path: the slim image has /usr/local/bin/python3,
# a Debian base /usr/bin/python3.
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-deps --require-hashes -r /src/requirements.lock \
    && /opt/venv/bin/pip wheel --no-deps -w /dist /src \
    && /opt/venv/bin/pip install --no-deps /dist/kaiwu_operator-*.whl \
    && /opt/venv/bin/pip uninstall --yes pip

# ---- final: the base plus the venv; no compiler, no pip cache, no sources or wheels -----------
FROM ${BASE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH
COPY --from=build /opt/venv /opt/venv
# A numeric user, so Kubernetes' runAsNonRoot can verify it without a passwd lookup.
RUN groupadd --gid 10001 kaiwu \
    && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin kaiwu
USER 10001:10001
EXPOSE 8090
ENTRYPOINT ["kaiwu", "reconcile"]
