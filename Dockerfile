# syntax=docker/dockerfile:1
#
# gfd container image: the package installed from its wheel into a virtualenv, on a slim
# Python base, running as a non-root user. The NVIDIA container runtime injects the driver
# (libnvidia-ml.so.1) at start because of the two NVIDIA_* variables below; nothing from
# the driver is baked into the image.
#
#   docker build -t gfd:0.1.0 .        (or: make image)
#
# tests/test_wheel_install.py builds the wheel and installs it the same way (a fresh venv
# without pip, the wheel installed into it by an outside pip) and runs gfd from there.
# Dependencies come from uv.lock only (make lock refreshes it).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- 1. the locked requirements, and the wheel built from the source tree --------------
# uv (itself pinned with its hashes in uv-bootstrap.txt) turns uv.lock into a requirements
# file with a hash for every wheel; the wheel of gfd is built with the locked setuptools of
# the lock file's `build` group, not whatever the registry serves that day.
FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY uv-bootstrap.txt uv.lock pyproject.toml README.md ./
COPY gfd ./gfd
RUN python3 -m venv /tools \
 && /tools/bin/pip install --no-cache-dir --no-deps --require-hashes --only-binary :all: -r uv-bootstrap.txt \
 && /tools/bin/uv export --frozen --quiet --no-dev --no-emit-project --format requirements-txt -o /dist/requirements.txt \
 && /tools/bin/uv export --frozen --quiet --only-group build --no-emit-project --format requirements-txt -o /tmp/build.txt \
 && /tools/bin/pip install --no-cache-dir --require-hashes --only-binary :all: -r /tmp/build.txt \
 && /tools/bin/pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /dist .

# --- 2. install the locked wheels and gfd's own into /opt/gfd ------------------------
# Only wheels, only at the locked versions, each checked against its hash; then gfd's wheel,
# without dependencies. The venv is created without pip. Byte code is compiled for
# everything except what gfd never imports: the kubernetes package's asyncio client
# (kubernetes.aio, about half of the package) and test modules. Nothing is removed.
FROM ${PYTHON_IMAGE} AS install
COPY --from=wheel /dist /dist
RUN python3 -m venv --without-pip /opt/gfd \
 && pip --python /opt/gfd/bin/python install --no-cache-dir --no-compile --no-deps \
        --require-hashes --only-binary :all: -r /dist/requirements.txt \
 && pip --python /opt/gfd/bin/python install --no-cache-dir --no-compile --no-deps /dist/gfd-*.whl \
 && /opt/gfd/bin/python -m compileall -q -j 0 -x '/kubernetes/aio/|_test[.]py$' /opt/gfd/lib

# --- 3. runtime --------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="gfd" \
      org.opencontainers.image.description="GPU feature discovery for Kubernetes (drop-in for NVIDIA gpu-feature-discovery)" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=install /opt/gfd /opt/gfd
# The image carries no installer: gfd's venv has none, and the base's own pip (the official
# image's under /usr/local, Debian's under /usr) is removed.
RUN rm -rf /usr/local/bin/pip* /usr/local/lib/python3*/site-packages/pip \
           /usr/local/lib/python3*/site-packages/pip-*.dist-info \
           /usr/bin/pip* /usr/lib/python3/dist-packages/pip /usr/lib/python3/dist-packages/pip-*
# The manifests mount the root filesystem read-only: byte code is compiled at install time
# and never written at run time.
ENV PATH=/opt/gfd/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility
# 65532 is the conventional "nonroot" id (distroless). Numeric, so that Kubernetes can
# verify runAsNonRoot without reading /etc/passwd.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["gfd"]
