# The operator image: the hooks and webhooks service, non-root.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml ./
COPY app ./app
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
COPY --from=build /install /usr/local
USER 10001:10001
EXPOSE 8443 8080
ENTRYPOINT ["modeldeployment"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
