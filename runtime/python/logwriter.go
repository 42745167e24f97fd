package python

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// lineLogger forwards a stub's stdout or stderr to the server log one line
// per record (log carries the model and instance), and remembers the last
// lines so that a failure report can quote what the stub said. limit,
// when not nil, bounds the bytes per second that reach the log (shared by
// a stub's stdout and stderr): a model printing in a loop would otherwise
// fill the server's disk or its log pipeline.
type lineLogger struct {
	log   *slog.Logger
	limit *logLimit

	mu      sync.Mutex
	partial []byte
	tail    []string // last tailLines lines, oldest first
}

const tailLines = 12

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.partial = append(l.partial, p...)
			// Keep a runaway line (no newline) from growing without bound.
			if len(l.partial) > 64<<10 {
				l.emit(string(l.partial))
				l.partial = l.partial[:0]
			}
			break
		}
		line := p[:i]
		if len(l.partial) > 0 {
			line = append(l.partial, line...)
			l.partial = l.partial[:0]
		}
		l.emit(string(line))
		p = p[i+1:]
	}
	return n, nil
}

func (l *lineLogger) emit(line string) {
	line = strings.TrimRight(line, "\r")
	if l.limit == nil {
		l.log.Info(line)
	} else if ok, lines, size := l.limit.allow(len(line)); ok {
		l.limit.report(l.log, lines, size)
		l.log.Info(line)
	}
	if len(l.tail) == tailLines {
		copy(l.tail, l.tail[1:])
		l.tail = l.tail[:tailLines-1]
	}
	l.tail = append(l.tail, line)
}

// flush emits an unterminated last line.
func (l *lineLogger) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.partial) > 0 {
		l.emit(string(l.partial))
		l.partial = l.partial[:0]
	}
	if l.limit != nil {
		// What was dropped since the last line let through is reported
		// even when no line follows.
		lines, size := l.limit.takeDropped()
		l.limit.report(l.log, lines, size)
	}
}

// lastLines returns the remembered tail joined for an error message.
func (l *lineLogger) lastLines() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.tail, "\n")
}

// logLimit is a token bucket of log bytes: rate bytes per second, up to
// one second's worth saved up. Lines over it are dropped and counted; the
// next line let through first reports how many were.
type logLimit struct {
	rate int64
	now  func() time.Time

	mu           sync.Mutex
	tokens       float64
	last         time.Time
	droppedLines int64
	droppedBytes int64
}

// newLogLimit returns a bound of rate bytes per second, or nil (no bound)
// for rate <= 0.
func newLogLimit(rate int64) *logLimit {
	if rate <= 0 {
		return nil
	}
	return &logLimit{rate: rate, now: time.Now, tokens: float64(rate)}
}

// allow takes n bytes (at least one, so that empty lines count too) from
// the bucket; when it lets the line through it also returns, and resets,
// the lines and bytes dropped before it.
func (b *logLimit) allow(n int) (ok bool, lines, size int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if !b.last.IsZero() {
		b.tokens = min(float64(b.rate), b.tokens+now.Sub(b.last).Seconds()*float64(b.rate))
	}
	b.last = now
	cost := float64(max(n, 1))
	if b.tokens < cost {
		b.droppedLines++
		b.droppedBytes += int64(n)
		return false, 0, 0
	}
	b.tokens -= cost
	lines, size = b.droppedLines, b.droppedBytes
	b.droppedLines, b.droppedBytes = 0, 0
	return true, lines, size
}

// takeDropped returns and resets the count of dropped lines and bytes.
func (b *logLimit) takeDropped() (lines, size int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	lines, size = b.droppedLines, b.droppedBytes
	b.droppedLines, b.droppedBytes = 0, 0
	return lines, size
}

// report logs a warning for dropped output, if any.
func (b *logLimit) report(log *slog.Logger, lines, size int64) {
	if lines > 0 {
		log.Warn("python stub output dropped over the log bound", "lines", lines, "bytes", size, KeyLogBytesPerSec, b.rate)
	}
}
