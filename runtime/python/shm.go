package python

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// shmRegion is one instance's shared memory: an anonymous memory file
// (memfd) mapped here and, through an inherited descriptor, in the stub.
// Because the file has no name it cannot leak: it disappears with the last
// descriptor, whether the server closes cleanly or is killed.
//
// Layout per execute: request inputs from offset 0, each 64-byte aligned,
// then the stub writes outputs after them. Either side may grow the file
// (the server before sending inputs, the stub before writing outputs); the
// other side remaps when a frame reports a larger size. It never shrinks.
type shmRegion struct {
	f   *os.File
	buf []byte
}

const shmAlign = 64

func alignUp(n int) int { return (n + shmAlign - 1) &^ (shmAlign - 1) }

func newShmRegion(name string, size int) (*shmRegion, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("creating shared memory %q: %w", name, err)
	}
	s := &shmRegion{f: os.NewFile(uintptr(fd), "memfd:"+name)}
	if err := s.resize(pageRound(size)); err != nil {
		s.f.Close()
		return nil, err
	}
	return s, nil
}

func pageRound(n int) int {
	p := os.Getpagesize()
	if n < p {
		n = p
	}
	return (n + p - 1) / p * p
}

// size is the mapped length, which equals the file size as this side knows it.
func (s *shmRegion) size() int { return len(s.buf) }

// resize sets the file to size bytes and maps all of it.
func (s *shmRegion) resize(size int) error {
	if err := s.f.Truncate(int64(size)); err != nil {
		return fmt.Errorf("growing shared memory to %d bytes: %w", size, err)
	}
	return s.remap(size)
}

func (s *shmRegion) remap(size int) error {
	if s.buf != nil {
		if err := unix.Munmap(s.buf); err != nil {
			return fmt.Errorf("unmapping shared memory: %w", err)
		}
		s.buf = nil
	}
	buf, err := unix.Mmap(int(s.f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mapping %d bytes of shared memory: %w", size, err)
	}
	s.buf = buf
	return nil
}

// ensure grows the region so that it holds at least need bytes, doubling
// to keep the number of regrowths logarithmic.
func (s *shmRegion) ensure(need int) error {
	if need <= len(s.buf) {
		return nil
	}
	size := pageRound(max(need, 2*len(s.buf)))
	// Never shrink below what the stub may have mapped: if the file grew
	// behind our back, keep its size.
	var st unix.Stat_t
	if err := unix.Fstat(int(s.f.Fd()), &st); err != nil {
		return fmt.Errorf("stat of shared memory: %w", err)
	}
	if int(st.Size) > size {
		size = int(st.Size)
	}
	return s.resize(size)
}

// follow maps the size the stub reports after it grew the file for outputs.
func (s *shmRegion) follow(size int) error {
	if size <= len(s.buf) {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(s.f.Fd()), &st); err != nil {
		return fmt.Errorf("stat of shared memory: %w", err)
	}
	if st.Size < int64(size) {
		return fmt.Errorf("stub reports %d bytes of shared memory, the file has %d", size, st.Size)
	}
	return s.remap(size)
}

func (s *shmRegion) close() error {
	var err error
	if s.buf != nil {
		err = unix.Munmap(s.buf)
		s.buf = nil
	}
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	return err
}
