package toolchain

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/bits"
	"os/exec"
	"strings"
	"syscall"
)

// OOMError says a build step failed because the kernel killed a process
// for lack of memory. It wraps the step's own error.
type OOMError struct {
	// Evidence lists what showed the OOM kill, e.g. "cgroup oom_kill 3 -> 5".
	Evidence []string
	// Kills is how many kills were counted (0 when only exit codes or
	// messages showed it).
	Kills int64
	Err   error
}

func (e *OOMError) Error() string {
	return fmt.Sprintf("out of memory (%s): %v", strings.Join(e.Evidence, "; "), e.Err)
}

func (e *OOMError) Unwrap() error { return e.Err }

// IsOOM reports whether err is or wraps an *OOMError.
func IsOOM(err error) bool {
	var oe *OOMError
	return errors.As(err, &oe)
}

// OOMMonitor watches one build step for OOM kills: it snapshots the memory
// cgroup's oom_kill counter and the broker's count before the step, and
// Classify compares after it.
type OOMMonitor struct {
	cg          *Cgroup
	broker      *Broker
	cgBefore    int64
	cgOK        bool
	brokerStart int64
}

// NewOOMMonitor starts watching. cg (the build's memory cgroup, from Host)
// and broker may be nil.
func NewOOMMonitor(cg *Cgroup, broker *Broker) *OOMMonitor {
	m := &OOMMonitor{cg: cg, broker: broker}
	if cg != nil {
		if n, err := cg.OOMKills(); err == nil {
			m.cgBefore, m.cgOK = n, true
		}
	}
	if broker != nil {
		m.brokerStart = broker.Counters().OOMKills
	}
	return m
}

// Classify returns err unchanged unless the step was OOM-killed, in which
// case it returns an *OOMError wrapping err. Evidence is any of: the
// cgroup's oom_kill counter rose, the broker's launchers reported a
// command killed, the step itself exited 137 or by SIGKILL, or its output
// holds a compiler's "killed" message. A nil err stays nil: a build that
// recovered by itself is not a failure.
func (m *OOMMonitor) Classify(err error, output []byte) error {
	if err == nil {
		return nil
	}
	oe := &OOMError{Err: err}
	if m.cg != nil && m.cgOK {
		if n, cerr := m.cg.OOMKills(); cerr == nil && n > m.cgBefore {
			oe.Kills = n - m.cgBefore
			oe.Evidence = append(oe.Evidence, fmt.Sprintf("cgroup oom_kill %d -> %d", m.cgBefore, n))
		}
	}
	if m.broker != nil {
		if n := m.broker.Counters().OOMKills - m.brokerStart; n > 0 {
			oe.Kills = max(oe.Kills, n)
			oe.Evidence = append(oe.Evidence, fmt.Sprintf("%d commands OOM-killed under the launcher", n))
		}
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			oe.Evidence = append(oe.Evidence, "killed by SIGKILL")
		} else if ee.ExitCode() == 137 {
			oe.Evidence = append(oe.Evidence, "exit status 137")
		}
	}
	for _, ph := range killedPhrases {
		if bytes.Contains(output, ph) {
			oe.Evidence = append(oe.Evidence, fmt.Sprintf("output says %q", ph))
		}
	}
	if len(oe.Evidence) == 0 {
		return err
	}
	return oe
}

// Attempt is one try of a build step.
type Attempt struct {
	// Number counts from 1.
	Number int `json:"number"`
	// Jobs is the -j to pass to the build tool.
	Jobs int `json:"jobs"`
	// Budget is the broker budget for this attempt.
	Budget int64 `json:"budget"`
	// Reason says why this attempt runs with these figures.
	Reason string `json:"reason"`
	// Err is the attempt's outcome, filled in by Run.
	Err error `json:"-"`
}

// RetryPolicy re-runs a build step that was OOM-killed with half the jobs
// (rounded up) and half the memory budget each time, down to one job, so
// at most ceil(log2(jobs)) retries.
type RetryPolicy struct {
	// Jobs and Budget are the first attempt's figures.
	Jobs   int
	Budget int64
	// Logf receives one line per retry; nil discards them.
	Logf func(format string, args ...any)
}

// RetryExhaustedError is returned when the step was still OOM-killed at one
// job. It wraps the last attempt's error.
type RetryExhaustedError struct {
	Attempts []Attempt
}

func (e *RetryExhaustedError) Error() string {
	last := e.Attempts[len(e.Attempts)-1]
	return fmt.Sprintf("still out of memory after %d attempts (last with %d job, %s budget): "+
		"the machine has too little memory for this build's largest command; free memory, add swap or lower the recipe's memory needs: %v",
		len(e.Attempts), last.Jobs, FormatBytes(last.Budget), last.Err)
}

func (e *RetryExhaustedError) Unwrap() error { return e.Attempts[len(e.Attempts)-1].Err }

// MaxRetries is ceil(log2(jobs)): the halvings from jobs down to 1.
func (p RetryPolicy) MaxRetries() int {
	if p.Jobs <= 1 {
		return 0
	}
	return bits.Len(uint(p.Jobs - 1))
}

// First is the first attempt.
func (p RetryPolicy) First() Attempt {
	return Attempt{Number: 1, Jobs: max(p.Jobs, 1), Budget: p.Budget, Reason: "planned"}
}

// Next returns the attempt after prev failed with err. ok is false when
// there is none: err was not an OOM kill (returned as is) or prev already
// ran one job (a *RetryExhaustedError is returned).
func (p RetryPolicy) Next(prev Attempt, err error) (Attempt, bool) {
	if !IsOOM(err) || prev.Jobs <= 1 {
		return Attempt{}, false
	}
	next := Attempt{
		Number: prev.Number + 1,
		Jobs:   max((prev.Jobs+1)/2, 1),
		Budget: prev.Budget / 2,
	}
	next.Reason = fmt.Sprintf("attempt %d was OOM-killed (%v); retrying with %d jobs and a %s memory budget",
		prev.Number, err, next.Jobs, FormatBytes(next.Budget))
	return next, true
}

// Run calls step for each attempt until it succeeds, fails for another
// reason than memory, or runs out of halvings. The step should re-run the
// same build directory (ninja and make resume where they stopped). It
// returns the attempts made, for the build record.
func (p RetryPolicy) Run(ctx context.Context, step func(context.Context, Attempt) error) ([]Attempt, error) {
	a := p.First()
	var done []Attempt
	for {
		a.Err = step(ctx, a)
		done = append(done, a)
		if a.Err == nil {
			return done, nil
		}
		if ctx.Err() != nil {
			return done, a.Err
		}
		next, ok := p.Next(a, a.Err)
		if !ok {
			if IsOOM(a.Err) {
				return done, &RetryExhaustedError{Attempts: done}
			}
			return done, a.Err
		}
		if p.Logf != nil {
			p.Logf("%s", next.Reason)
		}
		a = next
	}
}
