# The reshard binary (CLI and worker). Built by docker-compose.yml's worker
# and init services. NOT BUILT HERE: the build machine has no Docker engine.
# Tags are pinned to a release (the toolchain of go.mod and CI).
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/reshard ./cmd/reshard

FROM debian:12.8-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl postgresql-client \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/reshard /usr/local/bin/reshard
# curl: docker-compose.yml's health check of the worker (GET /healthz).
USER nobody
ENTRYPOINT ["reshard"]
CMD ["worker", "--config", "/etc/reshard/reshard.yaml", "--listen", "0.0.0.0:9464"]
