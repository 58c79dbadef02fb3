// Package sam provides the test that goes through SAM CLI itself: `sam
// build`, `sam local invoke` of each function with its event from events/,
// and `sam local start-api` driven over HTTP, every answer checked against
// api/openapi.yaml. It needs a Docker daemon and the Lambda base image,
// which scripts/sam-docker.sh provides, so it is behind the samlocal build
// tag: `make sam-test` runs it, `make test` does not.
//
// Unlike test/e2e, which runs the bootstraps under the Runtime Interface
// Emulator on the host, it exercises what SAM adds: the template as SAM
// reads it (parameters, environment, the authorizer), the container
// image, the architecture (arm64 under qemu by default) and the API
// Gateway emulation.
package sam
