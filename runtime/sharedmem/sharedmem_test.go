package sharedmem

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

func code(err error) backend.Code {
	var be *backend.Error
	if errors.As(err, &be) {
		return be.Code
	}
	return -1
}

func TestRegisterReadWriteUnregister(t *testing.T) {
	dir := t.TempDir()
	obj := filepath.Join(dir, "region0")
	page := os.Getpagesize()
	data := make([]byte, 2*page)
	for i := range data {
		data[i] = byte(i)
	}
	if err := os.WriteFile(obj, data, 0o600); err != nil {
		t.Fatal(err)
	}
	r := New(dir)
	// An offset that is not page-aligned works: the mapping starts below it.
	if err := r.Register("in", "/region0", uint64(page+3), 100); err != nil {
		t.Fatal(err)
	}
	got, err := r.Read(Ref{Region: "in", Offset: 2, ByteSize: 4})
	if err != nil || string(got) != string(data[page+5:page+9]) {
		t.Fatalf("read %v %v", got, err)
	}
	if err := r.Write("OUT", Ref{Region: "in", Offset: 10, ByteSize: 3}, []byte{9, 8, 7}); err != nil {
		t.Fatal(err)
	}
	file, _ := os.ReadFile(obj)
	if file[page+13] != 9 || file[page+15] != 7 {
		t.Errorf("write did not reach the object: %v", file[page+13:page+16])
	}
	for _, tc := range []struct {
		err  error
		code backend.Code
		text string
	}{
		{r.Register("in", "region0", 0, 1), backend.AlreadyExists, "shared memory region 'in' already in manager"},
		{r.Register("x", "region0", 0, uint64(2*page+1)), backend.InvalidArg, "failed to register shared memory region 'x': invalid args"},
		{r.Register("x", "nope", 0, 1), backend.Internal, "Unable to open shared memory region: 'nope'"},
		{r.Register("x", "../etc/passwd", 0, 1), backend.InvalidArg, "invalid shared memory key"},
		{r.Register("", "region0", 0, 1), backend.InvalidArg, "'region name' is necessary"},
		{errOf(r.Read(Ref{Region: "none", ByteSize: 1})), backend.NotFound, "Unable to find shared memory region: 'none'"},
		{errOf(r.Read(Ref{Region: "in", Offset: 100, ByteSize: 1})), backend.InvalidArg, "Invalid offset for shared memory region: 'in'"},
		{errOf(r.Read(Ref{Region: "in", Offset: 99, ByteSize: 2})), backend.InvalidArg, "Invalid offset + byte size for shared memory region: 'in'"},
		{r.Write("OUT", Ref{Region: "in", ByteSize: 2}, []byte{1, 2, 3}), backend.InvalidArg, "output 'OUT' (2 bytes) should be at least 3 bytes"},
	} {
		if tc.err == nil || code(tc.err) != tc.code || !strings.Contains(tc.err.Error(), tc.text) {
			t.Errorf("got %v (code %d), want %q (code %d)", tc.err, code(tc.err), tc.text, tc.code)
		}
	}
	// Symlinks in the object directory are not followed.
	if err := os.Symlink(obj, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := r.Register("l", "link", 0, 1); err == nil {
		t.Error("registered a symlink")
	}
	st, err := r.Status("")
	if err != nil || len(st) != 1 || st[0] != (Status{Name: "in", Key: "/region0", Offset: uint64(page + 3), ByteSize: 100}) {
		t.Errorf("status %+v %v", st, err)
	}
	if _, err := r.Status("x"); code(err) != backend.NotFound {
		t.Errorf("status of an unknown region: %v", err)
	}

	// Unregistering while an access holds the region: the mapping stays
	// until the access ends.
	reg, mem, err := r.acquire("in", 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Unregister("in"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(Ref{Region: "in", ByteSize: 1}); code(err) != backend.NotFound {
		t.Errorf("read after unregister: %v", err)
	}
	_ = mem[3] // still mapped
	r.release(reg)
	if err := r.Unregister("never-registered"); err != nil {
		t.Errorf("unregistering an unknown region: %v", err)
	}

	var off *Registry
	if err := off.Register("a", "region0", 0, 1); err == nil || !strings.Contains(err.Error(), "--allow-client-shm=true") {
		t.Errorf("disabled registry: %v", err)
	}
	if st, err := off.Status(""); err != nil || len(st) != 0 {
		t.Errorf("disabled status: %v %v", st, err)
	}
}

func errOf(_ []byte, err error) error { return err }
