# syntax=docker/dockerfile:1
# prefixring as a static binary on distroless: no shell, no libc, runs as
# nonroot. deploy/docker_test.go builds the binary with the same command as
# the RUN line below and checks it is static and runs.
#   docker build -t prefixring:dev .

FROM golang:1.26.8 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags="-s -w" -o /out/prefixring ./cmd/prefixring

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/prefixring /prefixring
USER nonroot:nonroot
# API, admin (/metrics), gossip (TCP and UDP).
EXPOSE 8080 9090 7946 7946/udp
ENTRYPOINT ["/prefixring"]
CMD ["serve"]
