# The reconciler's image: `kaiwu reconcile` as a non-root user. Build from the repository root:
#   docker build -t kaiwu-reconciler:0.1.0 .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/kaiwu
COPY pyproject.toml README.md ./
COPY crd ./crd
COPY renderer ./renderer
COPY reconciler ./reconciler

# Editable install: renderer.schema reads the CRD from crd/ beside the packages, so the
# packages stay where crd/ is.
RUN pip install --editable . \
    && useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin kaiwu

USER 10001:10001
EXPOSE 8090
ENTRYPOINT ["kaiwu", "reconcile"]
