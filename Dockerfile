# syntax=docker/dockerfile:1

# ratelimit-svc: a static binary on distroless, running as non-root.
#   docker build -t ratelimit-svc .
#   docker run -p 8080:8080 -p 8081:8081 ratelimit-svc
#   docker run -e RUNTIME_ROOT=/data -e RUNTIME_SUBDIRECTORY=ratelimit ... ratelimit-svc /bin/ratelimit
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
# envoyproxy/ratelimit's path, which Envoy Gateway and its users' manifests
# start (command: /bin/ratelimit): the same binary. A copy, as the image
# has no shell to make a link with.
COPY --from=build /out/ratelimit-svc /bin/ratelimit
# The example policies are the default; mount a ConfigMap over the
# directory to replace them.
COPY config/ /etc/ratelimit/config/
# Started with no flags (as /bin/ratelimit is), the service reads
# ./config: the same directory.
WORKDIR /etc/ratelimit
USER 65532:65532
# 8080: /healthcheck, /metrics, /json; 8081: gRPC (RLS, ext_proc,
# grpc.health.v1) over h2c, or TLS. The debug listener (pprof, /debug/...,
# /rlconfig) is on 127.0.0.1:6070: reach it with kubectl port-forward.
EXPOSE 8080 8081
# A command, not an entrypoint, so that a manifest's command
# (/bin/ratelimit, as for envoyproxy/ratelimit) replaces it whole.
CMD ["/usr/local/bin/ratelimit-svc", "--config", "/etc/ratelimit/config"]
