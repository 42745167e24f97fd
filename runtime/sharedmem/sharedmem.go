// Package sharedmem is Triton's system shared-memory extension on the
// server side: the regions local clients register (a POSIX shared memory
// object, as tritonclient's utils.shared_memory and perf_analyzer create
// under /dev/shm, an offset and a size), their status, and the reads and
// writes of tensors that name a region instead of carrying their data.
//
// Inputs are copied out of a region rather than handed to backends in
// place: a request whose client went away may still be executing when
// the region is unregistered, and a copy is what makes unmapping safe
// then. Outputs are copied in after the model ran. Each access holds a
// reference, so an unregistration waits for the copies in flight before
// the mapping goes away (Triton's behaviour for in-flight requests).
//
// Keys are object names as shm_open takes them ("/name" or "name"), opened
// under /dev/shm without following symlinks; the number of regions is
// bounded (MaxRegions).
package sharedmem

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// MaxRegions bounds the registered regions: each is a mapping of the
// server's address space.
const MaxRegions = 1024

// Dir is where POSIX shared memory objects live on Linux.
const Dir = "/dev/shm"

// Status is one registered region, as the status endpoints report it.
type Status struct {
	Name     string `json:"name"`
	Key      string `json:"key"`
	Offset   uint64 `json:"offset"`
	ByteSize uint64 `json:"byte_size"`
}

type region struct {
	Status
	mapping []byte // the page-aligned mapping, for munmap
	mem     []byte // the registered bytes: mapping[offset%page:]
	refs    int
	gone    bool // unregistered; unmapped when refs reaches 0
}

// Registry holds the registered regions. It is safe for concurrent use.
// The zero value is not usable; call New. A nil *Registry is a server
// without client shared memory: it lists no regions and refuses the rest.
type Registry struct {
	dir     string
	mu      sync.Mutex
	regions map[string]*region
}

// New returns an empty registry opening keys under dir (Dir when "").
func New(dir string) *Registry {
	if dir == "" {
		dir = Dir
	}
	return &Registry{dir: dir, regions: map[string]*region{}}
}

// keyPath maps a shm_open name to its file, refusing names shm_open
// refuses (another "/" than a leading one) and . and ..
func (r *Registry) keyPath(key string) (string, error) {
	name := strings.TrimPrefix(key, "/")
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") || len(name) > 255 || strings.ContainsRune(name, 0) {
		return "", backend.Errorf(backend.InvalidArg, "invalid shared memory key '%s'", key)
	}
	return filepath.Join(r.dir, name), nil
}

// Register maps byteSize bytes at offset of the shared memory object key
// as region name. Errors carry Triton's texts and codes.
func (r *Registry) Register(name, key string, offset, byteSize uint64) error {
	if r == nil {
		return Disabled()
	}
	if name == "" {
		return backend.Errorf(backend.InvalidArg, "'region name' is necessary to register system shared memory region")
	}
	path, err := r.keyPath(key)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.regions[name]; dup {
		return backend.Errorf(backend.AlreadyExists, "shared memory region '%s' already in manager", name)
	}
	if len(r.regions) >= MaxRegions {
		return backend.Errorf(backend.Unavailable, "failed to register shared memory region '%s': %d regions are registered already, the most this server holds", name, MaxRegions)
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return backend.Errorf(backend.Internal, "Unable to open shared memory region: '%s'", key)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return backend.Errorf(backend.Internal, "Invalid shared memory region: '%s'", key)
	}
	if byteSize == 0 || offset+byteSize < offset || offset+byteSize > uint64(st.Size) {
		return backend.Errorf(backend.InvalidArg, "failed to register shared memory region '%s': invalid args", name)
	}
	page := uint64(os.Getpagesize())
	start := offset &^ (page - 1)
	m, err := unix.Mmap(fd, int64(start), int(offset-start+byteSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return backend.Errorf(backend.InvalidArg, "failed to register shared memory region '%s': unable to map it: %v", name, err)
	}
	r.regions[name] = &region{
		Status:  Status{Name: name, Key: key, Offset: offset, ByteSize: byteSize},
		mapping: m, mem: m[offset-start:],
	}
	return nil
}

// Status lists the regions (all when name is "", sorted by name).
func (r *Registry) Status(name string) ([]Status, error) {
	if r == nil {
		if name != "" {
			return nil, backend.Errorf(backend.NotFound, "Unable to find system shared memory region: '%s'", name)
		}
		return []Status{}, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if name != "" {
		reg, ok := r.regions[name]
		if !ok {
			return nil, backend.Errorf(backend.NotFound, "Unable to find system shared memory region: '%s'", name)
		}
		return []Status{reg.Status}, nil
	}
	out := make([]Status, 0, len(r.regions))
	for _, reg := range r.regions {
		out = append(out, reg.Status)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Unregister removes region name (every region when name is ""); an
// unknown name is not an error, as with Triton. A region in use is
// unmapped when its last access ends.
func (r *Registry) Unregister(name string) error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	for n, reg := range r.regions {
		if name != "" && n != name {
			continue
		}
		delete(r.regions, n)
		reg.gone = true
		if reg.refs == 0 {
			errs = append(errs, unmap(reg))
		}
	}
	return errors.Join(errs...)
}

// Close unregisters every region.
func (r *Registry) Close() error { return r.Unregister("") }

func unmap(reg *region) error {
	if err := unix.Munmap(reg.mapping); err != nil {
		return fmt.Errorf("unmapping shared memory region '%s': %w", reg.Name, err)
	}
	return nil
}

// acquire finds region name and the byteSize bytes at offset in it, and
// holds a reference until release.
func (r *Registry) acquire(name string, offset, byteSize uint64) (*region, []byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	reg, ok := r.regions[name]
	if !ok {
		return nil, nil, backend.Errorf(backend.NotFound, "Unable to find shared memory region: '%s'", name)
	}
	if offset >= reg.ByteSize {
		return nil, nil, backend.Errorf(backend.InvalidArg, "Invalid offset for shared memory region: '%s'", name)
	}
	if offset+byteSize < offset || offset+byteSize > reg.ByteSize {
		return nil, nil, backend.Errorf(backend.InvalidArg, "Invalid offset + byte size for shared memory region: '%s'", name)
	}
	reg.refs++
	return reg, reg.mem[offset : offset+byteSize : offset+byteSize], nil
}

func (r *Registry) release(reg *region) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if reg.refs--; reg.refs == 0 && reg.gone {
		_ = unmap(reg)
	}
}

// Ref is a tensor's place in a region: the shared_memory_region,
// shared_memory_offset and shared_memory_byte_size parameters.
type Ref struct {
	Region           string
	Offset, ByteSize uint64
}

// Disabled is the error of every use of client shared memory on a server
// started without --allow-client-shm (a nil *Registry).
func Disabled() error {
	return backend.Errorf(backend.Unavailable, "client shared memory is disabled on this server; start it with --allow-client-shm=true")
}

// Read copies the bytes ref names. A nil registry answers Disabled.
func (r *Registry) Read(ref Ref) ([]byte, error) {
	if r == nil {
		return nil, Disabled()
	}
	reg, mem, err := r.acquire(ref.Region, ref.Offset, ref.ByteSize)
	if err != nil {
		return nil, err
	}
	defer r.release(reg)
	return append([]byte(nil), mem...), nil
}

// Write copies data to the place ref names, whose byte size must hold it
// (Triton's text when it does not). A nil registry answers Disabled.
func (r *Registry) Write(output string, ref Ref, data []byte) error {
	if r == nil {
		return Disabled()
	}
	if uint64(len(data)) > ref.ByteSize {
		return backend.Errorf(backend.InvalidArg, "shared memory size specified with the request for output '%s' (%d bytes) should be at least %d bytes to hold the results", output, ref.ByteSize, len(data))
	}
	reg, mem, err := r.acquire(ref.Region, ref.Offset, ref.ByteSize)
	if err != nil {
		return err
	}
	defer r.release(reg)
	copy(mem, data)
	return nil
}

// CUDARegisterError is the answer to a CUDA shared-memory registration on
// this CPU-only server: Triton's text and code (invalid argument) for a
// build without GPUs, and why.
func CUDARegisterError(region string) error {
	return backend.Errorf(backend.InvalidArg, "failed to register CUDA shared memory region: '%s', GPUs not supported: CUDA shared memory is not supported on this server (no GPUs); use system shared memory", region)
}
