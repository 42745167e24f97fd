package fetch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestCacheAdoptAndVerify(t *testing.T) {
	blob, sha := testBlob(10_000)
	c := Cache{Dir: t.TempDir()}
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "in") // another directory, maybe another file system
	if err := os.WriteFile(src, blob, 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := c.Adopt(ctx, sha, src, "test")
	if err != nil {
		t.Fatal(err)
	}
	checkCached(t, c, p, sha, blob)
	if _, err := os.Stat(src); !os.IsNotExist(err) {
		t.Errorf("Adopt left its source behind: %v", err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o444 {
		t.Errorf("cached file mode %v, want read-only", fi.Mode())
	}
	if err := c.Verify(ctx, sha); err != nil {
		t.Fatal(err)
	}
	// Corrupt the entry behind the cache's back.
	os.Chmod(p, 0o644)
	if err := os.WriteFile(p, []byte("rot"), 0o644); err != nil {
		t.Fatal(err)
	}
	var ce *ChecksumError
	if err := c.Verify(ctx, sha); !errors.As(err, &ce) || ce.Want != sha {
		t.Fatalf("Verify of a corrupt entry: %v", err)
	}
	if c.Has(sha) {
		t.Fatal("a corrupt entry stayed in the cache")
	}
}

func TestCacheRejectsBadDigests(t *testing.T) {
	c := Cache{Dir: t.TempDir()}
	for _, s := range []string{"", "abc", "g" + string(make([]byte, 63)), "../../etc/passwd"} {
		if c.Has(s) {
			t.Errorf("Has(%q)", s)
		}
		if _, err := c.Adopt(context.Background(), s, "/dev/null", "x"); err == nil {
			t.Errorf("Adopt(%q) accepted", s)
		}
	}
	if _, err := (Cache{}).Lock(context.Background(), "k"); err == nil {
		t.Error("a Cache without Dir locked")
	}
}

func TestCacheLockHonoursContext(t *testing.T) {
	c := Cache{Dir: t.TempDir()}
	unlock, err := c.Lock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Lock(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("second Lock with a cancelled context: %v", err)
	}
}
