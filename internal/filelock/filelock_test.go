package filelock_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/internal/filelock"
)

func TestLockExcludesAndReleases(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	unlock, err := filelock.Lock(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	var held atomic.Bool
	held.Store(true)
	got := make(chan error, 1)
	go func() {
		u, err := filelock.Lock(context.Background(), path)
		if err == nil && held.Load() {
			err = errors.New("second Lock returned while the first was held")
		}
		if u != nil {
			u()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("second Lock returned early: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	held.Store(false)
	unlock()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("second Lock did not get the lock after release")
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("lock file should stay: %v", err)
	}
}

func TestLockWaitEndsWithContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	unlock, err := filelock.Lock(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = filelock.Lock(ctx, path)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), path) {
		t.Fatalf("got %v, want a deadline error naming %s", err, path)
	}
}

// TestLockExcludesOtherProcesses holds the lock in a child process (this
// test binary again, see TestHelperHoldLock) and checks that Lock waits
// until the child is done with it.
func TestLockExcludesOtherProcesses(t *testing.T) {
	dir := t.TempDir()
	path, ready := filepath.Join(dir, "x.lock"), filepath.Join(dir, "ready")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldLock$")
	cmd.Env = append(os.Environ(), "FILELOCK_HELPER_LOCK="+path, "FILELOCK_HELPER_READY="+ready)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the helper process did not take the lock")
		}
	}
	unlock, err := filelock.Lock(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	if _, err := os.Stat(ready + ".done"); err != nil {
		t.Fatal("got the lock while the helper process still held it")
	}
}

// TestHelperHoldLock is the child of TestLockExcludesOtherProcesses: it
// holds the lock for half a second, marks that it is done and exits, which
// releases the lock.
func TestHelperHoldLock(t *testing.T) {
	path := os.Getenv("FILELOCK_HELPER_LOCK")
	if path == "" {
		return // not started as a helper
	}
	if _, err := filelock.Lock(context.Background(), path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(os.Getenv("FILELOCK_HELPER_READY"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if err := os.WriteFile(os.Getenv("FILELOCK_HELPER_READY")+".done", nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLockBadPath(t *testing.T) {
	_, err := filelock.Lock(context.Background(), filepath.Join(t.TempDir(), "missing", "x.lock"))
	if err == nil {
		t.Fatal("want an error for a lock in a missing directory")
	}
}

// TestSharedAndTryLock: shared holders coexist, exclude an exclusive lock
// and TryLock, and once they are gone TryLock succeeds.
func TestSharedAndTryLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "use")
	ctx := context.Background()
	a, err := filelock.Shared(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := filelock.Shared(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := filelock.TryLock(path); ok || err != nil {
		t.Fatalf("TryLock with shared holders: ok=%v err=%v", ok, err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := filelock.Lock(short, path); err == nil {
		t.Fatal("Lock with shared holders succeeded")
	}
	a()
	if _, ok, _ := filelock.TryLock(path); ok {
		t.Fatal("TryLock with one shared holder left succeeded")
	}
	b()
	unlock, ok, err := filelock.TryLock(path)
	if !ok || err != nil {
		t.Fatalf("TryLock once free: ok=%v err=%v", ok, err)
	}
	if _, ok, _ := filelock.TryLock(path); ok {
		t.Fatal("a second TryLock succeeded")
	}
	short2, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	if _, err := filelock.Shared(short2, path); err == nil {
		t.Fatal("Shared while exclusively held succeeded")
	}
	unlock()
}

// TestRemoveWhileWaited: a waiter that opened the lock file before its
// holder removed it does not end up holding the removed inode: once it has
// the lock it is on the file the path names, so a third locker is
// excluded (without the check, the third would create a fresh file and
// lock it too).
func TestRemoveWhileWaited(t *testing.T) {
	for _, how := range []struct {
		name string
		lock func(context.Context, string) (func(), error)
	}{{"Lock", filelock.Lock}, {"Shared", filelock.Shared}} {
		t.Run(how.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.lock")
			unlock, err := filelock.Lock(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan func(), 1)
			go func() {
				u, err := how.lock(context.Background(), path)
				if err != nil {
					t.Error(err)
				}
				got <- u
			}()
			waitOpenedTwice(t, path) // the waiter has the file open
			if err := filelock.Remove(path); err != nil {
				t.Fatal(err)
			}
			unlock()
			var u func()
			select {
			case u = <-got:
			case <-time.After(20 * time.Second):
				t.Fatal("the waiter did not get the lock")
			}
			if u == nil {
				return
			}
			defer u()
			if _, err := os.Stat(path); err != nil {
				t.Fatalf("the waiter holds a lock with no file at the path: %v", err)
			}
			if third, ok, err := filelock.TryLock(path); ok || err != nil {
				if third != nil {
					third()
				}
				t.Fatalf("a third locker got the lock the waiter holds: ok=%v err=%v", ok, err)
			}
			if err := filelock.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := filelock.Remove(path); err != nil {
				t.Fatalf("removing a lock file already gone: %v", err)
			}
		})
	}
}

// waitOpenedTwice waits until two of this process's descriptors have path
// open: the holder's and the waiter's.
func waitOpenedTwice(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		fds, _ := os.ReadDir("/proc/self/fd")
		n := 0
		for _, fd := range fds {
			if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && target == path {
				n++
			}
		}
		if n >= 2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiter did not open the lock file")
		}
	}
}
