package python

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// minPython is the oldest interpreter the stub supports.
var minPython = [2]int{3, 8}

// EnvError reports a python execution environment that cannot run the stub:
// a broken or unsafe archive, a missing interpreter, an interpreter that is
// too old or lacks numpy. Path names the file at fault and Check what failed.
// The message starts like Triton's so that people searching for the
// familiar text find it.
type EnvError struct {
	Model string // model name
	Path  string // the archive, directory or interpreter at fault
	Check string // "EXECUTION_ENV_PATH", "extract", "interpreter", "python version", "numpy"
	Err   error
}

func (e *EnvError) Error() string {
	return fmt.Sprintf("Failed to setup Python execution environment for model %q: %s check failed for %s: %v",
		e.Model, e.Check, e.Path, e.Err)
}

func (e *EnvError) Unwrap() error { return e.Err }

// interpreterInfo is what a successful probe learned.
type interpreterInfo struct {
	Python string // "3.11.2"
	NumPy  string // "1.24.2"
}

var pythonVersionRE = regexp.MustCompile(`Python (\d+)\.(\d+)(?:\.(\d+))?`)

// probeInterpreter checks that path is an interpreter the stub can run on:
// it exists and is executable, reports Python >= 3.8, and imports numpy.
// env is the environment the stub will get, so that an env's PATH and
// library path apply to the probe too.
func probeInterpreter(ctx context.Context, model, path string, env []string, timeout time.Duration) (interpreterInfo, error) {
	fail := func(check string, err error) (interpreterInfo, error) {
		return interpreterInfo{}, &EnvError{Model: model, Path: path, Check: check, Err: err}
	}
	st, err := os.Stat(path)
	if err != nil {
		return fail("interpreter", err)
	}
	if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		return fail("interpreter", fmt.Errorf("not an executable file (mode %s)", st.Mode()))
	}
	out, err := runProbe(ctx, path, env, timeout, "--version")
	if err != nil {
		return fail("interpreter", err)
	}
	m := pythonVersionRE.FindStringSubmatch(out)
	if m == nil {
		return fail("python version", fmt.Errorf("`%s --version` printed %q, not a Python version", path, firstLine(out)))
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	version := strings.TrimPrefix(m[0], "Python ")
	if major < minPython[0] || major == minPython[0] && minor < minPython[1] {
		return fail("python version", fmt.Errorf("interpreter is Python %s; the python backend needs Python >= %d.%d",
			version, minPython[0], minPython[1]))
	}
	out, err = runProbe(ctx, path, env, timeout, "-c", "import numpy; print(numpy.__version__)")
	if err != nil {
		return fail("numpy", fmt.Errorf("interpreter Python %s cannot import numpy, which the python backend needs: %w", version, err))
	}
	return interpreterInfo{Python: version, NumPy: strings.TrimSpace(out)}, nil
}

// runProbe runs the interpreter and returns stdout+stderr. A failure quotes
// the last line of output, which for Python is the exception.
func runProbe(ctx context.Context, path string, env []string, timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = env
	cmd.WaitDelay = time.Second
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("running %s %s: no answer within %s", path, strings.Join(args, " "), timeout)
		}
		if last := lastLine(out.String()); last != "" {
			return "", fmt.Errorf("%w: %s", err, last)
		}
		return "", err
	}
	return out.String(), nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
