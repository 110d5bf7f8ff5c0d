# syntax=docker/dockerfile:1

# ratelimit-svc: a static binary on distroless, running as non-root.
#   docker build -t ratelimit-svc .
#   docker run -p 8080:8080 -p 8081:8081 ratelimit-svc
# The image also holds rlsbench (load tool) and mockllm (demo upstream):
#   docker run --entrypoint /usr/local/bin/mockllm ratelimit-svc -addr :8000

FROM golang:1.26-bookworm AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-mod=readonly
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY cmd/ cmd/
COPY pkg/ pkg/
COPY internal/ internal/
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ \
      ./cmd/ratelimit-svc ./cmd/rlsbench ./cmd/mockllm

# distroless/static: CA certificates, tzdata, /etc/passwd with nonroot
# (65532), no shell.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ratelimit-svc /out/rlsbench /out/mockllm /usr/local/bin/
# The example policies are the default; mount a ConfigMap over the
# directory to replace them.
COPY config/ /etc/ratelimit/config/
USER 65532:65532
# 8080: /healthcheck, /metrics, /json, /debug; 8081: gRPC (RLS, ext_proc,
# grpc.health.v1) over h2c.
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/ratelimit-svc", "--config", "/etc/ratelimit/config"]
