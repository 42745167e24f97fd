package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestRowProfile(t *testing.T) {
	// No path: nothing is written and stopping is harmless.
	none := &rowProfile{}
	if err := none.start(); err != nil {
		t.Fatal(err)
	}
	none.stop()

	path := filepath.Join(t.TempDir(), "row.prof")
	p := &rowProfile{path: path}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	p.stop()
	p.stop() // the deferred stop after the row's own
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// pprof's format is a gzipped protocol buffer.
	if !bytes.HasPrefix(data, []byte{0x1f, 0x8b}) {
		t.Fatalf("%s: %d bytes, not a gzipped profile", path, len(data))
	}

	// A profile that cannot be written fails the run before it measures.
	bad := &rowProfile{path: filepath.Join(t.TempDir(), "missing", "row.prof")}
	if err := bad.start(); err == nil {
		bad.stop()
		t.Fatal("start into a missing directory succeeded")
	}
}
