package python

import (
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// doorbell is one page of shared memory beside a stub's control pipes:
// each side counts there the bytes it has written into its pipe. A reader
// waiting for a frame polls the other side's count, a plain memory load,
// instead of trying read(2) on the pipe: on the virtual machines this runs
// on every system call costs a kernel entry, and the pipe is read only
// once the count says bytes are in it. The count is a hint, never the
// data: a reader that stops polling blocks in read(2) as before, so a
// stale or torn count can delay a frame but never lose or invent one.
//
// The page is its own memory file rather than part of the tensor region
// (shm.go) because that region is remapped when it grows, while the
// server's reader goroutine may be polling; this page is mapped once and
// unmapped by a cleanup once nothing can reach the doorbell, so no
// goroutine still polling or counting a write can touch an unmapped page.
type doorbell struct {
	buf []byte
}

// Offsets of the two counts, a cache line apart so that the two writers
// do not share one.
const (
	bellToStub   = 0  // bytes the server has written to the stub's pipe
	bellToServer = 64 // bytes the stub has written to the server's pipe
	bellSize     = 4096
)

// newDoorbell maps a fresh page; the returned file is the descriptor the
// stub inherits, which the caller closes once the stub has started (the
// mapping outlives it).
func newDoorbell() (*doorbell, *os.File, error) {
	fd, err := unix.MemfdCreate("tritonbuild-doorbell", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the stub's doorbell page: %w", err)
	}
	f := os.NewFile(uintptr(fd), "memfd:tritonbuild-doorbell")
	if err := f.Truncate(bellSize); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("sizing the stub's doorbell page: %w", err)
	}
	buf, err := unix.Mmap(fd, 0, bellSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("mapping the stub's doorbell page: %w", err)
	}
	d := &doorbell{buf: buf}
	runtime.AddCleanup(d, func(b []byte) { _ = unix.Munmap(b) }, buf)
	return d, f, nil
}

// count is the counter at off. The mapping is page-aligned, so the word
// is 8-byte aligned as atomic operations need. Callers keep d (not the
// returned pointer) as long as they use it: the pointer alone does not
// keep the page mapped.
func (d *doorbell) count(off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&d.buf[off]))
}
