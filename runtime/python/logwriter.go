package python

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
)

// lineLogger forwards a stub's stdout or stderr to the server log one line
// per record (log carries the model and instance), and remembers the last
// lines so that a failure report can quote what the stub said.
type lineLogger struct {
	log *slog.Logger

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
	l.log.Info(line)
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
}

// lastLines returns the remembered tail joined for an error message.
func (l *lineLogger) lastLines() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.tail, "\n")
}
