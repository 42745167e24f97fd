package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/tritonbuild/tritonbuild/builder"
	"github.com/tritonbuild/tritonbuild/builder/fetch"
	"github.com/tritonbuild/tritonbuild/images"
)

// progress draws what the engine reports on its channels (downloads from
// package fetch, long build steps from package builder): one bar per
// transfer or step on a terminal, and on anything else (a CI log, a file)
// plain lines at intervals, which do not fill the log with redraws. The
// library packages only send updates; all drawing is here.
type progress struct {
	fetch chan fetch.Update
	steps chan builder.StepUpdate
	done  chan struct{}
}

// startProgress starts drawing on w. When w is not a file (a test's
// buffer), nothing is drawn and the channels stay nil, so nothing is sent.
func startProgress(w io.Writer) *progress {
	p := &progress{}
	f, ok := w.(*os.File)
	if !ok {
		return p
	}
	var fd transferView
	var sd stepView
	if term.IsTerminal(int(f.Fd())) {
		fd, sd = newTransferBars(f), &stepBars{w: f}
	} else {
		fd, sd = newTransferLines(f, 5*time.Second), &stepLines{w: f, every: 15 * time.Second}
	}
	p.fetch, p.steps, p.done = make(chan fetch.Update), make(chan builder.StepUpdate), make(chan struct{})
	go p.draw(fd, sd)
	return p
}

func (p *progress) draw(fd transferView, sd stepView) {
	defer close(p.done)
	fetchCh, stepCh := p.fetch, p.steps
	for fetchCh != nil || stepCh != nil {
		select {
		case u, ok := <-fetchCh:
			if !ok {
				fetchCh = nil
				continue
			}
			if u.Done {
				fd.finish(u.Name, u.Error)
			} else {
				fd.update(u.Name, u.Complete, u.Total)
			}
		case u, ok := <-stepCh:
			if !ok {
				stepCh = nil
				continue
			}
			switch {
			case u.Done:
				sd.finish()
			case u.Lines > 0:
				sd.tick(u.Lines)
			case u.Total < 0:
				sd.start(u.Label)
			default:
				sd.update(u.Complete, u.Total)
			}
		}
	}
}

// stop closes the channels and waits until everything sent is drawn. The
// senders must have returned.
func (p *progress) stop() {
	if p.done == nil {
		return
	}
	close(p.fetch)
	close(p.steps)
	<-p.done
	p.done = nil
}

// transferView draws downloads.
type transferView interface {
	update(name string, done, total int64)
	finish(name string, err error)
}

// stepView draws one build step at a time.
type stepView interface {
	start(label string)
	update(done, total int)
	// tick shows a step without counts (make, scripts) running: the
	// lines of output it printed so far.
	tick(lines int)
	finish()
}

// newTransferLines writes at most one line per transfer and interval, e.g.
// "fetching X: 40 MiB / 130 MiB (31%), 12 MiB/s", and one line when a
// transfer ends.
func newTransferLines(w io.Writer, every time.Duration) *transferLines {
	return &transferLines{w: w, every: every, now: time.Now, xfers: map[string]*lineXfer{}}
}

type transferLines struct {
	w     io.Writer
	every time.Duration
	now   func() time.Time // replaced in tests
	xfers map[string]*lineXfer
}

type lineXfer struct {
	start     time.Time
	startDone int64 // bytes present when the transfer began (a resume)
	lastT     time.Time
	lastDone  int64
	done      int64
}

func (p *transferLines) update(name string, done, total int64) {
	now := p.now()
	x := p.xfers[name]
	if x == nil {
		x = &lineXfer{start: now, startDone: done, lastT: now, lastDone: done}
		p.xfers[name] = x
	}
	if done < x.done {
		// The server restarted the transfer: measure the rate afresh.
		x.lastDone, x.startDone = done, done
	}
	x.done = done
	if now.Sub(x.lastT) < p.every {
		return
	}
	rate := float64(done-x.lastDone) / now.Sub(x.lastT).Seconds()
	x.lastT, x.lastDone = now, done
	if total > 0 {
		fmt.Fprintf(p.w, "fetching %s: %s / %s (%d%%), %s/s\n", name, humanBytes(done), humanBytes(total), done*100/total, humanBytes(int64(rate)))
	} else {
		fmt.Fprintf(p.w, "fetching %s: %s, %s/s\n", name, humanBytes(done), humanBytes(int64(rate)))
	}
}

func (p *transferLines) finish(name string, err error) {
	x := p.xfers[name]
	delete(p.xfers, name)
	if err != nil {
		fmt.Fprintf(p.w, "fetching %s failed: %v\n", name, err)
		return
	}
	if x == nil {
		fmt.Fprintf(p.w, "fetched %s\n", name)
		return
	}
	el := p.now().Sub(x.start)
	got := x.done - x.startDone
	// A rate needs bytes that arrived while we watched, over a measurable
	// time: a file apt downloaded, or one that came in one read, has none.
	rate := ""
	if got > 0 && el >= 100*time.Millisecond {
		rate = fmt.Sprintf(", %s/s", humanBytes(int64(float64(got)/el.Seconds())))
	}
	fmt.Fprintf(p.w, "fetched %s: %s in %s%s\n", name, humanBytes(x.done), el.Round(100*time.Millisecond), rate)
}

// humanBytes formats a byte count in binary units as people read them.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	if v >= 100 {
		return fmt.Sprintf("%.0f %ciB", v, "KMGTP"[i])
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTP"[i])
}

// newTransferBars draws one progress bar per transfer on w, showing bytes,
// bytes/s and the ETA.
func newTransferBars(w io.Writer) *transferBars {
	return &transferBars{w: w, bars: map[string]*progressbar.ProgressBar{}}
}

type transferBars struct {
	w    io.Writer
	bars map[string]*progressbar.ProgressBar
}

func (p *transferBars) update(name string, done, total int64) {
	b := p.bars[name]
	if b == nil || (total > 0 && b.GetMax64() != total) {
		if b != nil {
			b.Exit()
		}
		b = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription("fetching "+name),
			progressbar.OptionShowBytes(true),
			progressbar.OptionUseIECUnits(true),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionShowCount(),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(p.w) }),
		)
		p.bars[name] = b
	}
	b.Set64(done)
}

func (p *transferBars) finish(name string, err error) {
	b := p.bars[name]
	delete(p.bars, name)
	if b == nil {
		return
	}
	if err != nil {
		b.Exit()
		fmt.Fprintf(p.w, "\nfetching %s failed: %v\n", name, err)
		return
	}
	b.Finish()
}

// stepBars draws Ninja's [N/M] (and make's [ NN%]) as a bar.
type stepBars struct {
	w   io.Writer
	bar *progressbar.ProgressBar
}

func (p *stepBars) start(label string) {
	p.bar = progressbar.NewOptions(-1,
		progressbar.OptionSetWriter(p.w),
		progressbar.OptionSetDescription(label),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionThrottle(100*time.Millisecond))
}

func (p *stepBars) update(done, total int) {
	if p.bar == nil {
		return
	}
	if int64(total) != p.bar.GetMax64() {
		p.bar.ChangeMax(total)
	}
	p.bar.Set(done)
}

func (p *stepBars) tick(lines int) {
	if p.bar != nil && p.bar.GetMax64() < 0 {
		p.bar.Set(lines)
	}
}

func (p *stepBars) finish() {
	if p.bar != nil {
		p.bar.Finish()
		p.bar = nil
	}
}

// stepLines prints a step's progress at most once per interval, with the
// time it has run and an estimate of what is left.
type stepLines struct {
	w     io.Writer
	every time.Duration
	now   func() time.Time // nil: time.Now; replaced in tests
	label string
	began time.Time
	last  time.Time
}

func (p *stepLines) clock() time.Time {
	if p.now != nil {
		return p.now()
	}
	return time.Now()
}

func (p *stepLines) start(label string) {
	p.label, p.began, p.last = label, p.clock(), p.clock()
}

func (p *stepLines) update(done, total int) {
	now := p.clock()
	if now.Sub(p.last) < p.every || total <= 0 {
		return
	}
	p.last = now
	el := now.Sub(p.began)
	eta := ""
	if done > 0 {
		eta = fmt.Sprintf(", about %s left", (time.Duration(float64(el) / float64(done) * float64(total-done))).Round(time.Second))
	}
	fmt.Fprintf(p.w, "    %s: %d/%d (%d%%) after %s%s\n", p.label, done, total, done*100/total, el.Round(time.Second), eta)
}

func (p *stepLines) tick(lines int) {
	now := p.clock()
	if now.Sub(p.last) < p.every {
		return
	}
	p.last = now
	fmt.Fprintf(p.w, "    %s: running for %s, %d lines of output\n", p.label, now.Sub(p.began).Round(time.Second), lines)
}

func (p *stepLines) finish() {}

// imageProgress draws the layers images writes and pushes: bars for the
// big ones on a terminal, otherwise a line every five seconds for the
// very big ones.
func imageProgress() images.ProgressFunc {
	if !term.IsTerminal(int(os.Stderr.Fd())) {
		var last time.Time
		return func(p images.Progress) {
			if p.Total < 64<<20 || (time.Since(last) < 5*time.Second && p.Done < p.Total) {
				return
			}
			last = time.Now()
			fmt.Fprintf(os.Stderr, "    %s %s: %d/%d MiB\n", p.Stage, p.Name, p.Done>>20, p.Total>>20)
		}
	}
	bars := map[string]*progressbar.ProgressBar{}
	return func(p images.Progress) {
		if p.Total < 16<<20 {
			return
		}
		key := p.Stage + " " + p.Name
		b := bars[key]
		if b == nil {
			b = progressbar.DefaultBytes(p.Total, key)
			bars[key] = b
		}
		b.Set64(p.Done)
	}
}
