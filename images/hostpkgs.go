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

// hostPackages asks dpkg which packages own files. On hosts without dpkg it
// returns nothing: the SBOM then lists the trees only, which is all it can
// state truthfully. Files may be registered under their /lib alias on
// merged-/usr systems, so both spellings are asked.
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
		if rest, ok := strings.CutPrefix(f, "/usr/lib/"); ok {
			queries = append(queries, "/lib/"+rest)
		}
	}
	// dpkg-query -S exits 1 when some pattern matches nothing; its stdout
	// still lists the matches, so only a missing stdout is an error.
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "dpkg-query", append([]string{"-S", "--"}, queries...)...)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			return nil, fmt.Errorf("asking dpkg for the owners of the base libraries: %w: %s", err, stderr.String())
		}
	}
	owners := map[string]bool{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "diversion by") {
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
	cmd = exec.CommandContext(ctx, "dpkg-query", append([]string{"-W", "-f", "${Package}\t${Version}\t${Architecture}\t${Homepage}\n", "--"}, names...)...)
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
