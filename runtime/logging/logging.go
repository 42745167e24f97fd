// Package logging is the server's one log: a slog.Handler that writes
// Triton's line format and whose settings (which severities are on, the
// verbose level, the format) change while the server runs, as Triton's
// logging extension (GET/POST /v2/logging, gRPC LogSettings) requires.
//
// Lines look like Triton's: "I0105 10:20:30.123456 4242 main.go:120] msg"
// in the default format and "2024-01-05T10:20:30Z I 4242 main.go:120] msg"
// in ISO8601; slog attributes follow the message as key=value pairs.
// Severities map as Triton's: slog's Error, Warn and Info levels to E, W
// and I, each switched on and off on its own; levels below Info are verbose
// messages, Debug being verbose level 1, Debug-1 level 2 and so on, printed
// with I like Triton's verbose lines.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// Formats of --log-format, with Triton's names.
const (
	FormatDefault = "default"
	FormatISO8601 = "ISO8601"
)

// Settings are the log settings as Triton's logging extension reports them.
type Settings struct {
	File    string // "" means standard error; fixed at startup
	Info    bool
	Warning bool
	Error   bool
	Verbose uint32
	Format  string // FormatDefault or FormatISO8601
}

// Update names the settings a request changes; nil fields stay as they are.
type Update struct {
	File    *string
	Info    *bool
	Warning *bool
	Error   *bool
	Verbose *uint32
	Format  *string
}

// Log is the shared state behind every handler derived from it.
type Log struct {
	mu  sync.Mutex // serializes writes and settings updates
	out io.Writer

	file                string
	info, warning, errs atomic.Bool
	verbose             atomic.Uint32
	iso                 atomic.Bool
	pid                 string
}

// New returns a log writing to out with settings s (s.File is only
// reported: the caller opened it).
func New(out io.Writer, s Settings) (*Log, error) {
	if err := checkFormat(s.Format); err != nil {
		return nil, err
	}
	l := &Log{out: out, file: s.File, pid: strconv.Itoa(os.Getpid())}
	l.info.Store(s.Info)
	l.warning.Store(s.Warning)
	l.errs.Store(s.Error)
	l.verbose.Store(s.Verbose)
	l.iso.Store(s.Format == FormatISO8601)
	return l, nil
}

func checkFormat(f string) error {
	switch f {
	case FormatDefault, FormatISO8601, "":
		return nil
	}
	return backend.Errorf(backend.InvalidArg, "invalid argument for --log-format, got: %s (want default or ISO8601)", f)
}

// Settings returns the current settings.
func (l *Log) Settings() Settings {
	f := FormatDefault
	if l.iso.Load() {
		f = FormatISO8601
	}
	return Settings{File: l.file, Info: l.info.Load(), Warning: l.warning.Load(), Error: l.errs.Load(), Verbose: l.verbose.Load(), Format: f}
}

// Apply changes the settings u names, all or none: the log file cannot
// change at run time (Triton's rule and message), and a format other than
// Triton's two is refused. Errors are *backend.Error.
func (l *Log) Apply(u Update) (Settings, error) {
	if u.File != nil {
		return l.Settings(), backend.Errorf(backend.Unsupported, "log file location can not be updated through network protocol")
	}
	if u.Format != nil {
		if err := checkFormat(*u.Format); err != nil || *u.Format == "" {
			return l.Settings(), backend.Errorf(backend.InvalidArg, "invalid argument for log_format, got: '%s' (want default or ISO8601)", *u.Format)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if u.Info != nil {
		l.info.Store(*u.Info)
	}
	if u.Warning != nil {
		l.warning.Store(*u.Warning)
	}
	if u.Error != nil {
		l.errs.Store(*u.Error)
	}
	if u.Verbose != nil {
		l.verbose.Store(*u.Verbose)
	}
	if u.Format != nil {
		l.iso.Store(*u.Format == FormatISO8601)
	}
	return l.Settings(), nil
}

// Logger returns a logger writing through l.
func (l *Log) Logger() *slog.Logger { return slog.New(&handler{log: l}) }

// Verbose reports whether verbose messages of level n (1 and up) are on.
func (l *Log) Verbose(n uint32) bool { return l.verbose.Load() >= n }

func (l *Log) enabled(level slog.Level) bool {
	switch {
	case level >= slog.LevelError:
		return l.errs.Load()
	case level >= slog.LevelWarn:
		return l.warning.Load()
	case level >= slog.LevelInfo:
		return l.info.Load()
	}
	// Debug is verbose level 1, Debug-1 level 2, ...
	need := int64(slog.LevelDebug-level) + 1
	return int64(l.verbose.Load()) >= need
}

type handler struct {
	log    *Log
	prefix []byte // pre-rendered attributes of With, groups applied
	groups string // open groups, "a.b."
}

func (h *handler) Enabled(_ context.Context, level slog.Level) bool { return h.log.enabled(level) }

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	n := &handler{log: h.log, groups: h.groups, prefix: append([]byte(nil), h.prefix...)}
	for _, a := range attrs {
		n.prefix = appendAttr(n.prefix, h.groups, a)
	}
	return n
}

func (h *handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &handler{log: h.log, prefix: h.prefix, groups: h.groups + name + "."}
}

func (h *handler) Handle(_ context.Context, r slog.Record) error {
	b := make([]byte, 0, 160)
	sev := byte('I')
	switch {
	case r.Level >= slog.LevelError:
		sev = 'E'
	case r.Level >= slog.LevelWarn:
		sev = 'W'
	}
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	if h.log.iso.Load() {
		b = t.UTC().AppendFormat(b, "2006-01-02T15:04:05Z")
		b = append(b, ' ', sev)
	} else {
		b = append(b, sev)
		b = t.AppendFormat(b, "0102 15:04:05.000000")
	}
	b = append(b, ' ')
	b = append(b, h.log.pid...)
	b = append(b, ' ')
	if r.PC != 0 {
		f, _ := runtime.CallersFrames([]uintptr{r.PC}).Next()
		b = append(b, filepath.Base(f.File)...)
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(f.Line), 10)
	} else {
		b = append(b, "tritonserver"...)
	}
	b = append(b, "] "...)
	b = append(b, r.Message...)
	b = append(b, h.prefix...)
	r.Attrs(func(a slog.Attr) bool {
		b = appendAttr(b, h.groups, a)
		return true
	})
	b = append(b, '\n')
	h.log.mu.Lock()
	defer h.log.mu.Unlock()
	_, err := h.log.out.Write(b)
	return err
}

// appendAttr renders " key=value", quoting values that need it.
func appendAttr(b []byte, groups string, a slog.Attr) []byte {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return b
	}
	if a.Value.Kind() == slog.KindGroup {
		g := groups
		if a.Key != "" {
			g += a.Key + "."
		}
		for _, ga := range a.Value.Group() {
			b = appendAttr(b, g, ga)
		}
		return b
	}
	b = append(b, ' ')
	b = append(b, groups...)
	b = append(b, a.Key...)
	b = append(b, '=')
	var s string
	if a.Value.Kind() == slog.KindString {
		s = a.Value.String()
	} else {
		s = fmt.Sprint(a.Value.Any())
	}
	if needsQuote(s) {
		return strconv.AppendQuote(b, s)
	}
	return append(b, s...)
}

func needsQuote(s string) bool {
	if s == "" {
		return true
	}
	for _, r := range s {
		if r <= ' ' || r == '"' || r == '=' || r == utf8.RuneError || r > 0x7e {
			return true
		}
	}
	return false
}
