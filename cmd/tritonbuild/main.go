// Command tritonbuild builds the CPU inference stack from declarative
// recipes: plan, fetch, build, install and assemble images. Each command
// parses flags and calls one library function.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRoot().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "tritonbuild:", err)
		os.Exit(1)
	}
}
