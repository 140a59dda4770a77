# The operator image: `rolloutbatch operator` as PID 1, non-root, nothing written to the image FS.
# Stage 1 builds the wheel; stage 2 installs only the wheel and its dependencies, the operator
# extra's included (kopf, prometheus-client: `pip install rolloutbatch` alone is the SDK and the CLI).
ARG BASE=python:3.11.11-slim-bookworm
FROM ${BASE} AS build
WORKDIR /src
ENV PIP_DISABLE_PIP_VERSION_CHECK=1
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM ${BASE}
LABEL org.opencontainers.image.title="rolloutbatch" \
      org.opencontainers.image.description="Kubernetes operator for RL rollouts of coding agents" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /wheels /wheels
# The glob finds the one wheel; "[operator]" cannot be part of it (a glob character class), so it is
# appended to the path found, spelled from /wheels/ (which hadolint's pin rule knows as a local file).
RUN wheel=$(echo /wheels/rolloutbatch-*.whl) && pip install --no-cache-dir "/wheels/${wheel##*/}[operator]" && rm -rf /wheels
# Numeric so that runAsNonRoot can verify it (manifests/manager runs with readOnlyRootFilesystem).
USER 10001:10001
EXPOSE 8080 8081
ENTRYPOINT ["rolloutbatch", "operator"]
