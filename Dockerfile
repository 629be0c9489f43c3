# sluice serve in a container: a static binary on a distroless base, run
# as a user without privileges. Build it at the repository's root:
#
#   docker build -t sluice:dev .
#   docker run --rm -p 8080:8080 -p 9090:9090 sluice:dev
#   docker run --rm -p 8081:8081 -v "$PWD/sluice.yaml:/etc/sluice.yaml:ro" \
#     sluice:dev serve --config /etc/sluice.yaml
#
# Arguments replace the image's command, serve: name it before its flags.
#
# The listeners bind every interface here (the binary's defaults bind
# loopback); the flags and SLUICE_* variables of `sluice serve --help`
# configure the rest.

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The version sluice version prints: the build has no VCS history to
# tell it (docker build --build-arg VERSION=v1.2.0 .).
ARG VERSION
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.version=${VERSION}" -o /out/sluice ./cmd/sluice

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sluice /sluice
ENV SLUICE_LISTEN=0.0.0.0:8080 \
    SLUICE_CHECK_LISTEN=0.0.0.0:8081 \
    SLUICE_GRPC_LISTEN=0.0.0.0:8082 \
    SLUICE_ADMIN_LISTEN=0.0.0.0:9090
EXPOSE 8080 8081 8082 9090
# By number (distroless's nonroot): Kubernetes checks runAsNonRoot only
# against a numeric USER.
USER 65532:65532
ENTRYPOINT ["/sluice"]
CMD ["serve"]
