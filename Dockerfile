# The reshard binary (CLI and worker). Built by docker-compose.yml's worker
# and init services. NOT BUILT HERE: the build machine has no Docker engine.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/reshard ./cmd/reshard

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates postgresql-client \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/reshard /usr/local/bin/reshard
USER nobody
ENTRYPOINT ["reshard"]
CMD ["worker", "--config", "/etc/reshard/reshard.yaml", "--listen", "0.0.0.0:9464"]
