package envcache

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/tritonbuild/tritonbuild/internal/filelock"
)

// TestRemoveOnlyWhatNobodyHolds: an env a holder uses is busy and stays;
// once released it is removed with its marker and both lock files; a
// Busy look creates no lock file.
func TestRemoveOnlyWhatNobodyHolds(t *testing.T) {
	env := filepath.Join(t.TempDir(), "0123")
	if err := os.MkdirAll(filepath.Join(env, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(env, ReadyMarker), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if Busy(env) {
		t.Fatal("an env without lock files is busy")
	}
	for _, s := range []string{UseSuffix, LockSuffix} {
		if _, err := os.Lstat(env + s); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Busy made %s (err %v)", env+s, err)
		}
	}
	release, err := filelock.Shared(context.Background(), env+UseSuffix)
	if err != nil {
		t.Fatal(err)
	}
	if !Busy(env) {
		t.Error("an env whose use lock is held is not busy")
	}
	if removed, err := Remove(env, false); removed || err != nil {
		t.Fatalf("Remove of an env in use: removed %v, err %v", removed, err)
	}
	if _, err := os.Stat(filepath.Join(env, ReadyMarker)); err != nil {
		t.Fatalf("the env in use lost its marker: %v", err)
	}
	if removed, err := Remove(env, true); removed || err != nil {
		t.Fatalf("Remove(locksOnly) with the env there: removed %v, err %v", removed, err)
	}
	release()
	if removed, err := Remove(env, false); !removed || err != nil {
		t.Fatalf("Remove of an unused env: removed %v, err %v", removed, err)
	}
	for _, p := range []string{env, env + UseSuffix, env + LockSuffix} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s left after Remove (err %v)", p, err)
		}
	}
}
