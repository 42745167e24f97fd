package archive_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/internal/archive"
)

func writeEntries(t *testing.T) (string, []archive.Entry) {
	t.Helper()
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, bytes.Repeat([]byte("0123456789abcdef"), 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("small\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, []archive.Entry{
		{Name: "top", Type: tar.TypeDir, Mode: 0o755},
		{Name: "top/big", Type: tar.TypeReg, Mode: 0o644, Size: 16 << 20, Src: big},
		{Name: "top/hard", Type: tar.TypeLink, Link: "top/big"},
		{Name: "top/inline", Type: tar.TypeReg, Mode: 0o755, Size: 3, Data: []byte("hi\n"), UID: 7, GID: 8},
		{Name: "top/link", Type: tar.TypeSymlink, Mode: 0o777, Link: "small"},
		{Name: "top/small", Type: tar.TypeReg, Mode: 0o600, Size: 6, Src: small},
	}
}

func TestWriteTarIsDeterministicAndMinimal(t *testing.T) {
	_, entries := writeEntries(t)
	epoch := time.Unix(1700000000, 123456789)
	var progress []int64
	opts := archive.TarOptions{ModTime: epoch, Progress: func(done int64) { progress = append(progress, done) }}
	var one, two bytes.Buffer
	if err := archive.WriteTar(context.Background(), &one, entries, opts); err != nil {
		t.Fatal(err)
	}
	if err := archive.WriteTar(context.Background(), &two, entries, archive.TarOptions{ModTime: epoch}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(one.Bytes(), two.Bytes()) {
		t.Fatal("two writes of the same entries differ")
	}
	if len(progress) != 2 || progress[0] != 8<<20 || progress[1] != 16<<20 {
		t.Errorf("progress calls %v, want every 8 MiB of content", progress)
	}
	tr := tar.NewReader(&one)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Uname != "" || h.Gname != "" || !h.AccessTime.IsZero() || !h.ChangeTime.IsZero() || len(h.PAXRecords) != 0 {
			t.Errorf("%s: carries more than its entry: %+v", h.Name, h)
		}
		if !h.ModTime.Equal(time.Unix(1700000000, 0)) {
			t.Errorf("%s: mtime %v, want the epoch to the second", h.Name, h.ModTime)
		}
		if h.Name == "top/inline" && (h.Uid != 7 || h.Gid != 8 || h.Mode != 0o755) {
			t.Errorf("inline: %d:%d %o", h.Uid, h.Gid, h.Mode)
		}
	}
	want := "top/ top/big top/hard top/inline top/link top/small"
	if strings.Join(names, " ") != want {
		t.Errorf("names %v, want %s in the given order", names, want)
	}
	// What is written extracts back safely to the same tree.
	dest := filepath.Join(t.TempDir(), "out")
	if err := archive.ExtractTar(context.Background(), bytes.NewReader(two.Bytes()), dest, archive.Options{}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dest, "top", "link")); err != nil || string(b) != "small\n" {
		t.Errorf("extracted link reads %q, %v", b, err)
	}
}

func TestWriteTarRefusesChangedFiles(t *testing.T) {
	dir, entries := writeEntries(t)
	small := filepath.Join(dir, "small")
	for _, content := range []string{"grown: more than six bytes", "tiny"} {
		if err := os.WriteFile(small, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		err := archive.WriteTar(context.Background(), io.Discard, entries, archive.TarOptions{})
		var fc *archive.FileChangedError
		if !errors.As(err, &fc) || fc.Path != small || fc.Want != 6 {
			t.Errorf("content %q: got %v, want a *FileChangedError for %s", content, err, small)
		}
	}
	bad := []archive.Entry{{Name: "x", Type: tar.TypeReg, Size: 4, Data: []byte("abc")}}
	if err := archive.WriteTar(context.Background(), io.Discard, bad, archive.TarOptions{}); err == nil {
		t.Error("inline data of the wrong size was written")
	}
	dev := []archive.Entry{{Name: "null", Type: tar.TypeChar}}
	if err := archive.WriteTar(context.Background(), io.Discard, dev, archive.TarOptions{}); err == nil {
		t.Error("a device entry was written")
	}
}

func TestWriteTarStopsWithContext(t *testing.T) {
	_, entries := writeEntries(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := archive.WriteTar(ctx, io.Discard, entries, archive.TarOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
}
