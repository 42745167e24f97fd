package fetch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

func TestDebSrcSourcesGolden(t *testing.T) {
	got, err := DebSrcSources("testdata/apt/etc")
	if err != nil {
		t.Fatal(err)
	}
	golden := "testdata/apt/deb-src.sources"
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("generated sources differ from %s (run with -update after checking):\n%s", golden, got)
	}
	s := string(got)
	for _, absent := range []string{"off.invalid", "disabled.invalid", "Types: deb\n", "Enabled"} {
		if strings.Contains(s, absent) {
			t.Errorf("output contains %q", absent)
		}
	}
}

// TestDebSrcSourcesAcceptedByApt hands the generated file to the real apt,
// which lists the index files it would download without any network.
func TestDebSrcSourcesAcceptedByApt(t *testing.T) {
	testenv.NeedTools(t, "apt-get")
	content, err := DebSrcSources("testdata/apt/etc")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "deb-src.sources")
	if err := os.WriteFile(src, content, 0o644); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "lists", "partial"), 0o755)
	os.MkdirAll(filepath.Join(dir, "cache", "archives", "partial"), 0o755)
	out, err := exec.Command("apt-get",
		"-o", "Dir::Etc::sourcelist="+src, "-o", "Dir::Etc::sourceparts=-",
		"-o", "Dir::State::Lists="+filepath.Join(dir, "lists"), "-o", "Dir::Cache="+filepath.Join(dir, "cache"),
		"update", "--print-uris").CombinedOutput()
	if err != nil {
		t.Fatalf("apt-get rejected the generated file: %v\n%s", err, out)
	}
	for _, want := range []string{
		"http://deb.debian.org/debian/dists/bookworm/main/source/Sources",
		"http://deb.debian.org/debian/dists/bookworm/contrib/source/Sources",
		"http://deb.debian.org/debian/dists/bookworm-updates/main/source/Sources",
		"http://deb.debian.org/debian-security/dists/bookworm-security/main/source/Sources",
		"https://example.org/apt/dists/stable/main/source/Sources",
		"http://repo.invalid/flat/./Sources",
		"http://mirror.invalid/debian/dists/trixie/non-free-firmware/source/Sources",
		"https://vendor.invalid/apt/dists/stable/main/source/Sources",
		"http://third.invalid/y/dists/bookworm/main/source/Sources",
	} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("apt would not fetch %s:\n%s", want, out)
		}
	}
	for _, absent := range []string{"off.invalid", "disabled.invalid", "binary-"} {
		if bytes.Contains(out, []byte(absent)) {
			t.Errorf("apt would fetch %s:\n%s", absent, out)
		}
	}
}

func TestDebSrcSourcesErrors(t *testing.T) {
	if _, err := DebSrcSources("testdata/apt/bad"); err == nil || !strings.Contains(err.Error(), "sources.list:1") {
		t.Errorf("malformed line: %v, want an error naming sources.list:1", err)
	}
	if _, err := DebSrcSources(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no enabled deb entries") {
		t.Errorf("empty configuration: %v", err)
	}
	for _, tc := range []struct{ text, want string }{
		{" URIs: x\nTypes: deb\n", "continuation"},
		{"Types deb\n", "Field: value"},
		{"Types: deb\nURIs: http://x\n", "lacks the Suites field"},
	} {
		if _, err := parseDeb822(strings.NewReader(tc.text), "f.sources"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.text, err, tc.want)
		}
	}
	if _, err := parseOneLine(strings.NewReader("deb [arch=amd64 http://x bookworm\n"), "f.list"); err == nil {
		t.Error("unterminated options accepted")
	}
}

// scriptedApt writes an apt-get stand-in that logs its arguments and
// answers like apt: it serves files for hello=2.10-3 and fails for any
// other version. The real apt is exercised by TestAptFetchReal*; this one
// pins down what FetchApt does around it (private options, one update,
// refresh on a miss, checksum, error text) without a network.
func scriptedApt(t *testing.T, files map[string][]byte) (opts Options, log string) {
	dir := t.TempDir()
	served := filepath.Join(dir, "files")
	os.Mkdir(served, 0o755)
	for n, b := range files {
		os.WriteFile(filepath.Join(served, n), b, 0o644)
	}
	log = filepath.Join(dir, "calls")
	script := `#!/bin/sh
echo "$*" >> '` + log + `'
for a; do last=$a; done
case " $* " in
*" update "*) echo "Hit:1 scripted"; exit 0 ;;
*" source "*)
	if [ "$last" = hello=2.10-3 ]; then cp '` + served + `'/* . && echo "Download complete"; exit 0; fi
	# A mirror that lacks the debian tarball: the rest arrives, apt fails.
	if [ "$last" = hello=2.10-4 ]; then cp '` + served + `'/*.orig.* .
		echo "E: Failed to fetch http://mirror.invalid/hello_2.10-4.debian.tar.xz  404  Not Found" >&2
		echo "E: Failed to fetch some archives." >&2; exit 100; fi
	echo "Reading package lists..."
	echo "E: Can not find version '${last#*=}' of package '${last%%=*}'" >&2
	echo "E: Unable to find a source package for ${last%%=*}" >&2
	exit 100 ;;
esac
exit 2
`
	bin := filepath.Join(dir, "apt-get")
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	// apt-cache showsrc knows hello 2.10-3 (source of the binary package
	// hello-bin too) with the served files, and one older version.
	var sums strings.Builder
	for n, b := range files {
		sum := sha256.Sum256(b)
		fmt.Fprintf(&sums, " %x %d %s\n", sum, len(b), n)
	}
	showsrc := "Package: hello\nBinary: hello\nVersion: 2.10-3\nChecksums-Sha256:\n" + sums.String() +
		"\nPackage: hello\nVersion: 2.9-1\nChecksums-Sha256:\n 0000000000000000000000000000000000000000000000000000000000000000 10 hello_2.9.orig.tar.gz\n"
	os.WriteFile(filepath.Join(dir, "showsrc.txt"), []byte(showsrc), 0o644)
	cacheScript := `#!/bin/sh
echo "$*" >> '` + log + `.apt-cache'
for a; do last=$a; done
case "$last" in
hello|hello-bin) cat '` + filepath.Join(dir, "showsrc.txt") + `' ;;
*) echo "W: Unable to locate package $last" >&2 ;;
esac
exit 0
`
	if err := os.WriteFile(filepath.Join(dir, "apt-cache"), []byte(cacheScript), 0o755); err != nil {
		t.Fatal(err)
	}
	return Options{AptGet: bin, AptEtc: "testdata/apt/etc", Log: newTestLog(t)}, log
}

func aptCalls(t *testing.T, log string) []string {
	b, err := os.ReadFile(log)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func TestFetchAptPrivateConfiguration(t *testing.T) {
	orig, origSHA := testBlob(30_000)
	deb, debSHA := testBlob(3_000)
	opts, log := scriptedApt(t, map[string][]byte{"hello_2.10.orig.tar.gz": orig, "hello_2.10-3.debian.tar.xz": deb, "hello_2.10-3.dsc": []byte("dsc")})
	c := Cache{Dir: t.TempDir()}
	ctx := context.Background()

	p, err := FetchApt(ctx, AptSpec{Package: "hello", Version: "2.10-3", File: "hello_2.10.orig.tar.gz", SHA256: origSHA}, c, opts)
	if err != nil {
		t.Fatal(err)
	}
	checkCached(t, c, p, origSHA, orig)
	calls := aptCalls(t, log)
	if len(calls) != 2 || !strings.HasSuffix(calls[0], " update") || !strings.HasSuffix(calls[1], " source --download-only --only-source hello=2.10-3") {
		t.Fatalf("apt-get calls:\n%s", strings.Join(calls, "\n"))
	}
	aptDir := filepath.Join(c.Dir, "apt")
	for _, o := range []string{
		"-o Dir::Etc::sourcelist=" + filepath.Join(aptDir, "deb-src.sources"),
		"-o Dir::Etc::sourceparts=-",
		"-o Dir::State::Lists=" + filepath.Join(aptDir, "lists"),
		"-o Dir::Cache=" + filepath.Join(aptDir, "cache"),
	} {
		for _, call := range calls {
			if !strings.Contains(call, o) {
				t.Errorf("call %q lacks %q", call, o)
			}
		}
	}
	want, _ := DebSrcSources("testdata/apt/etc")
	if got, _ := os.ReadFile(filepath.Join(aptDir, "deb-src.sources")); !bytes.Equal(got, want) {
		t.Errorf("private sources file differs from DebSrcSources:\n%s", got)
	}
	if fi, err := os.Stat(filepath.Join(aptDir, "lists", "partial")); err != nil || !fi.IsDir() {
		t.Errorf("lists/partial: %v", err)
	}

	// Another file of the same package: the lists are reused.
	p2, err := FetchApt(ctx, AptSpec{Package: "hello", Version: "2.10-3", File: "hello_2.10-3.debian.tar.xz", SHA256: debSHA}, c, opts)
	if err != nil {
		t.Fatal(err)
	}
	checkCached(t, c, p2, debSHA, deb)
	if calls = aptCalls(t, log); len(calls) != 3 || strings.HasSuffix(calls[2], " update") {
		t.Fatalf("second fetch ran apt-get update again:\n%s", strings.Join(calls, "\n"))
	}
	// Cached: nothing is downloaded, but the version is checked against
	// the lists (defect 9: a warm cache hid a wrong apt_version).
	if _, err := FetchApt(ctx, AptSpec{Package: "hello", Version: "2.10-3", File: "hello_2.10.orig.tar.gz", SHA256: origSHA}, c, opts); err != nil {
		t.Fatal(err)
	}
	if n := len(aptCalls(t, log)); n != 3 {
		t.Fatalf("a cached fetch ran apt-get (%d calls)", n)
	}
	if calls := aptCalls(t, log+".apt-cache"); len(calls) != 1 || !strings.HasSuffix(calls[0], " showsrc hello") {
		t.Fatalf("a cached fetch did not check the version: apt-cache calls %q", calls)
	}
	_, err = FetchApt(ctx, AptSpec{Package: "hello", Version: "2.10-4", File: "hello_2.10.orig.tar.gz", SHA256: origSHA}, c, opts)
	var ve *AptVersionError
	if !errors.As(err, &ve) || !strings.Contains(err.Error(), "no version 2.10-4 (they have: 2.10-3, 2.9-1)") {
		t.Fatalf("a cached file under a wrong apt_version: %v", err)
	}
	if left, _ := os.ReadDir(filepath.Join(c.Dir, "tmp")); len(left) != 0 {
		t.Errorf("tmp/ holds %d entries", len(left))
	}
}

func TestFetchAptErrors(t *testing.T) {
	orig, origSHA := testBlob(30_000)
	_, otherSHA := testBlob(31_000)
	opts, log := scriptedApt(t, map[string][]byte{"hello_2.10.orig.tar.gz": orig})
	ctx := context.Background()

	t.Run("checksum", func(t *testing.T) {
		c := Cache{Dir: t.TempDir()}
		_, err := FetchApt(ctx, AptSpec{Package: "hello", Version: "2.10-3", File: "hello_2.10.orig.tar.gz", SHA256: otherSHA}, c, opts)
		var ce *ChecksumError
		if !errors.As(err, &ce) || ce.URL != "apt:hello=2.10-3/hello_2.10.orig.tar.gz" || ce.Want != otherSHA || ce.Got != origSHA {
			t.Fatalf("want ChecksumError, got %v", err)
		}
		if c.Has(otherSHA) || c.Has(origSHA) {
			t.Fatal("a mismatching file entered the cache")
		}
	})
	t.Run("missing file", func(t *testing.T) {
		c := Cache{Dir: t.TempDir()}
		_, err := FetchApt(ctx, AptSpec{Package: "hello", Version: "2.10-3", File: "hello_2.11.orig.tar.gz", SHA256: origSHA}, c, opts)
		if err == nil || !strings.Contains(err.Error(), "hello_2.11.orig.tar.gz") || !strings.Contains(err.Error(), "it got: hello_2.10.orig.tar.gz") {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("unknown version refreshes once", func(t *testing.T) {
		c := Cache{Dir: t.TempDir()}
		spec := AptSpec{Package: "hello", Version: "9.9-1", File: "hello_9.9.orig.tar.gz", SHA256: origSHA}
		// The first call updates the lists itself, so a miss is final.
		os.Remove(log)
		_, err := FetchApt(ctx, spec, c, opts)
		for _, s := range []string{"hello=9.9-1", "E: Unable to find a source package for hello", "exit status 100"} {
			if err == nil || !strings.Contains(err.Error(), s) {
				t.Errorf("error %v lacks %q", err, s)
			}
		}
		if n := len(aptCalls(t, log)); n != 2 {
			t.Errorf("%d apt-get calls, want update + source", n)
		}
		// With lists from an earlier run, a miss triggers one refresh.
		os.Remove(log)
		_, err = FetchApt(ctx, spec, c, opts)
		calls := aptCalls(t, log)
		if err == nil || len(calls) != 3 || !strings.HasSuffix(calls[1], " update") {
			t.Errorf("err %v, calls:\n%s", err, strings.Join(calls, "\n"))
		}
	})
	t.Run("another file of the package is missing", func(t *testing.T) {
		c := Cache{Dir: t.TempDir()}
		p, err := FetchApt(ctx, AptSpec{Package: "hello", Version: "2.10-4", File: "hello_2.10.orig.tar.gz", SHA256: origSHA}, c, opts)
		if err != nil {
			t.Fatalf("the wanted file arrived, but: %v", err)
		}
		checkCached(t, c, p, origSHA, orig)
		// What arrived is still checked.
		_, err = FetchApt(ctx, AptSpec{Package: "hello", Version: "2.10-4", File: "hello_2.10.orig.tar.gz", SHA256: otherSHA}, Cache{Dir: t.TempDir()}, opts)
		var ce *ChecksumError
		if !errors.As(err, &ce) {
			t.Fatalf("want ChecksumError, got %v", err)
		}
		// The wanted file itself missing: apt's complaint is the error.
		_, err = FetchApt(ctx, AptSpec{Package: "hello", Version: "2.10-4", File: "hello_2.10-4.debian.tar.xz", SHA256: origSHA}, Cache{Dir: t.TempDir()}, opts)
		if err == nil || !strings.Contains(err.Error(), "404  Not Found") {
			t.Fatalf("error %v, want apt's 404", err)
		}
	})
	t.Run("bad spec", func(t *testing.T) {
		c := Cache{Dir: t.TempDir()}
		for _, s := range []AptSpec{
			{Package: "hello", Version: "2.10-3", File: "../x", SHA256: origSHA},
			{Package: "-o", Version: "2.10-3", File: "x", SHA256: origSHA},
			{Package: "hello", File: "x", SHA256: origSHA},
			{Package: "hello", Version: "2.10-3", File: "x", SHA256: "123"},
		} {
			if _, err := FetchApt(ctx, s, c, opts); err == nil {
				t.Errorf("%+v accepted", s)
			}
		}
	})
	t.Run("no apt-get", func(t *testing.T) {
		o := opts
		o.AptGet = filepath.Join(t.TempDir(), "apt-get")
		_, err := FetchApt(ctx, AptSpec{Package: "hello", Version: "2.10-3", File: "x", SHA256: origSHA}, Cache{Dir: t.TempDir()}, o)
		if err == nil || !strings.Contains(err.Error(), "apt-get") {
			t.Fatalf("error %v", err)
		}
	})
}

// realAptOptions returns options for the real apt and the machine's
// configuration, or skips when apt or its archive cannot be reached here.
func realAptOptions(t *testing.T) Options {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: skipping a download from the distribution's archive")
	}
	testenv.NeedTools(t, "apt-get")
	content, err := DebSrcSources("/etc/apt")
	if err != nil {
		testenv.Unavailable(t, "no usable apt configuration: %v", err)
	}
	ps, err := parseDeb822(bytes.NewReader(content), "generated")
	if err != nil {
		t.Fatal(err)
	}
	var tried []string
	for _, p := range ps {
		uris, _ := p.get("URIs")
		for _, s := range strings.Fields(uris) {
			u, err := url.Parse(s)
			if err != nil || u.Host == "" {
				continue
			}
			host := u.Host
			if u.Port() == "" {
				port := "80"
				if u.Scheme == "https" {
					port = "443"
				}
				host = net.JoinHostPort(u.Hostname(), port)
			}
			conn, err := net.DialTimeout("tcp", host, 5*time.Second)
			if err == nil {
				conn.Close()
				return Options{Log: newTestLog(t)}
			}
			tried = append(tried, err.Error())
		}
	}
	testenv.Unavailable(t, "the distribution's archive is unreachable: %s", strings.Join(tried, "; "))
	return Options{}
}

func checkRealFile(t *testing.T, p string, size int64, sha string) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != size {
		t.Fatalf("%s: %d bytes, want %d", p, fi.Size(), size)
	}
	got, err := hashFile(context.Background(), p)
	if err != nil || got != sha {
		t.Fatalf("%s: sha256 %s (%v), want %s", p, got, err, sha)
	}
}

// TestAptFetchRealHello downloads a small source package through the real
// apt and the distribution's archive, always into a fresh cache so that apt
// really runs.
func TestAptFetchRealHello(t *testing.T) {
	opts := realAptOptions(t)
	c := Cache{Dir: t.TempDir()}
	// GNU hello 2.10's upstream tarball, as the Debian archive carries it.
	spec := AptSpec{Package: "hello", Version: "2.10-3", File: "hello_2.10.orig.tar.gz",
		SHA256: "31e066137a962676e89f69d1b65382de95a7ef7d914b8cb956f41ea72e0f516b"}
	p, err := FetchApt(context.Background(), spec, c, opts)
	if err != nil {
		t.Fatal(err)
	}
	checkRealFile(t, p, 725946, spec.SHA256)
	// Only the named file is kept.
	if es, _ := os.ReadDir(filepath.Join(c.Dir, "sha256")); len(es) != 1 {
		t.Errorf("sha256/ holds %d files, want 1", len(es))
	}
	// The lists persist: a fetch of a version that does not exist fails
	// naming it, after at most one refresh.
	_, err = FetchApt(context.Background(), AptSpec{Package: "hello", Version: "0.0-0", File: "hello_0.0.orig.tar.gz", SHA256: spec.SHA256[:63] + "0"}, c, opts)
	if err == nil || !strings.Contains(err.Error(), "hello=0.0-0") || !strings.Contains(err.Error(), "E: ") {
		t.Fatalf("fetching a missing version: %v", err)
	}
}

// TestAptFetchRealLLVM downloads LLVM 15.0.6's upstream tarball (137 MB)
// from the distribution's archive, the source the LLVM recipe builds from.
// TRITONBUILD_TEST_CACHE names a cache directory to keep it in across runs.
func TestAptFetchRealLLVM(t *testing.T) {
	opts := realAptOptions(t)
	dir := os.Getenv("TRITONBUILD_TEST_CACHE")
	if dir == "" {
		dir = t.TempDir()
	}
	c := Cache{Dir: dir}
	spec := AptSpec{Package: "llvm-toolchain-15", Version: "1:15.0.6-4", File: "llvm-toolchain-15_15.0.6.orig.tar.xz",
		SHA256: "076ac9fe372b3141b4fcbee80abfae34f9574fdb959cd8d14a7fd3f39ff89399"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	p, err := FetchApt(ctx, spec, c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fetched %s in %v", p, time.Since(start).Round(time.Millisecond))
	checkRealFile(t, p, 136794284, spec.SHA256)
	// A second fetch is a cache hit that needs no apt.
	opts.AptGet = "/nonexistent/apt-get"
	if p2, err := FetchApt(ctx, spec, c, opts); err != nil || p2 != p {
		t.Fatalf("cached fetch: %s, %v", p2, err)
	}
}

// `tritonbuild source apt` finds a package by source or binary name and
// picks the newest version, or the one asked for, with its tarball.
func TestShowAptSource(t *testing.T) {
	orig, origSHA := testBlob(30_000)
	opts, _ := scriptedApt(t, map[string][]byte{"hello_2.10.orig.tar.gz": orig, "hello_2.10-3.debian.tar.xz": []byte("d"), "hello_2.10-3.dsc": []byte("dsc")})
	c := Cache{Dir: t.TempDir()}
	ctx := context.Background()
	got, err := ShowAptSource(ctx, "hello-bin", "", c, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := AptSource{Package: "hello", Version: "2.10-3", File: "hello_2.10.orig.tar.gz", SHA256: origSHA, Versions: []string{"2.10-3", "2.9-1"}}
	if got.Package != want.Package || got.Version != want.Version || got.File != want.File || got.SHA256 != want.SHA256 || strings.Join(got.Versions, " ") != "2.10-3 2.9-1" {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if got, err := ShowAptSource(ctx, "hello", "2.9-1", c, opts); err != nil || got.File != "hello_2.9.orig.tar.gz" {
		t.Errorf("hello=2.9-1: %+v %v", got, err)
	}
	if _, err := ShowAptSource(ctx, "hello", "3.0-1", c, opts); err == nil || !strings.Contains(err.Error(), "they have: 2.10-3, 2.9-1") {
		t.Errorf("hello=3.0-1: %v", err)
	}
	if _, err := ShowAptSource(ctx, "nosuch", "", c, opts); err == nil || !strings.Contains(err.Error(), "no source package") {
		t.Errorf("nosuch: %v", err)
	}
}

// Defect 10: apt's own chatter and warnings do not pass through to the
// person when the command succeeds.
func TestAptOutputStaysQuiet(t *testing.T) {
	orig, origSHA := testBlob(30_000)
	opts, _ := scriptedApt(t, map[string][]byte{"hello_2.10.orig.tar.gz": orig})
	var log bytes.Buffer
	opts.Log = &log
	if _, err := FetchApt(context.Background(), AptSpec{Package: "hello", Version: "2.10-3", File: "hello_2.10.orig.tar.gz", SHA256: origSHA}, Cache{Dir: t.TempDir()}, opts); err != nil {
		t.Fatal(err)
	}
	for _, noise := range []string{"Hit:1 scripted", "Download complete"} {
		if strings.Contains(log.String(), noise) {
			t.Errorf("apt's %q reached the log:\n%s", noise, log.String())
		}
	}
}
