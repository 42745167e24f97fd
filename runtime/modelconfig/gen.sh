#!/bin/sh
# Regenerates the Go code for every .proto file in this directory.
#
# Needs protoc and protoc-gen-go (google.golang.org/protobuf/cmd/protoc-gen-go,
# same version as the protobuf module in go.mod). If protoc-gen-go-grpc is
# found as well, service stubs are generated for files that declare services.
# Tools are looked up on PATH, then in $GOBIN, $(go env GOPATH)/bin and the
# repository's .bin directory.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

PATH="$PATH:${GOBIN:-}:$(go env GOPATH 2>/dev/null)/bin:$root/.bin"
export PATH

command -v protoc >/dev/null || { echo "gen.sh: protoc not found (apt-get install protobuf-compiler)" >&2; exit 1; }
command -v protoc-gen-go >/dev/null || {
	echo "gen.sh: protoc-gen-go not found (go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12)" >&2
	exit 1
}

cd "$here"
set -- *.proto
grpc_args=""
if command -v protoc-gen-go-grpc >/dev/null; then
	grpc_args="--go-grpc_out=. --go-grpc_opt=paths=source_relative"
fi
# shellcheck disable=SC2086 # grpc_args is deliberately split into words.
protoc -I. --go_out=. --go_opt=paths=source_relative $grpc_args "$@"
