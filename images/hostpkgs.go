package images

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
)

// HostPackage is a distribution package that owns host files copied into
// the base-libraries layer; the SBOM lists it next to the trees.
type HostPackage struct {
	Name, Version, Arch, Homepage string
}

// mergedUsrDirs are the top-level directories a merged-/usr system links
// into /usr, and under which dpkg may still register files (dash owns
// /bin/dash, found as /usr/bin/dash).
var mergedUsrDirs = []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// dpkgQueryArgBytes bounds the bytes of file names given to one dpkg-query
// (Linux allows 2 MiB of arguments and environment by default).
const dpkgQueryArgBytes = 256 << 10

// hostPackages asks dpkg which packages own files. On hosts without dpkg it
// returns nothing: the SBOM then lists the trees only, which is all it can
// state truthfully. Files may be registered under their /lib alias on
// merged-/usr systems (/bin, /sbin, /lib...), so both spellings are asked.
func hostPackages(ctx context.Context, files []string) ([]HostPackage, error) {
	if len(files) == 0 {
		return nil, nil
	}
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		return nil, nil
	}
	var queries []string
	for _, f := range files {
		queries = append(queries, f)
		for _, d := range mergedUsrDirs {
			if rest, ok := strings.CutPrefix(f, "/usr/"+d+"/"); ok {
				queries = append(queries, "/"+d+"/"+rest)
			}
		}
	}
	// dpkg-query -S exits 1 when some pattern matches nothing; its stdout
	// still lists the matches, so only a missing stdout is an error. The
	// queries go in batches: HostPaths can bring tens of thousands of
	// files, more than one command line holds.
	var out, stderr bytes.Buffer
	for len(queries) > 0 {
		n, size := 0, 0
		for n < len(queries) && (n == 0 || size+len(queries[n])+1 <= dpkgQueryArgBytes) {
			size += len(queries[n]) + 1
			n++
		}
		stderr.Reset()
		cmd := exec.CommandContext(ctx, "dpkg-query", append([]string{"-S", "--"}, queries[:n]...)...)
		cmd.Env = append(os.Environ(), "LC_ALL=C")
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Run(); err != nil {
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				return nil, fmt.Errorf("asking dpkg for the owners of the base libraries: %w: %s", err, stderr.String())
			}
		}
		queries = queries[n:]
	}
	owners := map[string]bool{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		line := sc.Text()
		// Diversions are reported as "diversion by PKG from: PATH" and
		// "local diversion from: PATH" (in English with LC_ALL=C).
		if strings.HasPrefix(line, "diversion by") || strings.HasPrefix(line, "local diversion") {
			continue
		}
		pkgs, _, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		for _, p := range strings.Split(pkgs, ", ") {
			owners[strings.TrimSpace(p)] = true
		}
	}
	if len(owners) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(owners))
	for n := range owners {
		names = append(names, n)
	}
	sort.Strings(names)
	out.Reset()
	stderr.Reset()
	cmd := exec.CommandContext(ctx, "dpkg-query", append([]string{"-W", "-f", "${Package}\t${Version}\t${Architecture}\t${Homepage}\n", "--"}, names...)...)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("asking dpkg for package versions: %w: %s", err, stderr.String())
	}
	seen := map[string]bool{}
	var pkgs []HostPackage
	sc = bufio.NewScanner(&out)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) < 4 || seen[f[0]+":"+f[2]] {
			continue
		}
		seen[f[0]+":"+f[2]] = true
		pkgs = append(pkgs, HostPackage{Name: f[0], Version: f[1], Arch: f[2], Homepage: f[3]})
	}
	sort.Slice(pkgs, func(i, j int) bool {
		if pkgs[i].Name != pkgs[j].Name {
			return pkgs[i].Name < pkgs[j].Name
		}
		return pkgs[i].Arch < pkgs[j].Arch
	})
	return pkgs, nil
}

// hostDistro is the ID field of /etc/os-release ("debian", "ubuntu"), used
// as the package URL namespace; "debian" when unknown.
func hostDistro() string {
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return "debian"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "ID="); ok {
			if v = strings.Trim(v, `"'`); v != "" {
				return v
			}
		}
	}
	return "debian"
}
