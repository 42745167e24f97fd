package archive_test

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/internal/archive"
	"github.com/tritonbuild/tritonbuild/internal/archive/xzpar"
)

// xzDecoders is what tritonbuild passes: the parallel decoder for .tar.xz.
var xzDecoders = archive.Decoders{archive.FormatTarXz: xzpar.Decompressor(xzpar.Options{})}

// entry describes one archive member for the fixture builders.
type entry struct {
	name     string
	typ      byte // tar type flag
	mode     int64
	body     string
	linkname string
}

var mtime = time.Date(2022, 11, 29, 10, 0, 0, 0, time.UTC)

func tarBytes(t *testing.T, entries []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: mode, Linkname: e.linkname, ModTime: mtime, Format: tar.FormatPAX}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if e.typ == tar.TypeChar || e.typ == tar.TypeBlock {
			h.Devmajor, h.Devminor = 1, 3
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func zipBytes(t *testing.T, entries []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate, Modified: mtime}
		perm := fs.FileMode(e.mode)
		if perm == 0 {
			perm = 0o644
		}
		body := e.body
		switch e.typ {
		case tar.TypeDir:
			h.SetMode(fs.ModeDir | perm)
		case tar.TypeSymlink:
			h.SetMode(fs.ModeSymlink | 0o777)
			body = e.linkname
		case tar.TypeChar:
			h.SetMode(fs.ModeDevice | fs.ModeCharDevice | 0o644)
		default:
			h.SetMode(perm)
		}
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, body)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// compress pipes data through a command line compressor.
func compress(t *testing.T, data []byte, tool string, args ...string) []byte {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		t.Fatalf("%s is required for this test (xz-utils, bzip2): %v", tool, err)
	}
	cmd := exec.Command(tool, args...)
	cmd.Stdin = bytes.NewReader(data)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v: %s", tool, args, err, stderr.String())
	}
	return out.Bytes()
}

func gzipBytes(t *testing.T, data []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(data)
	zw.Close()
	return buf.Bytes()
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// bigBody is large enough to span several 64 KiB xz blocks.
func bigBody() string {
	rng := rand.New(rand.NewSource(1))
	var b strings.Builder
	for b.Len() < 600<<10 {
		fmt.Fprintf(&b, "line %d value %x\n", b.Len(), rng.Intn(1000))
	}
	return b.String()
}

func sampleTree() []entry {
	return []entry{
		{name: "proj-1.0/", typ: tar.TypeDir, mode: 0o755},
		{name: "proj-1.0/bin/", typ: tar.TypeDir, mode: 0o755},
		{name: "proj-1.0/bin/run.sh", typ: tar.TypeReg, mode: 0o755, body: "#!/bin/sh\necho hi\n"},
		{name: "proj-1.0/README", typ: tar.TypeReg, mode: 0o644, body: "readme\n"},
		{name: "proj-1.0/src/big.txt", typ: tar.TypeReg, mode: 0o600, body: bigBody()}, // parent dir implied
		{name: "proj-1.0/docs/", typ: tar.TypeDir, mode: 0o750},
		{name: "proj-1.0/docs/link-to-readme", typ: tar.TypeSymlink, linkname: "../README"},
		{name: "proj-1.0/latest", typ: tar.TypeSymlink, linkname: "src"},
		{name: "proj-1.0/README.hard", typ: tar.TypeLink, linkname: "proj-1.0/README"},
	}
}

// checkSampleTree verifies the extracted sampleTree with prefix stripped to
// root (root is dest for StripComponents=1, dest/proj-1.0 for 0).
func checkSampleTree(t *testing.T, root string, hardlinks bool) {
	t.Helper()
	mustFile := func(rel, body string, perm fs.FileMode) {
		t.Helper()
		p := filepath.Join(root, rel)
		st, err := os.Lstat(p)
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		if !st.Mode().IsRegular() || st.Mode().Perm() != perm {
			t.Fatalf("%s: mode %v, want regular %v", rel, st.Mode(), perm)
		}
		if !st.ModTime().Equal(mtime) {
			t.Fatalf("%s: mtime %v, want %v", rel, st.ModTime(), mtime)
		}
		got, _ := os.ReadFile(p)
		if string(got) != body {
			t.Fatalf("%s: content differs (%d bytes, want %d)", rel, len(got), len(body))
		}
	}
	mustFile("bin/run.sh", "#!/bin/sh\necho hi\n", 0o755)
	mustFile("README", "readme\n", 0o644)
	mustFile("src/big.txt", bigBody(), 0o600)
	if target, err := os.Readlink(filepath.Join(root, "docs/link-to-readme")); err != nil || target != "../README" {
		t.Fatalf("docs/link-to-readme -> %q, %v", target, err)
	}
	if got, err := os.ReadFile(filepath.Join(root, "docs/link-to-readme")); err != nil || string(got) != "readme\n" {
		t.Fatalf("reading through symlink: %q, %v", got, err)
	}
	if st, err := os.Stat(filepath.Join(root, "docs")); err != nil || st.Mode().Perm() != 0o750 {
		t.Fatalf("docs dir: %v, %v", st.Mode(), err)
	}
	if hardlinks {
		a, _ := os.Stat(filepath.Join(root, "README"))
		b, err := os.Stat(filepath.Join(root, "README.hard"))
		if err != nil || !os.SameFile(a, b) {
			t.Fatalf("README.hard is not a hard link of README: %v", err)
		}
	}
}

// noLeftovers asserts that dest does not exist and no temp dir remains.
func noLeftovers(t *testing.T, dest string) {
	t.Helper()
	if _, err := os.Lstat(dest); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("destination %s exists after a failed extraction (%v)", dest, err)
	}
	matches, _ := filepath.Glob(filepath.Join(filepath.Dir(dest), ".*extract-*"))
	if len(matches) > 0 {
		t.Fatalf("temporary directories left behind: %v", matches)
	}
}

func TestRoundTripFormats(t *testing.T) {
	tarData := tarBytes(t, sampleTree())
	formats := []struct {
		name      string
		file      func(t *testing.T) []byte
		want      archive.Format
		hardlinks bool
	}{
		{"a.tar", func(t *testing.T) []byte { return tarData }, archive.FormatTar, true},
		{"a.tar.gz", func(t *testing.T) []byte { return gzipBytes(t, tarData) }, archive.FormatTarGz, true},
		{"a.tar.xz", func(t *testing.T) []byte { return compress(t, tarData, "xz", "-c", "--block-size=64KiB", "-T1") }, archive.FormatTarXz, true},
		{"single.tar.xz", func(t *testing.T) []byte { return compress(t, tarData, "xz", "-c") }, archive.FormatTarXz, true},
		{"a.tar.bz2", func(t *testing.T) []byte { return compress(t, tarData, "bzip2", "-c") }, archive.FormatTarBz2, true},
		{"a.zip", func(t *testing.T) []byte { return zipBytes(t, sampleTree()) }, archive.FormatZip, false},
		// The name is only a hint: content wins.
		{"misnamed.tar.gz", func(t *testing.T) []byte { return compress(t, tarData, "xz", "-c", "--block-size=64KiB") }, archive.FormatTarXz, true},
	}
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			dir := t.TempDir()
			data := f.file(t)
			if got, err := archive.DetectFormat(data[:min(len(data), 512)], f.name); err != nil || got != f.want {
				t.Fatalf("archive.DetectFormat = %v, %v; want %v", got, err, f.want)
			}
			arc := writeFile(t, dir, f.name, data)
			dest := filepath.Join(dir, "out", "tree")
			var last, total int64
			calls := 0
			opts := archive.Options{Decoders: xzDecoders, StripComponents: 1, Progress: func(done, tot int64) {
				if done < last {
					t.Errorf("progress went back from %d to %d", last, done)
				}
				last, total = done, tot
				calls++
			}}
			if err := archive.Extract(context.Background(), arc, dest, opts); err != nil {
				t.Fatalf("Archive: %v", err)
			}
			checkSampleTree(t, dest, f.hardlinks)
			if calls == 0 || last != int64(len(data)) || total != int64(len(data)) {
				t.Fatalf("progress: %d calls, last %d of %d, want %d of %d", calls, last, total, len(data), len(data))
			}
			if st, _ := os.Stat(dest); st.Mode().Perm() != 0o755 {
				t.Fatalf("destination mode %v, want 0755", st.Mode())
			}
		})
	}
}

func TestStripComponents(t *testing.T) {
	dir := t.TempDir()
	arc := writeFile(t, dir, "a.tar", tarBytes(t, sampleTree()))
	dest0 := filepath.Join(dir, "s0")
	if err := archive.Extract(context.Background(), arc, dest0, archive.Options{Decoders: xzDecoders}); err != nil {
		t.Fatal(err)
	}
	checkSampleTree(t, filepath.Join(dest0, "proj-1.0"), true)

	// With two components stripped, docs/link-to-readme -> ../README would
	// leave the destination; leave it out here (TestUnsafeEntriesRefused
	// covers that case).
	var entries []entry
	for _, e := range sampleTree() {
		if e.name != "proj-1.0/docs/link-to-readme" {
			entries = append(entries, e)
		}
	}
	arc2 := writeFile(t, dir, "b.tar", tarBytes(t, entries))
	dest2 := filepath.Join(dir, "s2")
	if err := archive.Extract(context.Background(), arc2, dest2, archive.Options{Decoders: xzDecoders, StripComponents: 2}); err != nil {
		t.Fatal(err)
	}
	names := []string{}
	filepath.WalkDir(dest2, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(dest2, p)
		names = append(names, rel)
		return nil
	})
	// proj-1.0/bin/run.sh -> run.sh, proj-1.0/src/big.txt -> big.txt;
	// proj-1.0/docs/ becomes the root; top-level files vanish.
	want := ". big.txt run.sh"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("strip 2 gave %q, want %q", got, want)
	}
}

func TestUnsafeEntriesRefused(t *testing.T) {
	reg := func(name string) entry { return entry{name: name, typ: tar.TypeReg, body: "x"} }
	cases := []struct {
		name    string
		entries []entry
		bad     string // the entry the error must name
		reason  string // substring of the reason
		strip   int
	}{
		{"dotdot", []entry{reg("ok"), reg("../evil")}, "../evil", "..", 0},
		{"dotdot-inside", []entry{reg("a/../../evil")}, "a/../../evil", "..", 0},
		{"absolute", []entry{reg("/tmp/evil")}, "/tmp/evil", "absolute", 0},
		{"symlink-absolute", []entry{{name: "l", typ: tar.TypeSymlink, linkname: "/etc/passwd"}}, "l", "absolute", 0},
		{"symlink-up", []entry{{name: "d/l", typ: tar.TypeSymlink, linkname: "../../etc"}}, "d/l", "outside", 0},
		{"symlink-up-after-strip", []entry{{name: "top/l", typ: tar.TypeSymlink, linkname: "../x"}}, "top/l", "outside", 1},
		{"symlink-name-then-dotdot", []entry{{name: "l", typ: tar.TypeSymlink, linkname: "a/../.."}}, "l", "after a name", 0},
		{"through-symlink", []entry{{name: "d/", typ: tar.TypeDir, mode: 0o755}, {name: "l", typ: tar.TypeSymlink, linkname: "d"}, reg("l/file")}, "l/file", "symlink extracted earlier", 0},
		{"dir-over-symlink", []entry{{name: "l", typ: tar.TypeSymlink, linkname: "."}, {name: "l/", typ: tar.TypeDir, mode: 0o755}}, "l/", "symlink", 0},
		{"hardlink-up", []entry{{name: "h", typ: tar.TypeLink, linkname: "../outside"}}, "h", "hard link target", 0},
		{"hardlink-absolute", []entry{{name: "h", typ: tar.TypeLink, linkname: "/etc/passwd"}}, "h", "hard link target", 0},
		{"hardlink-through-symlink", []entry{{name: "d/", typ: tar.TypeDir, mode: 0o755}, reg("d/f"), {name: "l", typ: tar.TypeSymlink, linkname: "d"}, {name: "h", typ: tar.TypeLink, linkname: "l/f"}}, "h", "symlink extracted earlier", 0},
		{"through-hardlinked-symlink", []entry{{name: "d/", typ: tar.TypeDir, mode: 0o755}, {name: "l", typ: tar.TypeSymlink, linkname: "d"}, {name: "h", typ: tar.TypeLink, linkname: "l"}, reg("h/file")}, "h/file", "symlink extracted earlier", 0},
		{"hardlink-missing", []entry{{name: "h", typ: tar.TypeLink, linkname: "nothere"}}, "h", "not extracted", 0},
		{"char-device", []entry{reg("ok"), {name: "dev/null", typ: tar.TypeChar}}, "dev/null", "device", 0},
		{"block-device", []entry{{name: "sda", typ: tar.TypeBlock}}, "sda", "device", 0},
		{"fifo", []entry{{name: "p", typ: tar.TypeFifo}}, "p", "fifo", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			arc := writeFile(t, dir, "evil.tar", tarBytes(t, c.entries))
			dest := filepath.Join(dir, "dest")
			err := archive.Extract(context.Background(), arc, dest, archive.Options{Decoders: xzDecoders, StripComponents: c.strip})
			var ue *archive.UnsafeEntryError
			if !errors.As(err, &ue) {
				t.Fatalf("got %v, want *archive.UnsafeEntryError", err)
			}
			if ue.Entry != c.bad || ue.Archive != arc || !strings.Contains(ue.Reason, c.reason) {
				t.Fatalf("error %q: entry %q archive %q; want entry %q, archive %q, reason containing %q", err, ue.Entry, ue.Archive, c.bad, arc, c.reason)
			}
			noLeftovers(t, dest)
			if _, err := os.Lstat(filepath.Join(dir, "evil")); err == nil {
				t.Fatal("an entry was written outside the destination")
			}
		})
	}
}

func TestAllowAbsoluteSymlinks(t *testing.T) {
	dir := t.TempDir()
	arc := writeFile(t, dir, "venv.tar.gz", gzipBytes(t, tarBytes(t, []entry{
		{name: "venv/bin/", typ: tar.TypeDir, mode: 0o755},
		{name: "venv/bin/python3", typ: tar.TypeSymlink, linkname: "/usr/bin/python3"},
		{name: "venv/bin/python", typ: tar.TypeSymlink, linkname: "python3"},
	})))
	dest := filepath.Join(dir, "venv")
	if err := archive.Extract(context.Background(), arc, dest, archive.Options{Decoders: xzDecoders, StripComponents: 1, AllowAbsoluteSymlinks: true}); err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(filepath.Join(dest, "bin/python3")); err != nil || target != "/usr/bin/python3" {
		t.Fatalf("bin/python3 -> %q, %v", target, err)
	}
	// Still no writing through such a link.
	arc2 := writeFile(t, dir, "evil.tar", tarBytes(t, []entry{
		{name: "l", typ: tar.TypeSymlink, linkname: "/tmp"},
		{name: "l/evil", typ: tar.TypeReg, body: "x"},
	}))
	err := archive.Extract(context.Background(), arc2, filepath.Join(dir, "d2"), archive.Options{Decoders: xzDecoders, AllowAbsoluteSymlinks: true})
	var ue *archive.UnsafeEntryError
	if !errors.As(err, &ue) || ue.Entry != "l/evil" {
		t.Fatalf("got %v, want l/evil refused", err)
	}
}

func TestZipUnsafe(t *testing.T) {
	cases := map[string][]entry{
		"../zipslip": {{name: "../zipslip", typ: tar.TypeReg, body: "x"}},
		"l":          {{name: "l", typ: tar.TypeSymlink, linkname: "/etc"}},
		"dev":        {{name: "dev", typ: tar.TypeChar}},
	}
	for bad, entries := range cases {
		dir := t.TempDir()
		arc := writeFile(t, dir, "evil.zip", zipBytes(t, entries))
		dest := filepath.Join(dir, "dest")
		err := archive.Extract(context.Background(), arc, dest, archive.Options{Decoders: xzDecoders})
		var ue *archive.UnsafeEntryError
		if !errors.As(err, &ue) || ue.Entry != bad {
			t.Fatalf("%s: got %v, want *archive.UnsafeEntryError for it", bad, err)
		}
		noLeftovers(t, dest)
	}
}

func TestLaterEntryReplacesEarlier(t *testing.T) {
	dir := t.TempDir()
	arc := writeFile(t, dir, "a.tar", tarBytes(t, []entry{
		{name: "f", typ: tar.TypeReg, body: "old"},
		{name: "h", typ: tar.TypeLink, linkname: "f"},
		{name: "f", typ: tar.TypeReg, body: "new"},
		{name: "s", typ: tar.TypeSymlink, linkname: "f"},
		{name: "s", typ: tar.TypeReg, body: "plain"},
		{name: "ls", typ: tar.TypeSymlink, linkname: "f"},
		{name: "hls", typ: tar.TypeLink, linkname: "ls"}, // hard link to a symlink
	}))
	dest := filepath.Join(dir, "d")
	if err := archive.Extract(context.Background(), arc, dest, archive.Options{Decoders: xzDecoders}); err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(filepath.Join(dest, "hls")); err != nil || target != "f" {
		t.Fatalf("hls should be a hard link of the symlink ls -> f: %q, %v", target, err)
	}
	for name, want := range map[string]string{"f": "new", "h": "old", "s": "plain", "hls": "new"} {
		got, err := os.ReadFile(filepath.Join(dest, name))
		if err != nil || string(got) != want {
			t.Fatalf("%s = %q, %v; want %q (no write through the hard link)", name, got, err, want)
		}
	}
}

func TestDestination(t *testing.T) {
	dir := t.TempDir()
	arc := writeFile(t, dir, "a.tar", tarBytes(t, sampleTree()))
	full := filepath.Join(dir, "full")
	os.MkdirAll(full, 0o755)
	writeFile(t, full, "keep", []byte("x"))
	if err := archive.Extract(context.Background(), arc, full, archive.Options{Decoders: xzDecoders}); !errors.Is(err, archive.ErrDestNotEmpty) {
		t.Fatalf("non-empty destination: %v, want archive.ErrDestNotEmpty", err)
	}
	if got, _ := os.ReadFile(filepath.Join(full, "keep")); string(got) != "x" {
		t.Fatal("existing content was touched")
	}
	empty := filepath.Join(dir, "empty")
	os.MkdirAll(empty, 0o755)
	if err := archive.Extract(context.Background(), arc, empty, archive.Options{Decoders: xzDecoders, StripComponents: 1}); err != nil {
		t.Fatalf("empty destination: %v", err)
	}
	checkSampleTree(t, empty, true)
}

func TestCorruptCompressedDataLeavesNothing(t *testing.T) {
	tarData := tarBytes(t, sampleTree())
	cases := map[string][]byte{}
	xzData := compress(t, tarData, "xz", "-c", "--block-size=64KiB")
	badXz := bytes.Clone(xzData)
	badXz[len(badXz)/2] ^= 0xFF
	cases["parallel.tar.xz"] = badXz
	single := compress(t, tarData, "xz", "-c")
	badSingle := bytes.Clone(single)
	badSingle[len(badSingle)/2] ^= 0xFF
	cases["single.tar.xz"] = badSingle
	gz := gzipBytes(t, tarData)
	cases["trunc.tar.gz"] = gz[:len(gz)-100]
	cases["trunc.tar.xz"] = xzData[:len(xzData)-16]
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			arc := writeFile(t, dir, name, data)
			dest := filepath.Join(dir, "dest")
			err := archive.Extract(context.Background(), arc, dest, archive.Options{Decoders: xzDecoders})
			if err == nil {
				t.Fatal("corrupt archive extracted without error")
			}
			if !strings.Contains(err.Error(), arc) {
				t.Fatalf("error %q does not name the archive", err)
			}
			noLeftovers(t, dest)
		})
	}
}

func TestExtractTarFromReader(t *testing.T) {
	dir := t.TempDir()
	data := gzipBytes(t, tarBytes(t, sampleTree()))
	dest := filepath.Join(dir, "venv")
	if err := archive.ExtractTar(context.Background(), bytes.NewReader(data), dest, archive.Options{Decoders: xzDecoders, StripComponents: 1, Name: "venv.tar.gz"}); err != nil {
		t.Fatal(err)
	}
	checkSampleTree(t, dest, true)

	evil := gzipBytes(t, tarBytes(t, []entry{{name: "../x", typ: tar.TypeReg, body: "x"}}))
	err := archive.ExtractTar(context.Background(), bytes.NewReader(evil), filepath.Join(dir, "d2"), archive.Options{Decoders: xzDecoders, Name: "upload.tar.gz"})
	var ue *archive.UnsafeEntryError
	if !errors.As(err, &ue) || ue.Archive != "upload.tar.gz" || !strings.Contains(err.Error(), `"../x"`) {
		t.Fatalf("got %v, want an archive.UnsafeEntryError naming upload.tar.gz and ../x", err)
	}
}

func TestExtractZipFromReaderAt(t *testing.T) {
	dir := t.TempDir()
	data := zipBytes(t, sampleTree())
	dest := filepath.Join(dir, "z")
	if err := archive.ExtractZip(context.Background(), bytes.NewReader(data), int64(len(data)), dest, archive.Options{Decoders: xzDecoders, StripComponents: 1}); err != nil {
		t.Fatal(err)
	}
	checkSampleTree(t, dest, false)
}

func TestUnknownFormat(t *testing.T) {
	dir := t.TempDir()
	arc := writeFile(t, dir, "a.rar", []byte("Rar!\x1a\x07\x00 not supported here"))
	err := archive.Extract(context.Background(), arc, filepath.Join(dir, "d"), archive.Options{Decoders: xzDecoders})
	if err == nil || !strings.Contains(err.Error(), "unrecognised archive format") || !strings.Contains(err.Error(), arc) {
		t.Fatalf("got %v", err)
	}
	if _, err := archive.DetectFormat([]byte{0x28, 0xB5, 0x2F, 0xFD, 0}, "x.tar.zst"); err == nil || !strings.Contains(err.Error(), "zstd") {
		t.Fatalf("zstd: %v", err)
	}
}

func TestCancelled(t *testing.T) {
	dir := t.TempDir()
	arc := writeFile(t, dir, "a.tar.xz", compress(t, tarBytes(t, sampleTree()), "xz", "-c", "--block-size=64KiB"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dest := filepath.Join(dir, "d")
	if err := archive.Extract(ctx, arc, dest, archive.Options{Decoders: xzDecoders}); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	noLeftovers(t, dest)
}

// TestMatchesSystemTar is the integration test against GNU tar and xz: a
// tree with executables, symlinks, hard links and nested directories is
// packed by the system tools into a multi-block .tar.xz, then extracted by
// both GNU tar and Archive, and the two trees must agree entry by entry.
func TestMatchesSystemTar(t *testing.T) {
	for _, tool := range []string{"tar", "xz"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is required: %v", tool, err)
		}
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src", "pkg-2.0")
	rng := rand.New(rand.NewSource(7))
	for i := 0; i < 300; i++ {
		sub := filepath.Join(src, fmt.Sprintf("d%d", i%7), fmt.Sprintf("e%d", i%3))
		os.MkdirAll(sub, 0o755)
		body := make([]byte, rng.Intn(20000))
		for j := range body {
			body[j] = "abcdefgh\n"[rng.Intn(9)]
		}
		mode := fs.FileMode(0o644)
		if i%5 == 0 {
			mode = 0o755
		}
		p := filepath.Join(sub, fmt.Sprintf("f%d.c", i))
		os.WriteFile(p, body, mode)
		os.Chmod(p, mode)
	}
	os.Symlink("d1/e1", filepath.Join(src, "alias"))
	os.Symlink("../../d2/e2/f2.c", filepath.Join(src, "d0", "e0", "up.c"))
	os.Link(filepath.Join(src, "d0/e0/f0.c"), filepath.Join(src, "hard.c"))
	arc := filepath.Join(dir, "pkg.tar.xz")
	cmd := exec.Command("sh", "-c", `tar -C "$1" -cf - pkg-2.0 | xz -T2 --block-size=128KiB -c >"$2"`, "sh", filepath.Join(dir, "src"), arc)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("packing: %v: %s", err, out)
	}
	ref := filepath.Join(dir, "ref")
	os.MkdirAll(ref, 0o755)
	if out, err := exec.Command("tar", "-C", ref, "--strip-components=1", "-xJf", arc).CombinedOutput(); err != nil {
		t.Fatalf("tar -x: %v: %s", err, out)
	}
	ours := filepath.Join(dir, "ours")
	if err := archive.Extract(context.Background(), arc, ours, archive.Options{Decoders: xzDecoders, StripComponents: 1}); err != nil {
		t.Fatal(err)
	}
	listing := func(root string) map[string]string {
		m := map[string]string{}
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				t.Fatal(err)
			}
			rel, _ := filepath.Rel(root, p)
			st, _ := os.Lstat(p)
			desc := st.Mode().String()
			switch {
			case st.Mode()&fs.ModeSymlink != 0:
				target, _ := os.Readlink(p)
				desc += " -> " + target
			case st.Mode().IsRegular():
				body, _ := os.ReadFile(p)
				desc += fmt.Sprintf(" %d %x %d links %v", len(body), body[:min(len(body), 16)], st.Sys().(*syscall.Stat_t).Nlink, st.ModTime().Unix())
				if len(body) > 0 && !bytes.Equal(body, mustRead(t, filepath.Join(src, rel))) {
					desc += " CONTENT-DIFFERS-FROM-SOURCE"
				}
			}
			if rel != "." {
				m[rel] = desc
			}
			return nil
		})
		return m
	}
	want, got := listing(ref), listing(ours)
	if len(want) < 300 {
		t.Fatalf("reference tree has only %d entries", len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: ours %q, tar %q", k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: only in ours", k)
		}
	}
}

func mustRead(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestXZNeedsADecoder checks that .tar.xz is refused, clearly and leaving
// nothing behind, by a caller that passed no xz decoder (the server).
func TestXZNeedsADecoder(t *testing.T) {
	dir := t.TempDir()
	data := compress(t, tarBytes(t, sampleTree()), "xz", "-c")
	arc := writeFile(t, dir, "a.tar.xz", data)
	dest := filepath.Join(dir, "d")
	for name, extract := range map[string]func() error{
		"file": func() error { return archive.Extract(context.Background(), arc, dest, archive.Options{}) },
		"stream": func() error {
			return archive.ExtractTar(context.Background(), bytes.NewReader(data), dest, archive.Options{})
		},
	} {
		err := extract()
		var nd *archive.NoDecoderError
		if !errors.As(err, &nd) || nd.Format != archive.FormatTarXz || !strings.Contains(err.Error(), "no xz decoder") {
			t.Errorf("%s: got %v, want a *NoDecoderError for tar.xz", name, err)
		}
		noLeftovers(t, dest)
	}
}

// TestMaxBytes: an archive whose files hold more than MaxBytes is refused
// at the entry that crosses it, a sparse file counting at its full size,
// and nothing is left behind.
func TestMaxBytes(t *testing.T) {
	dir := t.TempDir()
	arc := filepath.Join(dir, "big.tar")
	f, err := os.Create(arc)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	for _, e := range []struct {
		name string
		size int64
	}{{"small", 10}, {"zeros", 4 << 20}} {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: e.size, Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(make([]byte, e.size)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	dest := filepath.Join(dir, "out")
	err = archive.Extract(context.Background(), arc, dest, archive.Options{MaxBytes: 1 << 20})
	var tl *archive.TooLargeError
	if !errors.As(err, &tl) || tl.Entry != "zeros" || !strings.Contains(err.Error(), "more than the limit of 1048576 bytes") {
		t.Fatalf("err %v", err)
	}
	if _, err := os.Stat(dest); !os.IsNotExist(err) {
		t.Errorf("destination left behind: %v", err)
	}
	if err := archive.Extract(context.Background(), arc, dest, archive.Options{MaxBytes: 8 << 20}); err != nil {
		t.Errorf("under the limit: %v", err)
	}
}
