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

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- 1. build the wheel from the source tree ------------------------------------------
FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gfd ./gfd
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

# --- 2. install the wheel and its dependencies into /opt/gfd --------------------------
# The venv is created without pip: the runtime image carries no installer. Byte code is
# compiled for everything except what gfd never imports: the kubernetes package's asyncio
# client (kubernetes.aio, about half of the package) and test modules. Nothing is removed.
FROM ${PYTHON_IMAGE} AS install
COPY --from=wheel /dist /dist
RUN python3 -m venv --without-pip /opt/gfd \
 && pip --python /opt/gfd/bin/python install --no-cache-dir --no-compile /dist/*.whl \
 && /opt/gfd/bin/python -m compileall -q -j 0 -x '/kubernetes/aio/|_test[.]py$' /opt/gfd/lib

# --- 3. runtime --------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="gfd" \
      org.opencontainers.image.description="GPU feature discovery for Kubernetes (drop-in for NVIDIA gpu-feature-discovery)" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=install /opt/gfd /opt/gfd
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
