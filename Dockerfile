# syntax=docker/dockerfile:1
#
# The coordinator as a small image: a static binary on distroless/static, running as a
# numeric non-root user. The binary needs cgo (statement validation uses PostgreSQL's own
# parser, libpg_query), so it is linked statically: -linkmode external -extldflags -static,
# with the netgo and osusergo tags so that nothing is looked up through glibc's NSS at run time. Build: docker build -t kpgtx/coordinator .
# Run:   docker run -e DATABASE_URL=... -e KAFKA_BROKERS=... -e COORDINATOR_TOKENS=... -p 8080:8080 kpgtx/coordinator
# (the image listens on 0.0.0.0:8080, so it refuses to start without COORDINATOR_TOKENS unless
# COORDINATOR_ALLOW_INSECURE=true, and without COORDINATOR_TLS_CERT_FILE and _KEY_FILE, mounted
# into the container, unless COORDINATOR_ALLOW_PLAINTEXT=true, as behind a proxy that terminates
# TLS). docker-compose.yml runs it next to PostgreSQL and Kafka.

# The go directive of go.mod (the golang image does not download another toolchain).
ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# Modules first: this layer is reused while go.mod and go.sum stay the same.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ENV CGO_ENABLED=1 GOOS=linux
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -buildvcs=false -tags netgo,osusergo \
      -ldflags='-s -w -linkmode external -extldflags "-static"' -o /out/coordinator ./cmd/coordinator

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/coordinator /usr/local/bin/coordinator
# distroless's "nonroot" user, by number: Kubernetes' runAsNonRoot can check a numeric USER.
USER 65532:65532
ENV COORDINATOR_LISTEN=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/coordinator"]
CMD ["serve"]
