// Package liblzma decodes raw LZMA2 data with the system's liblzma, the
// reference xz implementation. The parallel .xz reader uses it for block
// bodies because it needs about half the CPU per byte of the pure-Go
// decoder, which decides whether extracting a large source tarball keeps up
// with `xz -T0 -dc | tar -x` on a small machine.
//
// It is one of the module's two cgo packages (runtime/torch is the other)
// and is linked only by tritonbuild, never by the server. Built without cgo
// it still compiles: Available reports false and NewLZMA2 fails, and
// callers fall back to the pure-Go decoder.
package liblzma

import "errors"

// ErrNoProgress means a Decode call could neither consume input nor
// produce output: the input ended before the LZMA2 end marker, or the
// output buffer is full.
var ErrNoProgress = errors.New("liblzma: no progress possible")
