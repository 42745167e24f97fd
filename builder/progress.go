package builder

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// NewStepProgress follows Ninja's [N/M] (and make's [ NN%]) lines: a bar
// on a terminal, a plain line every interval otherwise (CI logs).
func NewStepProgress(f *os.File, interval time.Duration) StepProgress {
	if term.IsTerminal(int(f.Fd())) {
		return &barSteps{w: f}
	}
	return &lineSteps{w: f, every: interval}
}

type barSteps struct {
	w   io.Writer
	bar *progressbar.ProgressBar
}

func (p *barSteps) Start(label string) {
	p.bar = progressbar.NewOptions(-1,
		progressbar.OptionSetWriter(p.w),
		progressbar.OptionSetDescription(label),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionThrottle(100*time.Millisecond))
}

func (p *barSteps) Update(done, total int) {
	if p.bar == nil {
		return
	}
	if int64(total) != p.bar.GetMax64() {
		p.bar.ChangeMax(total)
	}
	p.bar.Set(done)
}

func (p *barSteps) Finish() {
	if p.bar != nil {
		p.bar.Finish()
		p.bar = nil
	}
}

type lineSteps struct {
	w     io.Writer
	every time.Duration
	mu    sync.Mutex
	label string
	start time.Time
	last  time.Time
}

func (p *lineSteps) Start(label string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.label, p.start, p.last = label, time.Now(), time.Now()
}

func (p *lineSteps) Update(done, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.last) < p.every || total <= 0 {
		return
	}
	p.last = time.Now()
	el := time.Since(p.start)
	eta := ""
	if done > 0 {
		eta = fmt.Sprintf(", about %s left", (time.Duration(float64(el) / float64(done) * float64(total-done))).Round(time.Second))
	}
	fmt.Fprintf(p.w, "    %s: %d/%d (%d%%) after %s%s\n", p.label, done, total, done*100/total, el.Round(time.Second), eta)
}

func (p *lineSteps) Finish() {}
