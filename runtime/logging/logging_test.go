package logging

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

func TestLineFormatsAndSwitches(t *testing.T) {
	var out bytes.Buffer
	l, err := New(&out, Settings{Info: true, Warning: true, Error: true, Format: FormatDefault})
	if err != nil {
		t.Fatal(err)
	}
	log := l.Logger().With("model", "m")
	log.Info("Started HTTPService at 0.0.0.0:8000", "addr", "0.0.0.0:8000", "note", "two words")
	log.Debug("hidden: verbose is off")
	defaultLine := regexp.MustCompile(`^I\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ logging_test\.go:\d+\] Started HTTPService at 0\.0\.0\.0:8000 model=m addr=0\.0\.0\.0:8000 note="two words"\n$`)
	if !defaultLine.MatchString(out.String()) {
		t.Fatalf("default format line: %q", out.String())
	}

	out.Reset()
	iso, verbose := FormatISO8601, uint32(2)
	off := false
	if _, err := l.Apply(Update{Format: &iso, Verbose: &verbose, Info: &off}); err != nil {
		t.Fatal(err)
	}
	log.Info("info is off now")
	log.Warn("careful")
	log.Debug("verbose 1")
	log.Log(context.Background(), slog.LevelDebug-1, "verbose 2")
	log.Log(context.Background(), slog.LevelDebug-2, "verbose 3 stays hidden")
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	isoLine := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ([IWE]) \d+ logging_test\.go:\d+\] (.*) model=m$`)
	var got []string
	for _, line := range lines {
		m := isoLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("ISO8601 line: %q", line)
		}
		got = append(got, m[1]+" "+m[2])
	}
	if want := []string{"W careful", "I verbose 1", "I verbose 2"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("lines %q, want %q", got, want)
	}
	st := l.Settings()
	if st.Info || !st.Warning || !st.Error || st.Verbose != 2 || st.Format != FormatISO8601 {
		t.Errorf("settings after update: %+v", st)
	}
}

func TestApplyRefusals(t *testing.T) {
	l, err := New(&bytes.Buffer{}, Settings{File: "/var/log/t.log", Info: true, Format: FormatDefault})
	if err != nil {
		t.Fatal(err)
	}
	file, bad, on := "/tmp/other.log", "json", false
	_, err = l.Apply(Update{File: &file, Info: &on})
	var be *backend.Error
	if !errors.As(err, &be) || be.Code != backend.Unsupported || be.Msg != "log file location can not be updated through network protocol" {
		t.Errorf("changing the file: %v", err)
	}
	if _, err := l.Apply(Update{Format: &bad}); err == nil || !strings.Contains(err.Error(), "json") {
		t.Errorf("bad format: %v", err)
	}
	if st := l.Settings(); !st.Info || st.File != "/var/log/t.log" || st.Format != FormatDefault {
		t.Errorf("a refused update changed the settings: %+v", st)
	}
	if _, err := New(&bytes.Buffer{}, Settings{Format: "xml"}); err == nil {
		t.Error("New accepted format xml")
	}
}
