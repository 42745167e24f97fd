#!/bin/sh
# Regenerates the Go code for every .proto file in this directory: messages
# with protoc-gen-go, GRPC service stubs (grpc_service.proto) with
# protoc-gen-go-grpc.
#
# Needs protoc (apt-get install protobuf-compiler). The two Go plugins are
# installed at pinned versions into the repository's .bin directory (from
# the Go module proxy) unless that exact version is already there, so the
# generated code does not depend on whatever happens to be on PATH.
set -eu

# Versions: protoc-gen-go matches the protobuf module in go.mod.
PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.5.1

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin="$root/.bin"

command -v protoc >/dev/null || { echo "gen.sh: protoc not found (apt-get install protobuf-compiler)" >&2; exit 1; }

# install <package path> <version> <binary name>: go install into .bin when
# the binary is missing or reports another version.
install() {
	if [ -x "$bin/$3" ] && "$bin/$3" --version 2>/dev/null | grep -q -- " ${2#v}\$\| $2\$"; then
		return
	fi
	echo "gen.sh: installing $1@$2 into $bin" >&2
	GOBIN="$bin" go install "$1@$2"
}
install google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION" protoc-gen-go
install google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION" protoc-gen-go-grpc

PATH="$bin:$PATH"
export PATH
cd "$here"
protoc -I. --go_out=. --go_opt=paths=source_relative \
	--go-grpc_out=. --go-grpc_opt=paths=source_relative \
	./*.proto
