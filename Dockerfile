# The operator image: the hooks and webhooks service, non-root.
#
# Dependencies come from requirements.lock (scripts/lock.sh; every file pinned by hash) in their
# own layer, so a code change rebuilds only the last layer. The base image is pinned to an exact
# tag; pin it by digest too in a registry you mirror (`docker buildx imagetools inspect`).
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY requirements.lock ./
RUN pip install --no-cache-dir --require-hashes --prefix=/install -r requirements.lock \
 && pip install --no-cache-dir --require-hashes -r requirements.lock
COPY pyproject.toml README.md LICENSE ./
COPY app ./app
RUN pip install --no-cache-dir --no-deps --no-build-isolation --prefix=/install .

FROM ${PYTHON_IMAGE}
COPY --from=build /install /usr/local
USER 10001:10001
# The ports the manifests and the chart pass too: the webhooks on 8443 (TLS once --tls-cert and
# --tls-key are given), Metacontroller's hooks on 8080 (plain HTTP, also /healthz and /metrics).
EXPOSE 8443 8080
HEALTHCHECK --interval=30s --timeout=3s --start-period=10s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2).status != 200)"]
# `serve` runs on uvloop with httptools (both in requirements.lock; app/web/serving.py), one process
# per Pod: the AdmissionCheck keeper, the metrics and the certificate reloader are per process, so it
# scales by replicas (charts/, manifests/), not workers (bench/README.md#the-http-stack-one-process-and-the-operator-on-the-real-stack).
ENTRYPOINT ["modeldeployment"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8443", "--hooks-port", "8080"]
